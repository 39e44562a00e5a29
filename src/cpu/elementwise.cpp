// Fast paths for copies and elementwise arithmetic: jointly coalesced layouts, contiguous inner
// loops the compiler vectorises, rows spread over OpenMP threads.
#include <cmath>
#include <cstring>

#include "cpu/cpu.hpp"
#include "cpu/loops.hpp"
#include "cpu/vec.hpp"
#include "exec/activation_math.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace vinf::cpu::fast {
namespace {

template <class S, class D>
void copy_typed(const Tensor& src, const Tensor& dst) {
  const auto l = joint_layout<2>({&src, &dst});
  const S* s = static_cast<const S*>(src.data);
  D* d = static_cast<D*>(dst.data);
  if (l.rank == 1 && l.stride[0][0] == 1 && l.stride[1][0] == 1) {
    parallel_chunks(l.size[0], [&](std::int64_t b, std::int64_t e) {
      if constexpr (std::is_same_v<S, D>) {
        std::memcpy(d + b, s + b, static_cast<std::size_t>(e - b) * sizeof(S));
      } else {
        for (std::int64_t i = b; i < e; ++i) d[i] = narrow<D>(widen(s[i]));
      }
    });
    return;
  }
  for_each_row<2>(l, [&](const std::array<std::int64_t, 2>& base, std::int64_t n, const std::array<std::int64_t, 2>& st) {
    const S* sp = s + base[0];
    D* dp = d + base[1];
    for (std::int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<S, D>) dp[i * st[1]] = sp[i * st[0]];
      else dp[i * st[1]] = narrow<D>(widen(sp[i * st[0]]));
    }
  });
}

template <class Fn>
void unary(const Tensor& x, const Tensor& out, Fn f) {
  const auto l = joint_layout<2>({&x, &out});
  const float* xp = x.ptr<float>();
  float* op = out.ptr<float>();
  if (l.rank == 1 && l.stride[0][0] == 1 && l.stride[1][0] == 1) {
    parallel_chunks(l.size[0], [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) op[i] = f(xp[i]);
    });
    return;
  }
  for_each_row<2>(l, [&](const std::array<std::int64_t, 2>& base, std::int64_t n, const std::array<std::int64_t, 2>& st) {
    for (std::int64_t i = 0; i < n; ++i) op[base[1] + i * st[1]] = f(xp[base[0] + i * st[0]]);
  });
}

// out = f(a, b) over their joint layout l (joint_layout of a, b, out).
template <class Fn>
void binary(const JointLayout<3>& l, const Tensor& a, const Tensor& b, const Tensor& out, Fn f) {
  const float* ap = a.ptr<float>();
  const float* bp = b.ptr<float>();
  float* op = out.ptr<float>();
  for_each_row<3>(l, [&](const std::array<std::int64_t, 3>& base, std::int64_t n, const std::array<std::int64_t, 3>& st) {
    const float* x = ap + base[0];
    const float* y = bp + base[1];
    float* z = op + base[2];
    if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
      for (std::int64_t i = 0; i < n; ++i) z[i] = f(x[i], y[i]);
    } else {
      for (std::int64_t i = 0; i < n; ++i) z[i * st[2]] = f(x[i * st[0]], y[i * st[1]]);
    }
  });
}

// out = a * gelu(g) along one contiguous row, a vector at a time (the vector erf), the tail exact.
template <class V>
VINF_VEC_INLINE void geglu_row_impl(const float* a, const float* g, float* out, std::int64_t n) {
  constexpr int L = vec::lanes_of<V>;
  std::int64_t i = 0;
  for (; i + L <= n; i += L) {
    const V x = vec::load_as<V>(g + i);
    vec::store_as(out + i, vec::load_as<V>(a + i) * (0.5f * x * (1.f + vec::erf(x * 0.70710678f))));
  }
  for (; i < n; ++i) out[i] = a[i] * exec::gelu(g[i]);
}
VINF_VEC_VARIANTS(geglu_row, geglu_row_impl, (const float* a, const float* g, float* out, std::int64_t n),
                  (a, g, out, n))

#if defined(__x86_64__)
// n floats to bf16 by VCVTNE2PS2BF16 (round to nearest even). The instruction reads denormal
// inputs as zero; a block that holds one is converted in software instead, so that the result
// is exactly f32_to_bf16_bits' (copy()'s contract).
#define VINF_BF16_TARGET __attribute__((target("arch=x86-64-v4,avx512bf16")))
// The lanes of v (among `lanes`) that hold a denormal: exponent bits 0, mantissa bits not.
VINF_BF16_TARGET inline __mmask16 denormal_lanes(__m512 v, __mmask16 lanes) {
  const __m512i bits = _mm512_castps_si512(v);
  return static_cast<__mmask16>(_mm512_mask_testn_epi32_mask(lanes, bits, _mm512_set1_epi32(0x7f800000)) &
                                _mm512_mask_test_epi32_mask(lanes, bits, _mm512_set1_epi32(0x007fffff)));
}

VINF_BF16_TARGET void narrow_bf16_native(const float* s, std::uint16_t* d, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(s + i), hi = _mm512_loadu_ps(s + i + 16);
    if ((denormal_lanes(lo, 0xffff) | denormal_lanes(hi, 0xffff)) != 0) {
      for (std::int64_t j = i; j < i + 32; ++j) d[j] = f32_to_bf16_bits(s[j]);
      continue;
    }
    _mm512_storeu_si512(d + i, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
  for (; i < n; i += 16) {
    const std::int64_t k = std::min<std::int64_t>(16, n - i);
    const auto m = static_cast<__mmask16>(k == 16 ? 0xffff : (1u << k) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, s + i);
    if (denormal_lanes(v, m) != 0) {
      for (std::int64_t j = i; j < i + k; ++j) d[j] = f32_to_bf16_bits(s[j]);
      continue;
    }
    _mm256_mask_storeu_epi16(d + i, m, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
  }
}
#undef VINF_BF16_TARGET

// f32 src into bf16 dst natively where the layout allows (one run, or rows contiguous in both).
bool narrow_tensor_native(const Tensor& src, const Tensor& dst) {
  if (!bf16_supported()) return false;
  const auto l = joint_layout<2>({&src, &dst});
  const float* s = src.ptr<float>();
  auto* d = static_cast<std::uint16_t*>(dst.data);
  if (l.rank == 1 && l.stride[0][0] == 1 && l.stride[1][0] == 1) {
    parallel_chunks(l.size[0], [&](std::int64_t b, std::int64_t e) { narrow_bf16_native(s + b, d + b, e - b); });
    return true;
  }
  if (l.stride[0][l.rank - 1] == 1 && l.stride[1][l.rank - 1] == 1) {  // contiguous rows (layout copies)
    for_each_row<2>(l, [&](const std::array<std::int64_t, 2>& base, std::int64_t n, const std::array<std::int64_t, 2>&) {
      narrow_bf16_native(s + base[0], d + base[1], n);
    });
    return true;
  }
  return false;
}
#endif

}  // namespace

void narrow_to_bf16(const float* src, std::uint16_t* dst, std::int64_t n) {
#if defined(__x86_64__)
  if (bf16_supported()) {
    narrow_bf16_native(src, dst, n);
    return;
  }
#endif
  for (std::int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16_bits(src[i]);
}

void copy(const Tensor& src, const Tensor& dst) {
#if defined(__x86_64__)
  // f32 to bf16 (the products' inputs under --dtype bf16, weights converted at load): the CPU's own
  // conversion where it has one, the same bits.
  if (src.dtype == DType::f32 && dst.dtype == DType::bf16 && narrow_tensor_native(src, dst)) return;
#endif
  dispatch_dtype(src.dtype, [&](auto s) {
    dispatch_dtype(dst.dtype, [&](auto d) { copy_typed<decltype(s), decltype(d)>(src, dst); });
  });
}

void fill(const Tensor& dst, double value) {
  dispatch_dtype(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T v = narrow<T>(value);
    const auto l = joint_layout<1>({&dst});
    T* p = static_cast<T*>(dst.data);
    for_each_row<1>(l, [&](const std::array<std::int64_t, 1>& base, std::int64_t n, const std::array<std::int64_t, 1>& st) {
      for (std::int64_t i = 0; i < n; ++i) p[base[0] + i * st[0]] = v;
    });
  });
}

namespace {

// out = alpha t + beta u over an (n2, n1) plane, where out and u run along n1 (stride 1) and t
// along n2 (its n1 stride ts1): t read in L x L tiles turned through registers, so that every
// load and store is a vector (a channels-last convolution output added to a tensor in the usual
// layout). Rows and columns past the whole tiles one element at a time.
template <class V>
VINF_VEC_INLINE void axpby_plane_impl(float alpha, const float* t, std::int64_t ts1, float beta, const float* u,
                                      std::int64_t us2, float* out, std::int64_t os2, std::int64_t n2,
                                      std::int64_t n1) {
  constexpr int L = vec::lanes_of<V>;
  const std::int64_t w2 = n2 / L * L, w1 = n1 / L * L;
  for (std::int64_t i0 = 0; i0 < w2; i0 += L)
    for (std::int64_t j0 = 0; j0 < w1; j0 += L) {
      V r[L];
#pragma GCC unroll 16
      for (int j = 0; j < L; ++j) r[j] = vec::load_as<V>(t + (j0 + j) * ts1 + i0);
      vec::transpose<V>(r);
#pragma GCC unroll 16
      for (int i = 0; i < L; ++i)
        vec::store_as(out + (i0 + i) * os2 + j0, r[i] * alpha + vec::load_as<V>(u + (i0 + i) * us2 + j0) * beta);
    }
  for (std::int64_t i = 0; i < n2; ++i)
    for (std::int64_t j = i < w2 ? w1 : 0; j < n1; ++j)
      out[i * os2 + j] = alpha * t[j * ts1 + i] + beta * u[i * us2 + j];
}
VINF_VEC_VARIANTS(axpby_plane, axpby_plane_impl,
                  (float alpha, const float* t, std::int64_t ts1, float beta, const float* u, std::int64_t us2,
                   float* out, std::int64_t os2, std::int64_t n2, std::int64_t n1),
                  (alpha, t, ts1, beta, u, us2, out, os2, n2, n1))

// axpby where one operand is the other's layout transposed in the two innermost dims of the
// output's order: those planes through axpby_plane, over threads. False where it is not.
bool axpby_transposed(const JointLayout<3>& l, float alpha, const Tensor& a, float beta, const Tensor& b,
                      const Tensor& out) {
  const int r = l.rank;
  if (r < 2 || l.stride[2][r - 1] != 1 || l.size[r - 1] < 16 || l.size[r - 2] < 16) return false;
  int k = -1;  // the transposed operand
  for (int i = 0; i < 2; ++i)
    if (l.stride[i][r - 1] > 1 && l.stride[i][r - 2] == 1 && l.stride[1 - i][r - 1] == 1) k = i;
  if (k < 0) return false;
  const float* t = (k == 0 ? a : b).ptr<float>();
  const float* u = (k == 0 ? b : a).ptr<float>();
  const float ta = k == 0 ? alpha : beta, ub = k == 0 ? beta : alpha;
  std::int64_t planes = 1;
  for (int d = 0; d < r - 2; ++d) planes *= l.size[d];
  float* o = out.ptr<float>();
#pragma omp parallel for schedule(static) if (out.numel() >= kParallelGrain && planes > 1)
  for (std::int64_t pl = 0; pl < planes; ++pl) {
    std::array<std::int64_t, 3> base{};
    std::int64_t rem = pl;
    for (int d = r - 3; d >= 0; --d) {
      const std::int64_t idx = rem % l.size[d];
      rem /= l.size[d];
      for (int q = 0; q < 3; ++q) base[q] += idx * l.stride[q][d];
    }
    axpby_plane(ta, t + base[k], l.stride[k][r - 1], ub, u + base[1 - k], l.stride[1 - k][r - 2], o + base[2],
                l.stride[2][r - 2], l.size[r - 2], l.size[r - 1]);
  }
  return true;
}

}  // namespace

void axpby(float alpha, const Tensor& a, float beta, const Tensor& b, const Tensor& out) {
  if (beta == 0.f) {
    unary(a, out, [alpha](float x) { return alpha * x; });
    return;
  }
  const auto l = joint_layout<3>({&a, &b, &out});
  if (axpby_transposed(l, alpha, a, beta, b, out)) return;
  binary(l, a, b, out, [alpha, beta](float x, float y) { return alpha * x + beta * y; });
}

void mul(const Tensor& a, const Tensor& b, const Tensor& out) {
  binary(joint_layout<3>({&a, &b, &out}), a, b, out, [](float x, float y) { return x * y; });
}

void activation(exec::Activation act, const Tensor& x, const Tensor& out) {
  switch (act) {
    case exec::Activation::none: copy(x, out); break;
    case exec::Activation::silu: unary(x, out, exec::silu<float>); break;
    case exec::Activation::gelu: unary(x, out, exec::gelu<float>); break;
    case exec::Activation::quick_gelu: unary(x, out, exec::quick_gelu<float>); break;
    case exec::Activation::gelu_tanh: unary(x, out, exec::gelu_tanh<float>); break;
  }
}

void geglu(const Tensor& x, const Tensor& out) {
  const int last = out.rank() - 1;
  const std::int64_t d = out.size(last);
  const Tensor a = x.slice(last, 0, d), g = x.slice(last, d, d);
  const auto l = joint_layout<3>({&a, &g, &out});
  if (l.stride[0][l.rank - 1] != 1 || l.stride[1][l.rank - 1] != 1 || l.stride[2][l.rank - 1] != 1) {
    binary(l, a, g, out, [](float av, float gv) { return av * exec::gelu(gv); });
    return;
  }
  const float* ap = a.ptr<float>();
  const float* gp = g.ptr<float>();
  float* op = out.ptr<float>();
  for_each_row<3>(l, [&](const std::array<std::int64_t, 3>& base, std::int64_t n, const std::array<std::int64_t, 3>&) {
    geglu_row(ap + base[0], gp + base[1], op + base[2], n);
  });
}

}  // namespace vinf::cpu::fast
