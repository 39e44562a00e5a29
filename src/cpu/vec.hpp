// Portable 16-lane f32 vectors (GCC vector extensions) for the CPU kernels that the compiler does
// not vectorise on its own: one AVX-512 register in an x86-64-v4 clone, two AVX2 registers in a v3
// one, plain code elsewhere. Every helper is always_inline, so it takes the target of the function
// it is used in (see VINF_CPU_CLONES).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

// 64-byte vectors in functions built for narrower targets are fine here: they never cross a
// non-inlined call. GCC warns about their ABI all the same, so the warning is off for includers.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace vinf::cpu::vec {

constexpr int kLanes = 16;
using f32x16 = float __attribute__((vector_size(64)));
using i32x16 = std::int32_t __attribute__((vector_size(64)));
using f32x8 = float __attribute__((vector_size(32)));  // for rows of 8 (small head dims)

#define VINF_VEC_INLINE inline __attribute__((always_inline))
// Compile a hot loop once per x86-64 level and pick one at load time.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define VINF_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define VINF_CPU_CLONES
#endif

VINF_VEC_INLINE f32x16 load(const float* p) {
  f32x16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
VINF_VEC_INLINE void store(float* p, f32x16 v) { std::memcpy(p, &v, sizeof v); }
// The same for any vector type V (f32x16 or f32x8).
template <class V>
VINF_VEC_INLINE V load_as(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
VINF_VEC_INLINE void store_as(float* p, V v) { std::memcpy(p, &v, sizeof v); }
VINF_VEC_INLINE f32x16 splat(float x) { return f32x16{} + x; }
VINF_VEC_INLINE f32x16 lane_index() { return f32x16{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}; }

// Lane i + w folded onto lane i for w = 8, 4, 2, 1 (shuffles with constant masks, not lane-by-lane
// extracts): the same pairwise order in every clone.
template <int W>
VINF_VEC_INLINE f32x16 fold(f32x16 v) {  // indices wrap modulo 16; only lanes < W are used
  return __builtin_shuffle(v, i32x16{W, W + 1, W + 2, W + 3, W + 4, W + 5, W + 6, W + 7, W + 8, W + 9, W + 10,
                                     W + 11, W + 12, W + 13, W + 14, W + 15});
}
VINF_VEC_INLINE f32x16 max(f32x16 a, f32x16 b) { return a > b ? a : b; }
VINF_VEC_INLINE float reduce_max(f32x16 v) {
  v = max(v, fold<8>(v));
  v = max(v, fold<4>(v));
  v = max(v, fold<2>(v));
  v = max(v, fold<1>(v));
  return v[0];
}
VINF_VEC_INLINE float reduce_sum(f32x16 v) {
  v += fold<8>(v);
  v += fold<4>(v);
  v += fold<2>(v);
  v += fold<1>(v);
  return v[0];
}

// One step of a 16 x 16 transpose held as 16 row vectors: for every row i with bit S clear, row i's
// lanes with bit S set trade places with row i + S's lanes with bit S clear. In the shuffle masks,
// index l picks a[l] for l < 16 and b[l - 16] above.
template <int S>
VINF_VEC_INLINE void transpose_step(f32x16 (&r)[16]) {
  constexpr auto lo = [](int l) { return l & S ? l + 16 - S : l; };
  constexpr auto hi = [](int l) { return l & S ? l + 16 : l + S; };
  const i32x16 low{lo(0), lo(1), lo(2),  lo(3),  lo(4),  lo(5),  lo(6),  lo(7),
                   lo(8), lo(9), lo(10), lo(11), lo(12), lo(13), lo(14), lo(15)};
  const i32x16 high{hi(0), hi(1), hi(2),  hi(3),  hi(4),  hi(5),  hi(6),  hi(7),
                    hi(8), hi(9), hi(10), hi(11), hi(12), hi(13), hi(14), hi(15)};
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) {
    if (i & S) continue;
    const f32x16 a = r[i], b = r[i + S];
    r[i] = __builtin_shuffle(a, b, low);
    r[i + S] = __builtin_shuffle(a, b, high);
  }
}
// r[i][j] becomes r[j][i]: each step swaps one row bit with the matching column bit.
VINF_VEC_INLINE void transpose16(f32x16 (&r)[16]) {
  transpose_step<8>(r);
  transpose_step<4>(r);
  transpose_step<2>(r);
  transpose_step<1>(r);
}

// exp(x) to about 2 ulp for x in [-87, 88]; 0 below -87 (and for -inf), +inf above 88.7.
// x = n ln2 + r with |r| <= ln2/2, exp(r) by its degree-6 Taylor polynomial, 2^n by exponent bits.
// For any float vector V (f32x16, f32x8); the lanes do not interact.
template <class V>
VINF_VEC_INLINE V exp(V x) {
  using I = decltype(x < x);  // the integer vector of V's width
  const V zero{};
  const V big = zero + 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  const V xc = x < -87.f ? zero - 87.f : (x > 88.f ? zero + 88.f : x);
  const V nf = (xc * 1.44269504f + big) - big;
  const V r = (xc - nf * 0.693359375f) - nf * -2.12194440e-4f;
  V p = zero + 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  const I n = __builtin_convertvector(nf, I);
  const V scale = reinterpret_cast<V>((n + 127) << 23);
  const V y = p * scale;
  return x < -87.f ? zero : (x > 88.7f ? zero + std::numeric_limits<float>::infinity() : y);
}

// Helpers for any float vector V.
template <class V>
constexpr int lanes_of = static_cast<int>(sizeof(V) / sizeof(float));
template <class V>
VINF_VEC_INLINE V splat_as(float x) {
  V v;
#pragma GCC unroll 16
  for (int i = 0; i < lanes_of<V>; ++i) v[i] = x;
  return v;
}
template <class V>
VINF_VEC_INLINE V lane_index_as() {
  V v;
#pragma GCC unroll 16
  for (int i = 0; i < lanes_of<V>; ++i) v[i] = static_cast<float>(i);
  return v;
}
template <class V>
VINF_VEC_INLINE float hmax(V v) {
  float m = v[0];
#pragma GCC unroll 16
  for (int i = 1; i < lanes_of<V>; ++i) m = m > v[i] ? m : v[i];
  return m;
}
template <class V>
VINF_VEC_INLINE float hsum(V v) {
  float m = v[0];
#pragma GCC unroll 16
  for (int i = 1; i < lanes_of<V>; ++i) m += v[i];
  return m;
}

// erf(x), absolute error below 6e-7 (Abramowitz and Stegun 7.1.26, 1.5e-7, plus f32 rounding).
VINF_VEC_INLINE f32x16 erf(f32x16 x) {
  const f32x16 a = x < 0.f ? -x : x;
  const f32x16 t = 1.f / (1.f + 0.3275911f * a);
  f32x16 p = splat(1.061405429f);
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const f32x16 y = 1.f - p * t * exp(-a * a);
  return x < 0.f ? -y : y;
}

}  // namespace vinf::cpu::vec

