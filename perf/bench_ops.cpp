// Op benchmarks on VideoCrafter2 shapes, from the same case table as the unit tests.
// Reports GFLOP/s per op and, in the same run, the machine's own f32 matrix-product rates (OpenBLAS
// sgemm and vinf's oneDNN matmul, 2048^3), then a summary of each conv/GEMM path as a fraction of
// the better of the two (target: at least 60%).
// With a GPU it adds the CUDA backends (f32, bf16, f16) and cuBLAS's bf16 GEMM rate as the peak.
//
//   vinf_bench_ops [--vinf_suite=bench|unit] [--vinf_devices=cpu,cuda] [Google Benchmark flags]
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cpu/blas.hpp"
#include "ops/cases.hpp"
#include "ops/elementwise.hpp"
#include "ops/gemm.hpp"
#include "ops/random.hpp"
#include "ops/runtime.hpp"
#include "ops/verify.hpp"
#include "bench_flags.hpp"

using namespace vinf;

namespace {

struct Prepared {
  std::unique_ptr<Runtime> rt;
  std::unique_ptr<opcheck::CaseEnv> env;
  std::function<void()> run;
};

// One runtime and one set of inputs per (case, backend), built on first use: Google Benchmark
// calls a benchmark function several times while it sizes the iteration count.
std::map<std::string, Prepared>& prepared() {
  static std::map<std::string, Prepared> p;
  return p;
}

void run_case(benchmark::State& state, const opcheck::OpCase& c, Device device, DType dtype, const std::string& key) {
  auto& slot = prepared()[key];
  if (!slot.rt) {
    slot.rt = std::make_unique<Runtime>(device);
    slot.env = std::make_unique<opcheck::CaseEnv>(slot.rt->ctx(), dtype, dtype, 1);
    slot.run = c.setup(*slot.env);
    slot.run();  // warm-up: oneDNN/cuDNN plans, arena blocks
    slot.rt->synchronize();
  }
  for (auto _ : state) {
    slot.run();
    slot.rt->synchronize();
  }
  if (c.flops > 0) state.counters["GFLOP/s"] = benchmark::Counter(c.flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  if (c.traffic > 0)
    state.counters["GB/s"] = benchmark::Counter(c.traffic * static_cast<double>(dtype_size(dtype)) / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(device.is_cpu() ? "cpu" : "cuda") + " " + dtype_name(dtype));
}

void sgemm_reference(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<float> a(static_cast<std::size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  state.SetLabel(std::string("OpenBLAS sgemm, OPENBLAS_CORETYPE=") + (core ? core : "unset"));
}

// vinf's own CPU matrix product (cpu/blas.hpp) on n^3.
void matmul_reference(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  Runtime rt(Device::cpu());
  OwnedTensor a = rt.arena().empty(DType::f32, {1, n, n}), b = rt.arena().empty(DType::f32, {1, n, n}),
              c = rt.arena().empty(DType::f32, {1, n, n});
  ops::fill(rt.ctx(), a, 0.5);
  ops::fill(rt.ctx(), b, 0.25);
  ops::bmm(rt.ctx(), a, b, c);
  for (auto _ : state) ops::bmm(rt.ctx(), a, b, c);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string("vinf matmul, ") + cpu::gemm_library_name());
}

// cuBLAS bf16 GEMM on a large square problem: the device's practical peak for the comparison.
opcheck::OpCase cublas_peak_case() {
  const std::int64_t n = 8192;
  return {"gemm", "cublas bf16 gemm 8192^3 (device reference)", 2.0 * n * n * n, [n](opcheck::CaseEnv& e) {
            const Tensor a = e.input({1, n, n}), b = e.input({1, n, n});
            const Tensor y = e.output({1, n, n});
            return std::function<void()>([&e, a, b, y] { ops::bmm(e.ctx, a, b, y); });
          }};
}

// Collects results for the summary while printing the usual console table.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  struct Row {
    std::string name, label;
    double gflops, gbytes;
  };
  std::vector<Row> rows;
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      const auto it = r.counters.find("GFLOP/s");
      const auto bw = r.counters.find("GB/s");
      if (it != r.counters.end() && r.run_type == Run::RT_Iteration)
        rows.push_back({r.benchmark_name(), r.report_label, it->second.value, bw != r.counters.end() ? bw->second.value : 0});
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  const std::string suite = bench::take_flag(argc, argv, "vinf_suite", "bench");
  const std::string devices = bench::take_flag(argc, argv, "vinf_devices", "cpu,cuda");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;

  static std::vector<opcheck::OpCase> cases = suite == "unit" ? opcheck::unit_cases() : opcheck::bench_cases();
  benchmark::RegisterBenchmark("sgemm_reference", sgemm_reference)->Arg(suite == "unit" ? 256 : 2048)->Unit(benchmark::kMillisecond);
  if (devices.find("cpu") != std::string::npos)
    benchmark::RegisterBenchmark("matmul_reference", matmul_reference)->Arg(suite == "unit" ? 256 : 2048)->Unit(benchmark::kMillisecond);

  struct Backend {
    Device device;
    DType dtype;
  };
  std::vector<Backend> backends;
  if (devices.find("cpu") != std::string::npos) {
    backends.push_back({Device::cpu(), DType::f32});
    // --dtype bf16 on the CPU, for the cases it changes (weights and attention).
    if (cpu_bf16()) backends.push_back({Device::cpu(), DType::bf16});
  }
  const bool gpu = devices.find("cuda") != std::string::npos && cuda_device_count() > 0;
  if (gpu) {
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) backends.push_back({Device::cuda(0), dt});
    cases.push_back(cublas_peak_case());
  } else if (devices.find("cuda") != std::string::npos) {
    std::cout << "cuda: skipped (" << (built_with_cuda() ? "no GPU visible" : "built without CUDA") << ")\n";
  }
  for (const auto& c : cases) {
    for (const Backend& b : backends) {
      const bool cublas_only = c.name.rfind("cublas", 0) == 0;
      if (cublas_only && (b.device.is_cpu() || b.dtype != DType::bf16)) continue;
      if (b.device.is_cpu() && b.dtype != DType::f32 && !opcheck::cpu_bf16_tolerance(c)) continue;
      const std::string name = c.name + " [" + (b.device.is_cpu() ? "cpu" : "cuda") + " " + dtype_name(b.dtype) + "]";
      benchmark::RegisterBenchmark(name.c_str(),
                                   [&c, b, name](benchmark::State& st) { run_case(st, c, b.device, b.dtype, name); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }

  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);

  double sgemm = 0, peak = 0;
  std::string best;
  for (const auto& r : reporter.rows) {
    if ((r.name.rfind("sgemm_reference", 0) == 0 || r.name.rfind("matmul_reference", 0) == 0) && r.gflops > sgemm) {
      sgemm = r.gflops;
      best = r.label;
    }
    if (r.name.rfind("cublas", 0) == 0) peak = r.gflops;
  }
  if (sgemm > 0 && suite == "bench") {
    std::cout << "\nsummary: CPU conv/GEMM paths against this run's best f32 matrix product (" << best << ", " << sgemm
              << " GFLOP/s), target >= 60%\n";
    for (const auto& r : reporter.rows) {
      if (r.label != "cpu f32") continue;
      const bool targeted = r.name.rfind("conv", 0) == 0 || r.name.rfind("linear", 0) == 0 || r.name.rfind("temporal_conv", 0) == 0;
      std::printf("  %-60s %9.1f GFLOP/s  %5.0f%% of best%s\n", r.name.c_str(), r.gflops, 100 * r.gflops / sgemm,
                  targeted ? (r.gflops >= 0.6 * sgemm ? "  (meets target)" : "  (BELOW target)") : "");
    }
  }
  if (peak > 0) {
    std::cout << "\nsummary: CUDA paths against cuBLAS bf16 GEMM (" << peak / 1000 << " TFLOP/s)\n";
    for (const auto& r : reporter.rows)
      if (r.label.rfind("cuda", 0) == 0)
        std::printf("  %-60s %9.2f TFLOP/s  %5.0f%% of cuBLAS bf16\n", r.name.c_str(), r.gflops / 1000, 100 * r.gflops / peak);
  }
  const double hbm = gpu ? memory_bandwidth_bytes(Device::cuda(0)) / 1e9 : 0;
  if (hbm > 0) {
    std::cout << "\nsummary: CUDA attention against the GPU's memory bandwidth (" << hbm
              << " GB/s), each input read and the output written once; target for the temporal layers >= 60%\n";
    for (const auto& r : reporter.rows)
      if (r.label.rfind("cuda", 0) == 0 && r.gbytes > 0)
        std::printf("  %-60s %9.1f GB/s  %5.0f%% of HBM\n", r.name.c_str(), r.gbytes, 100 * r.gbytes / hbm);
  }
  benchmark::Shutdown();
  return 0;
}
