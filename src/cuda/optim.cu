// The optimizer's element-wise work on CUDA (ops/optim.hpp has the contracts): one thread per
// element in double arithmetic, as the CPU computes it; the sum of squares a block at a time in
// double, the blocks' sums added in a fixed order.
#include "cuda/common.cuh"
#include "cuda/ops.hpp"

namespace vinf::cuda {
namespace {

struct AdamWConstants {
  double step, beta1, beta2, eps, decay, c2, grad_scale;
};

__global__ void adamw_kernel(AdamWConstants c, float* p, const float* g, float* m, float* v, void* copy,
                             DType copy_dtype, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const double gi = static_cast<double>(g[i]) * c.grad_scale;
    const double mi = c.beta1 * m[i] + (1.0 - c.beta1) * gi;
    const double vi = c.beta2 * v[i] + (1.0 - c.beta2) * gi * gi;
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
    const float pi = static_cast<float>(p[i] * c.decay - c.step * mi / (sqrt(vi) / c.c2 + c.eps));
    p[i] = pi;
    if (copy != nullptr) store_f(copy, copy_dtype, i, pi);
  }
}

// Each block's sum into partial[blockIdx.x]; the blocks' sums are then added in a fixed order, so
// every rank gets the same bits from the same gradients (the clipping scale must agree).
__global__ void sum_squares_kernel(const float* x, std::int64_t n, double* partial) {
  __shared__ double warps[kThreads / 32];
  double sum = 0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const double xi = x[i];
    sum += xi * xi;
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double block = 0;
    for (int w = 0; w < kThreads / 32; ++w) block += warps[w];
    partial[blockIdx.x] = block;
  }
}

__global__ void sum_in_order_kernel(const double* partial, unsigned count, double* out) {
  double sum = 0;
  for (unsigned b = 0; b < count; ++b) sum += partial[b];
  *out = sum;
}

}  // namespace

void adamw_update(ExecContext& ctx, double step, double beta1, double beta2, double eps, double decay, double c2,
                  double grad_scale, const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                  const Tensor* copy) {
  const std::int64_t n = p.numel();
  const AdamWConstants c{step, beta1, beta2, eps, decay, c2, grad_scale};
  adamw_kernel<<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(c, p.ptr<float>(), g.ptr<float>(), m.ptr<float>(),
                                                             v.ptr<float>(), copy ? copy->data : nullptr,
                                                             copy ? copy->dtype : DType::f32, n);
  VINF_CHECK_LAUNCH();
}

double sum_squares(ExecContext& ctx, const Tensor& x) {
  const cudaStream_t stream = stream_of(ctx);
  const unsigned blocks = std::min<unsigned>(grid_for(x.numel()), 1024);
  OwnedTensor partial = ctx.arena->empty(DType::f64, {static_cast<std::int64_t>(blocks) + 1});
  double* p = partial.ptr<double>();
  sum_squares_kernel<<<blocks, kThreads, 0, stream>>>(x.ptr<float>(), x.numel(), p);
  VINF_CHECK_LAUNCH();
  sum_in_order_kernel<<<1, 1, 0, stream>>>(p, blocks, p + blocks);
  VINF_CHECK_LAUNCH();
  double host = 0;
  VINF_CHECK_CUDA(cudaMemcpyAsync(&host, p + blocks, sizeof(double), cudaMemcpyDeviceToHost, stream));
  count_host_sync();
  VINF_CHECK_CUDA(cudaStreamSynchronize(stream));
  return host;
}

}  // namespace vinf::cuda
