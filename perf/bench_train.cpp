// One training step's forward and backward passes of the UNet (train/unet_loss), random weights of
// a preset's shape, f32 on the CPU: the backward / forward time ratio (target <= 2.5x), the forward
// against the inference forward of the same shape, and the activations' peak memory with and
// without activation checkpointing. Before the figures, once per setup, a table of each op's forward
// and backward time in one profiled step (train::Graph::Profile).
//   --vinf_suite=cpu (default): "narrow" (small's layout at widths 32/64/128/128, head dim 8) at
//                               8 frames, 32 x 32, 16 text tokens, batch 1
//   --vinf_suite=smoke: the tiny preset at 4 frames, 8 x 8, to check that the harness runs
//
//   vinf_bench_train [--vinf_suite=cpu|smoke] [Google Benchmark flags]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_flags.hpp"
#include "model/presets.hpp"
#include "model/unet3d.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"
#include "ops/runtime.hpp"
#include "sampling/scheduler.hpp"
#include "train/unet_loss.hpp"

using namespace vinf;

namespace {

struct Setup {
  std::string preset;
  std::int64_t b, f, h, w, tokens;
  bool checkpoint;
};

std::string name_of(const Setup& s) {
  return "train_step/" + s.preset + " B" + std::to_string(s.b) + " F" + std::to_string(s.f) + " " +
         std::to_string(s.h) + "x" + std::to_string(s.w) + (s.checkpoint ? " checkpointed" : " plain");
}

model::UNetConfig config_of(const std::string& preset) {
  model::UNetConfig c = model::preset_config(preset == "narrow" ? "small" : preset);
  if (preset == "narrow") {
    c.block_out_channels = {32, 64, 128, 128};
    c.attention_head_dim = 8;
  }
  return c;
}

void train_step(benchmark::State& state, const Setup& s) {
  Runtime rt(Device::cpu());
  const model::UNetConfig c = config_of(s.preset);
  const auto specs = model::unet_parameters(c);
  const model::Weights weights = model::Weights::random(specs, rt, DType::f32, 1);
  std::vector<std::pair<std::string, Shape>> all;
  for (const auto& p : specs) all.emplace_back(p.name, p.shape);
  train::ParamGrads grads(rt.arena(), all);
  const Shape xs{s.b, c.in_channels, s.f, s.h, s.w};
  OwnedTensor x0 = rt.arena().empty(DType::f32, xs), eps = rt.arena().empty(DType::f32, xs);
  OwnedTensor text = rt.arena().empty(DType::f32, {s.b, s.tokens, c.cross_attention_dim});
  ops::normal(rt.ctx(), x0, 3, 0, 0);
  ops::normal(rt.ctx(), eps, 3, 1, 0);
  ops::normal(rt.ctx(), text, 3, 2, 0);
  const train::LossBatch batch{x0, eps, text, std::vector<std::int64_t>(static_cast<std::size_t>(s.b), 500), 24};
  const auto abar = sampling::make_alphas_cumprod(sampling::NoiseScheduleConfig{});
  const auto lookup = [&weights](const std::string& n) { return weights.find(n); };
  auto step = [&](train::Graph::Profile* profile = nullptr) {
    grads.zero(rt.ctx());
    return train::unet_loss_backward(rt.ctx(), c, lookup, grads, abar, batch, x0.numel(), nullptr, s.checkpoint,
                                     1.f, profile);
  };
  step();  // warm-up: plans, arena blocks
  const std::size_t before = rt.arena().stats().in_use;
  rt.arena().reset_peak();
  double forward = 0, backward = 0;
  int n = 0;
  for (auto _ : state) {
    const train::LossResult r = step();
    forward += r.forward_seconds;
    backward += r.backward_seconds;
    ++n;
  }
  const double peak = static_cast<double>(rt.arena().stats().peak_in_use - before);
  // One more step, outside the timing, for where the time goes by op (once per setup: Google
  // Benchmark runs this function more than once).
  static std::set<std::string> shown;
  if (shown.insert(name_of(s)).second) {
    train::Graph::Profile by_op;
    const train::LossResult r = step(&by_op);
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [op, sec] : by_op.backward) rows.emplace_back(sec, op);
    std::sort(rows.rbegin(), rows.rend());
    std::printf("%s, by op (one step: forward %.3f s, backward %.3f s):\n", name_of(s).c_str(), r.forward_seconds,
                r.backward_seconds);
    std::printf("  %-48s %9s %9s %8s %7s\n", "op", "forward s", "backward s", "bwd/fwd", "of bwd");
    for (const auto& [sec, op] : rows) {
      const auto f = by_op.forward.find(op);
      const double fwd = f == by_op.forward.end() ? 0 : f->second;
      std::printf("  %-48s %9.4f %9.4f %8.2f %6.1f%%\n", op.c_str(), fwd, sec, fwd > 0 ? sec / fwd : 0.0,
                  100 * sec / r.backward_seconds);
    }
  }
  // The inference forward of the same shape (one timestep for the batch), for comparison.
  const model::UNet3D unet(c, model::Weights::random(specs, rt, DType::f32, 1));
  OwnedTensor out = rt.arena().empty(DType::f32, xs);
  model::PlainTemporalContext plain;
  unet.forward(rt.ctx(), x0, 500, 24, text, out, plain);
  const auto t0 = std::chrono::steady_clock::now();
  unet.forward(rt.ctx(), x0, 500, 24, text, out, plain);
  const double inference = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  state.counters["forward s"] = forward / n;
  state.counters["backward s"] = backward / n;
  state.counters["bwd/fwd"] = backward / forward;
  state.counters["fwd/inference"] = forward / n / inference;
  state.counters["peak MiB"] = peak / (1 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string suite = bench::take_flag(argc, argv, "vinf_suite", "cpu");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  static std::vector<Setup> setups;
  if (suite == "smoke") {
    setups = {{"tiny", 1, 4, 8, 8, 8, false}, {"tiny", 1, 4, 8, 8, 8, true}};
  } else {
    setups = {{"narrow", 1, 8, 32, 32, 16, false}, {"narrow", 1, 8, 32, 32, 16, true}};
  }
  for (const Setup& s : setups) {
    const std::string name = name_of(s);
    benchmark::RegisterBenchmark(name.c_str(), [&s](benchmark::State& st) { train_step(st, s); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(suite == "smoke" ? 0.001 : 2.0);
  }
  std::printf("target: backward / forward <= 2.5x; %d thread(s)\n", cpu_threads());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
