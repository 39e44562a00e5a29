// The machine's own f32 matrix-product rates, measured in the benchmark's run: what the CPU
// benchmarks report their efficiency against (the best of them, whichever library reaches it).
#pragma once

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu/blas.hpp"
#include "ops/elementwise.hpp"
#include "ops/gemm.hpp"
#include "ops/runtime.hpp"

namespace vinf::bench {

struct GemmRate {
  std::string what;
  double gflops = 0;
};

// Best of `reps` timed calls of fn, as GFLOP/s for `flops` per call (one untimed call first).
template <class Fn>
double best_rate(double flops, int reps, Fn&& fn) {
  fn();
  double best = 0;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flops / s / 1e9);
  }
  return best;
}

// OpenBLAS sgemm and vinf's CPU matrix product (cpu/blas.hpp: oneDNN's matmul unless
// VINF_CPU_GEMM=openblas) on n^3, on this process's threads.
inline std::vector<GemmRate> cpu_gemm_rates(int n = 2048, int reps = 3) {
  const double flops = 2.0 * n * n * n;
  std::vector<GemmRate> out;
  {
    std::vector<float> a(static_cast<std::size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
    const char* core = std::getenv("OPENBLAS_CORETYPE");
    out.push_back({std::string("OpenBLAS sgemm ") + std::to_string(n) + "^3 (OPENBLAS_CORETYPE=" + (core ? core : "unset") + ")",
                   best_rate(flops, reps, [&] {
                     cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f,
                                 c.data(), n);
                   })});
  }
  {
    Runtime rt(Device::cpu());
    OwnedTensor a = rt.arena().empty(DType::f32, {1, n, n}), b = rt.arena().empty(DType::f32, {1, n, n}),
                c = rt.arena().empty(DType::f32, {1, n, n});
    std::fill_n(a.ptr<float>(), a.numel(), 0.5f);
    std::fill_n(b.ptr<float>(), b.numel(), 0.25f);
    out.push_back({std::string("vinf CPU matmul ") + std::to_string(n) + "^3 (" + cpu::gemm_library_name() + ")",
                   best_rate(flops, reps, [&] { ops::bmm(rt.ctx(), a, b, c); })});
  }
  return out;
}

// --dtype bf16's product on the CPU, 2048^3: ops::linear with bf16 weights (the input rounded to a
// bf16 copy first, as the model's products do); 0 where the CPU lacks AVX-512 BF16. Not an f32
// rate: the summaries keep it apart from the best f32 one.
inline double cpu_bf16_linear_rate(int n = 2048, int reps = 3) {
  if (!cpu_bf16()) return 0;
  Runtime rt(Device::cpu());
  OwnedTensor x = rt.arena().empty(DType::f32, {n, n}), w32 = rt.arena().empty(DType::f32, {n, n}),
              w = rt.arena().empty(DType::bf16, {n, n}), y = rt.arena().empty(DType::f32, {n, n});
  std::fill_n(x.ptr<float>(), x.numel(), 0.5f);
  std::fill_n(w32.ptr<float>(), w32.numel(), 0.25f);
  ops::copy(rt.ctx(), w32, w);
  return best_rate(2.0 * n * n * n, reps, [&] { ops::linear(rt.ctx(), x, w, nullptr, y); });
}

}  // namespace vinf::bench
