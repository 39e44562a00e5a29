// Naive GEMMs: triple loops, double accumulation.
#include "cpu/cpu.hpp"
#include "cpu/strided.hpp"

namespace vinf::cpu::ref {

void linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) {
  const std::int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double acc = bias ? bias->ptr<float>()[n * bias->strides[0]] : 0.0;
      for (std::int64_t k = 0; k < K; ++k) acc += static_cast<double>(at_f32(x, m, k)) * at_f32(w, n, k);
      at_f32(y, m, n) = static_cast<float>(acc);
    }
}

void bmm(const Tensor& a, const Tensor& b, const Tensor& out, float alpha, float beta) {
  const std::int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  for (std::int64_t i = 0; i < B; ++i)
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (std::int64_t k = 0; k < K; ++k) acc += static_cast<double>(at_f32(a, i, m, k)) * at_f32(b, i, k, n);
        float& o = at_f32(out, i, m, n);
        o = static_cast<float>(alpha * acc + (beta == 0.f ? 0.0 : beta * static_cast<double>(o)));
      }
}

}  // namespace vinf::cpu::ref
