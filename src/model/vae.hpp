// The two halves of diffusers' AutoencoderKL (model-spec §4: the Stable Diffusion kl-f8 VAE that
// zeroscope ships). The decoder: post_quant_conv, conv_in, a mid block (resnet, single-head attention, resnet),
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

// The encoder half (diffusers' Encoder + quant_conv): conv_in, DownEncoderBlock2D x N
// (layers_per_block resnets, a stride-2 convolution after zero padding right and below but the
// last), the mid block, GroupNorm + SiLU + conv_out to 2 x latent channels, quant_conv: the mean and
// log-variance of the latent distribution. Per image, like the decoder.
class VaeEncoder {
 public:
  VaeEncoder(VaeConfig config, Weights weights);
  // dir as VaeDecoder::load's. Throws vinf::InputError naming the file and key for missing or
  // mismatched encoder weights.
  static VaeEncoder load(const std::string& dir, Runtime& rt, DType dtype);

  const VaeConfig& config() const { return config_; }

  // images (N, in_channels, H, W) in [-1, 1], H and W multiples of upscale(); mean and, when
  // given, logvar (N, latent_channels, H / upscale, W / upscale): the distribution's parameters
  // (logvar clamped to [-30, 20] as diffusers does; no scaling_factor applied). Encodes
  // `images_per_call` images at a time.
  void encode(ExecContext& ctx, const Tensor& images, const Tensor& mean, const Tensor* logvar,
              std::int64_t images_per_call = 4) const;

 private:
  VaeConfig config_;
  Weights weights_;
};

}  // namespace vinf::model
