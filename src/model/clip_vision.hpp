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
std::vector<ParamSpec> clip_vision_parameters(const ClipVisionConfig& c);

// CLIPImageProcessor's steps on height x width x 3 bytes: the shorter side resized to image_size
// (PIL's bicubic filter, a = -0.5, widened when shrinking, computed in floats without PIL's
// rounding to bytes between the two passes), the centre image_size square cropped, scaled to 0..1
// and normalized with CLIP's mean and std. Output (3, image_size, image_size).
std::vector<float> clip_preprocess(const std::uint8_t* hwc, std::int64_t width, std::int64_t height, int image_size);

class ClipVisionModel {
 public:
  ClipVisionModel(ClipVisionConfig config, Weights weights);
  // Throws vinf::InputError naming DIR and the missing file or key.
  static ClipVisionModel load(const std::string& dir, Runtime& rt);

  const ClipVisionConfig& config() const { return config_; }
  // pixels (N, 3, image_size, image_size) preprocessed; out (N, projection_dim) image embeddings.
  void embed(ExecContext& ctx, const Tensor& pixels, const Tensor& out) const;

 private:
  ClipVisionConfig config_;
  Weights weights_;
};

// The cosine similarity of two vectors (0 when either is zero).
double cosine_similarity(const float* a, const float* b, std::int64_t n);

}  // namespace vinf::model
