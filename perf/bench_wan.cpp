// One Wan2.1 transformer call (CFG batch 2) with random weights of a preset's shape: time, FLOPs
// (model::wan_transformer_flops), achieved TFLOP/s, peak memory and, on a GPU with a known peak, MFU.
// Then the Wan2.1 VAE's decoder (random weights of the released layout) over whole frames and over
// tiles (--vae.tile): time and peak memory.
//   CPU:  "wan-narrow" (the 1.3B model's width, heads and feed-forward with 2 of its 30 blocks)
//         at 3 latent frames (9 video frames) of 240 x 416 (30 x 52 latent), 64 text tokens, f32;
//         and wan-tiny at 5 latent frames of 32 x 32, as the fixture's shape grown
//   CUDA: wan-1.3b at 480 x 832, 81 frames (21 latent frames, 32,760 tokens per sample), 512 text
//         tokens, bf16: the published model's step
//   VAE:  CPU f32, 2 latent frames (5 video frames) of 16 x 32 latent pixels (128 x 256), tiles 0,
//         8, 4; CUDA f32, 5 latent frames (17 frames) of 60 x 104 (480 x 832), tiles 0 and 16 (the
//         decoder works chunk by chunk: its peak memory does not grow with the frames but for the output)
//   --vinf_suite=smoke: wan-tiny on a small input, to check that the harness runs.
//
//   --vinf_profile=FILE: after each transformer benchmark, two more calls with every op timed (CUDA
//   events on a GPU): the top 20 op kinds and modules printed at the end, every row in FILE (JSON,
//   keyed by benchmark name).
//
//   vinf_bench_wan [--vinf_suite=bench|smoke] [--vinf_devices=cpu,cuda] [--vinf_profile=FILE] [Google Benchmark flags]
#include <benchmark/benchmark.h>

#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "bench_flags.hpp"
#include "bench_main.hpp"
#include "ops/profile_json.hpp"
#include "model/wan_transformer.hpp"
#include "model/wan_vae.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"
#include "ops/runtime.hpp"

using namespace vinf;

namespace {

struct Setup {
  std::string name;  // the benchmark's
  std::string preset;  // a Wan preset, or "wan-narrow"
  Device device;
  DType dtype;
  std::int64_t frames, height, width, tokens;  // latent frames and pixels
};

model::WanTransformerConfig config_of(const std::string& preset) {
  if (preset != "wan-narrow") return model::wan_transformer_preset(preset);
  model::WanTransformerConfig c = model::wan_transformer_preset("wan-1.3b");
  c.layers = 2;
  return c;
}

bool g_profile = false;
std::map<std::string, ProfileReport> g_profiles;  // by benchmark name

void wan_call(benchmark::State& state, const Setup& s) {
  Runtime rt(s.device);
  const model::WanTransformerConfig c = config_of(s.preset);
  const model::WanTransformer wan(c, model::Weights::random(model::wan_transformer_parameters(c), rt, s.dtype, 1));
  const DType dt = wan.weights().dtype();
  constexpr std::int64_t B = 2;  // the two guidance branches in one batch
  OwnedTensor x = rt.arena().empty(dt, {B, c.in_channels, s.frames, s.height, s.width});
  OwnedTensor text = rt.arena().empty(dt, {B, s.tokens, c.text_dim});
  OwnedTensor out = rt.arena().empty(dt, x.shape), t = rt.arena().empty(DType::f32, {B});
  ops::normal(rt.ctx(), x, 2, 0, 0);
  ops::normal(rt.ctx(), text, 2, 1, 0);
  ops::fill(rt.ctx(), t, 937.0);
  wan.forward(rt.ctx(), x, t, text, out);  // warm-up: plans, arena blocks
  rt.synchronize();
  rt.arena().reset_peak();
  for (auto _ : state) {
    wan.forward(rt.ctx(), x, t, text, out);
    rt.synchronize();
  }
  if (g_profile) {
    const Profiling profiling(rt.ctx());
    for (int i = 0; i < 2; ++i) wan.forward(rt.ctx(), x, t, text, out);
    g_profiles[s.name] = profiling.report();
  }
  const model::WanFlops f = model::wan_transformer_flops(c, B, s.frames, s.height, s.width, s.tokens);
  state.counters["TFLOP/call"] = f.total() / 1e12;
  state.counters["attention share"] = f.attention / f.total();
  state.counters["TFLOP/s"] = benchmark::Counter(f.total() / 1e12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak GiB"] = static_cast<double>(rt.arena().stats().peak_in_use) / (1u << 30);
  state.counters["weights GiB"] = static_cast<double>(wan.weights().bytes()) / (1u << 30);
  if (s.device.is_cuda()) {
    std::string gpu;
    const double peak = bench::gpu_peak_tflops(&gpu);
    if (peak > 0)
      state.counters["MFU"] =
          benchmark::Counter(f.total() / 1e12 / peak, benchmark::Counter::kIsIterationInvariantRate);
    state.SetLabel(gpu);
  }
}

struct VaeSetup {
  std::string preset;  // a Wan VAE preset
  Device device;
  std::int64_t frames, height, width, tile;  // latent frames and pixels; --vae.tile
};

void wan_vae_decode(benchmark::State& state, const VaeSetup& s) {
  Runtime rt(s.device);
  const model::WanVaeConfig c = model::wan_vae_preset(s.preset);
  const model::WanVae vae(c, model::Weights::random(model::wan_vae_decoder_parameters(c), rt, DType::f32, 3),
                          model::WanVae::decoder);
  const std::int64_t r = c.spatial_ratio();
  OwnedTensor z = rt.arena().empty(DType::f32, {1, c.z_dim, s.frames, s.height, s.width});
  OwnedTensor y =
      rt.arena().empty(DType::f32, {1, c.out_channels, c.video_frames(s.frames), s.height * r, s.width * r});
  ops::normal(rt.ctx(), z, 4, 0, 0);
  vae.decode(rt.ctx(), z, y, s.tile);  // warm-up: plans, arena blocks
  rt.synchronize();
  rt.arena().reset_peak();
  for (auto _ : state) {
    vae.decode(rt.ctx(), z, y, s.tile);
    rt.synchronize();
  }
  state.counters["peak GiB"] = static_cast<double>(rt.arena().stats().peak_in_use) / (1u << 30);
  state.counters["output GiB"] = static_cast<double>(y.nbytes()) / (1u << 30);
  state.counters["weights GiB"] = static_cast<double>(vae.weights().bytes()) / (1u << 30);
  state.counters["frames/s"] =
      benchmark::Counter(static_cast<double>(c.video_frames(s.frames)), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string suite = bench::take_flag(argc, argv, "vinf_suite", "bench");
  const std::string devices = bench::take_flag(argc, argv, "vinf_devices", "cpu,cuda");
  const std::string profile_path = bench::take_flag(argc, argv, "vinf_profile", "");
  g_profile = !profile_path.empty();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  static std::vector<Setup> setups;
  const bool cpu = devices.find("cpu") != std::string::npos;
  const bool gpu = devices.find("cuda") != std::string::npos && cuda_device_count() > 0;
  if (suite == "smoke") {
    if (cpu) setups.push_back({"", "wan-tiny", Device::cpu(), DType::f32, 2, 8, 8, 12});
    if (gpu) setups.push_back({"", "wan-tiny", Device::cuda(0), DType::bf16, 2, 8, 8, 12});
  } else {
    if (cpu) {
      setups.push_back({"", "wan-tiny", Device::cpu(), DType::f32, 5, 32, 32, 24});
      setups.push_back({"", "wan-narrow", Device::cpu(), DType::f32, 3, 30, 52, 64});
    }
    if (gpu) setups.push_back({"", "wan-1.3b", Device::cuda(0), DType::bf16, 21, 60, 104, 512});
  }
  static std::vector<VaeSetup> vaes;
  if (suite == "smoke") {
    if (cpu) vaes.push_back({"wan-tiny", Device::cpu(), 2, 4, 4, 2});
  } else {
    for (std::int64_t tile : {0, 8, 4})
      if (cpu) vaes.push_back({"wan2.1", Device::cpu(), 2, 16, 32, tile});
    for (std::int64_t tile : {0, 16})
      if (gpu) vaes.push_back({"wan2.1", Device::cuda(0), 5, 60, 104, tile});
  }
  if (devices.find("cuda") != std::string::npos && !gpu)
    std::cout << "cuda: skipped (" << (built_with_cuda() ? "no GPU visible" : "built without CUDA") << ")\n";
  for (Setup& s : setups) {
    const std::string name = "wan_call/" + s.preset + " [" + (s.device.is_cpu() ? "cpu" : "cuda") + " " +
                             dtype_name(s.dtype) + "] B2 F" + std::to_string(s.frames) + " " +
                             std::to_string(s.height) + "x" + std::to_string(s.width) + " text " +
                             std::to_string(s.tokens);
    s.name = name;
    benchmark::RegisterBenchmark(name.c_str(), [&s](benchmark::State& st) { wan_call(st, s); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(suite == "smoke" ? 0.001 : 2.0);
  }
  for (const VaeSetup& s : vaes) {
    const std::string name = "wan_vae_decode/" + s.preset + " [" + (s.device.is_cpu() ? "cpu" : "cuda") + " f32] F" +
                             std::to_string(s.frames) + " " + std::to_string(s.height) + "x" + std::to_string(s.width) +
                             (s.tile > 0 ? " tile " + std::to_string(s.tile) : "");
    benchmark::RegisterBenchmark(name.c_str(), [&s](benchmark::State& st) { wan_vae_decode(st, s); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(0.001);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (g_profile) {
    nlohmann::ordered_json j;
    for (const auto& [name, report] : g_profiles) {
      std::cout << name << ": ";
      print_profile(std::cout, report);
      j[name] = profile_json(report);
    }
    try {
      bench::write_figures(profile_path, j);
    } catch (const std::exception& e) {
      std::cerr << "vinf_bench_wan: error: " << e.what() << "\n";
      return 1;
    }
  }
  return 0;
}
