// The Wan2.1 video VAE's configuration: diffusers' AutoencoderKLWan config.json, the built-in
// shapes, and the parameter lists that follow from them (diffusers' names). No tensors: tests and
// inspect count the parameters without the model.
#pragma once

#include <string>
#include <vector>

#include "model/params.hpp"

namespace vinf::model {

struct WanVaeConfig {
  int base_dim = 96;
  int decoder_base_dim = 96;  // diffusers' decoder_base_dim (absent: base_dim)
  int z_dim = 16;
  std::vector<int> dim_mult{1, 2, 4, 4};
  int num_res_blocks = 2;
  // One entry per downsampling stage (dim_mult.size() - 1): whether it halves the frames too. The
  // decoder upsamples in the reverse order.
  std::vector<bool> temperal_downsample{false, true, true};
  int in_channels = 3, out_channels = 3;
  // Per latent channel: the pipeline's normalisation latents = (mean - latents_mean) / latents_std.
  // The VAE itself does not apply it.
  std::vector<float> latents_mean, latents_std;

  // Pixels per latent pixel along H and W: 2^(stages - 1).
  int spatial_ratio() const { return 1 << (static_cast<int>(dim_mult.size()) - 1); }
  // Frames per latent frame after the first: 2^(temporal downsamplings).
  int temporal_ratio() const;
  // The encoder reads the first frame alone, then chunks of this many frames (diffusers' fixed 4).
  static constexpr int kChunkFrames = 4;
  // Latent frames of a video of `frames` frames (1 + 4k), and video frames of `latent_frames`.
  std::int64_t latent_frames(std::int64_t frames) const;
  std::int64_t video_frames(std::int64_t latent_frames) const;
};

// Built-in shapes: "wan-tiny" (base_dim 8, dim_mult 1, 2, 2, 2, one residual block per stage: the
// test fixture's shape) and "wan2.1" (the released Wan2.1 VAE: base_dim 96, dim_mult 1, 2, 4, 4,
// two residual blocks), both with Wan2.1's 16 latent channels and their latents_mean / latents_std.
WanVaeConfig wan_vae_preset(const std::string& name);

// diffusers' AutoencoderKLWan config.json for c: every key load_wan_vae_config reads (the
// compression ratios, attn_scales, is_residual and patch_size as Wan2.1's VAE has them).
std::string wan_vae_config_json(const WanVaeConfig& c);

// Reads a diffusers AutoencoderKLWan config.json. Throws vinf::InputError naming the file and the
// key for what vinf does not run (attention at a scale, Wan2.2's residual blocks, patching, keys it
// does not know) and for values out of range.
WanVaeConfig load_wan_vae_config(const std::string& path);

// The encoder's parameters (encoder.*, quant_conv) and the decoder's (post_quant_conv, decoder.*),
// each in diffusers' names and shapes; wan_vae_parameters: both, as the weight file holds them.
std::vector<ParamSpec> wan_vae_encoder_parameters(const WanVaeConfig& c);
std::vector<ParamSpec> wan_vae_decoder_parameters(const WanVaeConfig& c);
std::vector<ParamSpec> wan_vae_parameters(const WanVaeConfig& c);

// The encoder's down_blocks list, flat as diffusers numbers it: one entry per module.
struct WanVaeLayer {
  enum Kind { resnet, downsample2d, downsample3d, upsample2d, upsample3d } kind;
  std::string name;        // "encoder.down_blocks.3"
  std::int64_t in = 0, out = 0;  // channels
};
std::vector<WanVaeLayer> wan_vae_encoder_layers(const WanVaeConfig& c);
// The decoder's up blocks: each block's resnets, then its upsampler (if any), in order.
std::vector<WanVaeLayer> wan_vae_decoder_layers(const WanVaeConfig& c);
// Channels at the bottom (the mid blocks): the encoder's and the decoder's.
std::int64_t wan_vae_encoder_top(const WanVaeConfig& c);
std::int64_t wan_vae_decoder_top(const WanVaeConfig& c);

}  // namespace vinf::model
