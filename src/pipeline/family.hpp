// What family a model directory belongs to, by the class names of its configs: the one place that
// tells them apart, which generation (pipeline/video_pipeline), forward, decode and inspect ask.
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

}  // namespace vinf::pipeline
