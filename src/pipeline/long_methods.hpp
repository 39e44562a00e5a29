// The model side of `--long.mode windows` and `--long.mode fifo` (sampling/long_video.hpp): every
// rank holds the whole video's latents (windows) or the whole FIFO queue, runs the model on its
// share of the windows, and the clip group's all-gather gives every rank every window's output,
// combined in window order. Each window's numbers do not depend on the rank that computed it, so
// the video does not depend on the number of ranks (to the threads' rounding).
#pragma once

#include <cstdint>
#include <functional>
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

// FIFO-Diffusion over a state (1, C, frames + Q, H, W): the video's frames that have left the
// queue (frame o at o), then the queue's Q positions (head first).
class FifoQueue {
 public:
  // scheduler: first-order (DDIM) with plan.steps() steps. noise: keyed by global frame from 0.
  FifoQueue(const GuidedModel& model, mpi::Communicator* group, const sampling::FifoPlan& plan,
            const sampling::Scheduler& scheduler, const sampling::NoiseSource& noise, std::int64_t frames);
  // Makes the base video (plan.steps() model calls on f frames; progress(k) after call k) and
  // fills the queue from it; the video's frames are zero.
  void start(ExecContext& ctx, const Tensor& state, const std::function<void(int)>& progress);
  // Iteration i: every window through the model, one step per position, the head frame leaves
  // (into the video after the warm-up), the queue moves up, fresh noise enters at the tail.
  void iterate(ExecContext& ctx, std::int64_t i, const Tensor& state);

 private:
  const GuidedModel& model_;
  mpi::Communicator* group_;
  const sampling::FifoPlan& plan_;
  const sampling::Scheduler& scheduler_;
  const sampling::NoiseSource& noise_;
  std::int64_t frames_;
};

}  // namespace vinf::pipeline
