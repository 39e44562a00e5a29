// Device-side helpers shared by the CUDA kernels: strided indexing over jointly coalesced views,
// typed loads and stores with f32 arithmetic, launch sizes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "core/tensor.hpp"
#include "cuda/check.hpp"
#include "cuda/context.hpp"
#include "exec/context.hpp"
#include "exec/gpu_kernels.hpp"
#include "exec/index32.hpp"
#include "exec/layout.hpp"

namespace vinf::cuda {

// A view's shape and strides after joint coalescing: usually rank 1 for contiguous tensors.
struct Strided {
  int rank = 1;
  std::int64_t size[kMaxDims] = {};
  std::int64_t stride[kMaxDims] = {};

  __device__ __forceinline__ std::int64_t offset(std::int64_t linear) const {
    if (rank == 1) return linear * stride[0];
    std::int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      off += (linear % size[d]) * stride[d];
      linear /= size[d];
    }
    return off;
  }
};

// Joint layouts of N same-shaped views (see exec::joint_layout), one Strided per view.
template <int N>
std::array<Strided, N> joint_strided(const std::array<const Tensor*, N>& ts) {
  const auto l = exec::joint_layout<N>(ts);
  std::array<Strided, N> out{};
  for (int k = 0; k < N; ++k) {
    out[k].rank = l.rank;
    for (int d = 0; d < l.rank; ++d) {
      out[k].size[d] = l.size[d];
      out[k].stride[d] = l.stride[k][d];
    }
  }
  return out;
}

// The 32-bit form of the joint layout (exec/index32.hpp), when VINF_GPU_KERNELS has index32 on
// and every offset fits; false: the caller launches its 64-bit kernel.
template <int N>
bool joint_index32(const ExecContext& ctx, const std::array<const Tensor*, N>& ts, exec::Index32<N>& out) {
  return gpu_kernel_enabled(ctx, GpuKernel::index32) && exec::to_index32(exec::joint_layout<N>(ts), out);
}

// The linear index of the calling thread in a grid-stride loop, and the loop's step.
__device__ __forceinline__ std::uint32_t thread_index32() { return blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ std::uint32_t grid_step32() { return gridDim.x * blockDim.x; }

__device__ __forceinline__ float load_f(const void* p, DType dt, std::int64_t i) {
  switch (dt) {
    case DType::f16: return __half2float(static_cast<const __half*>(p)[i]);
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::f64: return static_cast<float>(static_cast<const double*>(p)[i]);
    case DType::i64: return static_cast<float>(static_cast<const long long*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ void store_f(void* p, DType dt, std::int64_t i, float v) {
  switch (dt) {
    case DType::f16: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    case DType::bf16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::i64: static_cast<long long*>(p)[i] = static_cast<long long>(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

__device__ __forceinline__ double load_d(const void* p, DType dt, std::int64_t i) {
  switch (dt) {
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::i64: return static_cast<double>(static_cast<const long long*>(p)[i]);
    default: return load_f(p, dt, i);
  }
}

__device__ __forceinline__ void store_d(void* p, DType dt, std::int64_t i, double v) {
  switch (dt) {
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::i64: static_cast<long long*>(p)[i] = static_cast<long long>(v); break;
    default: store_f(p, dt, i, static_cast<float>(v)); break;
  }
}

constexpr int kThreads = 256;

__device__ __forceinline__ std::int64_t imin(std::int64_t a, std::int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ std::int64_t imax(std::int64_t a, std::int64_t b) { return a > b ? a : b; }

// Grid for a grid-stride loop over n elements.
inline unsigned grid_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, 65535 * 8));
}

inline cudaStream_t stream_of(const ExecContext& ctx) { return ctx.cuda->stream(); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Reduction over the whole block (a multiple of 32 threads, at most 1024); every thread gets the
// result. `identity` is op's neutral element; `shared` holds 32 entries.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T identity, T* shared) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // shared may still be read by a previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace vinf::cuda
