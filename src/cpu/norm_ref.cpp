// Naive GroupNorm / LayerNorm / softmax: textbook formulas, double accumulation.
#include <cmath>
#include <vector>

#include "cpu/cpu.hpp"
#include "cpu/strided.hpp"
#include "exec/activation_math.hpp"

namespace vinf::cpu::ref {

void group_norm_sums(const Tensor& x, int groups, const Tensor& sums) {
  const std::int64_t N = x.size(0), C = x.size(1), T = x.size(2), S = x.size(3), cg = C / groups;
  for (std::int64_t n = 0; n < N; ++n) {
    for (int g = 0; g < groups; ++g) {
      double s1 = 0, s2 = 0;
      for (std::int64_t c = g * cg; c < (g + 1) * cg; ++c)
        for (std::int64_t t = 0; t < T; ++t)
          for (std::int64_t s = 0; s < S; ++s) {
            const double v = at_f32(x, n, c, t, s);
            s1 += v;
            s2 += v * v;
          }
      double* out = static_cast<double*>(sums.data);
      out[n * sums.strides[0] + g * sums.strides[1]] = s1;
      out[n * sums.strides[0] + g * sums.strides[1] + sums.strides[2]] = s2;
    }
  }
}


void group_norm_apply(const Tensor& x, const Tensor& sums, double count, const Tensor& gamma, const Tensor& beta,
                      const Tensor& y, const exec::GroupNormParams& p) {
  const std::int64_t N = x.size(0), C = x.size(1), T = x.size(2), S = x.size(3), cg = C / p.groups;
  const double* st = static_cast<const double*>(sums.data);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < C; ++c) {
      const std::int64_t g = c / cg;
      const double s1 = st[n * sums.strides[0] + g * sums.strides[1]];
      const double s2 = st[n * sums.strides[0] + g * sums.strides[1] + sums.strides[2]];
      const double mean = s1 / count;
      const double var = std::max(s2 / count - mean * mean, 0.0);
      const double rstd = 1.0 / std::sqrt(var + p.eps);
      const double w = gamma.ptr<float>()[c * gamma.strides[0]], b = beta.ptr<float>()[c * beta.strides[0]];
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t s = 0; s < S; ++s)
          at_f32(y, n, c, t, s) = static_cast<float>(exec::activate<double>(p.act, (at_f32(x, n, c, t, s) - mean) * rstd * w + b));
    }
}

void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y, float eps) {
  const std::int64_t M = x.size(0), D = x.size(1);
  for (std::int64_t m = 0; m < M; ++m) {
    double mean = 0, var = 0;
    for (std::int64_t d = 0; d < D; ++d) mean += at_f32(x, m, d);
    mean /= static_cast<double>(D);
    for (std::int64_t d = 0; d < D; ++d) var += (at_f32(x, m, d) - mean) * (at_f32(x, m, d) - mean);
    var /= static_cast<double>(D);
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (std::int64_t d = 0; d < D; ++d)
      at_f32(y, m, d) = static_cast<float>((at_f32(x, m, d) - mean) * rstd * gamma.ptr<float>()[d * gamma.strides[0]] +
                                           beta.ptr<float>()[d * beta.strides[0]]);
  }
}

// Rows in parallel (the model calls it on every token's q and k): each row is independent, so the
// result does not depend on the thread count.
void rms_norm(const Tensor& x, const Tensor& gamma, const Tensor& y, float eps) {
  const std::int64_t M = x.size(0), D = x.size(1);
#pragma omp parallel for schedule(static)
  for (std::int64_t m = 0; m < M; ++m) {
    const float* xr = x.ptr<float>() + m * x.strides[0];
    float* yr = y.ptr<float>() + m * y.strides[0];
    double ss = 0;
    for (std::int64_t d = 0; d < D; ++d) ss += static_cast<double>(xr[d]) * xr[d];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(D) + eps);
    const float* g = gamma.ptr<float>();
    for (std::int64_t d = 0; d < D; ++d) yr[d] = static_cast<float>(xr[d] * r * g[d * gamma.strides[0]]);
  }
}

void softmax(const Tensor& x, const Tensor& out) {
  const std::int64_t M = x.size(0), D = x.size(1);
  for (std::int64_t m = 0; m < M; ++m) {
    double mx = -INFINITY;
    for (std::int64_t d = 0; d < D; ++d) mx = std::max(mx, static_cast<double>(at_f32(x, m, d)));
    if (mx == -INFINITY) {  // a fully masked row: zeros, not exp(-inf + inf) = NaN
      for (std::int64_t d = 0; d < D; ++d) at_f32(out, m, d) = 0.f;
      continue;
    }
    double sum = 0;
    for (std::int64_t d = 0; d < D; ++d) sum += std::exp(at_f32(x, m, d) - mx);
    for (std::int64_t d = 0; d < D; ++d) at_f32(out, m, d) = static_cast<float>(std::exp(at_f32(x, m, d) - mx) / sum);
  }
}

}  // namespace vinf::cpu::ref
