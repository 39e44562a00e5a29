#include "pipeline/long_methods.hpp"

#include "pipeline/guidance.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "io/safetensors.hpp"
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

namespace {

class SeededFifoDraws final : public FifoDraws {
 public:
  SeededFifoDraws(const sampling::NoiseSource& noise, int steps) : noise_(noise), steps_(steps) {}
  void base_noise(ExecContext& ctx, Arena& arena, const Tensor& out) const override { noise_.initial(ctx, arena, out); }
  void base_step(ExecContext& ctx, Arena& arena, int j, const Tensor& out) const override {
    noise_.step(ctx, arena, j, out);
  }
  void queue_noise(ExecContext& ctx, Arena& arena, const Tensor& out) const override {
    noise_.step(ctx, arena, steps_, out);
  }
  void step_noise(ExecContext& ctx, Arena& arena, std::int64_t i, const Tensor& out) const override {
    noise_.step(ctx, arena, stream(i, 1), out);
  }
  void new_frame(ExecContext& ctx, Arena& arena, std::int64_t i, const Tensor& out) const override {
    noise_.step(ctx, arena, stream(i, 2), out);
  }

 private:
  int stream(std::int64_t i, int k) const {
    const std::int64_t s = steps_ + k + 2 * i;
    VINF_CHECK(s <= std::numeric_limits<int>::max(), "FIFO: iteration ", i, " is past the noise streams");
    return static_cast<int>(s);
  }
  const sampling::NoiseSource& noise_;
  int steps_;
};

std::string window_key(std::int64_t i, std::size_t w) {
  return "iter" + std::to_string(i) + ".eta_noise.window" + std::to_string(w);
}

class FileFifoDraws final : public FifoDraws {
 public:
  FileFifoDraws(const std::string& path, const sampling::FifoPlan& plan) : file_(path), plan_(plan) {}
  void base_noise(ExecContext& ctx, Arena&, const Tensor& out) const override { copy("base.noise", ctx, out); }
  void base_step(ExecContext& ctx, Arena&, int j, const Tensor& out) const override {
    copy("base.eta_noise.step" + std::to_string(j), ctx, out);
  }
  void queue_noise(ExecContext& ctx, Arena&, const Tensor& out) const override { copy("queue.noise", ctx, out); }
  void step_noise(ExecContext& ctx, Arena&, std::int64_t i, const Tensor& out) const override {
    ops::fill(ctx, out.slice(2, 0, plan_.context()), 0.0);
    for (std::size_t w = 0; w < plan_.windows().size(); ++w) {
      const sampling::FrameSpan& span = plan_.windows()[w];
      const sampling::FrameSpan& kept = plan_.kept()[w];
      const Tensor all = file_.tensor(window_key(i, w));
      ops::copy(ctx, all.slice(2, kept.first - span.first, kept.count), out.slice(2, kept.first, kept.count));
    }
  }
  void new_frame(ExecContext& ctx, Arena&, std::int64_t i, const Tensor& out) const override {
    const Tensor t = file_.tensor("iter" + std::to_string(i) + ".new_frame");
    ops::copy(ctx, t.reshape(out.shape), out);
  }

 private:
  void copy(const std::string& key, ExecContext& ctx, const Tensor& out) const {
    ops::copy(ctx, file_.tensor(key), out);
  }
  io::SafetensorsFile file_;
  const sampling::FifoPlan& plan_;
};

}  // namespace

std::unique_ptr<FifoDraws> seeded_fifo_draws(const sampling::NoiseSource& noise, const sampling::FifoPlan& plan) {
  return std::make_unique<SeededFifoDraws>(noise, plan.steps());
}

std::unique_ptr<FifoDraws> file_fifo_draws(const std::string& path, const sampling::FifoPlan& plan) {
  return std::make_unique<FileFifoDraws>(path, plan);
}

void check_fifo_draws(const std::string& path, const sampling::FifoPlan& plan, std::int64_t frames, const Shape& latent,
                      bool stochastic) {
  const io::SafetensorsFile file(path);
  const std::int64_t c = latent[0], h = latent[1], w = latent[2], f = plan.window();
  const auto need = [&](const std::string& key, const Shape& shape) {
    const io::SafetensorsFile::Entry* e = file.find(key);
    VINF_INPUT_CHECK(e, "--latents-init ", path, ": --long.mode fifo takes every random draw from the file, and it ",
                     "has no '", key, "' ", shape.str(),
                     " (the keys: base.noise, base.eta_noise.step<j> with eta > 0, ",
                     "queue.noise, iter<i>.eta_noise.window<w> with eta > 0, iter<i>.new_frame)");
    VINF_INPUT_CHECK(e->dtype == DType::f32 && e->shape == shape, "--latents-init ", path, ": '", key, "' is ",
                     dtype_name(e->dtype), " ", e->shape.str(), "; this run needs F32 ", shape.str());
    file.tensor(key);  // its values checked finite where read
  };
  need("base.noise", {1, c, f, h, w});
  need("queue.noise", {1, c, plan.queue_length(), h, w});
  for (int j = 0; stochastic && j < plan.steps(); ++j) need("base.eta_noise.step" + std::to_string(j), {1, c, f, h, w});
  for (std::int64_t i = 0; i < plan.iterations(frames); ++i) {
    need("iter" + std::to_string(i) + ".new_frame", {1, c, h, w});
    for (std::size_t k = 0; stochastic && k < plan.windows().size(); ++k) need(window_key(i, k), {1, c, f, h, w});
  }
}

FifoQueue::FifoQueue(const GuidedModel& model, mpi::Communicator* group, const sampling::FifoPlan& plan,
                     const sampling::Scheduler& scheduler, const sampling::Scheduler& base, const FifoDraws& draws,
                     std::int64_t frames, std::vector<std::int64_t> prompt_ends)
    : model_(model),
      group_(group),
      plan_(plan),
      scheduler_(scheduler),
      base_(base),
      draws_(draws),
      frames_(frames),
      prompt_ends_(std::move(prompt_ends)) {
  VINF_CHECK(scheduler.steps() == plan.steps() && base.steps() == plan.steps(), "FifoQueue: schedules of ",
             scheduler.steps(), " and ", base.steps(), " steps for ", plan.steps(), " queue levels");
}

void FifoQueue::start(ExecContext& ctx, const Tensor& state, const std::function<void(int)>& progress,
                      const Tensor& base_video) {
  Arena& arena = *ctx.arena;
  const int f = plan_.window(), steps = plan_.steps();
  const Tensor queue = state.slice(2, frames_, plan_.queue_length());
  // The base video: the plain model on f frames through the whole schedule, with the first prompt.
  Shape base_shape = state.slice(2, 0, f).shape;
  sampling::Sampler base(base_, arena, base_shape);
  draws_.base_noise(ctx, arena, base.latents());
  OwnedTensor eps = arena.empty(DType::f32, base_shape), z = arena.empty(DType::f32, base_shape);
  for (int i = 0; i < steps; ++i) {
    const std::int64_t t = base_.timesteps()[static_cast<std::size_t>(i)];
    model_.eps(ctx, base.latents(), std::span<const std::int64_t>(&t, 1), 0, eps);
    if (base_.stochastic()) draws_.base_step(ctx, arena, i, z);
    base.step(ctx, i, eps, z);
    if (progress) progress(i + 1);
  }
  if (base_video.data) ops::copy(ctx, base.latents(), base_video);
  // Position q: the base frame it starts from, noised to its level.
  OwnedTensor fresh = arena.empty(DType::f32, queue.shape);
  draws_.queue_noise(ctx, arena, fresh);
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
  const int f = plan_.window(), length = plan_.queue_length();
  const Tensor queue = state.slice(2, frames_, length);
  const std::vector<sampling::FrameSpan>& windows = plan_.windows();
  const auto count = static_cast<std::int64_t>(windows.size());
  const int prompt = sampling::fifo_prompt(prompt_ends_, plan_.output_frame(i));
  // Every window's prediction, each frame at its own timestep; the kept parts make the queue's.
  const Shape one = queue.slice(2, 0, f).shape;
  OwnedTensor all = arena.empty(DType::f32, {count, one[1], one[2], one[3], one[4]});
  gather_windows(ctx, group_, count, all, [&](std::int64_t w, const Tensor& o) {
    const sampling::FrameSpan& span = windows[static_cast<std::size_t>(w)];
    std::vector<std::int64_t> t;
    for (std::int64_t q = span.first; q < span.end(); ++q)
      t.push_back(scheduler_.timesteps()[static_cast<std::size_t>(plan_.step_index(static_cast<int>(q)))]);
    model_.eps(ctx, queue.slice(2, span.first, span.count), t, prompt, o);
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
    draws_.step_noise(ctx, arena, i, z);
  }
  sampling::step_frames(ctx, scheduler_, queue, eps, z, step, 2, arena);
  // The head has taken its last step: after the warm-up it is the video's next frame.
  const std::int64_t out = plan_.output_frame(i);
  if (out >= 0 && out < frames_) ops::copy(ctx, queue.slice(2, plan_.context(), 1), state.slice(2, out, 1));
  // The queue moves one position towards the head; fresh noise enters at the tail.
  OwnedTensor moved = arena.empty(DType::f32, queue.slice(2, 1, length - 1).shape);
  ops::copy(ctx, queue.slice(2, 1, length - 1), moved);
  ops::copy(ctx, moved, queue.slice(2, 0, length - 1));
  OwnedTensor tail = arena.empty(DType::f32, queue.slice(2, length - 1, 1).shape);
  draws_.new_frame(ctx, arena, i, tail);
  ops::copy(ctx, tail, queue.slice(2, length - 1, 1));
}

}  // namespace vinf::pipeline
