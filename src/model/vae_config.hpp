// The VAE's configuration: diffusers' AutoencoderKL config.json, the built-in shapes, and the
// parameter lists of the encoder and decoder that follow from them. No tensors: make-model, inspect and the config
// reader's fuzz target (fuzz/) use it without the decoder.
#pragma once

#include <string>
#include <vector>

#include "model/params.hpp"

namespace vinf::model {

struct VaeConfig {
  int in_channels = 3, out_channels = 3, latent_channels = 4;
  std::vector<int> block_out_channels{128, 256, 512, 512};
  int layers_per_block = 2;
  int norm_num_groups = 32;
  float scaling_factor = 0.18215f;
  bool use_quant_conv = true;  // the encoder's 1x1 conv after conv_out
  bool use_post_quant_conv = true;
  bool mid_block_attention = true;
  static constexpr float kNormEps = 1e-6f;
  // Output pixels per latent pixel: 2^(blocks - 1).
  int upscale() const { return 1 << (static_cast<int>(block_out_channels.size()) - 1); }
};

// Built-in VAE shapes for random-weight models: tiny (channels 32, 32, 64, 64, one layer per block,
// 8 groups) and small (64, 128, 128, 128, two layers): the full 8x upscale at a fraction of the cost;
// vc2: the kl-f8 VAE itself.
VaeConfig vae_preset(const std::string& name);
// diffusers' config.json for c (what make-model writes).
std::string vae_config_json(const VaeConfig& c);

// Reads a diffusers AutoencoderKL config.json. Throws vinf::InputError naming the file and key for
// what it cannot use (another activation, block type or layout).
VaeConfig load_vae_config(const std::string& path);

// The decoder's parameters (what decoding reads; the file also holds encoder.* and quant_conv.*).
// The mid-block attention accepts the older names query/key/value/proj_attn.
std::vector<ParamSpec> vae_decoder_parameters(const VaeConfig& c);
// The encoder's (encoder.*, quant_conv), likewise.
std::vector<ParamSpec> vae_encoder_parameters(const VaeConfig& c);

}  // namespace vinf::model
