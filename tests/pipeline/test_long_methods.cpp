// The model side of the long-video methods (pipeline/long_methods.hpp) on the tiny fixture UNet:
// FIFO-Diffusion against an independent step-by-step computation written here (host loops over
// the queue, DDIM's formula, the UNet called window by window), and sliding windows against the
// blend done by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "../support.hpp"
#include "pipeline/long_methods.hpp"
#include "model/presets.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"
#include "sampling/scheduler.hpp"

using namespace vinf;

namespace {

model::UNet3D tiny_unet(Runtime& rt) {
  const model::ModelFiles files = model::find_model_files(test::fixture("tiny-unet3d"));
  const model::UNetConfig c = model::load_unet_config(files.config, nullptr);
  const model::WeightFiles wf(files);
  return model::UNet3D(c, model::Weights(wf, model::unet_parameters(c), rt, DType::f32, false, nullptr));
}

std::vector<float> host(Runtime& rt, const Tensor& t) {
  OwnedTensor c = rt.arena().empty(DType::f32, t.shape);
  ops::copy(rt.ctx(), t, c);
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  ops::copy(rt.ctx(), c, Tensor::wrap(v.data(), DType::f32, Device::cpu(), t.shape));
  return v;
}

constexpr std::int64_t kC = 4, kH = 8, kW = 8, kPixels = kC * kH * kW;  // one frame, channel-major within it
constexpr float kGuidance = 3.f;

// Frames as host vectors of C x H x W values (the test's own layout).
using Frames = std::vector<std::vector<float>>;

Frames frames_of(const std::vector<float>& x, std::int64_t count) {  // from (1, C, F, H, W)
  Frames out(static_cast<std::size_t>(count), std::vector<float>(kPixels));
  for (std::int64_t c = 0; c < kC; ++c)
    for (std::int64_t f = 0; f < count; ++f)
      for (std::int64_t p = 0; p < kH * kW; ++p)
        out[static_cast<std::size_t>(f)][static_cast<std::size_t>(c * kH * kW + p)] =
            x[static_cast<std::size_t>((c * count + f) * kH * kW + p)];
  return out;
}

// The guided UNet prediction for frames at per-frame timesteps, called directly.
Frames predict(Runtime& rt, const model::UNet3D& unet, const Tensor& text, const Frames& x,
               const std::vector<std::int64_t>& t) {
  const auto f = static_cast<std::int64_t>(x.size());
  std::vector<float> in(static_cast<std::size_t>(2 * kPixels * f));
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t c = 0; c < kC; ++c)
      for (std::int64_t j = 0; j < f; ++j)
        for (std::int64_t p = 0; p < kH * kW; ++p)
          in[static_cast<std::size_t>(((b * kC + c) * f + j) * kH * kW + p)] =
              x[static_cast<std::size_t>(j)][static_cast<std::size_t>(c * kH * kW + p)];
  const Shape shape{2, kC, f, kH, kW};
  OwnedTensor dev = rt.arena().empty(DType::f32, shape), out = rt.arena().empty(DType::f32, shape);
  ops::copy(rt.ctx(), Tensor::wrap(in.data(), DType::f32, Device::cpu(), shape), dev);
  model::PlainTemporalContext plain;
  unet.forward(rt.ctx(), dev, t, 24.0, text, out, plain);
  const std::vector<float> pred = host(rt, out);
  const Frames u = frames_of(std::vector<float>(pred.begin(), pred.begin() + kPixels * f), f);
  const Frames c = frames_of(std::vector<float>(pred.begin() + kPixels * f, pred.end()), f);
  Frames eps = u;
  for (std::size_t j = 0; j < eps.size(); ++j)
    for (std::size_t k = 0; k < eps[j].size(); ++k) eps[j][k] = u[j][k] + kGuidance * (c[j][k] - u[j][k]);
  return eps;
}

// DDIM (eta 0) from noise level abar to abar_next.
void ddim(std::vector<float>& x, const std::vector<float>& eps, double abar, double abar_next) {
  for (std::size_t k = 0; k < x.size(); ++k) {
    const double x0 = (x[k] - std::sqrt(1 - abar) * eps[k]) / std::sqrt(abar);
    x[k] = static_cast<float>(std::sqrt(abar_next) * x0 + std::sqrt(1 - abar_next) * eps[k]);
  }
}

double max_diff(const Frames& a, const Frames& b, double& scale) {
  double worst = 0;
  for (std::size_t j = 0; j < a.size(); ++j)
    for (std::size_t k = 0; k < a[j].size(); ++k) {
      worst = std::max(worst, std::fabs(static_cast<double>(a[j][k]) - b[j][k]));
      scale = std::max(scale, std::fabs(static_cast<double>(b[j][k])));
    }
  return worst;
}

}  // namespace

TEST_CASE(
    "FIFO-Diffusion equals a step-by-step computation of its queue (tiny UNet, DDIM, with and without lookahead, two "
    "prompts)") {
  Runtime rt(Device::cpu());
  const model::UNet3D unet = tiny_unet(rt);
  // Two prompts: frame 0 takes the first, frames 1 and 2 the second (ends {1, 3}); an iteration
  // takes the prompt of the frame that leaves the queue at it, the warm-up the first.
  OwnedTensor text = rt.arena().empty(DType::f32, {2, 6, 32}), text2 = rt.arena().empty(DType::f32, {2, 6, 32});
  ops::normal(rt.ctx(), text, 7, 0, 0);
  ops::normal(rt.ctx(), text2, 8, 0, 0);
  const std::vector<std::int64_t> ends{1, 3};
  const std::int64_t frames = 3;  // more than f: the base video's two frames leave, then a new one
  for (bool lookahead : {false, true}) {
    CAPTURE(lookahead);
    const int f = 2, n = 2, S = f * n, L = lookahead ? f / 2 : 0, Q = S + L;
    const sampling::FifoPlan plan(f, n, lookahead);
    const sampling::Scheduler sched(sampling::SchedulerKind::ddim, {}, S, 0.0);
    const sampling::NoiseSource noise(sampling::NoiseMode::invariant, 11, 0, 0);
    std::vector<OwnedTensor> texts;
    for (const Tensor* t : {&text.view(), &text2.view()}) {
      texts.push_back(rt.arena().empty(DType::f32, t->shape));
      ops::copy(rt.ctx(), *t, texts.back());
    }
    const pipeline::GuidedModel model(unet, 24.0, kGuidance, std::move(texts));
    const std::unique_ptr<pipeline::FifoDraws> draws = pipeline::seeded_fifo_draws(noise, plan);
    pipeline::FifoQueue fifo(model, nullptr, plan, sched, sched, *draws, frames, ends);
    OwnedTensor state = rt.arena().empty(DType::f32, {1, kC, frames + Q, kH, kW});
    fifo.start(rt.ctx(), state, {});
    const std::int64_t iterations = frames + S - f;
    for (std::int64_t i = 0; i < iterations; ++i) fifo.iterate(rt.ctx(), i, state);
    const Frames got = frames_of(host(rt, state.slice(2, 0, frames)), frames);

    // The same by hand. The noise level of step i is abar = 1 / (1 + sigma_i^2); the queue's level
    // k is step S - 1 - k, so level k goes from abar(S - 1 - k) to abar(S - k) (clean after level 0).
    const auto abar = [&](int i) {
      return 1.0 / (1.0 + sched.sigmas()[static_cast<std::size_t>(i)] * sched.sigmas()[static_cast<std::size_t>(i)]);
    };
    const auto level = [&](int q) { return std::max(0, q - L); };
    const auto t_of = [&](int q) { return sched.timesteps()[static_cast<std::size_t>(S - 1 - level(q))]; };
    // The base video: f frames through the whole schedule.
    OwnedTensor x0 = rt.arena().empty(DType::f32, {1, kC, f, kH, kW});
    noise.initial(rt.ctx(), rt.arena(), x0);
    Frames base = frames_of(host(rt, x0), f);
    for (int i = 0; i < S; ++i) {
      const Frames eps = predict(
          rt, unet, text, base,
          std::vector<std::int64_t>(static_cast<std::size_t>(f), sched.timesteps()[static_cast<std::size_t>(i)]));
      for (int j = 0; j < f; ++j)
        ddim(base[static_cast<std::size_t>(j)], eps[static_cast<std::size_t>(j)], abar(i), abar(i + 1));
    }
    // The queue: position q holds base frame max(0, level - (S - f)) noised to its level.
    OwnedTensor z = rt.arena().empty(DType::f32, {1, kC, Q, kH, kW});
    noise.step(rt.ctx(), rt.arena(), S, z);
    const Frames fresh = frames_of(host(rt, z), Q);
    Frames queue(static_cast<std::size_t>(Q));
    for (int q = 0; q < Q; ++q) {
      const double a = abar(S - 1 - level(q));
      const std::vector<float>& b = base[static_cast<std::size_t>(std::max(0, level(q) - (S - f)))];
      queue[static_cast<std::size_t>(q)].resize(kPixels);
      for (std::int64_t k = 0; k < kPixels; ++k)
        queue[static_cast<std::size_t>(q)][static_cast<std::size_t>(k)] =
            static_cast<float>(std::sqrt(a) * b[static_cast<std::size_t>(k)] +
                               std::sqrt(1 - a) * fresh[static_cast<std::size_t>(q)][static_cast<std::size_t>(k)]);
    }
    Frames video(static_cast<std::size_t>(frames));
    for (std::int64_t i = 0; i < iterations; ++i) {
      const Frames before = queue;
      // Windows of f positions: every f (kept whole), or with lookahead every f / 2 keeping the
      // second half; each reads the queue as it was before this iteration.
      const int stride = lookahead ? f / 2 : f;
      for (int start = 0; start + f <= Q; start += stride) {
        const Frames win(before.begin() + start, before.begin() + start + f);
        std::vector<std::int64_t> t;
        for (int q = start; q < start + f; ++q) t.push_back(t_of(q));
        const Frames eps = predict(rt, unet, i - (S - f) >= ends[0] ? text2 : text, win, t);
        for (int q = start + (lookahead ? f / 2 : 0); q < start + f; ++q) {
          const int k = level(q);
          queue[static_cast<std::size_t>(q)] = before[static_cast<std::size_t>(q)];
          ddim(queue[static_cast<std::size_t>(q)], eps[static_cast<std::size_t>(q - start)], abar(S - 1 - k),
               abar(S - k));
        }
      }
      const std::int64_t out = i - (S - f);
      if (out >= 0 && out < frames) video[static_cast<std::size_t>(out)] = queue[static_cast<std::size_t>(L)];
      queue.erase(queue.begin());
      OwnedTensor tail = rt.arena().empty(DType::f32, {1, kC, 1, kH, kW});
      noise.step(rt.ctx(), rt.arena(), static_cast<int>(S + 2 + 2 * i), tail);
      queue.push_back(frames_of(host(rt, tail), 1)[0]);
    }
    double scale = 1;
    const double diff = max_diff(got, video, scale);
    CAPTURE(diff);
    CAPTURE(scale);
    CHECK(diff <= 1e-4 * scale);  // f32 arithmetic in another order (double here)
  }
}

TEST_CASE("sliding windows: the prediction is each window's UNet output blended with the windows' weights") {
  Runtime rt(Device::cpu());
  const model::UNet3D unet = tiny_unet(rt);
  OwnedTensor text = rt.arena().empty(DType::f32, {2, 6, 32});
  ops::normal(rt.ctx(), text, 3, 0, 0);
  std::vector<OwnedTensor> texts;
  texts.push_back(rt.arena().empty(DType::f32, text.shape));
  ops::copy(rt.ctx(), text, texts.back());
  const pipeline::GuidedModel model(unet, 24.0, kGuidance, std::move(texts));
  sampling::LongVideoConfig c;
  c.mode = sampling::LongMode::windows;
  c.window = 4;
  c.stride = 3;
  const std::int64_t frames = 10;  // windows [0, 4), [3, 7), [6, 10)
  pipeline::SlidingWindows windows(model, nullptr, c, frames);
  REQUIRE(windows.windows().size() == 3);
  OwnedTensor x = rt.arena().empty(DType::f32, {1, kC, frames, kH, kW}), eps = rt.arena().empty(DType::f32, x.shape);
  ops::normal(rt.ctx(), x, 5, 0, 0);
  windows.eps(rt.ctx(), x, 600, eps);
  const Frames got = frames_of(host(rt, eps), frames);
  const Frames all = frames_of(host(rt, x), frames);
  Frames want(static_cast<std::size_t>(frames), std::vector<float>(kPixels, 0.f));
  const auto weights = sampling::blend_weights(windows.windows(), c.blend);
  for (std::size_t w = 0; w < 3; ++w) {
    const sampling::FrameSpan s = windows.windows()[w];
    const Frames part = predict(rt, unet, text, Frames(all.begin() + s.first, all.begin() + s.end()),
                                std::vector<std::int64_t>(static_cast<std::size_t>(s.count), 600));
    for (std::int64_t j = 0; j < s.count; ++j)
      for (std::int64_t k = 0; k < kPixels; ++k)
        want[static_cast<std::size_t>(s.first + j)][static_cast<std::size_t>(k)] +=
            weights[w][static_cast<std::size_t>(j)] * part[static_cast<std::size_t>(j)][static_cast<std::size_t>(k)];
  }
  double scale = 1;
  CHECK(max_diff(got, want, scale) <= 1e-5 * scale);
}
