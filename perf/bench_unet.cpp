// One UNet call (CFG batch 2) with random weights of a preset's shape: time, FLOPs (counted from
// the layout, model/flops.hpp), achieved TFLOP/s and, on a GPU with a known peak, MFU.
//   CPU:  the small preset, 8 frames at a 32 x 32 latent, f32
//   CUDA: the vc2 preset at 320 x 512 (40 x 64 latent), 24 frames, bf16 and f16 (model-spec §8:
//         ~37.6 TFLOP per call with the text K/V projected once per batch element)
//   --vinf_suite=cpu: the CPU targets: "narrow" (small's layout at widths 32/64/128/128, head dim
//         8: 61 GFLOP per call) at 8 frames, 32 x 32, 16 text tokens, and small at 16 frames, both
//         CFG batch 2, f32; then each call's rate as a fraction of the best f32 matrix-product
//         rate this run measured (OpenBLAS sgemm and vinf's oneDNN matmul on 2048^3); on CPUs
//         with AVX-512 BF16 both again with --dtype bf16 (bf16 weights) and the bf16 / f32 ratio.
//   --vinf_suite=smoke: the tiny preset on small inputs, to check that the harness runs.
//
//   vinf_bench_unet [--vinf_suite=bench|cpu|smoke] [--vinf_devices=cpu,cuda] [Google Benchmark flags]
//   (--vinf_devices does not apply to the cpu suite)
#include <benchmark/benchmark.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "model/flops.hpp"
#include "model/presets.hpp"
#include "model/unet3d.hpp"
#include "ops/random.hpp"
#include "ops/runtime.hpp"
#include "bench_flags.hpp"
#include "bench_reference.hpp"

using namespace vinf;

namespace {

struct Shape5 {
  std::int64_t b, f, h, w, tokens;
};

struct Setup {
  std::string preset;  // a preset name, or "narrow": small's layout at widths 32/64/128/128, head dim 8
  Device device;
  DType dtype;
  Shape5 in;
};

void unet_call(benchmark::State& state, const Setup& s) {
  Runtime rt(s.device);
  model::UNetConfig c = model::preset_config(s.preset == "narrow" ? "small" : s.preset);
  if (s.preset == "narrow") {
    c.block_out_channels = {32, 64, 128, 128};
    c.attention_head_dim = 8;
  }
  const model::UNet3D unet(c, model::Weights::random(model::unet_parameters(c), rt, s.dtype, 1));
  const Shape sample_shape{s.in.b, c.in_channels, s.in.f, s.in.h, s.in.w};
  OwnedTensor sample = rt.arena().empty(DType::f32, sample_shape);
  OwnedTensor text = rt.arena().empty(DType::f32, {s.in.b, s.in.tokens, c.cross_attention_dim});
  OwnedTensor out = rt.arena().empty(DType::f32, {s.in.b, c.out_channels, s.in.f, s.in.h, s.in.w});
  ops::normal(rt.ctx(), sample, 2, 0, 0);
  ops::normal(rt.ctx(), text, 2, 1, 0);
  model::PlainTemporalContext plain;
  unet.forward(rt.ctx(), sample, 999, 24, text, out, plain);  // warm-up: plans, arena blocks
  rt.synchronize();
  rt.arena().reset_peak();
  for (auto _ : state) {
    unet.forward(rt.ctx(), sample, 999, 24, text, out, plain);
    rt.synchronize();
  }
  const double flops = model::unet_flops(c, s.in.b, s.in.f, s.in.h, s.in.w, s.in.tokens).total();
  state.counters["TFLOP/call"] = flops / 1e12;
  state.counters["TFLOP/s"] = benchmark::Counter(flops / 1e12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak GiB"] = static_cast<double>(rt.arena().stats().peak_in_use) / (1u << 30);
  state.counters["weights GiB"] = static_cast<double>(unet.weights().bytes()) / (1u << 30);
  if (s.device.is_cuda()) {
    std::string gpu;
    const double peak = bench::gpu_peak_tflops(&gpu);
    if (peak > 0) state.counters["MFU"] = benchmark::Counter(flops / 1e12 / peak, benchmark::Counter::kIsIterationInvariantRate);
    state.SetLabel(gpu);
  }
}

// Keeps each run's TFLOP/s for the summary while printing the usual console table.
class RateReporter : public benchmark::ConsoleReporter {
 public:
  std::vector<std::pair<std::string, double>> rates;
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      const auto it = r.counters.find("TFLOP/s");
      if (it != r.counters.end() && r.run_type == Run::RT_Iteration) rates.emplace_back(r.benchmark_name(), it->second.value);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  const std::string suite = bench::take_flag(argc, argv, "vinf_suite", "bench");
  const std::string devices = bench::take_flag(argc, argv, "vinf_devices", "cpu,cuda");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;

  static std::vector<Setup> setups;
  bench::GemmRate best;
  const bool cpu = devices.find("cpu") != std::string::npos;
  const bool gpu = devices.find("cuda") != std::string::npos && cuda_device_count() > 0;
  if (suite == "smoke") {
    if (cpu) setups.push_back({"tiny", Device::cpu(), DType::f32, {2, 4, 8, 8, 8}});
    if (gpu) setups.push_back({"tiny", Device::cuda(0), DType::bf16, {2, 4, 8, 8, 8}});
  } else if (suite == "cpu") {
    for (const bench::GemmRate& r : bench::cpu_gemm_rates()) {
      std::printf("reference: %-60s %7.1f GFLOP/s\n", r.what.c_str(), r.gflops);
      if (r.gflops > best.gflops) best = r;
    }
    if (const double bf16 = bench::cpu_bf16_linear_rate(); bf16 > 0)
      std::printf("reference: %-60s %7.1f GFLOP/s (bf16: not the f32 best)\n", "vinf CPU linear 2048^3, bf16 weights",
                  bf16);
    setups.push_back({"narrow", Device::cpu(), DType::f32, {2, 8, 32, 32, 16}});
    setups.push_back({"small", Device::cpu(), DType::f32, {2, 16, 32, 32, 77}});
    if (cpu_bf16()) {  // --dtype bf16 on the CPU: bf16 weights, f32 activations
      setups.push_back({"narrow", Device::cpu(), DType::bf16, {2, 8, 32, 32, 16}});
      setups.push_back({"small", Device::cpu(), DType::bf16, {2, 16, 32, 32, 77}});
    } else {
      std::printf("bf16: skipped (this CPU lacks AVX-512 BF16)\n");
    }
  } else {
    if (cpu) setups.push_back({"small", Device::cpu(), DType::f32, {2, 8, 32, 32, 77}});
    if (gpu) {
      setups.push_back({"small", Device::cuda(0), DType::bf16, {2, 24, 40, 64, 77}});
      setups.push_back({"vc2", Device::cuda(0), DType::bf16, {2, 24, 40, 64, 77}});
      setups.push_back({"vc2", Device::cuda(0), DType::f16, {2, 24, 40, 64, 77}});
    }
  }
  if (devices.find("cuda") != std::string::npos && !gpu)
    std::cout << "cuda: skipped (" << (built_with_cuda() ? "no GPU visible" : "built without CUDA") << ")\n";
  for (const Setup& s : setups) {
    const std::string name = "unet_call/" + s.preset + " [" + (s.device.is_cpu() ? "cpu" : "cuda") + " " +
                             dtype_name(s.dtype) + "] B" + std::to_string(s.in.b) + " F" + std::to_string(s.in.f) +
                             " " + std::to_string(s.in.h) + "x" + std::to_string(s.in.w);
    benchmark::RegisterBenchmark(name.c_str(), [&s](benchmark::State& st) { unet_call(st, s); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(suite == "smoke" ? 0.001 : 2.0);
  }
  RateReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  if (best.gflops > 0) {
    std::printf("\nsummary: UNet calls against the best f32 matrix product of this run (%s, %.1f GFLOP/s), %d thread(s)\n",
                best.what.c_str(), best.gflops, cpu_threads());
    for (const auto& [name, tflops] : reporter.rates)
      std::printf("  %-60s %7.1f GFLOP/s  %5.1f%% of the best\n", name.c_str(), tflops * 1000, 100 * tflops * 1000 / best.gflops);
    // bf16 against f32 for each shape that ran in both ("[cpu f32]" and "[cpu bf16]" in the names).
    for (const auto& [name, tflops] : reporter.rates) {
      const std::size_t at = name.find("[cpu bf16]");
      if (at == std::string::npos) continue;
      const std::string twin = name.substr(0, at) + "[cpu f32]" + name.substr(at + 10);
      for (const auto& [other, f32] : reporter.rates)
        if (other == twin) std::printf("  bf16 / f32 %-49s %5.2fx\n", name.substr(0, at).c_str(), tflops / f32);
    }
  }
  benchmark::Shutdown();
  return 0;
}
