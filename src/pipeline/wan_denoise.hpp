// The Wan family's denoising loop on one device, as diffusers' WanPipeline runs it: at each of the
// flow scheduler's steps the transformer's prediction for the prompt and, with guidance, for the
// negative prompt (one batch of two, or --parallel.cfg's one branch per rank elsewhere), guided,
// then the scheduler's update of the latents.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "io/video.hpp"
#include "model/wan_transformer.hpp"
#include "model/wan_vae.hpp"
#include "model/wan_vae_config.hpp"
#include "pipeline/guidance.hpp"
#include "sampling/flow_sampler.hpp"

namespace vinf {
class Runtime;
}
namespace vinf::mpi {
class Communicator;
class Session;
}  // namespace vinf::mpi

namespace vinf::pipeline {

struct WanDenoise {
  const model::WanTransformer& transformer;
  const sampling::FlowScheduler& scheduler;
  // [1, L, text_dim] each, on the device; `negative` unused when guidance is 1 or below.
  Tensor prompt, negative;
  float guidance = 5.f;
  // Called after each step with its index (progress, checkpoints, stop checks); false ends the
  // loop there (a stop signal).
  std::function<bool(int step)> after_step = nullptr;
  // --parallel.cfg 2: the two ranks of this group each run one branch (index 0 the negative prompt,
  // 1 the prompt) and all-gather the predictions; both then take the same step. Null: one batch of
  // both branches on this rank.
  mpi::Communicator* cfg_group = nullptr;
  int cfg_index = 0;
  // The latent frames the latents hold (of the video's), and the self-attention that sees the
  // other ranks' frames (--vi.mode exact) or Video-Infinity's windows (--vi.mode invariant);
  // defaults: the whole video on this rank, plain attention.
  model::WanFrames frames{};
  model::WanSelfAttention* self_attention = nullptr;
  // An image-to-video model's condition channels for the frames the latents hold, [1, 20, F, H, W]
  // beside them in every call, and the image's CLIP states [1, tokens, image_dim]; empty and null
  // for text-to-video.
  Tensor condition{};
  const Tensor* image = nullptr;
};

// What an image-to-video run adds to every model call (WanDenoise's condition and image).
struct WanInputs {
  Tensor condition{};
  const Tensor* image = nullptr;
};

// One step of the loop at a time, on sampler's latents [1, C, F, H, W]: the batch of prompts and
// the buffers made once, then each step's model call(s), guidance and the scheduler's update.
class WanStepper {
 public:
  WanStepper(Runtime& rt, const WanDenoise& d, sampling::FlowSampler& sampler);
  void step(int i);

 private:
  Runtime& rt_;
  const WanDenoise& d_;
  sampling::FlowSampler& sampler_;
  Guidance guidance_;
  Shape batch_shape_;
  OwnedTensor text_, in_, pred_, t_, v_, both_;
};

// Runs steps [sampler.steps_done(), scheduler.steps()) on sampler's latents [1, C, F, H, W],
// calling d.after_step after each.
void wan_denoise(Runtime& rt, const WanDenoise& d, sampling::FlowSampler& sampler);

// What the pipeline hands its VAE: z = latents * latents_std + latents_mean, per channel (the
// inverse of the encoder side's (mean - latents_mean) / latents_std). latents and z [N, C, F, h, w]
// f32 on rt's device; throws vinf::InputError when the VAE's config has no statistics for C channels.
void wan_latents_for_vae(Runtime& rt, const model::WanVaeConfig& vae, const Tensor& latents, const Tensor& z);

// The pipeline's last stage: wan_latents_for_vae, the causal VAE (over tiles of `tile` latent
// pixels when tile > 0), then the frames as the reference exports them (clamp(x / 2 + 0.5), times
// 255, truncated) into out_dir's video.mp4, contact.png and PNG frames as `settings` asks.
// latents [1, C, F, h, w] f32 on rt's device: the whole video, or with `parts` this rank's part of
// it. Returns the files written, the seconds taken and the writer's first error ("" when none;
// the caller says it).
//
// In parts (a video whose latent frames are split over ranks as infinity::clip_frames splits
// them): each of the ranks decodes its own frames, given the VAE's causal memory by the rank of
// the part before and handing its own to the next (WanVae::decode_part: the frames of one decode,
// bit for bit), then sends them to the first part's rank, which writes the video. The decoding
// runs one part after another (each needs the memory of the one before), each rank holding its own
// frames only: no rank holds the whole video. Point to point over the session (no watchdog: a rank
// waits for the parts before it).
struct WanVideoParts {
  const mpi::Session* session = nullptr;  // null: the whole video on this rank
  std::vector<int> ranks;  // the session ranks of the parts, in video order
  int index = 0;  // this rank's part
  std::int64_t total = 0;  // the video's latent frames
};
struct WanVideoFiles {
  double seconds = 0;
  std::vector<std::string> files;
  std::string error;
};
WanVideoFiles wan_write_video(Runtime& rt, const model::WanVae& vae, const Tensor& latents, const std::string& out_dir,
                              const io::FrameWriter::Settings& settings, std::int64_t tile,
                              const WanVideoParts& parts = {});

}  // namespace vinf::pipeline
