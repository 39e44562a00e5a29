// Fast banded attention: flash-style. Each OpenMP job takes a tile of query rows of one (batch,
// head), streams the keys it can see (the union of the tile's bands, then the global keys) in
// blocks through an online softmax, and never holds more than tile x block scores. The workspace
// is fixed per thread, so memory does not grow with the clip length.
//
// With AttentionParams::bf16_products on a CPU with AVX-512 BF16 (--dtype bf16), both products
// take bf16 operands two at a time (VDPBF16PS: pairs of bf16 products summed into f32 lanes): the
// queries and keys for the scores, the probabilities and values for the outputs. The scores, the
// softmax and the running sums stay f32. Head dims of 8 and less take another kernel on AVX-512
// (rows in lanes, below), in f32 whatever the dtype.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/error.hpp"
#include "cpu/cpu.hpp"
#include "cpu/strided.hpp"
#include "cpu/vec.hpp"

namespace vinf::cpu::fast {
namespace {

constexpr std::int64_t kRows = 128;  // query rows per tile (a multiple of kGroup)
// keys per block (a multiple of the score micro-kernel's 64): 256 rather than 128 halves the
// per-row work of the online softmax per key (3-8% faster spatial attention on a Zen 4; the
// scores stay in L2)
constexpr std::int64_t kKeys = 256;
constexpr std::int64_t kGroup = 4;  // rows per micro-kernel step
constexpr int kL = vec::kLanes;
using vec::f32x16;

struct Scratch {
  float* q;      // kRows x D, queries of the tile (rows past the tile's end are zero)
  float* kt;     // D x kKeys, key block transposed (columns past the block's end are zero)
  float* s;      // kRows x kKeys, scores, then probabilities
  float* o;      // kRows x os, unnormalised outputs
  float* m;      // kRows, running max
  float* l;      // kRows, running sum
  float* scale;  // kRows, per-row score factor
  std::int64_t os;  // the row stride of o: Dv, or Dv rounded up to 16 lanes in bf16
  // bf16 products only: pairs of bf16 in 32-bit words (element 2i in the low half, 2i + 1 in the
  // high half; an odd count ends with a zero).
  std::uint32_t* q2;  // kRows x D2 (D2 = ceil(D / 2)), the queries' channel pairs
  std::uint32_t* kt2;  // D2 x kKeys, each key's channel pair i in row i
  std::uint32_t* p2;  // kRows x kKeys / 2, pairs of consecutive keys' probabilities
  std::uint32_t* v2;  // kKeys / 2 x os, pairs of consecutive keys' values, per channel
};

std::int64_t pairs(std::int64_t n) { return (n + 1) / 2; }
std::int64_t padded_value_dim(std::int64_t dv) { return (dv + kL - 1) / kL * kL; }

std::size_t f32_floats(std::int64_t d, std::int64_t dv) {
  return static_cast<std::size_t>(kRows * d + d * kKeys + kRows * kKeys + kRows * dv + 3 * kRows);
}
std::size_t bf16_words(std::int64_t d, std::int64_t dv) {
  const std::int64_t d2 = pairs(d), dvp = padded_value_dim(dv);
  return static_cast<std::size_t>(kRows * d2 + d2 * kKeys + kRows * kKeys + kRows * kKeys / 2 + kKeys / 2 * dvp +
                                  kRows * dvp + 3 * kRows);
}
std::size_t column_floats(std::int64_t d, std::int64_t dv);
// Per thread: room for any of the layouts.
std::size_t scratch_floats(std::int64_t d, std::int64_t dv) {
  return std::max({f32_floats(d, dv), bf16_words(d, dv), column_floats(d, dv)});
}

Scratch carve(float* base, std::int64_t d, std::int64_t dv, bool bf16) {
  Scratch s{};
  if (!bf16) {
    s.q = base;
    s.kt = s.q + kRows * d;
    s.s = s.kt + d * kKeys;
    s.o = s.s + kRows * kKeys;
    s.os = dv;
    s.m = s.o + kRows * dv;
  } else {
    const std::int64_t d2 = pairs(d);
    s.os = padded_value_dim(dv);
    s.q2 = reinterpret_cast<std::uint32_t*>(base);
    s.kt2 = s.q2 + kRows * d2;
    s.s = reinterpret_cast<float*>(s.kt2 + d2 * kKeys);
    s.p2 = reinterpret_cast<std::uint32_t*>(s.s + kRows * kKeys);
    s.v2 = s.p2 + kRows * kKeys / 2;
    s.o = reinterpret_cast<float*>(s.v2 + kKeys / 2 * s.os);
    s.m = s.o + kRows * s.os;
  }
  s.l = s.m + kRows;
  s.scale = s.l + kRows;
  return s;
}

struct RowBand {
  std::int64_t lo[kRows], hi[kRows];
};

// The attention's register-blocked micro-kernel, for 4 rows and NV vectors V of L lanes:
//   out[g][col] (+)= sum over i < n of a[g * as + i] * b[i * bs + col]
// with 4 x NV accumulators in registers (starting from out when Accumulate, else from 0). The
// scores are q rows . kt columns; the values add p rows . value rows to o. Value widths that are
// not a multiple of 16 (head dim 8 in the small models) take 8-lane steps for what is left.
template <class V, int NV, bool Accumulate>
VINF_VEC_INLINE void group_update(const float* a, std::int64_t as, const float* b, std::int64_t bs, std::int64_t n,
                                  float* out, std::int64_t os) {
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  // With one vector per row, 4 accumulators would wait on each other's multiply-adds (their
  // latency is about twice what two ports retire a cycle): even and odd i go to separate sets.
  constexpr int kSets = NV == 1 ? 2 : 1;
  V acc[kSets][kGroup][NV] = {};
  if constexpr (Accumulate) {
#pragma GCC unroll 4
    for (int g = 0; g < kGroup; ++g)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[0][g][v] = vec::load_as<V>(out + g * os + v * L);
  }
  std::int64_t i = 0;
  for (; i + kSets <= n; i += kSets)
#pragma GCC unroll 2
    for (int k = 0; k < kSets; ++k) {
      V row[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) row[v] = vec::load_as<V>(b + (i + k) * bs + v * L);
#pragma GCC unroll 4
      for (int g = 0; g < kGroup; ++g) {
        const V ab = vec::splat_as<V>(a[g * as + i + k]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[k][g][v] += ab * row[v];
      }
    }
  for (; i < n; ++i) {
    V row[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) row[v] = vec::load_as<V>(b + i * bs + v * L);
#pragma GCC unroll 4
    for (int g = 0; g < kGroup; ++g) {
      const V ab = vec::splat_as<V>(a[g * as + i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[0][g][v] += ab * row[v];
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < kGroup; ++g)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      V sum = acc[0][g][v];
      if constexpr (kSets == 2) sum += acc[1][g][v];
      vec::store_as(out + g * os + v * L, sum);
    }
}

// s[r0 .. r0+4) x [j0, j0 + NV*16) = q rows . kt columns.
template <class V, int NV>
VINF_VEC_INLINE void scores_group(const Scratch& w, std::int64_t r0, std::int64_t d, std::int64_t j0) {
  group_update<V, NV, false>(w.q + r0 * d, d, w.kt + j0, kKeys, d, w.s + r0 * kKeys + j0, kKeys);
}

// o[r0 .. r0+4) x [c0, c0 + NV*16) += p rows . value rows [0, nb).
template <class V, int NV>
VINF_VEC_INLINE void values_group(const Scratch& w, std::int64_t r0, std::int64_t dv, std::int64_t c0,
                                  const float* vals, std::int64_t vs, std::int64_t nb) {
  group_update<V, NV, true>(w.s + r0 * kKeys, kKeys, vals + c0, vs, nb, w.o + r0 * dv + c0, dv);
}

// kt[c0 + c][j] = keys[j][c0 + c] for the channels [c0, c0 + T) and keys [0, width) (zero for j
// past nb): T x T tiles moved through registers.
template <class T>
VINF_VEC_INLINE void transpose_tiles(float* kt, const float* keys, std::int64_t ks, std::int64_t nb, std::int64_t c0,
                                     std::int64_t width) {
  constexpr int L = vec::lanes_of<T>;
  for (std::int64_t j0 = 0; j0 < width; j0 += L) {
    T t[L];
#pragma GCC unroll 16
    for (int j = 0; j < L; ++j) t[j] = j0 + j < nb ? vec::load_as<T>(keys + (j0 + j) * ks + c0) : T{};
    vec::transpose<T>(t);
#pragma GCC unroll 16
    for (int c = 0; c < L; ++c) vec::store_as(kt + (c0 + c) * kKeys + j0, t[c]);
  }
}

// kt[c][j] = keys[j][c] for the block's nb keys, zero for j in [nb, width): L x L tiles, then
// 8 x 8 ones (head dim 8 in the small models), then scalar code for the channels left.
template <class V>
VINF_VEC_INLINE void transpose_keys(float* kt, const float* keys, std::int64_t ks, std::int64_t nb, std::int64_t d,
                                    std::int64_t width) {
  constexpr int L = vec::lanes_of<V>;
  std::int64_t c0 = 0;
  for (; c0 + L <= d; c0 += L) transpose_tiles<V>(kt, keys, ks, nb, c0, width);
  if constexpr (L > 8)
    for (; c0 + 8 <= d; c0 += 8) transpose_tiles<vec::f32x8>(kt, keys, ks, nb, c0, width);
  for (std::int64_t c = c0; c < d; ++c)
    for (std::int64_t j = 0; j < width; ++j) kt[c * kKeys + j] = j < nb ? keys[j * ks + c] : 0.f;
}

#if defined(__x86_64__)
// 32 floats (lo, then hi) as 32 bf16 in order, rounded to nearest even (VCVTNE2PS2BF16; inline
// assembly for the reason exp_nonpositive_at gives). Only reached from the AVX-512 BF16 kernel.
VINF_VEC_INLINE vec::f32x16 bf16_pairs_asm(vec::f32x16 lo, vec::f32x16 hi) {
  vec::f32x16 out;
  asm("vcvtne2ps2bf16 %2, %1, %0" : "=v"(out) : "v"(hi), "v"(lo));
  return out;
}
#endif

// The online softmax of one block of nb keys (key index j0 on) for the tile's rows: the scores in
// s (already scaled: the queries were) become probabilities (0 where a key is not visible: local
// keys are masked to each row's band, global ones are visible to all), and each row's running max
// and sum, and its outputs so far, move to the new max. Three passes over the rows: the maxima,
// the exponentials (a loop without calls, so that its constants stay in registers), the rescaling.
// With PackPairs (the bf16 kernel) the probabilities go straight to w.p2 as bf16 pairs of
// consecutive keys (rows of kKeys / 2 words, zero past the block), not back to w.s.
template <class V, vec::Level level, bool PackPairs = false>
VINF_VEC_INLINE void softmax_block(const Scratch& w, std::int64_t rows, std::int64_t groups, std::int64_t dv,
                                   std::int64_t j0, std::int64_t nb, std::int64_t width, bool global, float bias,
                                   const RowBand& band) {
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  const float inf = std::numeric_limits<float>::infinity();
  // Per row: what the exponentials subtract, the max before the block minus the new one, the
  // block's sum of probabilities, and whether any of its keys is visible.
  float sub[kRows], old_max[kRows], block_sum[kRows];
  bool live[kRows];
  for (std::int64_t r = 0; r < groups * kGroup; ++r) {
    float* srow = w.s + r * kKeys;
    std::int64_t a = 0, e = nb;
    if (r < rows && !global) {
      a = std::max<std::int64_t>(0, band.lo[r] - j0);
      e = std::min<std::int64_t>(nb, band.hi[r] - j0 + 1);
    }
    live[r] = r < rows && a < e;
    if (!live[r]) {
      if constexpr (PackPairs)
        for (std::int64_t j = 0; j < width / 2; ++j) w.p2[r * (kKeys / 2) + j] = 0;
      else
        for (std::int64_t j = 0; j < width; ++j) srow[j] = 0.f;
      continue;
    }
    V mv = vec::splat_as<V>(-inf);
    float row_max, shift = 0.f;
    if (a == 0 && e == width && std::isfinite(bias)) {
      // Every score visible: the max of the scores as they are, the bias added to it and
      // subtracted from the exponentials' argument instead of from every score.
      for (std::int64_t c = 0; c < width; c += L) {
        const V x = vec::load_as<V>(srow + c);
        mv = mv > x ? mv : x;
      }
      row_max = vec::hmax(mv) + bias;
      shift = bias;
    } else {
      // Keys j in [a, e) are those with |j - centre| < half the band's width (exact in floats):
      // one compare and one select per vector.
      const float centre = 0.5f * static_cast<float>(a + e - 1), reach = 0.5f * static_cast<float>(e - a);
      for (std::int64_t c = 0; c < width; c += L) {
        const V j = vec::lane_index_as<V>() + (static_cast<float>(c) - centre);
        const V x = vec::load_as<V>(srow + c) + bias;
        const V sx = (j > -j ? j : -j) < reach ? x : vec::splat_as<V>(-inf);
        mv = mv > sx ? mv : sx;
        vec::store_as(srow + c, sx);
      }
      row_max = vec::hmax(mv);
    }
    const float m_new = std::max(w.m[r], row_max);
    // While all of the row's scores so far are -inf (a -inf bias masks them), exp(s - m_new)
    // would be exp(-inf + inf) = NaN: measure from 0 then, so they weigh 0 and the row's first
    // finite score starts the sum.
    const float ref = m_new == -inf ? 0.f : m_new;
    sub[r] = ref - shift;
    old_max[r] = w.m[r] - ref;
    w.m[r] = m_new;
  }
  for (std::int64_t r = 0; r < groups * kGroup; ++r) {
    if (!live[r]) continue;
    float* srow = w.s + r * kKeys;
    V sum{};
#if defined(__x86_64__)
    if constexpr (PackPairs) {
      static_assert(sizeof(V) == 64, "bf16 pairs from 16-lane vectors");
      // Two vectors a step; a block whose width is an odd number of vectors ends with zeros
      // (still inside the row: width <= kKeys).
      std::uint32_t* prow = w.p2 + r * (kKeys / 2);
      for (std::int64_t c = 0; c < width; c += 2 * L) {
        const V p0 = vec::exp_nonpositive_at<level>(vec::load_as<V>(srow + c) - sub[r]);
        const V p1 = c + L < width ? vec::exp_nonpositive_at<level>(vec::load_as<V>(srow + c + L) - sub[r]) : V{};
        sum += p0 + p1;
        const V packed = bf16_pairs_asm(p0, p1);
        std::memcpy(prow + c / 2, &packed, sizeof packed);
      }
    } else
#endif
      for (std::int64_t c = 0; c < width; c += L) {
        const V p = vec::exp_nonpositive_at<level>(vec::load_as<V>(srow + c) - sub[r]);
        sum += p;
        vec::store_as(srow + c, p);
      }
    block_sum[r] = vec::hsum(sum);
  }
  for (std::int64_t r = 0; r < groups * kGroup; ++r) {
    if (!live[r]) continue;
    // Nothing to rescale while the row's max was -inf (its outputs and sum are still 0).
    const bool had_max = old_max[r] != -inf;
    const float corr = had_max ? std::exp(old_max[r]) : 0.f;
    if (had_max && corr != 1.f) {
      float* orow = w.o + r * w.os;
      for (std::int64_t c = 0; c < dv; ++c) orow[c] *= corr;
    }
    w.l[r] = w.l[r] * corr + block_sum[r];
  }
}

// One block of nb keys (rows of `keys`/`vals`, starting at key index j0) against the tile's rows.
// The micro-kernels run on vectors V: 16 lanes where AVX-512 holds them in one register, 8 on
// AVX2, whose 16 registers cannot hold 4 rows x 4 double-width accumulators without spilling.
template <class V, vec::Level level>
VINF_VEC_INLINE void key_block_impl(const Scratch& w, std::int64_t rows, std::int64_t d, std::int64_t dv,
                                    const float* keys, std::int64_t ks, const float* vals, std::int64_t vs,
                                    std::int64_t j0, std::int64_t nb, bool global, float bias, const RowBand& band) {
  constexpr int L = static_cast<int>(sizeof(V) / sizeof(float));
  constexpr int kMaxNV = L == kL ? 4 : 2;  // accumulators: 4 rows x kMaxNV registers
  const int nv = static_cast<int>((nb + kL - 1) / kL);
  const std::int64_t width = nv * kL, groups = (rows + kGroup - 1) / kGroup;
  transpose_keys<V>(w.kt, keys + j0 * ks, ks, nb, d, width);
  for (std::int64_t g = 0; g < groups; ++g) {
    std::int64_t c0 = 0;
    for (; c0 + kMaxNV * L <= width; c0 += kMaxNV * L) scores_group<V, kMaxNV>(w, g * kGroup, d, c0);
    for (; c0 < width; c0 += L) scores_group<V, 1>(w, g * kGroup, d, c0);
  }
  softmax_block<V, level>(w, rows, groups, dv, j0, nb, width, global, bias, band);
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t r0 = g * kGroup;
    std::int64_t c0 = 0;
    for (; c0 + kMaxNV * L <= dv; c0 += kMaxNV * L) values_group<V, kMaxNV>(w, r0, dv, c0, vals + j0 * vs, vs, nb);
    for (; c0 + 2 * L <= dv; c0 += 2 * L) values_group<V, 2>(w, r0, dv, c0, vals + j0 * vs, vs, nb);
    for (; c0 + L <= dv; c0 += L) values_group<V, 1>(w, r0, dv, c0, vals + j0 * vs, vs, nb);
    for (; c0 + 8 <= dv; c0 += 8) values_group<vec::f32x8, 1>(w, r0, dv, c0, vals + j0 * vs, vs, nb);
    for (; c0 < dv; ++c0) {
      for (std::int64_t i = 0; i < kGroup; ++i) {
        float acc = w.o[(r0 + i) * w.os + c0];
        for (std::int64_t j = 0; j < nb; ++j) acc += w.s[(r0 + i) * kKeys + j] * vals[(j0 + j) * vs + c0];
        w.o[(r0 + i) * w.os + c0] = acc;
      }
    }
  }
}

VINF_VEC_LEVEL_VARIANTS(key_block, key_block_impl,
                        (const Scratch& w, std::int64_t rows, std::int64_t d, std::int64_t dv, const float* keys,
                         std::int64_t ks, const float* vals, std::int64_t vs, std::int64_t j0, std::int64_t nb,
                         bool global, float bias, const RowBand& band),
                        (w, rows, d, dv, keys, ks, vals, vs, j0, nb, global, bias, band))

// --- Head dims of 8 and less: rows in lanes -------------------------------------------------------
// With 8 channels or fewer per head, rows of 4 queries by 16 keys spend their time on per-row
// work (maxima, sums, broadcasts of 8 values). Here the lanes are 16 query rows instead: a key's
// score for all 16 rows is 8 multiply-adds with the key's channels broadcast from memory, the
// maxima and sums are lane-wise, and each key adds its values times 16 probabilities to 8
// accumulators that stay in registers with the queries. AVX-512 only (32 registers).
constexpr int kColumnsMaxDim = 8;
constexpr float kLog2e = 1.44269504f;
// Tiles of this many rows or fewer (a temporal layer's sequences of 8 frames) take 8 lanes: 16
// would spend half of every operation and of the tile's setup on padding.
constexpr std::int64_t kColumnsHalf = 8;

struct ColumnScratch {
  float* qt;  // D x kRows: the tile's queries times scale and log2(e), channel by channel (rows past the end zero)
  float* ot;  // Dv x kRows: unnormalised outputs, channel by channel
  float* s;   // kKeys x 16: one row group's scores of the block, key by key
  float* m;   // kRows: running max (log2 units)
  float* l;   // kRows: running sum
  float* lo;  // kRows: first visible local key (as a float: exact below 2^24)
  float* hi;  // kRows: last visible local key
};

std::size_t column_floats(std::int64_t d, std::int64_t dv) {
  return static_cast<std::size_t>(kRows * (d + dv) + kKeys * kL + 4 * kRows);
}

ColumnScratch carve_columns(float* base, std::int64_t d, std::int64_t dv) {
  ColumnScratch s{};
  s.qt = base;
  s.ot = s.qt + kRows * d;
  s.s = s.ot + kRows * dv;
  s.m = s.s + kKeys * kL;
  s.l = s.m + kRows;
  s.lo = s.l + kRows;
  s.hi = s.lo + kRows;
  return s;
}

#if defined(__x86_64__)
// One block of nb keys (key index j0 on) against the tile's rows, 16 (or 8) at a time: the online
// softmax as key_block does it, lane by lane, with the scores, maxima and exponentials in log2
// units (the queries come scaled by log2(e)). Fixed > 0 fixes d and dv at compile time, so that
// the channel loops carry no tests.
template <class V, int Fixed>
VINF_VEC_INLINE void column_block_impl(const ColumnScratch& w, std::int64_t rows, std::int64_t d_arg,
                                       std::int64_t dv_arg, const float* keys, std::int64_t ks, const float* vals,
                                       std::int64_t vs, std::int64_t j0, std::int64_t nb, bool global, float bias) {
  constexpr int L = vec::lanes_of<V>;
  const std::int64_t d = Fixed > 0 ? Fixed : d_arg, dv = Fixed > 0 ? Fixed : dv_arg;
  const V neg_inf = vec::splat_as<V>(-std::numeric_limits<float>::infinity());
  const float* kb = keys + j0 * ks;
  const float* vb = vals + j0 * vs;
  const V bias2 = vec::splat_as<V>(bias * kLog2e);  // the scores are in log2 units
  for (std::int64_t r0 = 0; r0 < rows; r0 += L) {
    // Whether every key of the block is visible to every row of the group: no masking then.
    bool all = true;
    for (std::int64_t r = r0; r < std::min(rows, r0 + L) && !global; ++r)
      all = all && w.lo[r] <= static_cast<float>(j0) && w.hi[r] >= static_cast<float>(j0 + nb - 1);
    V q[kColumnsMaxDim];
#pragma GCC unroll 8
    for (int c = 0; c < kColumnsMaxDim; ++c) q[c] = c < d ? vec::load_as<V>(w.qt + c * kRows + r0) : V{};
    const V lo = vec::load_as<V>(w.lo + r0), hi = vec::load_as<V>(w.hi + r0);
    V mx = neg_inf;
    for (std::int64_t j = 0; j < nb; ++j) {
      const float* kr = kb + j * ks;
      V s0 = bias2, s1{};  // two chains of multiply-adds
#pragma GCC unroll 8
      for (int c = 0; c < kColumnsMaxDim; c += 2) {
        if (c < d) s0 += vec::splat_as<V>(kr[c]) * q[c];
        if (c + 1 < d) s1 += vec::splat_as<V>(kr[c + 1]) * q[c + 1];
      }
      V sc = s0 + s1;
      if (!all) {
        const V key = vec::splat_as<V>(static_cast<float>(j0 + j));
        sc = key >= lo && key <= hi ? sc : neg_inf;
      }
      mx = mx > sc ? mx : sc;
      vec::store_as(w.s + j * L, sc);
    }
    // The new max, and what the exponentials subtract: 0 while a row's scores are all -inf (so
    // that they weigh 0, not NaN). The sums and outputs so far move to the new reference.
    const V m_old = vec::load_as<V>(w.m + r0);
    const V m_new = m_old > mx ? m_old : mx;
    const V ref = m_new == neg_inf ? V{} : m_new;
    const V corr = vec::exp2_nonpositive_v4<true>(m_old - ref);
    vec::store_as(w.m + r0, m_new);
    V l = vec::load_as<V>(w.l + r0) * corr;
    V o[kColumnsMaxDim];
#pragma GCC unroll 8
    for (int c = 0; c < kColumnsMaxDim; ++c) o[c] = c < dv ? vec::load_as<V>(w.ot + c * kRows + r0) * corr : V{};
    // Without masking, the scores of finite inputs are finite: the exponentials need no mask.
    auto accumulate = [&](auto masked) {
      for (std::int64_t j = 0; j < nb; ++j) {
        const V p = vec::exp2_nonpositive_v4<decltype(masked)::value>(vec::load_as<V>(w.s + j * L) - ref);
        l += p;
        const float* vr = vb + j * vs;
#pragma GCC unroll 8
        for (int c = 0; c < kColumnsMaxDim; ++c)
          if (c < dv) o[c] += vec::splat_as<V>(vr[c]) * p;
      }
    };
    if (all) accumulate(std::false_type{});
    else accumulate(std::true_type{});
    vec::store_as(w.l + r0, l);
#pragma GCC unroll 8
    for (int c = 0; c < kColumnsMaxDim; ++c)
      if (c < dv) vec::store_as(w.ot + c * kRows + r0, o[c]);
  }
}

__attribute__((target("arch=x86-64-v4"))) void column_block(const ColumnScratch& w, std::int64_t rows, std::int64_t d,
                                                            std::int64_t dv, const float* keys, std::int64_t ks,
                                                            const float* vals, std::int64_t vs, std::int64_t j0,
                                                            std::int64_t nb, bool global, float bias) {
  const bool fixed = d == kColumnsMaxDim && dv == kColumnsMaxDim;
  if (rows <= kColumnsHalf && fixed)
    column_block_impl<vec::f32x8, kColumnsMaxDim>(w, rows, d, dv, keys, ks, vals, vs, j0, nb, global, bias);
  else if (rows <= kColumnsHalf)
    column_block_impl<vec::f32x8, 0>(w, rows, d, dv, keys, ks, vals, vs, j0, nb, global, bias);
  else if (fixed)
    column_block_impl<vec::f32x16, kColumnsMaxDim>(w, rows, d, dv, keys, ks, vals, vs, j0, nb, global, bias);
  else
    column_block_impl<vec::f32x16, 0>(w, rows, d, dv, keys, ks, vals, vs, j0, nb, global, bias);
}
bool columns_supported() { return vec::cpu_level() == vec::Level::v4; }

// A tile's rows of 8 channels in and out through 8 x 8 register transposes, 8 rows at a time:
// the rows (from q0, qs apart) times their scales become the channels of qt (zero past `rows`, up
// to `padded`), and the channels of ot over the row sums l become the rows of the output (from
// o0, os apart).
__attribute__((target("arch=x86-64-v4"))) void columns_in8(const ColumnScratch& w, const float* q0, std::int64_t qs,
                                                           std::int64_t rows, std::int64_t padded,
                                                           const float* scale) {
  for (std::int64_t r0 = 0; r0 < padded; r0 += 8) {
    vec::f32x8 r[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i)
      r[i] = r0 + i < rows ? vec::load_as<vec::f32x8>(q0 + (r0 + i) * qs) * scale[r0 + i] : vec::f32x8{};
    vec::transpose<vec::f32x8>(r);
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      vec::store_as(w.qt + c * kRows + r0, r[c]);
      vec::store_as(w.ot + c * kRows + r0, vec::f32x8{});
    }
  }
}
__attribute__((target("arch=x86-64-v4"))) void columns_out8(const ColumnScratch& w, float* o0, std::int64_t os,
                                                            std::int64_t rows) {
  for (std::int64_t r0 = 0; r0 < rows; r0 += 8) {
    vec::f32x8 r[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) r[c] = vec::load_as<vec::f32x8>(w.ot + c * kRows + r0);
    vec::transpose<vec::f32x8>(r);
    for (std::int64_t i = 0; i < std::min<std::int64_t>(8, rows - r0); ++i) {
      const float l = w.l[r0 + i];
      vec::store_as(o0 + (r0 + i) * os, r[i] * (l > 0.f ? 1.f / l : 0.f));
    }
  }
}
#else  // never called: columns_supported() is false off x86-64
void column_block(const ColumnScratch&, std::int64_t, std::int64_t, std::int64_t, const float*, std::int64_t,
                  const float*, std::int64_t, std::int64_t, std::int64_t, bool, float) {
  VINF_FAIL("attention: the rows-in-lanes kernel needs x86-64");
}
bool columns_supported() { return false; }
void columns_in8(const ColumnScratch&, const float*, std::int64_t, std::int64_t, std::int64_t, const float*) {
  VINF_FAIL("attention: the rows-in-lanes kernel needs x86-64");
}
void columns_out8(const ColumnScratch&, float*, std::int64_t, std::int64_t) {
  VINF_FAIL("attention: the rows-in-lanes kernel needs x86-64");
}
#endif

#if defined(__x86_64__)
#define VINF_BF16_TARGET __attribute__((target("arch=x86-64-v4,avx512bf16")))

// n (<= 16) consecutive floats from p, the rest zero.
VINF_BF16_TARGET VINF_VEC_INLINE __m512 load_first(const float* p, std::int64_t n) {
  return n >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
}
// 32 floats (n of them from p, the rest zero), times scale, as 16 bf16 pairs, in order.
VINF_BF16_TARGET VINF_VEC_INLINE __m512i pairs_of(const float* p, std::int64_t n, float scale = 1.f) {
  __m512 lo = load_first(p, std::min<std::int64_t>(n, 16));
  __m512 hi = n > 16 ? load_first(p + 16, std::min<std::int64_t>(n - 16, 16)) : _mm512_setzero_ps();
  if (scale != 1.f) {
    lo = _mm512_mul_ps(lo, _mm512_set1_ps(scale));
    hi = _mm512_mul_ps(hi, _mm512_set1_ps(scale));
  }
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

// Rows [0, rows) of a (row stride as, n floats each) as rows of ceil(n / 2) pairs (stride ds),
// row r multiplied by row_scale[r] first where row_scale is given.
VINF_BF16_TARGET void pack_rows(std::uint32_t* dst, std::int64_t ds, const float* a, std::int64_t as,
                                std::int64_t rows, std::int64_t n, const float* row_scale = nullptr) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < n; c += 32) {
      const __m512i v = pairs_of(a + r * as + c, std::min<std::int64_t>(n - c, 32), row_scale ? row_scale[r] : 1.f);
      const std::int64_t words = std::min<std::int64_t>(pairs(n) - c / 2, 16);
      _mm512_mask_storeu_epi32(dst + r * ds + c / 2, static_cast<__mmask16>((1u << words) - 1), v);
    }
}

// kt2[i][j] = key j's channel pair i, for the block's nb keys; zero for j in [nb, width). Tiles of
// 16 keys x 16 pairs are converted row by row and transposed through registers.
VINF_BF16_TARGET void pack_keys(std::uint32_t* kt2, const float* keys, std::int64_t ks, std::int64_t nb,
                                std::int64_t d, std::int64_t width) {
  const std::int64_t d2 = pairs(d);
  for (std::int64_t j0 = 0; j0 < width; j0 += kL)
    for (std::int64_t i0 = 0; i0 < d2; i0 += kL) {
      vec::f32x16 t[kL];
      for (int j = 0; j < kL; ++j)
        t[j] = j0 + j < nb ? reinterpret_cast<vec::f32x16>(pairs_of(keys + (j0 + j) * ks + 2 * i0, std::min<std::int64_t>(d - 2 * i0, 32)))
                           : vec::f32x16{};
      vec::transpose<vec::f32x16>(t);
      for (std::int64_t i = 0; i < kL && i0 + i < d2; ++i) vec::store_as(reinterpret_cast<float*>(kt2 + (i0 + i) * kKeys + j0), t[i]);
    }
}

// v2[jp][c] = (value 2jp, value 2jp + 1) of channel c, for jp < ceil(nb / 2); channels past dv,
// and the value past nb when nb is odd, are zero.
VINF_BF16_TARGET void pack_values(std::uint32_t* v2, std::int64_t os, const float* vals, std::int64_t vs,
                                  std::int64_t nb, std::int64_t dv) {
  for (std::int64_t jp = 0; jp < pairs(nb); ++jp) {
    const float* a = vals + 2 * jp * vs;
    const bool has_b = 2 * jp + 1 < nb;
    for (std::int64_t c = 0; c < os; c += kL) {
      const std::int64_t n = std::max<std::int64_t>(0, std::min<std::int64_t>(dv - c, kL));
      using u16x16 = std::uint16_t __attribute__((vector_size(32)));
      using u32x16 = std::uint32_t __attribute__((vector_size(64)));
      const u16x16 lo = reinterpret_cast<u16x16>(_mm512_cvtneps_pbh(load_first(a + c, n)));
      const u16x16 hi = has_b ? reinterpret_cast<u16x16>(_mm512_cvtneps_pbh(load_first(a + vs + c, n))) : u16x16{};
      const u32x16 w = __builtin_convertvector(lo, u32x16) | (__builtin_convertvector(hi, u32x16) << 16);
      std::memcpy(v2 + jp * os + c, &w, sizeof w);
    }
  }
}

// out[g][c0 + 16v ...] (+)= sum over i < n of the pair a[g * as + i] . the pairs b[i * bs + c0 + 16v ...],
// for 4 rows g and NV vectors of 16 f32 lanes.
template <int NV, bool Accumulate>
VINF_BF16_TARGET VINF_VEC_INLINE void pair_update(const std::uint32_t* a, std::int64_t as, const std::uint32_t* b,
                                                  std::int64_t bs, std::int64_t n, float* out, std::int64_t os) {
  __m512 acc[kGroup][NV];
  for (int g = 0; g < kGroup; ++g)
    for (int v = 0; v < NV; ++v) acc[g][v] = Accumulate ? _mm512_loadu_ps(out + g * os + v * kL) : _mm512_setzero_ps();
  for (std::int64_t i = 0; i < n; ++i) {
    __m512bh row[NV];
    for (int v = 0; v < NV; ++v) row[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + i * bs + v * kL));
    for (int g = 0; g < kGroup; ++g) {
      const __m512bh ab = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[g * as + i])));
      for (int v = 0; v < NV; ++v) acc[g][v] = _mm512_dpbf16_ps(acc[g][v], ab, row[v]);
    }
  }
  for (int g = 0; g < kGroup; ++g)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(out + g * os + v * kL, acc[g][v]);
}

// key_block_impl with bf16 products (the tile's queries are in w.q2 already).
VINF_BF16_TARGET void key_block_bf16(const Scratch& w, std::int64_t rows, std::int64_t d, std::int64_t dv,
                                     const float* keys, std::int64_t ks, const float* vals, std::int64_t vs,
                                     std::int64_t j0, std::int64_t nb, bool global, float bias, const RowBand& band) {
  const std::int64_t d2 = pairs(d), width = (nb + kL - 1) / kL * kL, groups = (rows + kGroup - 1) / kGroup;
  pack_keys(w.kt2, keys + j0 * ks, ks, nb, d, width);
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::uint32_t* q = w.q2 + g * kGroup * d2;
    float* s = w.s + g * kGroup * kKeys;
    std::int64_t c0 = 0;
    for (; c0 + 4 * kL <= width; c0 += 4 * kL) pair_update<4, false>(q, d2, w.kt2 + c0, kKeys, d2, s + c0, kKeys);
    for (; c0 < width; c0 += kL) pair_update<1, false>(q, d2, w.kt2 + c0, kKeys, d2, s + c0, kKeys);
  }
  softmax_block<vec::f32x16, vec::Level::v4, true>(w, rows, groups, dv, j0, nb, width, global, bias, band);
  pack_values(w.v2, w.os, vals + j0 * vs, vs, nb, dv);
  const std::int64_t np = pairs(nb);
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::uint32_t* pr = w.p2 + g * kGroup * (kKeys / 2);
    float* o = w.o + g * kGroup * w.os;
    std::int64_t c0 = 0;
    for (; c0 + 4 * kL <= w.os; c0 += 4 * kL) pair_update<4, true>(pr, kKeys / 2, w.v2 + c0, w.os, np, o + c0, w.os);
    for (; c0 + 2 * kL <= w.os; c0 += 2 * kL) pair_update<2, true>(pr, kKeys / 2, w.v2 + c0, w.os, np, o + c0, w.os);
    for (; c0 < w.os; c0 += kL) pair_update<1, true>(pr, kKeys / 2, w.v2 + c0, w.os, np, o + c0, w.os);
  }
}
#else  // never called: bf16_supported() is false off x86-64
void pack_rows(std::uint32_t*, std::int64_t, const float*, std::int64_t, std::int64_t, std::int64_t,
               const float* = nullptr) {
  VINF_FAIL("attention: bf16 products need x86-64");
}
void key_block_bf16(const Scratch&, std::int64_t, std::int64_t, std::int64_t, const float*, std::int64_t,
                    const float*, std::int64_t, std::int64_t, std::int64_t, bool, float, const RowBand&) {
  VINF_FAIL("attention: bf16 products need x86-64");
}
#endif

}  // namespace

std::size_t attention_scratch_bytes_per_thread(std::int64_t head_dim, std::int64_t value_dim) {
  return scratch_floats(head_dim, value_dim) * sizeof(float);
}

bool attention_bf16_products(std::int64_t head_dim, std::int64_t value_dim) {
  return bf16_supported() && !(head_dim <= kColumnsMaxDim && value_dim <= kColumnsMaxDim && columns_supported());
}

std::size_t attention_workspace_bytes(std::int64_t head_dim, std::int64_t value_dim) {
  return static_cast<std::size_t>(omp_get_max_threads()) * attention_scratch_bytes_per_thread(head_dim, value_dim);
}

namespace {

// The scale of a row that sees the keys [lo, hi] and G global ones (AttentionParams'
// token-count scale where log_base, the log of its base, is not 0).
float row_scale(const exec::AttentionParams& p, std::int64_t lo, std::int64_t hi, std::int64_t G, float log_base) {
  const std::int64_t visible = std::max<std::int64_t>(0, hi - lo + 1) + G;
  return p.scale * (log_base != 0.f && visible > 0 ? std::log(static_cast<float>(visible)) / log_base : 1.f);
}

// The blocks of at most kKeys keys a tile of (b, h) streams: its rows' local keys [wlo, whi],
// then the global ones: fn(keys, key stride, values, value stride, j0, nb, global, bias).
template <class Fn>
void for_key_blocks(const Tensor& k, const Tensor& v, const Tensor* kg, const Tensor* vg, std::int64_t b,
                    std::int64_t h, std::int64_t wlo, std::int64_t whi, const exec::AttentionParams& p, Fn&& fn) {
  const float* kb = &at_f32(k, b, h, 0);
  const float* vb = &at_f32(v, b, h, 0);
  for (std::int64_t j0 = wlo; j0 <= whi; j0 += kKeys)
    fn(kb, k.strides[2], vb, v.strides[2], j0, std::min(kKeys, whi - j0 + 1), false, p.local_bias);
  const std::int64_t G = kg ? kg->shape[2] : 0;
  if (G == 0) return;
  const float* gkb = &at_f32(*kg, b, h, 0);
  const float* gvb = &at_f32(*vg, b, h, 0);
  for (std::int64_t j0 = 0; j0 < G; j0 += kKeys)
    fn(gkb, kg->strides[2], gvb, vg->strides[2], j0, std::min(kKeys, G - j0), true, p.global_bias);
}

// One tile of query rows (from i0) of (b, h) with the rows-in-lanes kernel.
void column_tile(float* scratch, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* kg, const Tensor* vg,
                 const Tensor& out, const exec::AttentionParams& p, float log_base, std::int64_t b, std::int64_t h,
                 std::int64_t i0, float* lse) {
  const std::int64_t Lq = q.shape[2], D = q.shape[3], Lk = k.shape[2], Dv = v.shape[3], G = kg ? kg->shape[2] : 0;
  const ColumnScratch w = carve_columns(scratch, D, Dv);
  const std::int64_t rows = std::min(kRows, Lq - i0);
  const std::int64_t lanes = rows <= kColumnsHalf ? kColumnsHalf : kL, padded = (rows + lanes - 1) / lanes * lanes;
  // Rows of 8 channels go in and out through transposes.
  const bool eights = D == kColumnsMaxDim && Dv == kColumnsMaxDim && q.strides[3] == 1 && out.strides[3] == 1;
  float scale[kRows];
  std::int64_t wlo = 0, whi = -1;  // the union of the rows' bands (they move monotonically with the row)
  for (std::int64_t r = 0; r < padded; ++r) {
    std::int64_t lo = 1, hi = 0;  // the padding rows see nothing
    float sc = 0.f;
    if (r < rows) {
      exec::attention_band(p, i0 + r, Lk, lo, hi);
      sc = row_scale(p, lo, hi, G, log_base) * kLog2e;  // scores in log2 units
      if (r == 0) wlo = lo;
      if (r == rows - 1) whi = hi;
    }
    w.lo[r] = static_cast<float>(lo);
    w.hi[r] = static_cast<float>(hi);
    w.m[r] = -std::numeric_limits<float>::infinity();
    w.l[r] = 0.f;
    if (eights) {
      scale[r] = sc;
      continue;
    }
    const float* qrow = r < rows ? &at_f32(q, b, h, i0 + r) : nullptr;
    for (std::int64_t c = 0; c < D; ++c) w.qt[c * kRows + r] = qrow ? qrow[c] * sc : 0.f;
    for (std::int64_t c = 0; c < Dv; ++c) w.ot[c * kRows + r] = 0.f;
  }
  if (eights) columns_in8(w, &at_f32(q, b, h, i0), q.strides[2], rows, padded, scale);
  for_key_blocks(k, v, kg, vg, b, h, wlo, whi, p,
                 [&](const float* keys, std::int64_t ks, const float* vals, std::int64_t vs, std::int64_t j0,
                     std::int64_t nb, bool global, float bias) {
                   column_block(w, rows, D, Dv, keys, ks, vals, vs, j0, nb, global, bias);
                 });
  // The scores are in log2 units: the log-sum-exp is (m + log2 l) ln 2.
  for (std::int64_t r = 0; r < rows && lse; ++r)
    lse[r] = w.l[r] > 0.f ? (w.m[r] + std::log2(w.l[r])) / kLog2e : -std::numeric_limits<float>::infinity();
  if (eights) return columns_out8(w, &at_f32(out, b, h, i0), out.strides[2], rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    float* orow = &at_f32(out, b, h, i0 + r);
    const float inv = w.l[r] > 0.f ? 1.f / w.l[r] : 0.f;
    for (std::int64_t c = 0; c < Dv; ++c) orow[c] = w.ot[c * kRows + r] * inv;
  }
}

}  // namespace

void attention(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* kg, const Tensor* vg,
               const Tensor& out, const exec::AttentionParams& p, const Tensor* lse) {
  const std::int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3);
  const std::int64_t Lk = k.size(2), Dv = v.size(3), G = kg ? kg->size(2) : 0;
  const int threads = omp_get_max_threads();
  Allocation ws = ctx.arena->allocate(attention_workspace_bytes(D, Dv));
  const std::int64_t tiles = (Lq + kRows - 1) / kRows, jobs = B * H * tiles;
  const float log_base = p.token_count_log_base > 0.f ? std::log(p.token_count_log_base) : 0.f;

  // Rows in lanes for head dims of 8 and less on AVX-512 (f32 products: faster there than bf16
  // ones); else bf16 products where asked for and the CPU has them, the same f32 kernel elsewhere.
  const bool columns = D <= kColumnsMaxDim && Dv <= kColumnsMaxDim && columns_supported();
  const bool bf16 = p.bf16_products && attention_bf16_products(D, Dv);
  auto block = bf16 ? key_block_bf16 : key_block;

#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (std::int64_t job = 0; job < jobs; ++job) {
    const std::int64_t tile = job % tiles, h = (job / tiles) % H, b = job / (tiles * H);
    float* tile_lse = lse ? static_cast<float*>(lse->data) + (b * H + h) * Lq + tile * kRows : nullptr;
    if (columns) {
      column_tile(static_cast<float*>(ws.data()) + omp_get_thread_num() * scratch_floats(D, Dv), q, k, v, kg, vg,
                  out, p, log_base, b, h, tile * kRows, tile_lse);
      continue;
    }
    const Scratch w = carve(static_cast<float*>(ws.data()) + omp_get_thread_num() * scratch_floats(D, Dv), D, Dv, bf16);
    const std::int64_t i0 = tile * kRows, rows = std::min(kRows, Lq - i0), padded = (rows + kGroup - 1) / kGroup * kGroup;
    RowBand band;
    for (std::int64_t r = 0; r < padded; ++r)  // the rows past the tile's end are the micro-kernels' padding
      for (std::int64_t c = 0; c < w.os; ++c) w.o[r * w.os + c] = 0.f;
    for (std::int64_t r = 0; r < rows; ++r) {
      exec::attention_band(p, i0 + r, Lk, band.lo[r], band.hi[r]);
      w.scale[r] = row_scale(p, band.lo[r], band.hi[r], G, log_base);
      w.m[r] = -std::numeric_limits<float>::infinity();
      w.l[r] = 0.f;
    }
    // The queries are scaled as they are copied in: the scores come out scaled.
    if (bf16) {
      const std::int64_t d2 = pairs(D);
      pack_rows(w.q2, d2, &at_f32(q, b, h, i0), q.stride(2), rows, D, w.scale);
      for (std::int64_t i = rows * d2; i < padded * d2; ++i) w.q2[i] = 0;
    } else {
      for (std::int64_t r = 0; r < padded; ++r) {
        const float* qrow = r < rows ? &at_f32(q, b, h, i0 + r) : nullptr;
        for (std::int64_t c = 0; c < D; ++c) w.q[r * D + c] = qrow ? qrow[c] * w.scale[r] : 0.f;
      }
    }
    // Local keys: the union of the rows' bands (bands move monotonically with the row).
    for_key_blocks(k, v, kg, vg, b, h, band.lo[0], band.hi[rows - 1], p,
                   [&](const float* keys, std::int64_t ks, const float* vals, std::int64_t vs, std::int64_t j0,
                       std::int64_t nb, bool global, float bias) {
                     block(w, rows, D, Dv, keys, ks, vals, vs, j0, nb, global, bias, band);
                   });
    for (std::int64_t r = 0; r < rows; ++r) {
      float* orow = &at_f32(out, b, h, i0 + r);
      const float inv = w.l[r] > 0.f ? 1.f / w.l[r] : 0.f;
      for (std::int64_t c = 0; c < Dv; ++c) orow[c] = w.o[r * w.os + c] * inv;
      if (tile_lse) tile_lse[r] = w.l[r] > 0.f ? w.m[r] + std::log(w.l[r]) : -std::numeric_limits<float>::infinity();
    }
  }
}

}  // namespace vinf::cpu::fast

namespace vinf::cpu {
int thread_count() { return omp_get_max_threads(); }
void set_thread_count(int n) { omp_set_num_threads(n > 0 ? n : 1); }
}  // namespace vinf::cpu
