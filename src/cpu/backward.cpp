// The CPU's backward passes: the reductions in double, the products of the convolutions through
// the same matrix-product library as the forward ops (cpu::gemm).
#include "cpu/backward.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include <omp.h>

#include "cpu/blas.hpp"
#include "cpu/cpu.hpp"
#include "cpu/strided.hpp"
#include "cpu/vec.hpp"
#include "exec/activation_math.hpp"

namespace vinf::cpu::grad {
namespace {

constexpr std::int64_t kParallelGrain = 1 << 14;

// f(i, offset in a, offset in b, offset in c) for every element of three same-shaped views.
template <class F>
void each_element(const Tensor& a, const Tensor& b, const Tensor& c, F&& f) {
  const std::int64_t n = a.numel();
  if (a.is_contiguous() && b.is_contiguous() && c.is_contiguous()) {
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
    for (std::int64_t i = 0; i < n; ++i) f(i, i, i);
    return;
  }
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (std::int64_t i = 0; i < n; ++i) f(offset_of(a, i), offset_of(b, i), offset_of(c, i));
}

float* f32(const Tensor& t) { return static_cast<float*>(t.data); }

}  // namespace

void activation(exec::Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx) {
  const float *px = f32(x), *pdy = f32(dy);
  float* pdx = f32(dx);
  each_element(x, dy, dx, [&](std::int64_t ox, std::int64_t ody, std::int64_t odx) {
    pdx[odx] += pdy[ody] * exec::activate_grad<float>(act, px[ox]);
  });
}

namespace {

// One row of GEGLU's backward, n values: a = x[0, n), g = x[n, 2n) (contiguous), dy and dx the
// same way: da += dy gelu(g), dg += dy a (Phi(g) + g phi(g)); with `add` false, = instead.
template <class V, bool Add>
VINF_VEC_INLINE void geglu_row_of(const float* a, const float* g, const float* up, float* da, float* dg,
                                  std::int64_t n) {
  constexpr int L = vec::lanes_of<V>;
  std::int64_t j = 0;
  for (; j + L <= n; j += L) {
    const V x = vec::load_as<V>(g + j), u = vec::load_as<V>(up + j);
    const V cdf = 0.5f * (1.f + vec::erf(x * 0.70710678f));
    const V pdf = 0.39894228f * vec::exp_nonpositive(-0.5f * x * x);
    const V va = u * x * cdf, vg = u * vec::load_as<V>(a + j) * (cdf + x * pdf);
    vec::store_as(da + j, Add ? vec::load_as<V>(da + j) + va : va);
    vec::store_as(dg + j, Add ? vec::load_as<V>(dg + j) + vg : vg);
  }
  for (; j < n; ++j) {
    const float va = up[j] * exec::gelu(g[j]);
    const float vg = up[j] * a[j] * exec::activate_grad<float>(exec::Activation::gelu, g[j]);
    da[j] = Add ? da[j] + va : va;
    dg[j] = Add ? dg[j] + vg : vg;
  }
}
template <class V>
VINF_VEC_INLINE void geglu_row_impl(const float* a, const float* g, const float* up, float* da, float* dg,
                                    std::int64_t n, bool add) {
  if (add) geglu_row_of<V, true>(a, g, up, da, dg, n);
  else geglu_row_of<V, false>(a, g, up, da, dg, n);
}
VINF_VEC_VARIANTS(geglu_row, geglu_row_impl,
                  (const float* a, const float* g, const float* up, float* da, float* dg, std::int64_t n, bool add),
                  (a, g, up, da, dg, n, add))

}  // namespace

void geglu(const Tensor& x, const Tensor& dy, const Tensor& dx, bool overwrite) {
  const std::int64_t m = dy.size(0), d = dy.size(1);
  const bool rows = x.strides[1] == 1 && dy.strides[1] == 1 && dx.strides[1] == 1;
#pragma omp parallel for schedule(static) if (m * d >= kParallelGrain)
  for (std::int64_t r = 0; r < m; ++r) {
    if (rows) {
      const float* xr = f32(x) + r * x.strides[0];
      float* dxr = f32(dx) + r * dx.strides[0];
      geglu_row(xr, xr + d, f32(dy) + r * dy.strides[0], dxr, dxr + d, d, !overwrite);
      continue;
    }
    for (std::int64_t j = 0; j < d; ++j) {
      const float a = at_f32(x, r, j), g = at_f32(x, r, d + j), up = at_f32(dy, r, j);
      const float da = up * exec::gelu(g), dg = up * a * exec::activate_grad<float>(exec::Activation::gelu, g);
      at_f32(dx, r, j) = overwrite ? da : at_f32(dx, r, j) + da;
      at_f32(dx, r, d + j) = overwrite ? dg : at_f32(dx, r, d + j) + dg;
    }
  }
}

void conv(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, int stride, int pad_h, int pad_w,
          const Tensor* dx, const Tensor* dw, const Tensor* db) {
  const std::int64_t n_img = x.size(0), cin = x.size(1), h = x.size(2), wd = x.size(3);
  const std::int64_t cout = w.size(0), kh = w.size(2), kw = w.size(3), ho = dy.size(2), wo = dy.size(3);
  const std::int64_t k = cin * kh * kw, pix = ho * wo;
  // Scratch kept per thread between calls: fresh megabytes on every call cost more in page faults
  // than the products themselves at small sizes.
  // (The calling thread's; the OpenMP workers below use them through these pointers.)
  thread_local std::vector<float> cols_buf, dyn_buf, dcols_buf;
  if (dw) cols_buf.resize(static_cast<std::size_t>(k * pix));
  dyn_buf.resize(static_cast<std::size_t>(cout * pix));
  if (dx) dcols_buf.resize(static_cast<std::size_t>(k * pix));
  float* const cols = cols_buf.data();
  float* const dyn = dyn_buf.data();
  float* const dcols = dcols_buf.data();
  // dw as one (Cout, K) matrix the products add into: dw itself when contiguous.
  std::vector<float> dw_tmp;
  float* dw_acc = nullptr;
  if (dw) {
    if (dw->is_contiguous()) {
      dw_acc = f32(*dw);
    } else {
      dw_tmp.assign(static_cast<std::size_t>(cout * k), 0.f);
      dw_acc = dw_tmp.data();
    }
  }
  const BlasMatrix wt{w.data, true, k, false};  // W^T (K x Cout) read from W (Cout x K)
  for (std::int64_t n = 0; n < n_img; ++n) {
#pragma omp parallel for schedule(static) if (cout * pix >= kParallelGrain)
    for (std::int64_t o = 0; o < cout; ++o)
      for (std::int64_t y = 0; y < ho; ++y)
        for (std::int64_t xo = 0; xo < wo; ++xo) dyn[(o * ho + y) * wo + xo] = at_f32(dy, n, o, y, xo);
    if (db) {
      for (std::int64_t o = 0; o < cout; ++o) {
        double s = 0;
        for (std::int64_t p = 0; p < pix; ++p) s += dyn[o * pix + p];
        f32(*db)[o * db->strides[0]] += static_cast<float>(s);
      }
    }
    if (dw) {
#pragma omp parallel for schedule(static) if (k * pix >= kParallelGrain)
      for (std::int64_t r = 0; r < k; ++r) {
        const std::int64_t i = r / (kh * kw), a = r / kw % kh, b = r % kw;
        float* row = cols + r * pix;
        for (std::int64_t y = 0; y < ho; ++y) {
          const std::int64_t yi = y * stride + a - pad_h;
          for (std::int64_t xo = 0; xo < wo; ++xo) {
            const std::int64_t xi = xo * stride + b - pad_w;
            row[y * wo + xo] = yi >= 0 && yi < h && xi >= 0 && xi < wd ? at_f32(x, n, i, yi, xi) : 0.f;
          }
        }
      }
      // dW (Cout x K) += dy_n (Cout x P) * cols^T (P x K)
      sgemm(ctx, cout, k, pix, 1.f, BlasMatrix{dyn, false, pix, false}, BlasMatrix{cols, true, pix, false}, 1.f,
            dw_acc, k);
    }
    if (dx) {
      // dcols (K x P) = W^T (K x Cout) * dy_n (Cout x P), then each column back onto its pixel.
      sgemm(ctx, k, pix, cout, 1.f, wt, BlasMatrix{dyn, false, pix, false}, 0.f, dcols, pix);
#pragma omp parallel for schedule(static) if (k * pix >= kParallelGrain)
      for (std::int64_t i = 0; i < cin; ++i)
        for (std::int64_t a = 0; a < kh; ++a)
          for (std::int64_t b = 0; b < kw; ++b) {
            const float* row = dcols + ((i * kh + a) * kw + b) * pix;
            for (std::int64_t y = 0; y < ho; ++y) {
              const std::int64_t yi = y * stride + a - pad_h;
              if (yi < 0 || yi >= h) continue;
              for (std::int64_t xo = 0; xo < wo; ++xo) {
                const std::int64_t xi = xo * stride + b - pad_w;
                if (xi >= 0 && xi < wd) at_f32(*dx, n, i, yi, xi) += row[y * wo + xo];
              }
            }
          }
    }
  }
  if (dw && !dw_tmp.empty()) {
    const Tensor acc = Tensor::wrap(dw_tmp.data(), DType::f32, Device::cpu(), dw->shape);
    accumulate(acc, *dw);
  }
}

namespace {

// GroupNorm's backward along one contiguous row of n values of a channel (gamma g, beta b), the
// group's mean and rstd given: z = xh g + b with xh = (x - mean) rstd, dz = dy act'(z).
struct NormRow {
  const float *x, *dy;
  float* dx;
  std::int64_t n;
  float mean, rstd, g, b;
  exec::Activation act;
};

template <class V>
VINF_VEC_INLINE V dz_of(V z, V up, exec::Activation act) {
  if (act == exec::Activation::none) return up;
  const V s = 1.f / (1.f + vec::exp(-z));  // silu'(z) = s (1 + z (1 - s))
  return up * s * (1.f + z * (1.f - s));
}

// {sum x, sum x^2} of the row.
template <class V>
VINF_VEC_INLINE void norm_row_sums_impl(const float* x, std::int64_t n, double* out) {
  constexpr int L = vec::lanes_of<V>;
  V s1{}, s2{};
  std::int64_t j = 0;
  for (; j + L <= n; j += L) {
    const V v = vec::load_as<V>(x + j);
    s1 += v;
    s2 += v * v;
  }
  double a = vec::hsum(s1), b = vec::hsum(s2);
  for (; j < n; ++j) a += x[j], b += static_cast<double>(x[j]) * x[j];
  out[0] += a;
  out[1] += b;
}
VINF_VEC_VARIANTS(norm_row_sums, norm_row_sums_impl, (const float* x, std::int64_t n, double* out), (x, n, out))

// {sum dz xh, sum dz} of the row.
template <class V>
VINF_VEC_INLINE void norm_row_grads_impl(const NormRow& r, double* out) {
  constexpr int L = vec::lanes_of<V>;
  const V mean = vec::splat_as<V>(r.mean), rstd = vec::splat_as<V>(r.rstd), g = vec::splat_as<V>(r.g),
          b = vec::splat_as<V>(r.b);
  V sx{}, sd{};
  std::int64_t j = 0;
  for (; j + L <= r.n; j += L) {
    const V xh = (vec::load_as<V>(r.x + j) - mean) * rstd;
    const V dz = dz_of<V>(xh * g + b, vec::load_as<V>(r.dy + j), r.act);
    sx += dz * xh;
    sd += dz;
  }
  double a = vec::hsum(sx), c = vec::hsum(sd);
  for (; j < r.n; ++j) {
    const float xh = (r.x[j] - r.mean) * r.rstd;
    const float dz = r.dy[j] * exec::activate_grad<float>(r.act, xh * r.g + r.b);
    a += dz * xh;
    c += dz;
  }
  out[0] += a;
  out[1] += c;
}
VINF_VEC_VARIANTS(norm_row_grads, norm_row_grads_impl, (const NormRow& r, double* out), (r, out))

// dx += rstd (dz g - a1 - xh a2).
template <class V>
VINF_VEC_INLINE void norm_row_dx_impl(const NormRow& r, float a1, float a2) {
  constexpr int L = vec::lanes_of<V>;
  const V mean = vec::splat_as<V>(r.mean), rstd = vec::splat_as<V>(r.rstd), g = vec::splat_as<V>(r.g),
          b = vec::splat_as<V>(r.b), va1 = vec::splat_as<V>(a1), va2 = vec::splat_as<V>(a2);
  std::int64_t j = 0;
  for (; j + L <= r.n; j += L) {
    const V xh = (vec::load_as<V>(r.x + j) - mean) * rstd;
    const V dz = dz_of<V>(xh * g + b, vec::load_as<V>(r.dy + j), r.act);
    vec::store_as(r.dx + j, vec::load_as<V>(r.dx + j) + rstd * (dz * g - va1 - xh * va2));
  }
  for (; j < r.n; ++j) {
    const float xh = (r.x[j] - r.mean) * r.rstd;
    const float dz = r.dy[j] * exec::activate_grad<float>(r.act, xh * r.g + r.b);
    r.dx[j] += r.rstd * (dz * r.g - a1 - xh * a2);
  }
}
VINF_VEC_VARIANTS(norm_row_dx, norm_row_dx_impl, (const NormRow& r, float a1, float a2), (r, a1, a2))

// The rows path of group_norm: every (N, C, T, S) view with unit stride along S.
void group_norm_rows(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& dy,
                     const exec::GroupNormParams& p, const Tensor* dx, const Tensor* dgamma, const Tensor* dbeta) {
  const std::int64_t n_s = x.size(0), c = x.size(1), t_n = x.size(2), s_n = x.size(3), cg = c / p.groups;
  const double count = static_cast<double>(cg * t_n * s_n);
  auto row = [](const Tensor& v, std::int64_t n, std::int64_t ch, std::int64_t t) {
    return f32(v) + n * v.strides[0] + ch * v.strides[1] + t * v.strides[2];
  };
  // Groups in parallel: each owns its channels' dgamma and dbeta.
#pragma omp parallel for schedule(dynamic) if (x.numel() >= kParallelGrain)
  for (int g = 0; g < p.groups; ++g) {
    std::vector<double> per_channel(static_cast<std::size_t>(2 * cg));
    for (std::int64_t n = 0; n < n_s; ++n) {
      double sums[2] = {0, 0};
      for (std::int64_t ch = g * cg; ch < (g + 1) * cg; ++ch)
        for (std::int64_t t = 0; t < t_n; ++t) norm_row_sums(row(x, n, ch, t), s_n, sums);
      const double mean = sums[0] / count, var = std::max(sums[1] / count - mean * mean, 0.0);
      const float rstd = static_cast<float>(1.0 / std::sqrt(var + p.eps));
      double a1 = 0, a2 = 0;
      for (std::int64_t k = 0; k < cg; ++k) {
        const std::int64_t ch = g * cg + k;
        const float gam = f32(gamma)[ch * gamma.strides[0]], bet = f32(beta)[ch * beta.strides[0]];
        double acc[2] = {0, 0};  // sum dz xh, sum dz
        for (std::int64_t t = 0; t < t_n; ++t)
          norm_row_grads(NormRow{row(x, n, ch, t), row(dy, n, ch, t), nullptr, s_n, static_cast<float>(mean), rstd,
                                 gam, bet, p.act},
                         acc);
        if (dgamma) f32(*dgamma)[ch * dgamma->strides[0]] += static_cast<float>(acc[0]);
        if (dbeta) f32(*dbeta)[ch * dbeta->strides[0]] += static_cast<float>(acc[1]);
        a1 += acc[1] * gam;
        a2 += acc[0] * gam;
      }
      if (!dx) continue;
      const float m1 = static_cast<float>(a1 / count), m2 = static_cast<float>(a2 / count);
      for (std::int64_t ch = g * cg; ch < (g + 1) * cg; ++ch) {
        const float gam = f32(gamma)[ch * gamma.strides[0]], bet = f32(beta)[ch * beta.strides[0]];
        for (std::int64_t t = 0; t < t_n; ++t)
          norm_row_dx(NormRow{row(x, n, ch, t), row(dy, n, ch, t), row(*dx, n, ch, t), s_n, static_cast<float>(mean),
                              rstd, gam, bet, p.act},
                      m1, m2);
      }
    }
  }
}

}  // namespace

void group_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& dy,
                const exec::GroupNormParams& p, const Tensor* dx, const Tensor* dgamma, const Tensor* dbeta) {
  // The rows path takes unit-stride rows and the activations the UNet fuses (none, SiLU); the
  // scalar loops below take the rest.
  const bool rows = x.strides[3] == 1 && dy.strides[3] == 1 && (!dx || dx->strides[3] == 1);
  if (rows && (p.act == exec::Activation::none || p.act == exec::Activation::silu)) {
    group_norm_rows(x, gamma, beta, dy, p, dx, dgamma, dbeta);
    return;
  }
  const std::int64_t n_s = x.size(0), c = x.size(1), t_n = x.size(2), s_n = x.size(3), cg = c / p.groups;
  const double count = static_cast<double>(cg * t_n * s_n);
  auto gam = [&](std::int64_t ch) { return static_cast<double>(f32(gamma)[ch * gamma.strides[0]]); };
  auto bet = [&](std::int64_t ch) { return static_cast<double>(f32(beta)[ch * beta.strides[0]]); };
  // Groups in parallel: each owns its channels' dgamma and dbeta.
#pragma omp parallel for schedule(dynamic) if (x.numel() >= kParallelGrain)
  for (int g = 0; g < p.groups; ++g) {
    for (std::int64_t n = 0; n < n_s; ++n) {
      double s1 = 0, s2 = 0;
      for (std::int64_t ch = g * cg; ch < (g + 1) * cg; ++ch)
        for (std::int64_t t = 0; t < t_n; ++t)
          for (std::int64_t s = 0; s < s_n; ++s) {
            const double v = at_f32(x, n, ch, t, s);
            s1 += v;
            s2 += v * v;
          }
      const double mean = s1 / count, var = std::max(s2 / count - mean * mean, 0.0);
      const double rstd = 1.0 / std::sqrt(var + p.eps);
      // dz = dy * act'(z); sums of dz * gamma and dz * gamma * xhat over the group.
      double a1 = 0, a2 = 0;
      for (std::int64_t ch = g * cg; ch < (g + 1) * cg; ++ch) {
        double dg = 0, dbt = 0;
        for (std::int64_t t = 0; t < t_n; ++t)
          for (std::int64_t s = 0; s < s_n; ++s) {
            const double xh = (at_f32(x, n, ch, t, s) - mean) * rstd;
            const double dz = at_f32(dy, n, ch, t, s) * exec::activate_grad<double>(p.act, xh * gam(ch) + bet(ch));
            dg += dz * xh;
            dbt += dz;
            a1 += dz * gam(ch);
            a2 += dz * gam(ch) * xh;
          }
        if (dgamma) f32(*dgamma)[ch * dgamma->strides[0]] += static_cast<float>(dg);
        if (dbeta) f32(*dbeta)[ch * dbeta->strides[0]] += static_cast<float>(dbt);
      }
      if (!dx) continue;
      a1 /= count;
      a2 /= count;
      for (std::int64_t ch = g * cg; ch < (g + 1) * cg; ++ch)
        for (std::int64_t t = 0; t < t_n; ++t)
          for (std::int64_t s = 0; s < s_n; ++s) {
            const double xh = (at_f32(x, n, ch, t, s) - mean) * rstd;
            const double dz = at_f32(dy, n, ch, t, s) * exec::activate_grad<double>(p.act, xh * gam(ch) + bet(ch));
            at_f32(*dx, n, ch, t, s) += static_cast<float>(rstd * (dz * gam(ch) - a1 - xh * a2));
          }
    }
  }
}

namespace {

// One row of LayerNorm's backward pass: its mean and rstd, dx += rstd (dy g - a1 - xh a2) (when dx
// is given) and, into float partial sums, dgamma += dy xh and dbeta += dy.
struct LayerNormRow {
  const float *x, *dy, *gamma;
  float* dx;  // null: no input gradient
  float *pg, *pb;
  std::int64_t n;
  float eps;
};

template <class V>
VINF_VEC_INLINE void layer_norm_row_impl(const LayerNormRow& r) {
  constexpr int L = vec::lanes_of<V>;
  const std::int64_t n = r.n;
  V s1{}, s2{};
  std::int64_t j = 0;
  for (; j + L <= n; j += L) {
    const V v = vec::load_as<V>(r.x + j);
    s1 += v;
    s2 += v * v;
  }
  double a = vec::hsum(s1), b = vec::hsum(s2);
  for (; j < n; ++j) a += r.x[j], b += static_cast<double>(r.x[j]) * r.x[j];
  const double mu = a / static_cast<double>(n);
  const float mean = static_cast<float>(mu);
  const float rstd = static_cast<float>(1.0 / std::sqrt(std::max(b / static_cast<double>(n) - mu * mu, 0.0) + r.eps));
  const V vmean = vec::splat_as<V>(mean), vrstd = vec::splat_as<V>(rstd);
  V va1{}, va2{};
  for (j = 0; j + L <= n; j += L) {
    const V up = vec::load_as<V>(r.dy + j);
    const V xh = (vec::load_as<V>(r.x + j) - vmean) * vrstd;
    const V g = up * vec::load_as<V>(r.gamma + j);
    va1 += g;
    va2 += g * xh;
    vec::store_as(r.pg + j, vec::load_as<V>(r.pg + j) + up * xh);
    vec::store_as(r.pb + j, vec::load_as<V>(r.pb + j) + up);
  }
  double a1 = vec::hsum(va1), a2 = vec::hsum(va2);
  for (; j < n; ++j) {
    const float xh = (r.x[j] - mean) * rstd, g = r.dy[j] * r.gamma[j];
    a1 += g;
    a2 += static_cast<double>(g) * xh;
    r.pg[j] += r.dy[j] * xh;
    r.pb[j] += r.dy[j];
  }
  if (r.dx == nullptr) return;
  const float m1 = static_cast<float>(a1 / static_cast<double>(n)), m2 = static_cast<float>(a2 / static_cast<double>(n));
  const V vm1 = vec::splat_as<V>(m1), vm2 = vec::splat_as<V>(m2);
  for (j = 0; j + L <= n; j += L) {
    const V xh = (vec::load_as<V>(r.x + j) - vmean) * vrstd;
    const V g = vec::load_as<V>(r.dy + j) * vec::load_as<V>(r.gamma + j);
    vec::store_as(r.dx + j, vec::load_as<V>(r.dx + j) + vrstd * (g - vm1 - xh * vm2));
  }
  for (; j < n; ++j) {
    const float xh = (r.x[j] - mean) * rstd;
    r.dx[j] += rstd * (r.dy[j] * r.gamma[j] - m1 - xh * m2);
  }
}
VINF_VEC_VARIANTS(layer_norm_row, layer_norm_row_impl, (const LayerNormRow& r), (r))

}  // namespace

void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& dy, float eps, const Tensor* dx,
                const Tensor* dgamma, const Tensor* dbeta) {
  const std::int64_t m = x.size(0), d = x.size(1);
  std::vector<float> gam(static_cast<std::size_t>(d));
  for (std::int64_t j = 0; j < d; ++j) gam[static_cast<std::size_t>(j)] = f32(gamma)[j * gamma.strides[0]];
  auto row = [](const Tensor& t, std::int64_t r) { return f32(t) + r * t.strides[0]; };
  // Rows in parallel, each thread summing dgamma and dbeta over blocks of rows in float and the
  // blocks in double; the threads' sums added in their order.
  constexpr std::int64_t kBlock = 32;
  std::vector<double> total(static_cast<std::size_t>(2 * d), 0.0);
#pragma omp parallel if (x.numel() >= kParallelGrain)
  {
    std::vector<double> mine(static_cast<std::size_t>(2 * d), 0.0);
    std::vector<float> part(static_cast<std::size_t>(2 * d));
#pragma omp for schedule(static)
    for (std::int64_t b0 = 0; b0 < m; b0 += kBlock) {
      std::fill(part.begin(), part.end(), 0.f);
      for (std::int64_t r = b0; r < std::min(m, b0 + kBlock); ++r) {
        layer_norm_row(LayerNormRow{row(x, r), row(dy, r), gam.data(), dx ? row(*dx, r) : nullptr, part.data(),
                                    part.data() + d, d, eps});
      }
      for (std::size_t j = 0; j < part.size(); ++j) mine[j] += part[j];
    }
#pragma omp for ordered schedule(static, 1)
    for (int t = 0; t < omp_get_num_threads(); ++t) {
#pragma omp ordered
      for (std::size_t j = 0; j < mine.size(); ++j) total[j] += mine[j];
    }
  }
  for (std::int64_t j = 0; j < d; ++j) {
    if (dgamma) f32(*dgamma)[j * dgamma->strides[0]] += static_cast<float>(total[static_cast<std::size_t>(j)]);
    if (dbeta) f32(*dbeta)[j * dbeta->strides[0]] += static_cast<float>(total[static_cast<std::size_t>(d + j)]);
  }
}

void softmax(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const std::int64_t m = y.size(0), d = y.size(1);
#pragma omp parallel for schedule(static) if (y.numel() >= kParallelGrain)
  for (std::int64_t r = 0; r < m; ++r) {
    double dot = 0;
    for (std::int64_t j = 0; j < d; ++j) dot += static_cast<double>(at_f32(y, r, j)) * at_f32(dy, r, j);
    for (std::int64_t j = 0; j < d; ++j)
      at_f32(dx, r, j) += static_cast<float>(at_f32(y, r, j) * (at_f32(dy, r, j) - dot));
  }
}

namespace {

// One query row of the attention's backward pass, over its n visible keys, with K and V held
// transposed (kt[e * ld + j]: channel e of key j, likewise vt) so that every loop runs along the
// keys, a vector at a time:
//   s = c q K^T, p = softmax(s), dp = dout V^T, D = p . dp, ds = p (dp - D) c;
//   dV^T += dout p^T, dq = ds K, dK^T += q ds^T.
// s and dp are scratch rows of n floats; dkt and dvt are laid out as kt and vt.
struct AttentionRow {
  const float *q, *dout, *kt, *vt;
  std::int64_t ld, n, d, dv;
  float c;
  float *s, *dp, *dq, *dkt, *dvt;
};

template <class V>
VINF_VEC_INLINE void fill_row(float* y, float value, std::int64_t n) {
  constexpr int L = vec::lanes_of<V>;
  const V v = vec::splat_as<V>(value);
  std::int64_t j = 0;
  for (; j + L <= n; j += L) vec::store_as(y + j, v);
  for (; j < n; ++j) y[j] = value;
}

// y += a x
template <class V>
VINF_VEC_INLINE void axpy_row(float* y, float a, const float* x, std::int64_t n) {
  constexpr int L = vec::lanes_of<V>;
  const V va = vec::splat_as<V>(a);
  std::int64_t j = 0;
  for (; j + L <= n; j += L) vec::store_as(y + j, vec::load_as<V>(y + j) + va * vec::load_as<V>(x + j));
  for (; j < n; ++j) y[j] += a * x[j];
}

template <class V>
VINF_VEC_INLINE float dot_row(const float* a, const float* b, std::int64_t n) {
  constexpr int L = vec::lanes_of<V>;
  V acc{};
  std::int64_t j = 0;
  for (; j + L <= n; j += L) acc += vec::load_as<V>(a + j) * vec::load_as<V>(b + j);
  float sum = vec::hsum(acc);
  for (; j < n; ++j) sum += a[j] * b[j];
  return sum;
}

template <class V>
VINF_VEC_INLINE void attention_row_impl(const AttentionRow& r) {
  constexpr int L = vec::lanes_of<V>;
  const std::int64_t n = r.n;
  // s = c q K^T and its maximum.
  fill_row<V>(r.s, 0.f, n);
  for (std::int64_t e = 0; e < r.d; ++e) axpy_row<V>(r.s, r.q[e] * r.c, r.kt + e * r.ld, n);
  V vmax = vec::splat_as<V>(-INFINITY);
  std::int64_t j = 0;
  for (; j + L <= n; j += L) {
    const V x = vec::load_as<V>(r.s + j);
    vmax = x > vmax ? x : vmax;
  }
  float mx = vec::hmax(vmax);
  for (; j < n; ++j) mx = std::max(mx, r.s[j]);
  // p = exp(s - max) / sum.
  const V vm = vec::splat_as<V>(mx);
  V vsum{};
  for (j = 0; j + L <= n; j += L) {
    const V e = vec::exp_nonpositive(vec::load_as<V>(r.s + j) - vm);
    vec::store_as(r.s + j, e);
    vsum += e;
  }
  float sum = vec::hsum(vsum);
  for (; j < n; ++j) sum += r.s[j] = std::exp(r.s[j] - mx);
  const float inv = 1.f / sum;
  const V vinv = vec::splat_as<V>(inv);
  for (j = 0; j + L <= n; j += L) vec::store_as(r.s + j, vec::load_as<V>(r.s + j) * vinv);
  for (; j < n; ++j) r.s[j] *= inv;
  // dp = dout V^T, D = p . dp; dV^T += dout p^T.
  fill_row<V>(r.dp, 0.f, n);
  for (std::int64_t e = 0; e < r.dv; ++e) {
    axpy_row<V>(r.dp, r.dout[e], r.vt + e * r.ld, n);
    axpy_row<V>(r.dvt + e * r.ld, r.dout[e], r.s, n);
  }
  const float big_d = dot_row<V>(r.s, r.dp, n);
  // ds = p (dp - D) c, in dp's place.
  const V vd = vec::splat_as<V>(big_d), vc = vec::splat_as<V>(r.c);
  for (j = 0; j + L <= n; j += L)
    vec::store_as(r.dp + j, vec::load_as<V>(r.s + j) * (vec::load_as<V>(r.dp + j) - vd) * vc);
  for (; j < n; ++j) r.dp[j] = r.s[j] * (r.dp[j] - big_d) * r.c;
  // dq = ds K; dK^T += q ds^T.
  for (std::int64_t e = 0; e < r.d; ++e) {
    r.dq[e] += dot_row<V>(r.dp, r.kt + e * r.ld, n);
    axpy_row<V>(r.dkt + e * r.ld, r.q[e], r.dp, n);
  }
}
VINF_VEC_VARIANTS(attention_row, attention_row_impl, (const AttentionRow& r), (r))

// Full attention (every row sees every key, so one scale c for all rows) with small heads
// (d = dv = D, 8 or 16), for one (batch, head) pair. The row kernel above runs a vector along the
// keys per channel, reading and writing a row of scratch for each of the 5 d products; with d = 8
// that is memory traffic for every 2 flops. Here the scores stay in registers, in flash-attention's
// backward order, with L = lanes:
//   1. rows in lanes: each row's log-sum-exp (lse) and D = p . dp over the keys, in chunks of 8
//      (one rescaling of the running sums a chunk); D = dout . out instead when the forward's
//      output is given;
//   2. keys in lanes, L x L tiles: p = exp(s - lse), ds = p (dp - D); dV += p^T dout and
//      dK += c ds^T q in 2 D accumulators a block of keys; each tile's ds transposed (rows in lanes)
//      for dq += c ds K, added into a transposed dq.
// The scores are recomputed in both stages from the same products in the same order.
struct SmallPair {
  const float *q, *k, *v, *g;  // row i of q at q + i * ldq, likewise the others
  std::int64_t ldq, ldk, ldv, ldg;
  const float* o;  // the forward's output, for D = dout . out (null: D from the keys)
  std::int64_t ldo;
  float *dq, *dk, *dv;
  std::int64_t lddq, lddk, lddv;
  std::int64_t lq, lk;
  float c;
  float* scratch;  // small_pair_scratch(lq, d, lanes) floats
};

std::int64_t round_up(std::int64_t n, std::int64_t m) { return (n + m - 1) / m * m; }

// QT, GT, DQT (D x lq padded), lse, dd (lq padded), a block of keys and values (D x lanes each),
// a tile of p and one of ds (lanes x lanes each), q c row by row (lq x D).
std::int64_t small_pair_scratch(std::int64_t lq, std::int64_t d, std::int64_t lanes) {
  const std::int64_t lqp = round_up(lq, lanes);
  return 3 * d * lqp + 2 * lqp + 2 * d * lanes + 2 * lanes * lanes + lq * d;
}

template <class V, int D>
VINF_VEC_INLINE V dot_splat(const V (&x)[D], const float* y) {  // sum_e x[e] * y[e], y broadcast
  V acc = x[0] * vec::splat_as<V>(y[0]);
#pragma GCC unroll 16
  for (int e = 1; e < D; ++e) acc += x[e] * vec::splat_as<V>(y[e]);
  return acc;
}

// sum_e x[e] * xt[e * lanes + lane], x broadcast: with x = q c, the same products in the same
// order as dot_splat over QT.
template <class V, int D>
VINF_VEC_INLINE V dot_splat_rev(const float* x, const float* xt) {
  constexpr int L = vec::lanes_of<V>;
  V acc = vec::splat_as<V>(x[0]) * vec::load_as<V>(xt);
#pragma GCC unroll 16
  for (int e = 1; e < D; ++e) acc += vec::splat_as<V>(x[e]) * vec::load_as<V>(xt + e * L);
  return acc;
}

// small_pair's scratch (see small_pair_scratch), laid out for lq rows and L lanes.
struct SmallPairTiles {
  std::int64_t lqp;
  float *qt, *gt, *dqt, *lse, *dd, *kb, *vb, *pt, *dst, *qc;
};

template <class V, int D>
SmallPairTiles small_pair_tiles(const SmallPair& a) {
  constexpr int L = vec::lanes_of<V>;
  SmallPairTiles t;
  t.lqp = round_up(a.lq, L);
  t.qt = a.scratch;
  t.gt = t.qt + D * t.lqp;
  t.dqt = t.gt + D * t.lqp;
  t.lse = t.dqt + D * t.lqp;
  t.dd = t.lse + t.lqp;
  t.kb = t.dd + t.lqp;  // kb[e * L + j]: channel e of the block's key j (zeros past the last)
  t.vb = t.kb + D * L;
  t.pt = t.vb + D * L;  // pt[r * L + j]: p of row r0 + r and key j0 + j; dst likewise ds
  t.dst = t.pt + L * L;
  t.qc = t.dst + L * L;  // qc[i * D + e] = q c
  return t;
}

// 1. lse and D, rows in lanes (D from out when given).
template <class V, vec::Level Lv, int D, bool HaveOut>
VINF_VEC_INLINE void small_pair_rows(const SmallPair& a, const SmallPairTiles& t) {
  constexpr int L = vec::lanes_of<V>;
  constexpr int kChunk = 8;
  const std::int64_t lq = a.lq, lk = a.lk, lqp = t.lqp;
  const float* qt = t.qt;
  const float* gt = t.gt;
  float* lse = t.lse;
  float* dd = t.dd;
  for (std::int64_t r0 = 0; r0 < lq; r0 += L) {
    V qv[D], gv[D];
#pragma GCC unroll 16
    for (int e = 0; e < D; ++e) {
      qv[e] = vec::load_as<V>(qt + e * lqp + r0);
      gv[e] = vec::load_as<V>(gt + e * lqp + r0);
    }
    V m = vec::splat_as<V>(-INFINITY), l{}, acc{};
    std::int64_t j0 = 0;
    for (; j0 + kChunk <= lk; j0 += kChunk) {
      V sc[kChunk];
#pragma GCC unroll 8
      for (int t = 0; t < kChunk; ++t) sc[t] = dot_splat<V, D>(qv, a.k + (j0 + t) * a.ldk);
      V bm = m;
#pragma GCC unroll 8
      for (int t = 0; t < kChunk; ++t) bm = sc[t] > bm ? sc[t] : bm;
      const V rescale = vec::exp_nonpositive_at<Lv>(m - bm);
      l *= rescale;
      if constexpr (!HaveOut) acc *= rescale;
      m = bm;
#pragma GCC unroll 8
      for (int t = 0; t < kChunk; ++t) {
        const V p = vec::exp_nonpositive_at<Lv>(sc[t] - m);
        l += p;
        if constexpr (!HaveOut) acc += p * dot_splat<V, D>(gv, a.v + (j0 + t) * a.ldv);
      }
    }
    for (; j0 < lk; ++j0) {  // the last keys, one at a time
      const V s = dot_splat<V, D>(qv, a.k + j0 * a.ldk);
      const V bm = s > m ? s : m;
      const V rescale = vec::exp_nonpositive_at<Lv>(m - bm);
      const V p = vec::exp_nonpositive_at<Lv>(s - bm);
      l = l * rescale + p;
      if constexpr (!HaveOut) acc = acc * rescale + p * dot_splat<V, D>(gv, a.v + j0 * a.ldv);
      m = bm;
    }
    float ml[L], ll[L], al[L];
    vec::store_as(ml, m);
    vec::store_as(ll, l);
    vec::store_as(al, acc);
    for (int r = 0; r < L; ++r) {
      lse[r0 + r] = ml[r] + std::log(ll[r]);
      if constexpr (!HaveOut) dd[r0 + r] = al[r] / ll[r];
    }
  }
}

// 2. Keys in lanes: dK and dV per block of keys, dq per tile.
template <class V, vec::Level Lv, int D>
VINF_VEC_INLINE void small_pair_keys(const SmallPair& a, const SmallPairTiles& t) {
  constexpr int L = vec::lanes_of<V>;
  const std::int64_t lq = a.lq, lk = a.lk, lqp = t.lqp;
  float* kb = t.kb;
  float* vb = t.vb;
  float* pt = t.pt;
  float* dst = t.dst;
  float* dqt = t.dqt;
  const float* qc = t.qc;
  const float* lse = t.lse;
  const float* dd = t.dd;
  for (std::int64_t j0 = 0; j0 < lk; j0 += L) {
    float live[L];  // 1 for the keys that exist, 0 for the block's padding
    for (int j = 0; j < L; ++j) {
      live[j] = j0 + j < lk ? 1.f : 0.f;
      for (int e = 0; e < D; ++e) {
        kb[e * L + j] = j0 + j < lk ? a.k[(j0 + j) * a.ldk + e] : 0.f;
        vb[e * L + j] = j0 + j < lk ? a.v[(j0 + j) * a.ldv + e] : 0.f;
      }
    }
    const V keep = vec::load_as<V>(live);
    V dkv[D], dvv[D];
#pragma GCC unroll 16
    for (int e = 0; e < D; ++e) dkv[e] = dvv[e] = V{};
    for (std::int64_t r0 = 0; r0 < lq; r0 += L) {
      // The tile's p and ds, a row each (rows past the last: zeros).
      const int rows = static_cast<int>(std::min<std::int64_t>(L, lq - r0));
      for (int r = 0; r < rows; ++r) {
        const std::int64_t i = r0 + r;
        const V p = vec::exp_nonpositive_at<Lv>(dot_splat_rev<V, D>(qc + i * D, kb) - vec::splat_as<V>(lse[i])) * keep;
        vec::store_as(pt + r * L, p);
        vec::store_as(dst + r * L, p * (dot_splat_rev<V, D>(a.g + i * a.ldg, vb) - vec::splat_as<V>(dd[i])));
      }
      for (int r = rows; r < L; ++r) vec::store_as(dst + r * L, V{});
      // dV^T += p^T dout, dK^T += ds^T q, keys in lanes.
      for (int r = 0; r < rows; ++r) {
        const float* qi = a.q + (r0 + r) * a.ldq;
        const float* gi = a.g + (r0 + r) * a.ldg;
        const V p = vec::load_as<V>(pt + r * L), ds = vec::load_as<V>(dst + r * L);
#pragma GCC unroll 16
        for (int e = 0; e < D; ++e) {
          dvv[e] += p * vec::splat_as<V>(gi[e]);
          dkv[e] += ds * vec::splat_as<V>(qi[e]);
        }
      }
      // dq += ds K, rows in lanes.
      V tile[L];
#pragma GCC unroll 16
      for (int r = 0; r < L; ++r) tile[r] = vec::load_as<V>(dst + r * L);
      vec::transpose<V>(tile);  // tile[j]: key j0 + j's ds over the rows r0...
#pragma GCC unroll 16
      for (int e = 0; e < D; ++e) {
        V acc = vec::load_as<V>(dqt + e * lqp + r0);
#pragma GCC unroll 16
        for (int j = 0; j < L; ++j) acc += tile[j] * vec::splat_as<V>(kb[e * L + j]);
        vec::store_as(dqt + e * lqp + r0, acc);
      }
    }
    float out[D][L];
#pragma GCC unroll 16
    for (int e = 0; e < D; ++e) vec::store_as(out[e], dkv[e]);
    for (std::int64_t j = 0; j < L && j0 + j < lk; ++j)
      for (int e = 0; e < D; ++e) a.dk[(j0 + j) * a.lddk + e] += a.c * out[e][j];
#pragma GCC unroll 16
    for (int e = 0; e < D; ++e) vec::store_as(out[e], dvv[e]);
    for (std::int64_t j = 0; j < L && j0 + j < lk; ++j)
      for (int e = 0; e < D; ++e) a.dv[(j0 + j) * a.lddv + e] += out[e][j];
  }
}

template <class V, vec::Level Lv, int D, bool HaveOut>
VINF_VEC_INLINE void small_pair(const SmallPair& a) {
  const SmallPairTiles t = small_pair_tiles<V, D>(a);
  const std::int64_t lq = a.lq, lqp = t.lqp;
  std::fill(t.qt, t.dd + lqp, 0.f);
  for (std::int64_t i = 0; i < lq; ++i)
    for (int e = 0; e < D; ++e) {
      t.qc[i * D + e] = t.qt[e * lqp + i] = a.q[i * a.ldq + e] * a.c;
      t.gt[e * lqp + i] = a.g[i * a.ldg + e];
    }
  if constexpr (HaveOut) {
    for (std::int64_t i = 0; i < lq; ++i) {
      float sum = 0;
      for (int e = 0; e < D; ++e) sum += a.g[i * a.ldg + e] * a.o[i * a.ldo + e];
      t.dd[i] = sum;
    }
  }
  small_pair_rows<V, Lv, D, HaveOut>(a, t);
  small_pair_keys<V, Lv, D>(a, t);
  for (std::int64_t i = 0; i < lq; ++i)
    for (int e = 0; e < D; ++e) a.dq[i * a.lddq + e] += a.c * t.dqt[e * lqp + i];
}

template <class V, vec::Level Lv>
VINF_VEC_INLINE void small_pair_impl(const SmallPair& a, int d) {
  // Pairs of at most 8 rows and 8 keys (the temporal attention over 8 frames) in 8 lanes, on
  // AVX-512 too: 16 would leave half of every vector empty.
  const bool out = a.o != nullptr;
  if constexpr (vec::lanes_of<V> == 16) {
    if (a.lq <= 8 && a.lk <= 8) {
      if (d == 8) out ? small_pair<vec::f32x8, Lv, 8, true>(a) : small_pair<vec::f32x8, Lv, 8, false>(a);
      else out ? small_pair<vec::f32x8, Lv, 16, true>(a) : small_pair<vec::f32x8, Lv, 16, false>(a);
      return;
    }
  }
  if (d == 8) out ? small_pair<V, Lv, 8, true>(a) : small_pair<V, Lv, 8, false>(a);
  else out ? small_pair<V, Lv, 16, true>(a) : small_pair<V, Lv, 16, false>(a);
}
VINF_VEC_LEVEL_VARIANTS(attention_small_pair, small_pair_impl, (const SmallPair& a, int d), (a, d))

}  // namespace

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const exec::AttentionParams& p,
               const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor* out) {
  const std::int64_t nb = q.size(0), nh = q.size(1), lq = q.size(2), lk = k.size(2), d = q.size(3), dvn = v.size(3);
  const double log_base = p.token_count_log_base > 0 ? std::log(static_cast<double>(p.token_count_log_base)) : 0;
  auto row = [](const Tensor& t, std::int64_t b, std::int64_t h, std::int64_t i) {
    return f32(t) + b * t.strides[0] + h * t.strides[1] + i * t.strides[2];
  };
  // (b, h) pairs go to the threads in chunks: many small ones (the temporal attention's, one per
  // pixel and head) one at a time cost more in scheduling than in work.
  const int chunk = static_cast<int>(std::clamp<std::int64_t>(nb * nh / (16 * omp_get_max_threads()), 1, 64));
  // Every row sees every key: the small-head kernel, when the heads are small.
  std::int64_t lo_last = 0, hi_last = 0, lo_first = 0, hi_first = 0;
  exec::attention_band(p, lq - 1, lk, lo_last, hi_last);
  exec::attention_band(p, 0, lk, lo_first, hi_first);
  if (lq > 0 && lk > 0 && lo_last == 0 && hi_first == lk - 1 && d == dvn && (d == 8 || d == 16)) {
    const float c =
        static_cast<float>(p.scale * (log_base > 0 ? std::log(static_cast<double>(lk)) / log_base : 1.0));
    const std::int64_t lanes = vec::variant_lanes();
#pragma omp parallel
    {
      std::vector<float> scratch(static_cast<std::size_t>(small_pair_scratch(lq, d, lanes)));
#pragma omp for schedule(dynamic, chunk) collapse(2)
      for (std::int64_t b = 0; b < nb; ++b)
        for (std::int64_t h = 0; h < nh; ++h)
          attention_small_pair(SmallPair{row(q, b, h, 0), row(k, b, h, 0), row(v, b, h, 0), row(dout, b, h, 0),
                                         q.strides[2], k.strides[2], v.strides[2], dout.strides[2],
                                         out ? row(*out, b, h, 0) : nullptr, out ? out->strides[2] : 0,
                                         row(dq, b, h, 0), row(dk, b, h, 0), row(dv, b, h, 0), dq.strides[2],
                                         dk.strides[2], dv.strides[2], lq, lk, c, scratch.data()},
                               static_cast<int>(d));
    }
    return;
  }
  // (b, h) pairs in parallel: each owns its rows of dq, dk and dv. A pair's keys and values are
  // transposed into the thread's scratch, its dK and dV gathered there and added at the end. The
  // probabilities of a row are recomputed from q and k (nothing of size rows x keys is kept from
  // the forward pass).
#pragma omp parallel
  {
    std::vector<float> kt(static_cast<std::size_t>(d * lk)), vt(static_cast<std::size_t>(dvn * lk));
    std::vector<float> dkt(kt.size()), dvt(vt.size()), s(static_cast<std::size_t>(lk)), dp(s.size());
    std::vector<float> qi(static_cast<std::size_t>(d)), gi(static_cast<std::size_t>(dvn)), dqi(qi.size());
#pragma omp for schedule(dynamic, chunk) collapse(2)
    for (std::int64_t b = 0; b < nb; ++b)
      for (std::int64_t h = 0; h < nh; ++h) {
        for (std::int64_t j = 0; j < lk; ++j) {
          const float* kj = row(k, b, h, j);
          const float* vj = row(v, b, h, j);
          for (std::int64_t e = 0; e < d; ++e) kt[static_cast<std::size_t>(e * lk + j)] = kj[e];
          for (std::int64_t e = 0; e < dvn; ++e) vt[static_cast<std::size_t>(e * lk + j)] = vj[e];
        }
        std::fill(dkt.begin(), dkt.end(), 0.f);
        std::fill(dvt.begin(), dvt.end(), 0.f);
        for (std::int64_t i = 0; i < lq; ++i) {
          std::int64_t lo = 0, hi = 0;
          exec::attention_band(p, i, lk, lo, hi);
          if (lo > hi) continue;  // a row that sees no key: its output is zeros, constant
          const double f = log_base > 0 ? std::log(static_cast<double>(hi - lo + 1)) / log_base : 1.0;
          std::copy(row(q, b, h, i), row(q, b, h, i) + d, qi.begin());
          std::copy(row(dout, b, h, i), row(dout, b, h, i) + dvn, gi.begin());
          std::fill(dqi.begin(), dqi.end(), 0.f);
          attention_row(AttentionRow{qi.data(), gi.data(), kt.data() + lo, vt.data() + lo, lk, hi - lo + 1, d, dvn,
                                     static_cast<float>(p.scale * f), s.data(), dp.data(), dqi.data(), dkt.data() + lo,
                                     dvt.data() + lo});
          float* dq_row = row(dq, b, h, i);
          for (std::int64_t e = 0; e < d; ++e) dq_row[e] += dqi[static_cast<std::size_t>(e)];
        }
        for (std::int64_t j = 0; j < lk; ++j) {
          float* dkj = row(dk, b, h, j);
          float* dvj = row(dv, b, h, j);
          for (std::int64_t e = 0; e < d; ++e) dkj[e] += dkt[static_cast<std::size_t>(e * lk + j)];
          for (std::int64_t e = 0; e < dvn; ++e) dvj[e] += dvt[static_cast<std::size_t>(e * lk + j)];
        }
      }
  }
}

void upsample_nearest(const Tensor& dy, const Tensor& dx) {
  const std::int64_t n_s = dy.size(0), c = dy.size(1), ho = dy.size(2), wo = dy.size(3), h = dx.size(2), w = dx.size(3);
#pragma omp parallel for schedule(static) collapse(2) if (dy.numel() >= kParallelGrain)
  for (std::int64_t n = 0; n < n_s; ++n)
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t y = 0; y < ho; ++y)
        for (std::int64_t xo = 0; xo < wo; ++xo) at_f32(dx, n, ch, y * h / ho, xo * w / wo) += at_f32(dy, n, ch, y, xo);
}

void accumulate(const Tensor& src, const Tensor& dst) {
  bool broadcast = false;
  for (int i = 0; i < dst.rank(); ++i) broadcast = broadcast || (dst.strides[i] == 0 && dst.shape[i] > 1);
  if (!broadcast) {  // same-shaped views: the fast strided sum, in place
    fast::axpby(1.f, dst, 1.f, src, dst);
    return;
  }
  // Several elements of src land on one of dst (the dims where dst has stride 0): each element of
  // dst sums its own, in double, in src's index order; the elements of dst in parallel.
  int kept[kMaxDims], summed[kMaxDims];
  int nk = 0, ns = 0;
  std::int64_t n_kept = 1, n_summed = 1;
  for (int i = 0; i < dst.rank(); ++i) {
    if (dst.strides[i] == 0 && dst.shape[i] > 1) {
      summed[ns++] = i;
      n_summed *= dst.shape[i];
    } else {
      kept[nk++] = i;
      n_kept *= dst.shape[i];
    }
  }
  const float* ps = f32(src);
  float* pd = f32(dst);
#pragma omp parallel for schedule(static) if (src.numel() >= kParallelGrain)
  for (std::int64_t e = 0; e < n_kept; ++e) {
    std::int64_t os = 0, od = 0, rest = e;
    for (int a = nk - 1; a >= 0; --a) {
      const int i = kept[a];
      const std::int64_t idx = rest % dst.shape[i];
      rest /= dst.shape[i];
      os += idx * src.strides[i];
      od += idx * dst.strides[i];
    }
    // The summed dims as an odometer, the last one innermost.
    std::int64_t idx[kMaxDims] = {};
    const int last = summed[ns - 1];
    const std::int64_t n_last = dst.shape[last], step_last = src.strides[last];
    double sum = 0;
    for (std::int64_t done = 0; done < n_summed; done += n_last) {
      std::int64_t o = os;
      for (int a = 0; a < ns - 1; ++a) o += idx[a] * src.strides[summed[a]];
      for (std::int64_t j = 0; j < n_last; ++j) sum += ps[o + j * step_last];
      for (int a = ns - 2; a >= 0 && ++idx[a] == dst.shape[summed[a]]; --a) idx[a] = 0;
    }
    pd[od] += static_cast<float>(sum);
  }
}

}  // namespace vinf::cpu::grad
