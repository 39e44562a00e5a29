// The model side of `--long.mode windows` and `--long.mode fifo` (sampling/long_video.hpp): every
// rank holds the whole video's latents (windows) or the whole FIFO queue, runs the model on its
// share of the windows, and the clip group's all-gather gives every rank every window's output,
// combined in window order. Each window's numbers do not depend on the rank that computed it, so
// the video does not depend on the number of ranks (to the threads' rounding).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <span>
#include <utility>
#include <vector>

#include "core/arena.hpp"
#include "model/unet3d.hpp"
#include "mpi/communicator.hpp"
#include "sampling/long_video.hpp"
#include "sampling/noise.hpp"
#include "sampling/scheduler.hpp"

namespace vinf::pipeline {

// One guided prediction of the plain model: eps (1, C, F, H, W) f32 for latents x of that shape,
// at one timestep or one per frame, with prompt p's text batch ([negative, prompt] with guidance).
class GuidedModel {
 public:
  GuidedModel(const model::UNet3D& unet, double fps, double guidance, std::vector<OwnedTensor> texts);
  void eps(ExecContext& ctx, const Tensor& x, std::span<const std::int64_t> timesteps, int prompt,
           const Tensor& out) const;
  int prompts() const { return static_cast<int>(texts_.size()); }
  // Sees every UNet module's output (--debug's check of finite values).
  void observe(model::UNet3D::Observer observer) { observe_ = std::move(observer); }

 private:
  const model::UNet3D& unet_;
  double fps_;
  float guidance_;
  std::vector<OwnedTensor> texts_;
  model::UNet3D::Observer observe_;
};

// Sliding windows with blended overlaps: the noise prediction of the whole video at one step.
// Window w gets prompt prompt_for_clip(w, windows, prompts).
class SlidingWindows {
 public:
  // group: the ranks that share the windows (null: this rank alone).
  SlidingWindows(const GuidedModel& model, mpi::Communicator* group, const sampling::LongVideoConfig& c,
                 std::int64_t frames);
  const std::vector<sampling::FrameSpan>& windows() const { return windows_; }
  // x, out: (1, C, F, H, W) f32, the whole video.
  void eps(ExecContext& ctx, const Tensor& x, std::int64_t timestep, const Tensor& out);

 private:
  const GuidedModel& model_;
  mpi::Communicator* group_;
  std::vector<sampling::FrameSpan> windows_;
  std::vector<std::vector<float>> weights_;
};

// Windows' model outputs on every rank: window w of `windows` into all.slice(0, w, 1), each
// (1, C, F_w, H, W); `compute(w, out)` makes this rank's share.
void gather_windows(ExecContext& ctx, mpi::Communicator* group, std::int64_t windows, const Tensor& all,
                    const std::function<void(std::int64_t w, const Tensor& out)>& compute);

// The random draws of a FIFO run, in the released code's shapes: the base video's initial noise
// and each of its DDIM steps' noise, the noise that makes the queue from the base video, each
// iteration's step noise over the queue, and each iteration's fresh frame.
class FifoDraws {
 public:
  virtual ~FifoDraws() = default;
  virtual void base_noise(ExecContext& ctx, Arena& arena, const Tensor& out) const = 0;  // (1, C, f, H, W)
  virtual void base_step(ExecContext& ctx, Arena& arena, int j, const Tensor& out) const = 0;  // (1, C, f, H, W)
  virtual void queue_noise(ExecContext& ctx, Arena& arena, const Tensor& out) const = 0;  // (1, C, Q, H, W)
  // Iteration i's step noise of every queue position (its kept window's draw; zero for the context).
  virtual void step_noise(ExecContext& ctx, Arena& arena, std::int64_t i, const Tensor& out) const = 0;
  virtual void new_frame(ExecContext& ctx, Arena& arena, std::int64_t i,
                         const Tensor& out) const = 0;  // (1, C, 1, H, W)
};

// The draws from the run's seed, keyed by frame (the same on any number of ranks): stream 0 the
// base video's initial noise, j + 1 its step j, S + 1 the queue's noise, S + 2 + 2i iteration i's
// step noise over the queue, S + 3 + 2i its fresh frame.
std::unique_ptr<FifoDraws> seeded_fifo_draws(const sampling::NoiseSource& noise, const sampling::FifoPlan& plan);

// The draws given in a file (--latents-init in FIFO mode), under the keys of the released code's
// draws: base.noise [1, C, f, H, W], base.eta_noise.step<j> [1, C, f, H, W] (j = 0 at the first
// step), queue.noise [1, C, Q, H, W], iter<i>.eta_noise.window<w> [1, C, f, H, W] (frame j of window
// w is queue position start_w + j) and iter<i>.new_frame [1, C, H, W]; the noise of the DDIM steps
// only when eta > 0. Every rank reads the file.
std::unique_ptr<FifoDraws> file_fifo_draws(const std::string& path, const sampling::FifoPlan& plan);
// Checks such a file before any output: every key the run needs, of its shape (latent: C, H, W),
// F32 and finite. Throws vinf::InputError naming the file and the key.
void check_fifo_draws(const std::string& path, const sampling::FifoPlan& plan, std::int64_t frames, const Shape& latent,
                      bool stochastic);

// FIFO-Diffusion over a state (1, C, frames + Q, H, W): the video's frames that have left the
// queue (frame o at o), then the queue's Q positions (head first).
class FifoQueue {
 public:
  // scheduler: DDIM with plan.steps() steps, for the queue; base: the same grid for the base
  // video (with use_scale when the run asks for it). prompt_ends: where each prompt's frames end
  // (sampling::fifo_prompt_ends); an iteration takes the prompt of the frame that leaves at it.
  FifoQueue(const GuidedModel& model, mpi::Communicator* group, const sampling::FifoPlan& plan,
            const sampling::Scheduler& scheduler, const sampling::Scheduler& base, const FifoDraws& draws,
            std::int64_t frames, std::vector<std::int64_t> prompt_ends);
  // Makes the base video (plan.steps() model calls on f frames with the first prompt; progress(k)
  // after call k) and fills the queue from it; the video's frames are zero.
  // base_video: also a copy of the base video there ((1, C, f, H, W), optional).
  void start(ExecContext& ctx, const Tensor& state, const std::function<void(int)>& progress,
             const Tensor& base_video = Tensor{});
  // Iteration i: every window through the model, one step per position, the head frame leaves
  // (into the video after the warm-up), the queue moves up, fresh noise enters at the tail.
  void iterate(ExecContext& ctx, std::int64_t i, const Tensor& state);

 private:
  const GuidedModel& model_;
  mpi::Communicator* group_;
  const sampling::FifoPlan& plan_;
  const sampling::Scheduler& scheduler_;
  const sampling::Scheduler& base_;
  const FifoDraws& draws_;
  std::int64_t frames_;
  std::vector<std::int64_t> prompt_ends_;
};

}  // namespace vinf::pipeline
