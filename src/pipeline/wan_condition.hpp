// What a conditioned Wan video starts from, computed as diffusers' pipelines compute it:
// image-to-video's (and first-and-last-frame's) CLIP states and condition channels, and
// video-to-video's start latents. Every rank of a run computes the same numbers for the whole video
// and takes its frames of them (the image tokens every rank sees whole).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/video_reader.hpp"
#include "model/wan_vae.hpp"

namespace vinf {
class Runtime;
}

namespace vinf::pipeline {

// Image-to-video: the images' CLIP states, image_tokens x image_dim (257 per image, the first
// image's first), and the condition channels beside the noisy latents, channel-major [4 + z_dim,
// latent frames, h, w]: the mask (pixel frame 0's value four times, then four pixel frames per
// latent frame: 1 for the given images' frames, 0 elsewhere), then the VAE posterior mean of the
// video that is the first image, zero (mid-grey) frames and, with a last image, that image as the
// last frame, normalised by the VAE's latents_mean and latents_std.
struct WanImageCondition {
  std::int64_t image_tokens = 0, image_dim = 0;
  std::vector<float> clip_pixels;  // [images, 3, s, s], CLIPImageProcessor's output
  std::vector<float> image_states;  // [image_tokens, image_dim]
  std::int64_t channels = 0, latent_frames = 0, lh = 0, lw = 0;
  std::vector<float> condition;  // [channels, latent_frames, lh, lw]
};

// model: the pipeline directory (image_encoder/, image_processor/, vae/). images: the first frame
// and, for first-and-last-frame, the last, each at any size (resized to width x height with
// Lanczos for the VAE, as the reference does). frames, height, width: the video's.
WanImageCondition wan_image_condition(Runtime& rt, const std::string& model, const std::vector<io::RgbFrames>& images,
                                      std::int64_t frames, std::int64_t height, std::int64_t width);

// diffusers' video preprocessing of one picture: resized to width x height with Pillow's Lanczos
// when its size differs, x / 255, 2x - 1 (f32). Returns [3, height, width].
std::vector<float> wan_pixels(const std::uint8_t* hwc, std::int64_t w, std::int64_t h, std::int64_t width,
                              std::int64_t height);

// Video-to-video: the VAE posterior of the given frames (the first `frames` of them, each
// preprocessed as wan_pixels), mean and log-variance, [z_dim, latent frames, h, w] each.
struct WanPosterior {
  std::vector<float> mean, logvar;
  std::int64_t latent_frames = 0, lh = 0, lw = 0;
};
WanPosterior wan_video_posterior(Runtime& rt, const model::WanVae& vae, const io::RgbFrames& video, std::int64_t frames,
                                 std::int64_t height, std::int64_t width);

// The start latents of video-to-video, in f32 as the pipeline computes them: the posterior sampled
// (mean + exp(logvar / 2) eps), normalised ((x - latents_mean) * (1 / latents_std)), then noised to
// sigma ((1 - sigma) x + sigma noise). All [z_dim, frames, h, w]; eps and noise the draws.
std::vector<float> wan_video_start(const model::WanVaeConfig& vae, const WanPosterior& posterior,
                                   const std::vector<float>& eps, const std::vector<float>& noise, float sigma);

// Video-to-video's cut: of `steps`, int(steps x strength) run (at most steps), from step
// steps - that. InputError when strength leaves no step.
int wan_strength_first_step(int steps, double strength);

// A content fingerprint of pictures (what a checkpoint records of its conditioning): 16 hex digits.
std::string frames_fingerprint(const io::RgbFrames& frames);

}  // namespace vinf::pipeline
