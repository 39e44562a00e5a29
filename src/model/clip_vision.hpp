// transformers' CLIPVisionModelWithProjection: a ViT over image_size x image_size pixels in
// patch_size squares (patch convolution without bias, a class token, position embeddings,
// pre_layrnorm, CLIP's encoder layers without a mask), post_layernorm of the class token and the
// visual projection (no bias). The image embedding vinf evaluate compares frames with. Weights
// come from a directory with config.json (the vision config itself, or a CLIPConfig with
// `vision_config`) and model.safetensors (transformers' key names; a whole CLIPModel's text tower
// is ignored).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/clip_encoder.hpp"
#include "model/weights.hpp"
#include "ops/context.hpp"

namespace vinf::model {

struct ClipVisionConfig {
  int image_size = 224, patch_size = 32, channels = 3, projection_dim = 512;
  ClipEncoderShape encoder{768, 3072, 12, 12, 1e-5f, ops::Activation::quick_gelu};
  std::int64_t grid() const { return image_size / patch_size; }
  std::int64_t tokens() const { return grid() * grid() + 1; }
};

// Reads config.json. Throws vinf::InputError naming the file and key.
ClipVisionConfig load_clip_vision_config(const std::string& path);
// The tower's parameters, and the visual projection's when `projection` (a
// CLIPVisionModelWithProjection; a plain CLIPVisionModel has none).
std::vector<ParamSpec> clip_vision_parameters(const ClipVisionConfig& c, bool projection = true);

// CLIPImageProcessor's settings (image_processor/preprocessor_config.json): the shorter side's
// size, the centre crop, the scale and the normalisation.
struct ClipImageProcessor {
  std::int64_t shortest_edge = 224, crop_height = 224, crop_width = 224;
  double rescale_factor = 1.0 / 255.0;
  float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
  float std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
};
// Reads preprocessor_config.json; refuses settings vinf does not run (resampling other than
// bicubic, no resize, crop or normalisation) naming the file and key.
ClipImageProcessor load_clip_image_processor(const std::string& path);

// CLIPImageProcessor on height x width x 3 bytes exactly as transformers runs it: the shorter side
// to shortest_edge (the longer scaled and truncated) with Pillow's bicubic resampling on the bytes
// (io::resize_rgb8), the centre crop (top (h - crop) / 2, left alike), x * rescale_factor and
// (x - mean) / std in float32. Output (3, crop_height, crop_width).
std::vector<float> clip_image_pixels(const std::uint8_t* hwc, std::int64_t width, std::int64_t height,
                                     const ClipImageProcessor& p);

// clip_image_pixels at OpenAI CLIP's settings for a tower of image_size: the shorter side to
// image_size, the centre image_size square, CLIP's mean and std. Output (3, image_size, image_size).
std::vector<float> clip_preprocess(const std::uint8_t* hwc, std::int64_t width, std::int64_t height, int image_size);

class ClipVisionModel {
 public:
  ClipVisionModel(ClipVisionConfig config, Weights weights, bool projection);
  // Throws vinf::InputError naming DIR and the missing file or key. `projection`: a
  // CLIPVisionModelWithProjection (embed's image embeddings); false: a CLIPVisionModel, whose
  // hidden states an image-to-video model reads. `option` names the option the directory came from.
  static ClipVisionModel load(const std::string& dir, Runtime& rt, bool projection = true,
                              const std::string& option = "--clip-vision");

  const ClipVisionConfig& config() const { return config_; }
  // pixels (N, 3, image_size, image_size) preprocessed; out (N, projection_dim) image embeddings.
  void embed(ExecContext& ctx, const Tensor& pixels, const Tensor& out) const;
  // transformers' hidden_states[layers_run]: the tokens after the embeddings and pre_layrnorm, then
  // the first `layers_run` encoder layers (Wan: all but the last, hidden_states[-2]); out (N,
  // tokens, hidden_size).
  void hidden_state(ExecContext& ctx, const Tensor& pixels, int layers_run, const Tensor& out) const;

 private:
  // The tokens after the embeddings and pre_layrnorm, (N, tokens, hidden_size).
  OwnedTensor embed_tokens(ExecContext& ctx, const Tensor& pixels) const;
  ClipVisionConfig config_;
  Weights weights_;
  bool projection_ = true;
};

// The cosine similarity of two vectors (0 when either is zero).
double cosine_similarity(const float* a, const float* b, std::int64_t n);

}  // namespace vinf::model
