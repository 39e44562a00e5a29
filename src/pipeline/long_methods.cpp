#include "pipeline/long_methods.hpp"

#include "pipeline/guidance.hpp"

#include <cmath>
#include <utility>

#include "core/error.hpp"
#include "ops/elementwise.hpp"
#include "sampling/conditioning.hpp"
#include "sampling/sampler.hpp"

namespace vinf::pipeline {

GuidedModel::GuidedModel(const model::UNet3D& unet, double fps, double guidance, std::vector<OwnedTensor> texts)
    : unet_(unet), fps_(fps), guidance_(static_cast<float>(guidance)), texts_(std::move(texts)) {}

void GuidedModel::eps(ExecContext& ctx, const Tensor& x, std::span<const std::int64_t> timesteps, int prompt,
                      const Tensor& out) const {
  const Tensor& text = texts_.at(static_cast<std::size_t>(prompt));
  const std::int64_t batch = text.size(0);
  Shape shape = x.shape;
  shape[0] = batch;
  OwnedTensor in = ctx.arena->empty(DType::f32, shape), pred = ctx.arena->empty(DType::f32, shape);
  for (std::int64_t b = 0; b < batch; ++b) ops::copy(ctx, x, in.slice(0, b, 1));
  model::PlainTemporalContext plain;
  unet_.forward(ctx, in, timesteps, fps_, text, pred, plain, observe_);
  Guidance::of(batch > 1, guidance_, nullptr).combine(ctx, pred, Tensor{}, out);
}

void gather_windows(ExecContext& ctx, mpi::Communicator* group, std::int64_t windows, const Tensor& all,
                    const std::function<void(std::int64_t w, const Tensor& out)>& compute) {
  const int ranks = group ? group->size() : 1, rank = group ? group->rank() : 0;
  const sampling::FrameSpan mine = sampling::share(windows, ranks, rank);
  if (ranks == 1) {
    for (std::int64_t w = 0; w < windows; ++w) compute(w, all.slice(0, w, 1));
    return;
  }
  OwnedTensor send = ctx.arena->empty(DType::f32, all.slice(0, 0, mine.count).shape);
  for (std::int64_t k = 0; k < mine.count; ++k) compute(mine.first + k, send.slice(0, k, 1));
  const std::int64_t per_window = all.numel() / windows;
  std::vector<std::int64_t> counts;
  for (int r = 0; r < ranks; ++r) counts.push_back(sampling::share(windows, ranks, r).count * per_window);
  group->all_gather_v(ctx, send, all, counts);
}

SlidingWindows::SlidingWindows(const GuidedModel& model, mpi::Communicator* group, const sampling::LongVideoConfig& c,
                               std::int64_t frames)
    : model_(model),
      group_(group),
      windows_(sampling::sliding_windows(frames, c.window, c.stride)),
      weights_(sampling::blend_weights(windows_, c.blend)) {}

void SlidingWindows::eps(ExecContext& ctx, const Tensor& x, std::int64_t timestep, const Tensor& out) {
  const auto count = static_cast<std::int64_t>(windows_.size());
  const std::int64_t length = windows_.front().count;
  Shape one = x.slice(2, 0, length).shape;
  OwnedTensor all = ctx.arena->empty(DType::f32, {count, one[1], one[2], one[3], one[4]});
  gather_windows(ctx, group_, count, all, [&](std::int64_t w, const Tensor& o) {
    const sampling::FrameSpan& span = windows_[static_cast<std::size_t>(w)];
    const int prompt = sampling::prompt_for_clip(static_cast<int>(w), static_cast<int>(count), model_.prompts());
    model_.eps(ctx, x.slice(2, span.first, span.count), std::span<const std::int64_t>(&timestep, 1), prompt, o);
  });
  // The blend, in window order on every rank.
  ops::fill(ctx, out, 0.0);
  for (std::int64_t w = 0; w < count; ++w) {
    const sampling::FrameSpan& span = windows_[static_cast<std::size_t>(w)];
    const std::vector<float>& a = weights_[static_cast<std::size_t>(w)];
    for (std::int64_t j = 0; j < span.count; ++j) {
      const Tensor dst = out.slice(2, span.first + j, 1);
      ops::axpby(ctx, 1.f, dst, a[static_cast<std::size_t>(j)], all.slice(0, w, 1).slice(2, j, 1), dst);
    }
  }
}

FifoQueue::FifoQueue(const GuidedModel& model, mpi::Communicator* group, const sampling::FifoPlan& plan,
                     const sampling::Scheduler& scheduler, const sampling::NoiseSource& noise, std::int64_t frames)
    : model_(model), group_(group), plan_(plan), scheduler_(scheduler), noise_(noise), frames_(frames) {
  VINF_CHECK(scheduler.steps() == plan.steps(), "FifoQueue: a schedule of ", scheduler.steps(), " steps for ",
             plan.steps(), " queue levels");
}

void FifoQueue::start(ExecContext& ctx, const Tensor& state, const std::function<void(int)>& progress) {
  Arena& arena = *ctx.arena;
  const int f = plan_.window(), steps = plan_.steps();
  const Tensor queue = state.slice(2, frames_, plan_.queue_length());
  // The base video: the plain model on f frames through the whole schedule.
  Shape base_shape = state.slice(2, 0, f).shape;
  sampling::Sampler base(scheduler_, arena, base_shape);
  noise_.initial(ctx, arena, base.latents());
  OwnedTensor eps = arena.empty(DType::f32, base_shape), z = arena.empty(DType::f32, base_shape);
  for (int i = 0; i < steps; ++i) {
    const std::int64_t t = scheduler_.timesteps()[static_cast<std::size_t>(i)];
    model_.eps(ctx, base.latents(), std::span<const std::int64_t>(&t, 1), 0, eps);
    if (scheduler_.stochastic()) noise_.step(ctx, arena, i, z);
    base.step(ctx, i, eps, z);
    if (progress) progress(i + 1);
  }
  // Position q: the base frame it starts from, noised to its level.
  OwnedTensor fresh = arena.empty(DType::f32, queue.shape);
  noise_.step(ctx, arena, steps, fresh);
  for (int q = 0; q < plan_.queue_length(); ++q) {
    const std::int64_t t = scheduler_.timesteps()[static_cast<std::size_t>(plan_.step_index(q))];
    const double abar = scheduler_.alphas_cumprod()[static_cast<std::size_t>(t)];
    ops::axpby(ctx, static_cast<float>(std::sqrt(abar)), base.latents().slice(2, plan_.base_frame(q), 1),
               static_cast<float>(std::sqrt(1.0 - abar)), fresh.slice(2, q, 1), queue.slice(2, q, 1));
  }
  ops::fill(ctx, state.slice(2, 0, frames_), 0.0);
}

void FifoQueue::iterate(ExecContext& ctx, std::int64_t i, const Tensor& state) {
  Arena& arena = *ctx.arena;
  const int f = plan_.window(), steps = plan_.steps(), length = plan_.queue_length();
  const Tensor queue = state.slice(2, frames_, length);
  const std::vector<sampling::FrameSpan>& windows = plan_.windows();
  const auto count = static_cast<std::int64_t>(windows.size());
  // Every window's prediction, each frame at its own timestep; the kept parts make the queue's.
  const Shape one = queue.slice(2, 0, f).shape;
  OwnedTensor all = arena.empty(DType::f32, {count, one[1], one[2], one[3], one[4]});
  gather_windows(ctx, group_, count, all, [&](std::int64_t w, const Tensor& o) {
    const sampling::FrameSpan& span = windows[static_cast<std::size_t>(w)];
    std::vector<std::int64_t> t;
    for (std::int64_t q = span.first; q < span.end(); ++q)
      t.push_back(scheduler_.timesteps()[static_cast<std::size_t>(plan_.step_index(static_cast<int>(q)))]);
    model_.eps(ctx, queue.slice(2, span.first, span.count), t, 0, o);
  });
  OwnedTensor eps = arena.empty(DType::f32, queue.shape);
  ops::fill(ctx, eps, 0.0);
  for (std::int64_t w = 0; w < count; ++w) {
    const sampling::FrameSpan& span = windows[static_cast<std::size_t>(w)];
    const sampling::FrameSpan& kept = plan_.kept()[static_cast<std::size_t>(w)];
    ops::copy(ctx, all.slice(0, w, 1).slice(2, kept.first - span.first, kept.count),
              eps.slice(2, kept.first, kept.count));
  }
  std::vector<int> step(static_cast<std::size_t>(length), -1);
  for (int q = plan_.context(); q < length; ++q) step[static_cast<std::size_t>(q)] = plan_.step_index(q);
  OwnedTensor z;
  if (scheduler_.stochastic()) {
    z = arena.empty(DType::f32, queue.shape);
    noise_.step(ctx, arena, static_cast<int>(steps + 1 + 2 * i), z);
  }
  sampling::step_frames(ctx, scheduler_, queue, eps, z, step, 2, arena);
  // The head is clean: after the warm-up it is the video's next frame.
  const std::int64_t out = plan_.output_frame(i);
  if (out >= 0 && out < frames_) ops::copy(ctx, queue.slice(2, plan_.context(), 1), state.slice(2, out, 1));
  // The queue moves one position towards the head; fresh noise enters at the tail.
  OwnedTensor moved = arena.empty(DType::f32, queue.slice(2, 1, length - 1).shape);
  ops::copy(ctx, queue.slice(2, 1, length - 1), moved);
  ops::copy(ctx, moved, queue.slice(2, 0, length - 1));
  OwnedTensor tail = arena.empty(DType::f32, queue.slice(2, length - 1, 1).shape);
  noise_.step(ctx, arena, static_cast<int>(steps + 2 + 2 * i), tail);
  ops::copy(ctx, tail, queue.slice(2, length - 1, 1));
}

}  // namespace vinf::pipeline
