// Random-weight Wan2.1 models in diffusers' directory layout, for tests, demos and benchmarks
// without real weights: the transformer alone, or the whole WanPipeline (transformer/, vae/,
// text_encoder/, tokenizer/, scheduler/ and model_index.json) that generate, encode-text and
// inspect read as they read a released one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "model/clip_vision.hpp"
#include "model/params.hpp"
#include "model/umt5.hpp"
#include "model/wan_config.hpp"
#include "model/wan_vae_config.hpp"

namespace vinf::model {

// The shapes of a whole pipeline: "wan-tiny" (every part in the test fixture's shape), "wan-1.3b"
// and "wan-14b" (Wan2.1's transformers with the released VAE and umt5-xxl's encoder); the
// image-to-video pipelines "wan-i2v-tiny" and "wan-flf2v-tiny" (the image-to-video fixture's
// shapes: a CLIP tower of 2 layers on 16 x 16 images), "wan-i2v-14b" and "wan-flf2v-14b" (with
// open-clip's ViT-H/14 tower, as Wan2.1-I2V ships it).
struct WanPipelinePreset {
  std::string name;
  WanTransformerConfig transformer;
  WanVaeConfig vae;
  Umt5Config text_encoder;
  // Pieces of the tokenizer trained on vinf's built-in text (t5_tokenizer_train.hpp): at most the
  // text encoder's vocabulary.
  int tokenizer_pieces = 0;
  // UniPC's flow_shift: Wan2.1's 3.0 (480p); its 720p videos use 5.0.
  double flow_shift = 3.0;
  // Image-to-video: the CLIP tower (a CLIPVisionModel) and its image processor.
  bool image = false;
  ClipVisionConfig image_encoder;
  ClipImageProcessor image_processor;
};
// The image encoder's seed beside the transformer's (presets.hpp's vae_seed, text_encoder_seed).
inline std::uint64_t image_encoder_seed(std::uint64_t seed) { return seed + 3; }
// transformers' CLIPVisionModel config.json and CLIPImageProcessor's preprocessor_config.json.
std::string clip_vision_config_json(const ClipVisionConfig& c);
std::string clip_image_processor_json(const ClipImageProcessor& p);
// Throws vinf::InputError naming the presets for an unknown name.
WanPipelinePreset wan_pipeline_preset(const std::string& name);

// One weight file of a pipeline: its part (a directory of the pipeline), parameters (as the file
// stores them: the VAE's attention projections as diffusers' [out, in, 1, 1]), dtype and seed.
struct WanPipelineWeights {
  std::string part;  // "transformer", "vae", "text_encoder"
  std::string file;  // relative to the pipeline root
  std::vector<ParamSpec> params;
  DType dtype = DType::f32;
  std::uint64_t seed = 0;
};
// The transformer drawn with `seed` in `dtype`; the VAE with vae_seed(seed), always f32 (as Wan2.1
// releases it); the text encoder with text_encoder_seed(seed) in `dtype` (presets.hpp's seeds).
std::vector<WanPipelineWeights> wan_pipeline_weights(const WanPipelinePreset& p, std::uint64_t seed, DType dtype);

using WanWriteProgress = std::function<void(const WanPipelineWeights& part, std::size_t done, std::size_t total)>;

// DIR/config.json and DIR/diffusion_pytorch_model.safetensors of a random transformer, drawn with
// `seed` as write_random_weights draws (presets.hpp); the config is written last.
void write_random_wan_transformer(const WanTransformerConfig& c, std::uint64_t seed, DType dtype,
                                  const std::string& dir,
                                  const std::function<void(std::size_t, std::size_t)>& progress = {});

// The whole pipeline in DIR: the weights of wan_pipeline_weights with their configs, the trained
// tokenizer (the same for every seed), UniPC's scheduler_config.json with flow sigmas, and
// model_index.json last (a directory with one is a pipeline). progress(part, done, total) is
// called after every tensor.
void write_random_wan_pipeline(const WanPipelinePreset& p, std::uint64_t seed, DType dtype, const std::string& dir,
                               const WanWriteProgress& progress = {});

// scheduler/scheduler_config.json: diffusers' UniPCMultistepScheduler with flow sigmas, as Wan2.1's
// pipelines ship it.
std::string wan_unipc_scheduler_config_json(double flow_shift);

}  // namespace vinf::model
