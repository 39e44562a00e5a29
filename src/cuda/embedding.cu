// Sinusoidal timestep embedding, one thread per (timestep, frequency).
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/ops.hpp"

namespace vinf::cuda {
namespace {

__global__ void timestep_kernel(const void* t, DType tt, std::int64_t ts, void* out, DType ot, std::int64_t os0,
                                std::int64_t os1, std::int64_t B, std::int64_t dim, bool flip, float shift,
                                float neg_log_period) {
  const std::int64_t half = dim / 2;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < B * half;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = i / half, j = i % half;
    const float tv = static_cast<float>(load_d(t, tt, b * ts));
    const float freq = expf(neg_log_period * static_cast<float>(j) / (static_cast<float>(half) - shift));
    const float arg = tv * freq;
    const float s = sinf(arg), c = cosf(arg);
    store_f(out, ot, b * os0 + j * os1, flip ? c : s);
    store_f(out, ot, b * os0 + (half + j) * os1, flip ? s : c);
    if (j == 0 && dim % 2) store_f(out, ot, b * os0 + (dim - 1) * os1, 0.f);
  }
}

// One thread per (b, l, h, pair).
__global__ void rotary_kernel(const void* x, DType xt, std::int64_t xb, std::int64_t xl, std::int64_t xh, void* out,
                              DType ot, std::int64_t ob, std::int64_t ol, std::int64_t oh, const float* cos,
                              std::int64_t cl, std::int64_t ci, const float* sin, std::int64_t sl, std::int64_t si,
                              std::int64_t L, std::int64_t H, std::int64_t half, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t p = i % half, h = (i / half) % H, l = (i / (half * H)) % L, b = i / (half * H * L);
    const std::int64_t xo = b * xb + l * xl + h * xh + 2 * p, oo = b * ob + l * ol + h * oh + 2 * p;
    const float re = load_f(x, xt, xo), im = load_f(x, xt, xo + 1);
    const float c = cos[l * cl + p * ci], s = sin[l * sl + p * si];
    store_f(out, ot, oo, re * c - im * s);
    store_f(out, ot, oo + 1, re * s + im * c);
  }
}

}  // namespace

void rotary(ExecContext& ctx, const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out) {
  const std::int64_t L = x.size(1), H = x.size(2), half = x.size(3) / 2;
  const std::int64_t n = x.size(0) * L * H * half;
  if (n == 0) return;
  rotary_kernel<<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(
      x.data, x.dtype, x.stride(0), x.stride(1), x.stride(2), out.data, out.dtype, out.stride(0), out.stride(1),
      out.stride(2), cos.ptr<float>(), cos.stride(0), cos.stride(1), sin.ptr<float>(), sin.stride(0), sin.stride(1), L,
      H, half, n);
  VINF_CHECK_LAUNCH();
}

void timestep_embedding(ExecContext& ctx, const Tensor& t, const Tensor& out, const exec::TimestepEmbeddingParams& p) {
  const std::int64_t B = out.size(0), dim = out.size(1);
  if (B == 0) return;
  const float neg_log_period = -std::log(p.max_period);
  timestep_kernel<<<grid_for(B * (dim / 2)), kThreads, 0, stream_of(ctx)>>>(
      t.data, t.dtype, t.stride(0), out.data, out.dtype, out.stride(0), out.stride(1), B, dim, p.flip_sin_to_cos,
      p.shift, neg_log_period);
  VINF_CHECK_LAUNCH();
}

}  // namespace vinf::cuda
