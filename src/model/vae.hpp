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
#include "model/vae_config.hpp"
#include "model/weights.hpp"
#include "ops/context.hpp"

namespace vinf::model {

class VaeDecoder {
 public:
  VaeDecoder(VaeConfig config, Weights weights);
  // dir: a VAE directory (config.json + diffusion_pytorch_model.safetensors) or a pipeline root
  // with vae/. Throws vinf::InputError naming the file and key for missing or mismatched weights.
  static VaeDecoder load(const std::string& dir, Runtime& rt, DType dtype);
  // The config that load(dir) reads, without the weights.
  static VaeConfig read_config(const std::string& dir);

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
