// What family a model directory belongs to, by the class names of its configs: the one place that
// tells them apart (and says what a part is), which generation (pipeline/video_pipeline), forward,
// decode and inspect ask. The config loaders of model/ check that a file declares their own class.
#pragma once

#include <string>

namespace vinf::pipeline {

enum class ModelFamily {
  unet,  // VideoCrafter2 / ModelScope: UNet3DConditionModel, AutoencoderKL, CLIP; Video-Infinity's clips
  wan,  // Wan2.1: WanTransformer3DModel, AutoencoderKLWan, UMT5
};

// The family of a model directory: a pipeline root, a transformer's or a UNet's. A
// WanTransformer3DModel config in DIR or DIR/transformer is the Wan family; anything else (and
// builtin:PRESET) is the UNet family.
ModelFamily model_family(const std::string& dir);
// The family of a VAE directory (DIR or DIR/vae): AutoencoderKLWan is Wan's, else the UNet family's.
ModelFamily vae_family(const std::string& dir);

// What a part directory of a pipeline is, for `vinf inspect`: the class its config.json (or
// scheduler_config.json) declares, else its model_type ("model_type clip_text_model"), else "".
std::string part_class(const std::string& dir);
// A part vinf inspects on its own: the UNet family's VAE (AutoencoderKL), a CLIP text encoder
// (model_type clip_text_model, or a config with text_config) or a tokenizer (vocab.json).
bool is_model_part(const std::string& dir);
// DIR/config.json declares the UNet family's VAE (AutoencoderKL).
bool is_unet_vae(const std::string& dir);

}  // namespace vinf::pipeline
