// The CLIP text encoder's configuration: transformers' config.json, the built-in models' shape, and
// the parameter list that follows from them. No tensors: make-model and the config reader's fuzz
// target (fuzz/) use it without the encoder.
#pragma once

#include <string>
#include <vector>

#include "model/clip_encoder.hpp"
#include "model/params.hpp"
#include "ops/activation.hpp"

namespace vinf::model {

struct ClipTextConfig {
  int vocab_size = 49408, hidden_size = 1024, intermediate_size = 4096, layers = 23, heads = 16;
  int max_positions = 77;
  float layer_norm_eps = 1e-5f;
  ops::Activation act = ops::Activation::gelu;  // "gelu" (erf) or "quick_gelu"
};

inline ClipEncoderShape clip_encoder_shape(const ClipTextConfig& c) {
  return {c.hidden_size, c.intermediate_size, c.layers, c.heads, c.layer_norm_eps, c.act};
}

// Reads transformers' config.json. Throws vinf::InputError naming the file and key.
ClipTextConfig load_clip_text_config(const std::string& path);
// transformers' config.json for c (what make-model writes).
std::string clip_text_config_json(const ClipTextConfig& c);
// The built-in models' text encoder: two layers of `width` (the UNet's cross_attention_dim), two
// heads, erf GELU, 77 positions, the byte-level tokenizer's 514 ids.
ClipTextConfig clip_text_preset(int width);
std::vector<ParamSpec> clip_text_parameters(const ClipTextConfig& c);

}  // namespace vinf::model
