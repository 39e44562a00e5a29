// Fast GroupNorm / LayerNorm / softmax: OpenMP over (sample, group) or rows, contiguous inner loops.
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/cpu.hpp"
#include "cpu/loops.hpp"
#include "cpu/vec.hpp"
#include "exec/activation_math.hpp"

namespace vinf::cpu::fast {
namespace {

// Channels-last input (a convolution's output, cpu/conv.cpp): per channel of L, the sum and the
// sum of squares of x[s * xs + c] over S pixels, float over blocks of 1024 pixels, double across.
template <class V>
VINF_VEC_INLINE void channel_sums_impl(const float* x, std::int64_t xs, std::int64_t S, double* s1, double* s2) {
  constexpr int L = vec::lanes_of<V>;
  for (std::int64_t s0 = 0; s0 < S; s0 += 1024) {
    const std::int64_t end = std::min(S, s0 + 1024);
    V a1 = vec::splat_as<V>(0.f), a2 = vec::splat_as<V>(0.f);
    for (std::int64_t s = s0; s < end; ++s) {
      const V v = vec::load_as<V>(x + s * xs);
      a1 += v;
      a2 += v * v;
    }
    float b1[L], b2[L];
    vec::store_as(b1, a1);
    vec::store_as(b2, a2);
    for (int c = 0; c < L; ++c) {
      s1[c] += b1[c];
      s2[c] += b2[c];
    }
  }
}
VINF_VEC_VARIANTS(channel_sums, channel_sums_impl,
                  (const float* x, std::int64_t xs, std::int64_t S, double* s1, double* s2), (x, xs, S, s1, s2))

void channels_last_sums(const Tensor& x, int groups, const Tensor& sums) {
  const std::int64_t N = x.size(0), C = x.size(1), T = x.size(2), S = x.size(3), cg = C / groups;
  const std::int64_t L = vec::variant_lanes(), blocks = C / L;
  // Per (sample, frame, channel): the two sums, then added up per (sample, group).
  std::vector<double> part(static_cast<std::size_t>(N * T * C * 2), 0.0);
  const std::int64_t jobs = N * T * blocks;
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelGrain)
  for (std::int64_t job = 0; job < jobs; ++job) {
    const std::int64_t c0 = job % blocks * L, t = job / blocks % T, n = job / (blocks * T);
    double* p = part.data() + ((n * T + t) * C + c0) * 2;
    double s1[16] = {}, s2[16] = {};
    channel_sums(x.ptr<float>() + n * x.strides[0] + t * x.strides[2] + c0, x.strides[3], S, s1, s2);
    for (std::int64_t i = 0; i < L; ++i) {
      p[2 * i] = s1[i];
      p[2 * i + 1] = s2[i];
    }
  }
  double* out = static_cast<double*>(sums.data);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t g = 0; g < groups; ++g) {
      double s1 = 0, s2 = 0;
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t c = g * cg; c < (g + 1) * cg; ++c) {
          s1 += part[static_cast<std::size_t>(((n * T + t) * C + c) * 2)];
          s2 += part[static_cast<std::size_t>(((n * T + t) * C + c) * 2 + 1)];
        }
      out[n * sums.strides[0] + g * sums.strides[1]] = s1;
      out[n * sums.strides[0] + g * sums.strides[1] + sums.strides[2]] = s2;
    }
}

// Whether x (N, C, T, S) is stored channels-last with whole vectors of channels.
bool channels_last(const Tensor& x) {
  return x.strides[1] == 1 && x.size(1) % vec::variant_lanes() == 0 && x.strides[3] >= x.size(1);
}

}  // namespace

void group_norm_sums(const Tensor& x, int groups, const Tensor& sums) {
  if (channels_last(x)) {
    channels_last_sums(x, groups, sums);
    return;
  }
  const std::int64_t N = x.size(0), C = x.size(1), T = x.size(2), S = x.size(3), cg = C / groups;
  const float* xp = x.ptr<float>();
  double* out = static_cast<double*>(sums.data);
  const std::int64_t jobs = N * groups;
#pragma omp parallel for schedule(dynamic) if (x.numel() >= kParallelGrain)
  for (std::int64_t job = 0; job < jobs; ++job) {
    const std::int64_t n = job / groups, g = job % groups;
    double s1 = 0, s2 = 0;
    for (std::int64_t c = g * cg; c < (g + 1) * cg; ++c)
      for (std::int64_t t = 0; t < T; ++t) {
        const float* row = xp + n * x.strides[0] + c * x.strides[1] + t * x.strides[2];
        const std::int64_t ss = x.strides[3];
        // Float partial sums over blocks of 1024 values, double across blocks.
        for (std::int64_t s0 = 0; s0 < S; s0 += 1024) {
          const std::int64_t s_end = std::min(S, s0 + 1024);
          float r1 = 0, r2 = 0;
          if (ss == 1) {
#pragma omp simd reduction(+ : r1, r2)
            for (std::int64_t s = s0; s < s_end; ++s) {
              r1 += row[s];
              r2 += row[s] * row[s];
            }
          } else {
            for (std::int64_t s = s0; s < s_end; ++s) {
              r1 += row[s * ss];
              r2 += row[s * ss] * row[s * ss];
            }
          }
          s1 += r1;
          s2 += r2;
        }
      }
    out[n * sums.strides[0] + g * sums.strides[1]] = s1;
    out[n * sums.strides[0] + g * sums.strides[1] + sums.strides[2]] = s2;
  }
}

namespace {

// y = silu(x * a + b) along a contiguous row, a vector at a time (the vector exp), the tail exact.
template <class V>
VINF_VEC_INLINE void affine_silu_row_impl(const float* x, float* y, std::int64_t n, float a, float b) {
  constexpr int L = vec::lanes_of<V>;
  std::int64_t i = 0;
  for (; i + L <= n; i += L) {
    const V z = vec::load_as<V>(x + i) * a + b;
    vec::store_as(y + i, z / (1.f + vec::exp(-z)));
  }
  for (; i < n; ++i) y[i] = exec::silu(x[i] * a + b);
}
VINF_VEC_VARIANTS(affine_silu_row, affine_silu_row_impl, (const float* x, float* y, std::int64_t n, float a, float b),
                  (x, y, n, a, b))

// Channels-last output: y[s * ys + c] = act(x[c * xs + s] * a[c] + b[c]) for L channels and the S
// pixels of contiguous rows (xs apart), L x L tiles turned through registers so that every store
// is a pixel's L channels; pixels past the last whole tile one at a time.
template <class V>
VINF_VEC_INLINE void affine_to_channels_last_impl(const float* x, std::int64_t xs, float* y, std::int64_t ys,
                                                  std::int64_t S, const float* a, const float* b, bool silu) {
  constexpr int L = vec::lanes_of<V>;
  std::int64_t s0 = 0;
  for (; s0 + L <= S; s0 += L) {
    V t[L];
#pragma GCC unroll 16
    for (int c = 0; c < L; ++c) {
      const V z = vec::load_as<V>(x + c * xs + s0) * a[c] + b[c];
      t[c] = silu ? z / (1.f + vec::exp(-z)) : z;
    }
    vec::transpose<V>(t);
#pragma GCC unroll 16
    for (int j = 0; j < L; ++j) vec::store_as(y + (s0 + j) * ys, t[j]);
  }
  for (; s0 < S; ++s0)
    for (int c = 0; c < L; ++c) {
      const float z = x[c * xs + s0] * a[c] + b[c];
      y[s0 * ys + c] = silu ? exec::silu(z) : z;
    }
}
VINF_VEC_VARIANTS(affine_to_channels_last, affine_to_channels_last_impl,
                  (const float* x, std::int64_t xs, float* y, std::int64_t ys, std::int64_t S, const float* a,
                   const float* b, bool silu),
                  (x, xs, y, ys, S, a, b, silu))

// Channels-last in and out: y[s * ys + c] = act(x[s * xs + c] * a[c] + b[c]) for the C channels
// (a multiple of the vector width) of S pixels.
template <class V>
VINF_VEC_INLINE void affine_channels_last_impl(const float* x, std::int64_t xs, float* y, std::int64_t ys,
                                               std::int64_t S, std::int64_t C, const float* a, const float* b,
                                               bool silu) {
  constexpr int L = vec::lanes_of<V>;
  for (std::int64_t s = 0; s < S; ++s)
    for (std::int64_t c = 0; c < C; c += L) {
      const V z = vec::load_as<V>(x + s * xs + c) * vec::load_as<V>(a + c) + vec::load_as<V>(b + c);
      vec::store_as(y + s * ys + c, silu ? z / (1.f + vec::exp(-z)) : z);
    }
}
VINF_VEC_VARIANTS(affine_channels_last, affine_channels_last_impl,
                  (const float* x, std::int64_t xs, float* y, std::int64_t ys, std::int64_t S, std::int64_t C,
                   const float* a, const float* b, bool silu),
                  (x, xs, y, ys, S, C, a, b, silu))

bool fast_activation(exec::Activation act) { return act == exec::Activation::none || act == exec::Activation::silu; }

}  // namespace

void group_norm_apply(const Tensor& x, const Tensor& sums, double count, const Tensor& gamma, const Tensor& beta,
                      const Tensor& y, const exec::GroupNormParams& p) {
  const std::int64_t N = x.size(0), C = x.size(1), T = x.size(2), S = x.size(3), cg = C / p.groups;
  const double* st = static_cast<const double*>(sums.data);
  const float* xp = x.ptr<float>();
  float* yp = y.ptr<float>();
  // The affine factors of channel c of sample n: y = x * a + b.
  auto factors = [&](std::int64_t n, std::int64_t c, float& a, float& b) {
    const std::int64_t g = c / cg;
    const double s1 = st[n * sums.strides[0] + g * sums.strides[1]];
    const double s2 = st[n * sums.strides[0] + g * sums.strides[1] + sums.strides[2]];
    const double mean = s1 / count;
    const double var = std::max(s2 / count - mean * mean, 0.0);
    const float rstd = static_cast<float>(1.0 / std::sqrt(var + p.eps));
    a = rstd * gamma.ptr<float>()[c * gamma.strides[0]];
    b = beta.ptr<float>()[c * beta.strides[0]] - static_cast<float>(mean) * a;
  };
  const bool silu = p.act == exec::Activation::silu;
  if (fast_activation(p.act) && channels_last(x) && channels_last(y)) {
    std::vector<float> ab(static_cast<std::size_t>(2 * N * C));  // a, then b, per (sample, channel)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t c = 0; c < C; ++c) factors(n, c, ab[n * C + c], ab[(N + n) * C + c]);
    constexpr std::int64_t kPixels = 64;  // per job
    const std::int64_t chunks = (S + kPixels - 1) / kPixels, jobs = N * T * chunks;
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelGrain)
    for (std::int64_t job = 0; job < jobs; ++job) {
      const std::int64_t s0 = job % chunks * kPixels, t = job / chunks % T, n = job / (chunks * T);
      affine_channels_last(xp + n * x.strides[0] + t * x.strides[2] + s0 * x.strides[3], x.strides[3],
                           yp + n * y.strides[0] + t * y.strides[2] + s0 * y.strides[3], y.strides[3],
                           std::min(kPixels, S - s0), C, &ab[n * C], &ab[(N + n) * C], silu);
    }
    return;
  }
  if (fast_activation(p.act) && x.strides[3] == 1 && channels_last(y)) {
    // A convolution's input in the layout its primitive reads (cpu/conv.cpp): no reorder there.
    const std::int64_t L = vec::variant_lanes(), blocks = C / L;
    const std::int64_t jobs = N * T * blocks;
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelGrain)
    for (std::int64_t job = 0; job < jobs; ++job) {
      const std::int64_t c0 = job % blocks * L, t = job / blocks % T, n = job / (blocks * T);
      float a[16], b[16];
      for (std::int64_t i = 0; i < L; ++i) factors(n, c0 + i, a[i], b[i]);
      affine_to_channels_last(xp + n * x.strides[0] + c0 * x.strides[1] + t * x.strides[2], x.strides[1],
                              yp + n * y.strides[0] + c0 + t * y.strides[2], y.strides[3], S, a, b, silu);
    }
    return;
  }
  const std::int64_t rows = N * C * T;
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelGrain)
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t t = r % T, c = (r / T) % C, n = r / (T * C);
    float a, b;
    factors(n, c, a, b);
    const float* xr = xp + n * x.strides[0] + c * x.strides[1] + t * x.strides[2];
    float* yr = yp + n * y.strides[0] + c * y.strides[1] + t * y.strides[2];
    const std::int64_t xs = x.strides[3], ys = y.strides[3];
    if (xs == 1 && ys == 1) {
      switch (p.act) {
        case exec::Activation::none:
          for (std::int64_t s = 0; s < S; ++s) yr[s] = xr[s] * a + b;
          break;
        case exec::Activation::silu: affine_silu_row(xr, yr, S, a, b); break;
        default:
          for (std::int64_t s = 0; s < S; ++s) yr[s] = exec::activate(p.act, xr[s] * a + b);
      }
    } else {
      for (std::int64_t s = 0; s < S; ++s) yr[s * ys] = exec::activate(p.act, xr[s * xs] * a + b);
    }
  }
}

namespace {

// One LayerNorm row (gamma and beta contiguous): the mean, the variance about it, then the affine.
template <class V>
VINF_VEC_INLINE void layer_norm_row_impl(const float* x, const float* g, const float* b, float* y, std::int64_t n,
                                         float eps) {
  constexpr int L = vec::lanes_of<V>;
  V acc = vec::splat_as<V>(0.f);
  std::int64_t i = 0;
  for (; i + L <= n; i += L) acc += vec::load_as<V>(x + i);
  float sum = vec::hsum(acc);
  for (; i < n; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(n);
  acc = vec::splat_as<V>(0.f);
  for (i = 0; i + L <= n; i += L) {
    const V d = vec::load_as<V>(x + i) - mean;
    acc += d * d;
  }
  float var = vec::hsum(acc);
  for (; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  const float rstd = 1.f / std::sqrt(var / static_cast<float>(n) + eps);
  for (i = 0; i + L <= n; i += L)
    vec::store_as(y + i, (vec::load_as<V>(x + i) - mean) * rstd * vec::load_as<V>(g + i) + vec::load_as<V>(b + i));
  for (; i < n; ++i) y[i] = (x[i] - mean) * rstd * g[i] + b[i];
}
VINF_VEC_VARIANTS(layer_norm_row, layer_norm_row_impl,
                  (const float* x, const float* g, const float* b, float* y, std::int64_t n, float eps),
                  (x, g, b, y, n, eps))

// The view's D values as a contiguous array: t's own memory, or a copy in `hold`.
const float* contiguous_vector(const Tensor& t, std::vector<float>& hold) {
  if (t.strides[0] == 1) return t.ptr<float>();
  hold.resize(static_cast<std::size_t>(t.size(0)));
  for (std::int64_t d = 0; d < t.size(0); ++d) hold[static_cast<std::size_t>(d)] = t.ptr<float>()[d * t.strides[0]];
  return hold.data();
}

}  // namespace

void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y, float eps) {
  const std::int64_t M = x.size(0), D = x.size(1);
  std::vector<float> gh, bh;
  const float* gp = contiguous_vector(gamma, gh);
  const float* bp = contiguous_vector(beta, bh);
  // A bf16 y (the input of a bf16 product): each row normalised in f32, then rounded once.
  const bool bf16 = y.dtype == DType::bf16;
#pragma omp parallel if (x.numel() >= kParallelGrain)
  {
    std::vector<float> row(bf16 ? static_cast<std::size_t>(D) : 0);
#pragma omp for schedule(static)
    for (std::int64_t m = 0; m < M; ++m) {
      const float* xr = x.ptr<float>() + m * x.strides[0];
      if (!bf16) {
        layer_norm_row(xr, gp, bp, y.ptr<float>() + m * y.strides[0], D, eps);
        continue;
      }
      layer_norm_row(xr, gp, bp, row.data(), D, eps);
      narrow_to_bf16(row.data(), static_cast<std::uint16_t*>(y.data) + m * y.strides[0], D);
    }
  }
}

void softmax(const Tensor& x, const Tensor& out) {
  const std::int64_t M = x.size(0), D = x.size(1);
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelGrain)
  for (std::int64_t m = 0; m < M; ++m) {
    const float* xr = x.ptr<float>() + m * x.strides[0];
    float* orow = out.ptr<float>() + m * out.strides[0];
    float mx = -INFINITY;
    for (std::int64_t d = 0; d < D; ++d) mx = std::max(mx, xr[d]);
    // A fully masked row (all -inf): measured from 0 every term is 0, and the row is zeros
    // instead of exp(-inf + inf) = NaN.
    if (mx == -INFINITY) mx = 0.f;
    float sum = 0;
    for (std::int64_t d = 0; d < D; ++d) {
      const float e = std::exp(xr[d] - mx);
      orow[d] = e;
      sum += e;
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    for (std::int64_t d = 0; d < D; ++d) orow[d] *= inv;
  }
}

}  // namespace vinf::cpu::fast
