// Banded attention with global keys: one warp per query row, a block of consecutive rows of one
// (batch, head) shares key/value tiles staged in shared memory, an online softmax per row keeps
// everything in registers. Memory is independent of the number of rows and keys. By default a
// block has 4 rows and tiles of up to 64 keys; with VINF_GPU_KERNELS=temporal-attention it has
// up to 32 rows and tiles of as many keys as shared memory holds, so that in the temporal layers
// (about 24 rows against at most 56 keys) one block per (batch, head) reads every query, key and
// value row once.
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/ops.hpp"

namespace vinf::cuda {
namespace {

constexpr int kWarps = 4;       // rows per block, by default
constexpr int kWideWarps = 32;  // at most, with temporal-attention
constexpr int kWideMaxDpl = 4;  // head dims up to 128 (wider ones spill registers at 1024 threads)
constexpr std::size_t kSharedBytes = 48 * 1024;

struct Operand {  // a [B, H, L, dim] view with a contiguous last dim
  const void* data;
  std::int64_t sb, sh, sl;
};

Operand operand(const Tensor& t) { return {t.data, t.stride(0), t.stride(1), t.stride(2)}; }

struct Args {
  Operand q, k, v, kg, vg, out;
  DType dtype;
  std::int64_t B, H, Lq, Lk, G, D, Dv;
  std::int64_t band_lo, band_hi;
  float scale, local_bias, global_bias, log_base;  // log_base = ln(base), 0 when off
  int tile_keys;
  float* lse;  // [B, H, Lq] contiguous, or null
};

template <int DPL>
struct RowState {
  float q[DPL], acc[DPL];
  float m, l, factor;
};

// Streams keys [j_begin, j_end) of (k, v) through shared memory; the warp's row sees
// [row_lo, row_hi] of them (all of them for global keys).
template <int DPL>
__device__ void stream_keys(const Args& a, const Operand& k, const Operand& v, std::int64_t b, std::int64_t h,
                            std::int64_t j_begin, std::int64_t j_end, std::int64_t row_lo, std::int64_t row_hi,
                            bool row_valid, float bias, RowState<DPL>& st, float* ks, float* vs) {
  const int lane = threadIdx.x % 32;
  const char* kbase = static_cast<const char*>(k.data);
  const char* vbase = static_cast<const char*>(v.data);
  const std::size_t es = a.dtype == DType::f32 ? 4 : 2;
  for (std::int64_t j0 = j_begin; j0 < j_end; j0 += a.tile_keys) {
    const int nb = static_cast<int>(imin(a.tile_keys, j_end - j0));
    __syncthreads();  // the previous tile is no longer read
    for (std::int64_t e = threadIdx.x; e < static_cast<std::int64_t>(nb) * a.D; e += blockDim.x) {
      const std::int64_t j = e / a.D, c = e % a.D;
      ks[j * a.D + c] = load_f(kbase + (b * k.sb + h * k.sh + (j0 + j) * k.sl) * es, a.dtype, c);
    }
    for (std::int64_t e = threadIdx.x; e < static_cast<std::int64_t>(nb) * a.Dv; e += blockDim.x) {
      const std::int64_t j = e / a.Dv, c = e % a.Dv;
      vs[j * a.Dv + c] = load_f(vbase + (b * v.sb + h * v.sh + (j0 + j) * v.sl) * es, a.dtype, c);
    }
    __syncthreads();
    if (!row_valid) continue;
    const int first = static_cast<int>(imax(0, row_lo - j0));
    const int last = static_cast<int>(imin(nb - 1, row_hi - j0));
    for (int j = first; j <= last; ++j) {
      float partial = 0.f;
#pragma unroll
      for (int r = 0; r < DPL; ++r) {
        const int c = lane + 32 * r;
        if (c < a.D) partial += st.q[r] * ks[j * a.D + c];
      }
      const float s = warp_sum(partial) * st.factor + bias;
      const float m_new = fmaxf(st.m, s);
      // While every score so far is -inf (masked), exp(s - m_new) would be exp(-inf + inf) = NaN:
      // measure from 0 instead, so masked keys weigh 0 and the first finite score starts the sum
      // (corr = exp(-inf) = 0 drops the empty state).
      const float ref = m_new == -INFINITY ? 0.f : m_new;
      const float corr = expf(st.m - ref);
      const float p = expf(s - ref);
      st.l = st.l * corr + p;
#pragma unroll
      for (int r = 0; r < DPL; ++r) {
        const int c = lane + 32 * r;
        st.acc[r] = st.acc[r] * corr + (c < a.Dv ? p * vs[j * a.Dv + c] : 0.f);
      }
      st.m = m_new;
    }
  }
}

template <int DPL, int MaxWarps>
__global__ void __launch_bounds__(MaxWarps * 32) attention_kernel(Args a) {
  extern __shared__ float shared[];
  float* ks = shared;
  float* vs = shared + static_cast<std::int64_t>(a.tile_keys) * a.D;
  const int warps = static_cast<int>(blockDim.x / 32);  // rows per block
  const std::int64_t tiles = (a.Lq + warps - 1) / warps;
  const std::int64_t tile = blockIdx.x % tiles, h = (blockIdx.x / tiles) % a.H, b = blockIdx.x / (tiles * a.H);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t i0 = tile * warps, i = i0 + warp;
  const std::int64_t i_last = imin(i0 + warps, a.Lq) - 1;
  const bool row_valid = i < a.Lq;
  const std::size_t es = a.dtype == DType::f32 ? 4 : 2;

  auto band = [&](std::int64_t row, std::int64_t& lo, std::int64_t& hi) {
    lo = row + a.band_lo < 0 ? 0 : row + a.band_lo;
    hi = row + a.band_hi > a.Lk - 1 ? a.Lk - 1 : row + a.band_hi;
  };
  std::int64_t lo, hi, wlo, whi, unused;
  band(row_valid ? i : i_last, lo, hi);
  band(i0, wlo, unused);
  band(i_last, unused, whi);

  RowState<DPL> st;
  const std::int64_t visible = (hi >= lo ? hi - lo + 1 : 0) + a.G;
  st.factor = a.scale * (a.log_base != 0.f && visible > 0 ? logf(static_cast<float>(visible)) / a.log_base : 1.f);
  st.m = -INFINITY;
  st.l = 0.f;
  const char* qrow = static_cast<const char*>(a.q.data) + (b * a.q.sb + h * a.q.sh + (row_valid ? i : i_last) * a.q.sl) * es;
#pragma unroll
  for (int r = 0; r < DPL; ++r) {
    const int c = lane + 32 * r;
    st.q[r] = c < a.D ? load_f(qrow, a.dtype, c) : 0.f;
    st.acc[r] = 0.f;
  }
  if (whi >= wlo) stream_keys<DPL>(a, a.k, a.v, b, h, wlo, whi + 1, lo, hi, row_valid, a.local_bias, st, ks, vs);
  if (a.G > 0) stream_keys<DPL>(a, a.kg, a.vg, b, h, 0, a.G, 0, a.G - 1, row_valid, a.global_bias, st, ks, vs);
  if (!row_valid) return;
  if (a.lse && lane == 0) a.lse[(b * a.H + h) * a.Lq + i] = st.l > 0.f ? st.m + logf(st.l) : -INFINITY;
  const float inv = st.l > 0.f ? 1.f / st.l : 0.f;
  char* orow = static_cast<char*>(const_cast<void*>(a.out.data)) + (b * a.out.sb + h * a.out.sh + i * a.out.sl) * es;
#pragma unroll
  for (int r = 0; r < DPL; ++r) {
    const int c = lane + 32 * r;
    if (c < a.Dv) store_f(orow, a.dtype, c, st.acc[r] * inv);
  }
}

template <int DPL>
void launch(const Args& a, int warps, std::int64_t blocks, std::size_t shared, cudaStream_t stream) {
  if constexpr (DPL <= kWideMaxDpl) {
    if (warps > kWarps) {
      attention_kernel<DPL, kWideWarps><<<static_cast<unsigned>(blocks), warps * 32, shared, stream>>>(a);
      return;
    }
  }
  attention_kernel<DPL, kWarps><<<static_cast<unsigned>(blocks), warps * 32, shared, stream>>>(a);
}

}  // namespace

void attention(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* kg, const Tensor* vg,
               const Tensor& out, const exec::AttentionParams& p, const Tensor* lse) {
  for (const Tensor* t : {&k, &v, &out})
    VINF_CHECK(t->dtype == q.dtype, "attention: CUDA needs one dtype for all operands, got ", q.describe(), " and ",
               t->describe());
  if (kg) VINF_CHECK(kg->dtype == q.dtype && vg->dtype == q.dtype, "attention: global keys must match q's dtype");
  Args a{};
  a.q = operand(q);
  a.k = operand(k);
  a.v = operand(v);
  a.out = operand(out);
  if (kg) {
    a.kg = operand(*kg);
    a.vg = operand(*vg);
  }
  a.dtype = q.dtype;
  a.B = q.size(0);
  a.H = q.size(1);
  a.Lq = q.size(2);
  a.D = q.size(3);
  a.Lk = k.size(2);
  a.Dv = v.size(3);
  a.G = kg ? kg->size(2) : 0;
  a.band_lo = p.band_lo;
  a.band_hi = p.band_hi;
  a.scale = p.scale;
  a.local_bias = p.local_bias;
  a.global_bias = p.global_bias;
  a.log_base = p.token_count_log_base > 0.f ? std::log(p.token_count_log_base) : 0.f;
  a.lse = lse ? static_cast<float*>(lse->data) : nullptr;
  const std::int64_t width = std::max(a.D, a.Dv);
  VINF_CHECK(width <= 512, "attention: head dims up to 512 are supported on CUDA, got ", width);
  const bool wide = gpu_kernel_enabled(ctx, GpuKernel::temporal_attention) && width <= 32 * kWideMaxDpl;
  const int warps = wide ? static_cast<int>(std::clamp<std::int64_t>(a.Lq, 1, kWideWarps)) : kWarps;
  const std::int64_t fit = kSharedBytes / (sizeof(float) * (a.D + a.Dv));
  a.tile_keys = static_cast<int>(std::min<std::int64_t>(wide ? 1024 : 64, fit));
  const std::size_t shared = static_cast<std::size_t>(a.tile_keys) * (a.D + a.Dv) * sizeof(float);
  const std::int64_t blocks = (a.Lq + warps - 1) / warps * a.H * a.B;
  if (blocks == 0) return;
  VINF_CHECK(blocks <= 0x7fffffff, "attention: too many (batch, head, row tile) blocks: ", blocks);
  const cudaStream_t s = stream_of(ctx);
  if (width <= 32) launch<1>(a, warps, blocks, shared, s);
  else if (width <= 64) launch<2>(a, warps, blocks, shared, s);
  else if (width <= 128) launch<4>(a, warps, blocks, shared, s);
  else if (width <= 256) launch<8>(a, warps, blocks, shared, s);
  else launch<16>(a, warps, blocks, shared, s);
  VINF_CHECK_LAUNCH();
}

}  // namespace vinf::cuda
