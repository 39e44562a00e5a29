// Wan2.1's causal video VAE (diffusers' AutoencoderKLWan): 3-D convolutions that see only the
// current and earlier frames, RMS norms over channels, per-frame single-head attention in the mid
// blocks. The encoder compresses 8x along H and W and 4x along time after the first frame (a video
// of 1 + 4k frames gives 1 + k latent frames); the decoder inverts that.
//
// Both halves run as diffusers does: the encoder over the first frame alone, then chunks of 4
// frames; the decoder one latent frame at a time. Every causal convolution keeps the last two frames
// of its input from the previous chunk (zeros before the first), the temporal downsamplers their
// last frame, the temporal upsamplers skip their time convolution on the first chunk. The results
// are those of the reference, and the activations' memory is bounded by a chunk, not the video.
//
// Decoding may also run over spatial tiles (decode's tile): the same layers, each 3x3 convolution
// over tiles of its output with its input made on the spot, as VaeDecoder's tiled path.
//
// Activations are stored frame-major, (frames, channels, H, W), so every per-frame op (the 2-D
// convolutions of the resamplers, attention, upsampling) sees the frames as a batch.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.hpp"
#include "model/wan_vae_config.hpp"
#include "model/weights.hpp"
#include "ops/context.hpp"

namespace vinf::model {

class WanVae {
 public:
  enum Parts { encoder = 1, decoder = 2, both = 3 };

  WanVae(WanVaeConfig config, Weights weights, Parts parts);
  // dir: a VAE directory (config.json + diffusion_pytorch_model.safetensors) or a pipeline root
  // with vae/. Loads the weights of `parts` only. Throws vinf::InputError naming the file and the
  // key for a config vinf does not run and for missing or mismatched weights.
  static WanVae load(const std::string& dir, Runtime& rt, DType dtype, Parts parts = both);
  static WanVaeConfig read_config(const std::string& dir);

  const WanVaeConfig& config() const { return config_; }
  const Weights& weights() const { return weights_; }

  // video (N, in_channels, F, H, W) in [-1, 1], F = 1 + 4k, H and W multiples of spatial_ratio();
  // mean and, when given, logvar (N, z_dim, latent_frames(F), H / 8, W / 8): the latent
  // distribution's parameters (logvar clamped to [-30, 20] as diffusers does; no latents_mean /
  // latents_std applied). Throws vinf::InputError for a frame count or size it cannot encode.
  void encode(ExecContext& ctx, const Tensor& video, const Tensor& mean, const Tensor* logvar) const;

  // latents (N, z_dim, F', h, w) exactly as given (no latents_mean / latents_std); out (N,
  // out_channels, video_frames(F'), 8h, 8w), clamped to [-1, 1] as diffusers' decode does.
  // tile > 0 (latent pixels) runs the 3x3 convolutions of frames larger than that over tiles of
  // tile x tile latent pixels (tile * 2^k pixels after k upsamplings), as VaeDecoder does: the same
  // numbers as whole-frame decoding to float rounding (the RMS norms work pixel by pixel), with the
  // convolutions' working memory bounded by the tile; the mid block's attention runs on whole
  // frames at the latent resolution. Throws vinf::InputError for a negative tile.
  void decode(ExecContext& ctx, const Tensor& latents, const Tensor& out, std::int64_t tile = 0) const;

  // Decoding one video in parts, in video order, each part on its own rank if need be: latent
  // frames [first, first + F') (latents (1, z_dim, F', h, w)) into out (1, out_channels,
  // part_frames(first, F'), 8h, 8w), the frames decode() of the whole video gives there, bit for
  // bit. The decoder is causal: on entry `memory` holds what decoding the frames before `first` left
  // (empty when first == 0), every causal layer's last input frames on the device, and on return
  // this part's. save_memory and load_memory carry it to the next part's rank as bytes. Parts must
  // use the same tile.
  struct Memory {
    std::map<std::string, std::shared_ptr<OwnedTensor>> frames;
  };
  void decode_part(ExecContext& ctx, const Tensor& latents, std::int64_t first, Memory& memory, const Tensor& out,
                   std::int64_t tile = 0) const;
  static std::string save_memory(ExecContext& ctx, const Memory& memory);
  Memory load_memory(ExecContext& ctx, const std::string& bytes) const;
  // The video frames of latent frames [first, first + count): 1 + 4 (count - 1) from the first, else 4 count.
  std::int64_t part_frames(std::int64_t first, std::int64_t count) const;

 private:
  WanVaeConfig config_;
  Weights weights_;
  Parts parts_;
};

}  // namespace vinf::model
