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

}  // namespace

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
