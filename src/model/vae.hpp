// The decoder half of diffusers' AutoencoderKL (model-spec §4: the Stable Diffusion kl-f8 VAE that
// zeroscope ships): post_quant_conv, conv_in, a mid block (resnet, single-head attention, resnet),
// UpDecoderBlock2D x N (layers_per_block + 1 resnets, nearest x2 + conv upsampling but the last),
// GroupNorm + SiLU + conv_out. Every op works per image, so frames decode independently: any
// batch of frames, in any chunking, gives the same numbers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/params.hpp"
#include "model/weights.hpp"
#include "ops/context.hpp"

namespace vinf::model {

struct VaeConfig {
  int in_channels = 3, out_channels = 3, latent_channels = 4;
  std::vector<int> block_out_channels{128, 256, 512, 512};
  int layers_per_block = 2;
  int norm_num_groups = 32;
  float scaling_factor = 0.18215f;
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

class VaeDecoder {
 public:
  VaeDecoder(VaeConfig config, Weights weights);
  // dir: a VAE directory (config.json + diffusion_pytorch_model.safetensors) or a pipeline root
  // with vae/. Throws vinf::InputError naming the file and key for missing or mismatched weights.
  static VaeDecoder load(const std::string& dir, Runtime& rt, DType dtype);

  const VaeConfig& config() const { return config_; }
  const Weights& weights() const { return weights_; }

  // latents (N, latent_channels, h, w) exactly as given (no 1/scaling_factor); out (N,
  // out_channels, h * upscale, w * upscale), the raw decoder output (no clamp). Decodes
  // `frames_per_call` images at a time to bound the activation memory. tile > 0 (latent pixels)
  // runs the convolutions of images larger than that over tiles of tile x tile latent pixels
  // (tile * 2^k pixels after k upsamplings) with GroupNorm statistics of the whole image: the same
  // numbers as whole-image decoding to float rounding, with the convolutions' working memory
  // bounded by the tile; between layers one or two whole-image activations remain.
  void decode(ExecContext& ctx, const Tensor& latents, const Tensor& out, std::int64_t frames_per_call = 4,
              std::int64_t tile = 0) const;

 private:
  void decode_images(ExecContext& ctx, const Tensor& latents, const Tensor& out, std::int64_t tile) const;

  VaeConfig config_;
  Weights weights_;
};

}  // namespace vinf::model
