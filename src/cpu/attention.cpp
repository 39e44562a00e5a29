// Fast banded attention: flash-style. Each OpenMP job takes a tile of query rows of one (batch,
// head), streams the keys it can see (the union of the tile's bands, then the global keys) in
// blocks through an online softmax, and never holds more than tile x block scores. The workspace
// is fixed per thread, so memory does not grow with the clip length.
#include <omp.h>

#include <cmath>
#include <limits>

#include "cpu/cpu.hpp"
#include "cpu/strided.hpp"

namespace vinf::cpu::fast {
namespace {

constexpr std::int64_t kRows = 32;  // query rows per tile
constexpr std::int64_t kKeys = 64;  // keys per block

struct Scratch {
  float* q;      // kRows x D, queries of the tile
  float* kt;     // D x kKeys, key block transposed
  float* s;      // kRows x kKeys, scores
  float* o;      // kRows x Dv, unnormalised outputs
  float* m;      // kRows, running max
  float* l;      // kRows, running sum
  float* scale;  // kRows, per-row score factor
};

std::size_t scratch_floats(std::int64_t d, std::int64_t dv) {
  return static_cast<std::size_t>(kRows * d + d * kKeys + kRows * kKeys + kRows * dv + 3 * kRows);
}

Scratch carve(float* base, std::int64_t d, std::int64_t dv) {
  Scratch s;
  s.q = base;
  s.kt = s.q + kRows * d;
  s.s = s.kt + d * kKeys;
  s.o = s.s + kRows * kKeys;
  s.m = s.o + kRows * dv;
  s.l = s.m + kRows;
  s.scale = s.l + kRows;
  return s;
}

struct RowBand {
  std::int64_t lo[kRows], hi[kRows];
};

// One block of nb keys (rows of `keys`/`vals`, starting at key index j0) against the tile's rows.
// Local keys are masked to each row's band; global ones are visible to all.
__attribute__((target_clones("avx512f", "avx2", "default")))
void key_block(const Scratch& w, std::int64_t rows, std::int64_t d, std::int64_t dv, const float* keys, std::int64_t ks,
               const float* vals, std::int64_t vs, std::int64_t j0, std::int64_t nb, bool global, float bias,
               const RowBand& band) {
  for (std::int64_t j = 0; j < nb; ++j)
    for (std::int64_t c = 0; c < d; ++c) w.kt[c * kKeys + j] = keys[(j0 + j) * ks + c];
  for (std::int64_t r = 0; r < rows; ++r) {
    float* srow = w.s + r * kKeys;
    for (std::int64_t j = 0; j < nb; ++j) srow[j] = 0.f;
    const float* qr = w.q + r * d;
    for (std::int64_t c = 0; c < d; ++c) {
      const float qc = qr[c];
      const float* kc = w.kt + c * kKeys;
#pragma omp simd
      for (std::int64_t j = 0; j < nb; ++j) srow[j] += qc * kc[j];
    }
    // The row's visible part of this block.
    std::int64_t a = 0, e = nb;
    if (!global) {
      a = std::max<std::int64_t>(0, band.lo[r] - j0);
      e = std::min<std::int64_t>(nb, band.hi[r] - j0 + 1);
      if (e <= a) continue;
    }
    float mb = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = a; j < e; ++j) {
      srow[j] = srow[j] * w.scale[r] + bias;
      mb = std::max(mb, srow[j]);
    }
    const float m_new = std::max(w.m[r], mb);
    const float corr = std::exp(w.m[r] - m_new);  // 0 on the row's first visible block
    float* orow = w.o + r * dv;
    if (corr != 1.f) {
      for (std::int64_t c = 0; c < dv; ++c) orow[c] *= corr;
    }
    float sum = w.l[r] * corr;
    for (std::int64_t j = a; j < e; ++j) {
      const float pj = std::exp(srow[j] - m_new);
      sum += pj;
      const float* vrow = vals + (j0 + j) * vs;
#pragma omp simd
      for (std::int64_t c = 0; c < dv; ++c) orow[c] += pj * vrow[c];
    }
    w.l[r] = sum;
    w.m[r] = m_new;
  }
}

}  // namespace

std::size_t attention_workspace_bytes(std::int64_t head_dim, std::int64_t value_dim) {
  return static_cast<std::size_t>(omp_get_max_threads()) * scratch_floats(head_dim, value_dim) * sizeof(float);
}

void attention(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* kg, const Tensor* vg,
               const Tensor& out, const ops::AttentionParams& p) {
  const std::int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3);
  const std::int64_t Lk = k.size(2), Dv = v.size(3), G = kg ? kg->size(2) : 0;
  const int threads = omp_get_max_threads();
  Allocation ws = ctx.arena->allocate(attention_workspace_bytes(D, Dv));
  const std::int64_t tiles = (Lq + kRows - 1) / kRows, jobs = B * H * tiles;
  const float log_base = p.token_count_log_base > 0.f ? std::log(p.token_count_log_base) : 0.f;

#pragma omp parallel for schedule(dynamic) num_threads(threads)
  for (std::int64_t job = 0; job < jobs; ++job) {
    const std::int64_t tile = job % tiles, h = (job / tiles) % H, b = job / (tiles * H);
    const Scratch w = carve(static_cast<float*>(ws.data()) + omp_get_thread_num() * scratch_floats(D, Dv), D, Dv);
    const std::int64_t i0 = tile * kRows, rows = std::min(kRows, Lq - i0);
    RowBand band;
    for (std::int64_t r = 0; r < rows; ++r) {
      ops::attention_band(p, i0 + r, Lk, band.lo[r], band.hi[r]);
      const std::int64_t visible = std::max<std::int64_t>(0, band.hi[r] - band.lo[r] + 1) + G;
      w.scale[r] = p.scale * (log_base != 0.f && visible > 0 ? std::log(static_cast<float>(visible)) / log_base : 1.f);
      w.m[r] = -std::numeric_limits<float>::infinity();
      w.l[r] = 0.f;
      for (std::int64_t c = 0; c < Dv; ++c) w.o[r * Dv + c] = 0.f;
      const float* qrow = &at_f32(q, b, h, i0 + r);
      for (std::int64_t c = 0; c < D; ++c) w.q[r * D + c] = qrow[c];
    }
    // Local keys: the union of the rows' bands (bands move monotonically with the row).
    const std::int64_t wlo = band.lo[0], whi = band.hi[rows - 1];
    const float* kb = &at_f32(k, b, h, 0);
    const float* vb = &at_f32(v, b, h, 0);
    for (std::int64_t j0 = wlo; j0 <= whi; j0 += kKeys)
      key_block(w, rows, D, Dv, kb, k.stride(2), vb, v.stride(2), j0, std::min(kKeys, whi - j0 + 1), false,
                p.local_bias, band);
    if (G > 0) {
      const float* gkb = &at_f32(*kg, b, h, 0);
      const float* gvb = &at_f32(*vg, b, h, 0);
      for (std::int64_t j0 = 0; j0 < G; j0 += kKeys)
        key_block(w, rows, D, Dv, gkb, kg->stride(2), gvb, vg->stride(2), j0, std::min(kKeys, G - j0), true,
                  p.global_bias, band);
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      float* orow = &at_f32(out, b, h, i0 + r);
      const float inv = w.l[r] > 0.f ? 1.f / w.l[r] : 0.f;
      for (std::int64_t c = 0; c < Dv; ++c) orow[c] = w.o[r * Dv + c] * inv;
    }
  }
}

}  // namespace vinf::cpu::fast
