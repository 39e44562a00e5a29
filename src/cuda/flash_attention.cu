// Full attention on the tensor cores without a score matrix in memory (VINF_GPU_KERNELS=
// flash-attention; off by default until a GPU has checked it against the CPU): a block takes 64
// query rows of one (batch, head), four warps of 16 rows each; key and value tiles of 64 rows go
// through shared memory; each warp forms its 16 x 64 scores with WMMA (f16 or bf16 inputs, f32
// sums), updates its rows' running maximum and sum (an online softmax, f32), rounds the
// probabilities to the storage dtype as the GEMM path does, and adds probabilities x values
// (WMMA again) into f32 rows kept in shared memory, rescaled per row as the maximum moves.
// Head dims 16, 32, 64 and 128, equal for keys and values; no band, global keys, biases or
// token-count scale (ops::fused_attention_applies).
#include <mma.h>

#include "cuda/common.cuh"
#include "cuda/ops.hpp"

namespace vinf::cuda {
namespace {

using namespace nvcuda;

constexpr int kFlashWarps = 4;
constexpr int kWarpRows = 16;
constexpr int kBlockRows = kFlashWarps * kWarpRows;
constexpr int kTileKeys = 64;

struct FlashOperand {
  const void* data;
  std::int64_t sb, sh, sl;  // element strides; the last dim is contiguous
};

struct FlashArgs {
  FlashOperand q, k, v, out;
  std::int64_t B, H, Lq, Lk;
  float scale;
};

template <class T>
__device__ __forceinline__ T to_storage(float x);
template <>
__device__ __forceinline__ __half to_storage<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 to_storage<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Shared memory of one block, in bytes (every part a multiple of 32 bytes, as WMMA wants).
template <int D>
__host__ __device__ constexpr std::size_t flash_block_bytes() {
  return (kBlockRows + 2 * kTileKeys) * D * 2;  // Q, K, V tiles
}
template <int D>
__host__ __device__ constexpr std::size_t flash_warp_bytes() {
  return kWarpRows * kTileKeys * 4     // scores
         + kWarpRows * kTileKeys * 2   // probabilities
         + 2 * kWarpRows * D * 4       // output rows and this tile's part
         + 3 * kWarpRows * 4;          // max, sum, rescale factor
}
template <int D>
__host__ __device__ constexpr std::size_t flash_shared_bytes() {
  return flash_block_bytes<D>() + kFlashWarps * flash_warp_bytes<D>();
}

template <class T, int D>
__global__ void __launch_bounds__(kFlashWarps * 32) flash_kernel(FlashArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem);
  T* ks = qs + kBlockRows * D;
  T* vs = ks + kTileKeys * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  static_assert(sizeof(T) == 2, "flash attention stores 16-bit tiles");
  unsigned char* mine = smem + flash_block_bytes<D>() + warp * flash_warp_bytes<D>();
  float* s = reinterpret_cast<float*>(mine);
  T* p = reinterpret_cast<T*>(s + kWarpRows * kTileKeys);
  float* o = reinterpret_cast<float*>(p + kWarpRows * kTileKeys);
  float* part = o + kWarpRows * D;
  float* row_max = part + kWarpRows * D;
  float* row_sum = row_max + kWarpRows;
  float* row_corr = row_sum + kWarpRows;

  const std::int64_t tiles = (a.Lq + kBlockRows - 1) / kBlockRows;
  const std::int64_t tile = blockIdx.x % tiles, h = (blockIdx.x / tiles) % a.H, b = blockIdx.x / (tiles * a.H);
  const std::int64_t i0 = tile * kBlockRows;
  const T* qg = static_cast<const T*>(a.q.data) + b * a.q.sb + h * a.q.sh;
  const T* kgm = static_cast<const T*>(a.k.data) + b * a.k.sb + h * a.k.sh;
  const T* vgm = static_cast<const T*>(a.v.data) + b * a.v.sb + h * a.v.sh;
  const T zero = to_storage<T>(0.f);

  for (int e = threadIdx.x; e < kBlockRows * D; e += blockDim.x) {
    const int r = e / D, c = e % D;
    qs[e] = i0 + r < a.Lq ? qg[(i0 + r) * a.q.sl + c] : zero;
  }
  for (int e = lane; e < kWarpRows * D; e += 32) o[e] = 0.f;
  if (lane < kWarpRows) {
    row_max[lane] = -INFINITY;
    row_sum[lane] = 0.f;
  }

  for (std::int64_t j0 = 0; j0 < a.Lk; j0 += kTileKeys) {
    __syncthreads();  // the previous tiles are no longer read (and Q is in place)
    for (int e = threadIdx.x; e < kTileKeys * D; e += blockDim.x) {
      const int r = e / D, c = e % D;
      const bool in = j0 + r < a.Lk;
      ks[e] = in ? kgm[(j0 + r) * a.k.sl + c] : zero;
      vs[e] = in ? vgm[(j0 + r) * a.v.sl + c] : zero;
    }
    __syncthreads();

    // Scores of the warp's 16 rows against the tile's 64 keys.
    for (int n = 0; n < kTileKeys / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> qa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kb;  // K^T
        wmma::load_matrix_sync(qa, qs + warp * kWarpRows * D + kk * 16, D);
        wmma::load_matrix_sync(kb, ks + n * 16 * D + kk * 16, D);
        wmma::mma_sync(acc, qa, kb, acc);
      }
      wmma::store_matrix_sync(s + n * 16, acc, kTileKeys, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax: two lanes per row, 32 keys each.
    {
      const int r = lane / 2, half = lane % 2;
      const int valid = static_cast<int>(a.Lk - j0 < kTileKeys ? a.Lk - j0 : kTileKeys);
      float m = -INFINITY;
      for (int c = half * 32; c < half * 32 + 32; ++c)
        if (c < valid) m = fmaxf(m, s[r * kTileKeys + c] * a.scale);
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
      const float m_old = row_max[r];
      const float m_new = fmaxf(m_old, m);
      const float ref = m_new == -INFINITY ? 0.f : m_new;
      float sum = 0.f;
      for (int c = half * 32; c < half * 32 + 32; ++c) {
        const float e = c < valid ? expf(s[r * kTileKeys + c] * a.scale - ref) : 0.f;
        const T rounded = to_storage<T>(e);
        p[r * kTileKeys + c] = rounded;
        sum += static_cast<float>(rounded);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      __syncwarp();
      if (half == 0) {
        const float corr = expf(m_old - ref);
        row_corr[r] = corr;
        row_sum[r] = row_sum[r] * corr + sum;
        row_max[r] = m_new;
      }
    }
    __syncwarp();

    // This tile's probabilities x values, then the rows rescaled and added up.
    for (int n = 0; n < D / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
      for (int kk = 0; kk < kTileKeys / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vb;
        wmma::load_matrix_sync(pa, p + kk * 16, kTileKeys);
        wmma::load_matrix_sync(vb, vs + kk * 16 * D + n * 16, D);
        wmma::mma_sync(acc, pa, vb, acc);
      }
      wmma::store_matrix_sync(part + n * 16, acc, D, wmma::mem_row_major);
    }
    __syncwarp();
    for (int e = lane; e < kWarpRows * D; e += 32) o[e] = o[e] * row_corr[e / D] + part[e];
    __syncwarp();
  }

  T* og = static_cast<T*>(const_cast<void*>(a.out.data)) + b * a.out.sb + h * a.out.sh;
  for (int e = lane; e < kWarpRows * D; e += 32) {
    const int r = e / D, c = e % D;
    const std::int64_t i = i0 + warp * kWarpRows + r;
    if (i < a.Lq) og[i * a.out.sl + c] = to_storage<T>(row_sum[r] > 0.f ? o[e] / row_sum[r] : 0.f);
  }
}

FlashOperand flash_operand(const Tensor& t) { return {t.data, t.stride(0), t.stride(1), t.stride(2)}; }

template <class T, int D>
void launch_flash(const FlashArgs& a, cudaStream_t stream) {
  constexpr std::size_t shared = flash_shared_bytes<D>();
  static_assert(shared <= 163 * 1024, "flash attention: more shared memory than an sm_80 block may have");
  VINF_CHECK_CUDA(cudaFuncSetAttribute(flash_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(shared)));
  const std::int64_t blocks = (a.Lq + kBlockRows - 1) / kBlockRows * a.H * a.B;
  VINF_CHECK(blocks <= 0x7fffffff, "flash attention: too many (batch, head, row tile) blocks: ", blocks);
  flash_kernel<T, D><<<static_cast<unsigned>(blocks), kFlashWarps * 32, shared, stream>>>(a);
}

template <class T>
void launch_flash_dim(const FlashArgs& a, std::int64_t d, cudaStream_t stream) {
  switch (d) {
    case 16: launch_flash<T, 16>(a, stream); break;
    case 32: launch_flash<T, 32>(a, stream); break;
    case 64: launch_flash<T, 64>(a, stream); break;
    default: launch_flash<T, 128>(a, stream); break;
  }
}

}  // namespace

std::size_t flash_attention_shared_bytes(std::int64_t head_dim) {
  switch (head_dim) {
    case 16: return flash_shared_bytes<16>();
    case 32: return flash_shared_bytes<32>();
    case 64: return flash_shared_bytes<64>();
    case 128: return flash_shared_bytes<128>();
    default: return 0;
  }
}

void flash_attention(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                     float scale) {
  FlashArgs a{flash_operand(q), flash_operand(k), flash_operand(v), flash_operand(out),
              q.size(0), q.size(1), q.size(2), k.size(2), scale};
  if (a.B * a.H * a.Lq == 0) return;
  const std::int64_t d = q.size(3);
  VINF_CHECK(d == 16 || d == 32 || d == 64 || d == 128, "flash attention: head dim ", d, " (16, 32, 64 or 128)");
  if (q.dtype == DType::f16) launch_flash_dim<__half>(a, d, stream_of(ctx));
  else launch_flash_dim<__nv_bfloat16>(a, d, stream_of(ctx));
  VINF_CHECK_LAUNCH();
}

}  // namespace vinf::cuda
