// Portable f32 vectors (GCC vector extensions) for the CPU kernels that the compiler does not
// vectorise on its own: 16 lanes (one AVX-512 register) and 8 (one AVX2 register). Every helper is
// always_inline, so it takes the target of the function it is used in; the kernels are written
// once over the vector type and built per x86-64 level (VINF_VEC_VARIANTS, at the end).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

// 64-byte vectors in functions built for narrower targets are fine here: they never cross a
// non-inlined call. GCC warns about their ABI all the same, so the warning is off for includers.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace vinf::cpu::vec {

constexpr int kLanes = 16;
using f32x16 = float __attribute__((vector_size(64)));
using i32x16 = std::int32_t __attribute__((vector_size(64)));
using f32x8 = float __attribute__((vector_size(32)));  // for rows of 8 (small head dims)

#define VINF_VEC_INLINE inline __attribute__((always_inline))

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

// One step of an N x N transpose held as N row vectors of N lanes (V = f32x16 or f32x8): for
// every row i with bit S clear, row i's lanes with bit S set trade places with row i + S's lanes
// with bit S clear. In the shuffle masks, index l picks a[l] for l < N and b[l - N] above.
template <int S, class V>
VINF_VEC_INLINE void transpose_step(V (&r)[sizeof(V) / sizeof(float)]) {
  constexpr int N = static_cast<int>(sizeof(V) / sizeof(float));
  using I = decltype(r[0] < r[0]);
  I low, high;
#pragma GCC unroll 16
  for (int l = 0; l < N; ++l) {
    low[l] = l & S ? l + N - S : l;
    high[l] = l & S ? l + N : l + S;
  }
#pragma GCC unroll 16
  for (int i = 0; i < N; ++i) {
    if (i & S) continue;
    const V a = r[i], b = r[i + S];
    r[i] = __builtin_shuffle(a, b, low);
    r[i + S] = __builtin_shuffle(a, b, high);
  }
}
// r[i][j] becomes r[j][i]: each step swaps one row bit with the matching column bit.
template <class V>
VINF_VEC_INLINE void transpose(V (&r)[sizeof(V) / sizeof(float)]) {
  if constexpr (sizeof(V) / sizeof(float) == 16) transpose_step<8, V>(r);
  transpose_step<4, V>(r);
  transpose_step<2, V>(r);
  transpose_step<1, V>(r);
}
VINF_VEC_INLINE void transpose16(f32x16 (&r)[16]) { transpose<f32x16>(r); }

// exp(x) to about 2 ulp for x in [-87, 88]; 0 below -87 (and for -inf), +inf above 88.7.
// x / ln2 = n + f with n an integer and |f| <= 1/2; 2^f from a degree-5 polynomial fitted to its
// relative error on [-1/2, 1/2] (7.5e-8 in exact arithmetic, about 2.3e-7 evaluated in floats,
// as accurate as the degree-6 Taylor polynomial of exp it replaced, with one multiply-add fewer);
// 2^n by exponent bits. f = (x - n ln2) / ln2, with n ln2 subtracted exactly in two parts, or,
// with Near = true, x log2(e) - n in one multiply-add: two operations fewer, and f then carries
// the rounding of x log2(e), a relative error up to 1.3e-6 near -87 (3.9e-6 where there is no
// fused multiply-add) and 2.3e-7 on [-1, 0]. That is the softmax's choice: its exponentials of
// scores minus their maximum far below 0 are weights far below the row's weight of 1.
// For any float vector V (f32x16, f32x8); the lanes do not interact. exp2_fraction is the
// polynomial (2^f for |f| <= 1/2); exp_reduced gives the two factors: n (as floats) and 2^f.
template <class V>
VINF_VEC_INLINE V exp2_fraction(V f) {
  const V zero{};
  V p = zero + 1.32764720e-3f;
  p = p * f + 9.67554133e-3f;
  p = p * f + 5.55071327e-2f;
  p = p * f + 2.40221197e-1f;
  p = p * f + 6.93146967e-1f;
  return p * f + 1.00000007f;
}
template <class V, bool Near = false>
VINF_VEC_INLINE V exp_reduced(V x, V& nf) {
  const V zero{};
  const V big = zero + 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  nf = (x * 1.44269502f + big) - big;
  V f;
  if constexpr (Near)
    f = x * 1.44269502f - nf;
  else  // x - n ln2 exactly (n times the 10 leading bits of ln2, then the rest), over ln2
    f = ((x - nf * 0.693359375f) - nf * -2.12194440e-4f) * 1.44269502f;
  return exp2_fraction(f);
}
template <class V, bool Near = false>
VINF_VEC_INLINE V exp_in_range(V xc) {  // xc already clamped to [-87, 88]
  using I = decltype(xc < xc);  // the integer vector of V's width
  V nf;
  const V p = exp_reduced<V, Near>(xc, nf);
  const I n = __builtin_convertvector(nf, I);
  return p * reinterpret_cast<V>((n + 127) << 23);
}
template <class V>
VINF_VEC_INLINE V exp(V x) {
  const V zero{};
  const V y = exp_in_range(x < -87.f ? zero - 87.f : (x > 88.f ? zero + 88.f : x));
  return x < -87.f ? zero : (x > 88.7f ? zero + std::numeric_limits<float>::infinity() : y);
}

// The softmax's exponentials: exp(x) for x <= 0 (and -inf, NaN), of scores minus their maximum,
// with the one-part log2(e) (exp_reduced's Near) and without the clamps above 0.
template <class V>
VINF_VEC_INLINE V exp_nonpositive(V x) {
  const V zero{};
  const V y = exp_in_range<V, true>(x < -87.f ? zero - 87.f : x);
  return x < -87.f ? zero : y;
}

// Helpers for any float vector V.
template <class V>
constexpr int lanes_of = static_cast<int>(sizeof(V) / sizeof(float));
// Built in memory and loaded: GCC 12 lowers lane-by-lane assignments (and vector constructors) of
// 64-byte vectors in these baseline-target helpers early, and the AVX-512 variants then rebuilt
// every splat from 16 masked broadcasts (the attention's inner loops ran at a quarter of their
// speed). A store-and-load of a uniform array becomes one vbroadcastss.
template <class V>
VINF_VEC_INLINE V splat_as(float x) {
  float lanes[lanes_of<V>];
#pragma GCC unroll 16
  for (int i = 0; i < lanes_of<V>; ++i) lanes[i] = x;
  return load_as<V>(lanes);
}
template <class V>
VINF_VEC_INLINE V lane_index_as() {
  float lanes[lanes_of<V>];
#pragma GCC unroll 16
  for (int i = 0; i < lanes_of<V>; ++i) lanes[i] = static_cast<float>(i);
  return load_as<V>(lanes);
}
// Horizontal max and sum by halving: each step folds the upper half of the lanes onto the lower
// (log2 of the lanes steps, against a chain of lanes - 1 dependent scalar operations).
template <bool Max, class V>
VINF_VEC_INLINE float fold_lanes(V v) {
  constexpr int N = lanes_of<V>;
  using I = decltype(v < v);
  // The masks as constant arrays loaded whole (see splat_as): lane l takes lane l + half (the
  // shuffle takes indices modulo N).
  static constexpr std::int32_t kRotate[32] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                                  0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
#pragma GCC unroll 4
  for (int half = N / 2; half >= 1; half /= 2) {
    I upper;
    std::memcpy(&upper, kRotate + half, sizeof upper);
    const V u = __builtin_shuffle(v, upper);
    if constexpr (Max)
      v = v > u ? v : u;
    else
      v = v + u;
  }
  return v[0];
}
template <class V>
VINF_VEC_INLINE float hmax(V v) {
  return fold_lanes<true>(v);
}
template <class V>
VINF_VEC_INLINE float hsum(V v) {
  return fold_lanes<false>(v);
}

// erf(x), absolute error below 6e-7 (Abramowitz and Stegun 7.1.26, 1.5e-7, plus f32 rounding).
template <class V>
VINF_VEC_INLINE V erf(V x) {
  const V a = x < 0.f ? -x : x;
  const V t = 1.f / (1.f + 0.3275911f * a);
  V p = splat_as<V>(1.061405429f);
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const V y = 1.f - p * t * exp(-a * a);
  return x < 0.f ? -y : y;
}

// The vector width of the running CPU's kernels: a kernel written once as an always-inline
// template over V is compiled for AVX-512 with 16 lanes (one register), for AVX2 with 8 (16 lanes
// would take two registers each, and GCC lowers some of their operations lane by lane through the
// stack), and for the baseline. VINF_VEC_VARIANTS(name, impl, (params), (args)) defines `name`,
// which calls impl<V>(args) in the variant the CPU supports (picked once).
enum class Level { v4, v3, baseline };
inline Level cpu_level() {
#if defined(__x86_64__)
  static const Level level = [] {
    __builtin_cpu_init();
    // The whole level the variants are compiled for (v3 also has BMI1/2, LZCNT, MOVBE, F16C; v4
    // adds AVX512CD): GCC 12 names the levels, other compilers check the features they know.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
    const bool v3 = __builtin_cpu_supports("x86-64-v3"), v4 = __builtin_cpu_supports("x86-64-v4");
#else
    const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
                    __builtin_cpu_supports("bmi2");
    const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                    __builtin_cpu_supports("avx512cd");
#endif
    // VINF_CPU_LEVEL=v3|baseline caps it (tests run every variant on one machine); v4 or empty
    // leaves it, anything else is reported once and ignored.
    const char* cap = std::getenv("VINF_CPU_LEVEL");
    std::string_view c = cap ? cap : "";
    if (!c.empty() && c != "v4" && c != "v3" && c != "baseline") {
      std::fprintf(stderr, "vinf: warning: VINF_CPU_LEVEL must be v4, v3 or baseline, got '%s': ignored\n", cap);
      c = "";
    }
    if (v4 && (c.empty() || c == "v4")) return Level::v4;
    if (v3 && c != "baseline") return Level::v3;
    return Level::baseline;
  }();
  return level;
#else
  return Level::baseline;
#endif
}

// exp_nonpositive in a variant built for `level`: on AVX-512, 2^n comes from VSCALEFPS (one
// instruction for the conversion, the exponent arithmetic and the multiplication) and the lanes
// below -87 are zeroed without clamping them first (whatever they compute, -inf's NaN included, is
// dropped, and the compare's mask zeroes them in the scaling): the softmax's exponentials, 10
// vector instructions a vector instead of 15, the same values (for x >= -87, n >= -126: both
// scalings multiply by an exact power of 2). Inline assembly
// because the intrinsic cannot be inlined into these templates, which are compiled for the
// baseline target before they reach the AVX-512 variant.
template <Level level, class V>
VINF_VEC_INLINE V exp_nonpositive_at(V x) {
#if defined(__x86_64__)
  if constexpr (level == Level::v4 && sizeof(V) == 64) {
    V nf;
    const V p = exp_reduced<V, true>(x, nf);
    V y;
    unsigned short keep;  // the lanes not below -87, NaN included (a mask register)
    asm("vcmpps $5, %[lim], %[x], %[k]\n\tvscalefps %[n], %[p], %[y]%{%[k]%}%{z%}"
        : [y] "=v"(y), [k] "=&Yk"(keep)
        : [x] "v"(x), [lim] "v"(splat_as<V>(-87.f)), [n] "v"(nf), [p] "v"(p));
    return y;
  }
#endif
  return exp_nonpositive(x);
}

#if defined(__x86_64__)
// 2^t for t <= 0 on AVX-512 (16 or 8 lanes): the softmax's exponentials where the scores come in
// log2 units (the queries scaled by log2(e)). t splits into n, rounded by VRNDSCALEPS, and f = t - n
// in [-1/2, 1/2]; VSCALEFPS multiplies 2^f by 2^n, and underflows to 0 far below. Where t may be
// -inf (a masked score, a first maximum), Masked zeroes the lanes below -126 through the scaling's
// mask (-inf's NaN included); without it, every lane must be finite or NaN. 8 vector
// instructions a vector, 9 masked.
template <bool Masked, class V>
VINF_VEC_INLINE V exp2_nonpositive_v4(V t) {
  V nf;
  asm("vrndscaleps $0, %[t], %[n]" : [n] "=v"(nf) : [t] "v"(t));
  const V p = exp2_fraction(t - nf);
  V y;
  if constexpr (Masked) {
    unsigned short keep;  // the lanes not below -126, NaN included
    asm("vcmpps $5, %[lim], %[t], %[k]\n\tvscalefps %[n], %[p], %[y]%{%[k]%}%{z%}"
        : [y] "=v"(y), [k] "=&Yk"(keep)
        : [t] "v"(t), [lim] "v"(splat_as<V>(-126.f)), [n] "v"(nf), [p] "v"(p));
  } else {
    asm("vscalefps %[n], %[p], %[y]" : [y] "=v"(y) : [n] "v"(nf), [p] "v"(p));
  }
  return y;
}
#endif

// The lanes of the vectors V that VINF_VEC_VARIANTS' variant for the running CPU computes on: 8
// on AVX2, else 16.
inline int variant_lanes() { return cpu_level() == Level::v3 ? 8 : 16; }

#define VINF_VEC_UNPAREN(...) __VA_ARGS__
#if defined(__x86_64__)
// The dispatcher behind both: f4, f3 and fb are the (parenthesised) callees of the v4, v3 and
// baseline variants.
#define VINF_VEC_DISPATCH(name, f4, f3, fb, params, args)                                                  \
  __attribute__((target("arch=x86-64-v4"))) void name##_v4(VINF_VEC_UNPAREN params) {                    \
    VINF_VEC_UNPAREN f4(VINF_VEC_UNPAREN args);                                                          \
  }                                                                                                       \
  __attribute__((target("arch=x86-64-v3"))) void name##_v3(VINF_VEC_UNPAREN params) {                    \
    VINF_VEC_UNPAREN f3(VINF_VEC_UNPAREN args);                                                          \
  }                                                                                                       \
  void name##_base(VINF_VEC_UNPAREN params) { VINF_VEC_UNPAREN fb(VINF_VEC_UNPAREN args); }                \
  void name(VINF_VEC_UNPAREN params) {                                                                    \
    switch (::vinf::cpu::vec::cpu_level()) {                                                              \
      case ::vinf::cpu::vec::Level::v4: return name##_v4(VINF_VEC_UNPAREN args);                          \
      case ::vinf::cpu::vec::Level::v3: return name##_v3(VINF_VEC_UNPAREN args);                          \
      default: return name##_base(VINF_VEC_UNPAREN args);                                                 \
    }                                                                                                     \
  }
#define VINF_VEC_VARIANTS(name, impl, params, args)                                                       \
  VINF_VEC_DISPATCH(name, (impl<::vinf::cpu::vec::f32x16>), (impl<::vinf::cpu::vec::f32x8>),           \
                    (impl<::vinf::cpu::vec::f32x16>), params, args)
// The same for impl<V, Level> templates that take the level too.
#define VINF_VEC_LEVEL_VARIANTS(name, impl, params, args)                                                 \
  VINF_VEC_DISPATCH(name, (impl<::vinf::cpu::vec::f32x16, ::vinf::cpu::vec::Level::v4>),                \
                    (impl<::vinf::cpu::vec::f32x8, ::vinf::cpu::vec::Level::v3>),                         \
                    (impl<::vinf::cpu::vec::f32x16, ::vinf::cpu::vec::Level::baseline>), params, args)
#else
#define VINF_VEC_VARIANTS(name, impl, params, args) \
  void name(VINF_VEC_UNPAREN params) { impl<::vinf::cpu::vec::f32x16>(VINF_VEC_UNPAREN args); }
#define VINF_VEC_LEVEL_VARIANTS(name, impl, params, args) \
  void name(VINF_VEC_UNPAREN params) {                      \
    impl<::vinf::cpu::vec::f32x16, ::vinf::cpu::vec::Level::baseline>(VINF_VEC_UNPAREN args); \
  }
#endif

}  // namespace vinf::cpu::vec

