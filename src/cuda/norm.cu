// GroupNorm (partial sums, then per-channel scale/shift, then apply), LayerNorm and softmax.
#include "cuda/common.cuh"
#include "cuda/ops.hpp"
#include "exec/activation_math.hpp"

#include <type_traits>

namespace vinf::cuda {
namespace {

struct View4 {  // an (N, C, T, S) view
  const void* data;
  DType dtype;
  std::int64_t n, c, t, s;
  std::int64_t sn, sc, st, ss;
};

View4 view4(const Tensor& x) {
  return {x.data,    x.dtype,     x.size(0),   x.size(1),   x.size(2),
          x.size(3), x.stride(0), x.stride(1), x.stride(2), x.stride(3)};
}

// Block (job, split) sums a slice of group `job`'s elements; atomics combine the splits.
__global__ void group_sums_kernel(View4 x, int groups, double* sums, std::int64_t s_n, std::int64_t s_g,
                                  std::int64_t s_k, int splits) {
  __shared__ double shared[32];
  const std::int64_t job = blockIdx.x, n = job / groups, g = job % groups;
  const std::int64_t cg = x.c / groups, per_channel = x.t * x.s, total = cg * per_channel;
  float s1 = 0.f, s2 = 0.f;
  for (std::int64_t e = blockIdx.y * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(blockDim.x) * splits) {
    const std::int64_t c = g * cg + e / per_channel, rem = e % per_channel, t = rem / x.s, s = rem % x.s;
    const float v = load_f(x.data, x.dtype, n * x.sn + c * x.sc + t * x.st + s * x.ss);
    s1 += v;
    s2 += v * v;
  }
  const auto add = [](double a, double b) { return a + b; };
  const double t1 = block_reduce<double>(s1, add, 0.0, shared);
  const double t2 = block_reduce<double>(s2, add, 0.0, shared);
  if (threadIdx.x == 0) {
    atomicAdd(sums + n * s_n + g * s_g, t1);
    atomicAdd(sums + n * s_n + g * s_g + s_k, t2);
  }
}

// Per (n, c): a = rstd * gamma, b = beta - mean * a.
__global__ void group_affine_kernel(const double* sums, std::int64_t s_n, std::int64_t s_g, std::int64_t s_k,
                                    double count, const void* gamma, DType gt, std::int64_t gs, const void* beta,
                                    DType bt, std::int64_t bs, std::int64_t N, std::int64_t C, int groups, float eps,
                                    float2* ab) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= N * C) return;
  const std::int64_t n = i / C, c = i % C, g = c / (C / groups);
  const double mean = sums[n * s_n + g * s_g] / count;
  const double var = fmax(sums[n * s_n + g * s_g + s_k] / count - mean * mean, 0.0);
  const float rstd = static_cast<float>(1.0 / sqrt(var + eps));
  const float a = rstd * load_f(gamma, gt, c * gs);
  ab[i] = make_float2(a, load_f(beta, bt, c * bs) - static_cast<float>(mean) * a);
}

__global__ void group_apply_kernel(View4 x, View4 y, const float2* ab, exec::Activation act) {
  const std::int64_t total = x.n * x.c * x.t * x.s;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t s = i % x.s, t = (i / x.s) % x.t, c = (i / (x.s * x.t)) % x.c, n = i / (x.s * x.t * x.c);
    const float2 k = ab[n * x.c + c];
    float v = load_f(x.data, x.dtype, n * x.sn + c * x.sc + t * x.st + s * x.ss) * k.x + k.y;
    v = exec::activate(act, v);
    store_f(const_cast<void*>(y.data), y.dtype, n * y.sn + c * y.sc + t * y.st + s * y.ss, v);
  }
}

// GroupNorm in one kernel (VINF_GPU_KERNELS=group-norm): one block per (sample, group) whose
// elements lie in one run (x and y (N, C, T, S) with (C, T, S) contiguous). The statistics in one
// read of the run, then the per-channel scale and shift and the activation in one more read and
// one write, V elements (16 bytes) at a time where the run allows.
template <typename T>
__device__ __forceinline__ float to_float(T v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else if constexpr (std::is_same_v<T, __half>)
    return __half2float(v);
  else
    return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(v);
  else
    return __float2bfloat16_rn(v);
}

struct GroupRun {
  std::int64_t x_sn, y_sn;  // sample strides, in elements
  unsigned cg, per_channel;  // channels per group, elements per channel (T x S)
  int groups;
  float eps;
  exec::Activation act;
};

template <typename T, int V>
__global__ void __launch_bounds__(1024)
    group_norm_run_kernel(const T* __restrict__ x, T* __restrict__ y, GroupRun r, const void* gamma, DType gt,
                          std::int64_t gs, const void* beta, DType bt, std::int64_t bs) {
  struct alignas(sizeof(T) * V) Pack {  // V elements: one 16-byte access, or one element
    T e[V];
  };
  extern __shared__ float2 ab[];  // the group's channels: scale, shift
  __shared__ double shared[32];
  const std::int64_t n = blockIdx.x / r.groups, g = blockIdx.x % r.groups;
  const unsigned count = r.cg * r.per_channel, packs = count / V;
  const Pack* xg = reinterpret_cast<const Pack*>(x + n * r.x_sn + g * count);
  Pack* yg = reinterpret_cast<Pack*>(y + n * r.y_sn + g * count);
  float s1 = 0.f, s2 = 0.f;
  for (unsigned i = threadIdx.x; i < packs; i += blockDim.x) {
    const Pack p = xg[i];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float v = to_float(p.e[k]);
      s1 += v;
      s2 += v * v;
    }
  }
  const auto add = [](double a, double b) { return a + b; };
  const double mean = block_reduce<double>(s1, add, 0.0, shared) / count;
  const double var = fmax(block_reduce<double>(s2, add, 0.0, shared) / count - mean * mean, 0.0);
  const float rstd = static_cast<float>(1.0 / sqrt(var + r.eps));
  for (unsigned c = threadIdx.x; c < r.cg; c += blockDim.x) {
    const std::int64_t ch = g * r.cg + c;
    const float a = rstd * load_f(gamma, gt, ch * gs);
    ab[c] = make_float2(a, load_f(beta, bt, ch * bs) - static_cast<float>(mean) * a);
  }
  __syncthreads();
  for (unsigned i = threadIdx.x; i < packs; i += blockDim.x) {
    const Pack p = xg[i];
    Pack q;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float2 k2 = ab[(i * V + k) / r.per_channel];
      q.e[k] = from_float<T>(exec::activate(r.act, to_float(p.e[k]) * k2.x + k2.y));
    }
    yg[i] = q;
  }
}

template <typename T>
void launch_group_norm_run(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                           const GroupRun& r) {
  constexpr int kVector = 16 / static_cast<int>(sizeof(T));
  const unsigned count = r.cg * r.per_channel;
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  const bool vector =
      count % kVector == 0 && r.x_sn % kVector == 0 && r.y_sn % kVector == 0 && aligned(x.data) && aligned(y.data);
  const unsigned blocks = static_cast<unsigned>(x.size(0) * r.groups);
  const std::size_t shared = r.cg * sizeof(float2);
  const int threads = count >= 8192 ? 1024 : count >= 2048 ? 512 : kThreads;
  auto* xp = static_cast<const T*>(x.data);
  auto* yp = static_cast<T*>(y.data);
  if (vector)
    group_norm_run_kernel<T, kVector><<<blocks, threads, shared, stream_of(ctx)>>>(
        xp, yp, r, gamma.data, gamma.dtype, gamma.stride(0), beta.data, beta.dtype, beta.stride(0));
  else
    group_norm_run_kernel<T, 1><<<blocks, threads, shared, stream_of(ctx)>>>(
        xp, yp, r, gamma.data, gamma.dtype, gamma.stride(0), beta.data, beta.dtype, beta.stride(0));
  VINF_CHECK_LAUNCH();
}

// One block per row; two passes over the row (mean, then variance about it).
__global__ void layer_norm_kernel(const void* x, DType xt, std::int64_t xs, void* y, DType yt, std::int64_t ys,
                                  const void* gamma, DType gt, std::int64_t gs, const void* beta, DType bt,
                                  std::int64_t bs, std::int64_t D, float eps) {
  __shared__ float shared[32];
  const std::int64_t row = blockIdx.x;
  const auto add = [](float a, float b) { return a + b; };
  float s = 0.f;
  for (std::int64_t d = threadIdx.x; d < D; d += blockDim.x) s += load_f(x, xt, row * xs + d);
  const float mean = block_reduce<float>(s, add, 0.f, shared) / static_cast<float>(D);
  float v = 0.f;
  for (std::int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    const float z = load_f(x, xt, row * xs + d) - mean;
    v += z * z;
  }
  const float rstd = rsqrtf(block_reduce<float>(v, add, 0.f, shared) / static_cast<float>(D) + eps);
  for (std::int64_t d = threadIdx.x; d < D; d += blockDim.x)
    store_f(y, yt, row * ys + d,
            (load_f(x, xt, row * xs + d) - mean) * rstd * load_f(gamma, gt, d * gs) + load_f(beta, bt, d * bs));
}

__global__ void rms_norm_kernel(const void* x, DType xt, std::int64_t xs, void* y, DType yt, std::int64_t ys,
                                const void* gamma, DType gt, std::int64_t gs, std::int64_t D, float eps) {
  __shared__ float shared[32];
  const std::int64_t row = blockIdx.x;
  float s = 0.f;
  for (std::int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    const float v = load_f(x, xt, row * xs + d);
    s += v * v;
  }
  const float r = rsqrtf(block_reduce<float>(
                             s, [](float a, float b) { return a + b; }, 0.f, shared) /
                             static_cast<float>(D) +
                         eps);
  for (std::int64_t d = threadIdx.x; d < D; d += blockDim.x)
    store_f(y, yt, row * ys + d, load_f(x, xt, row * xs + d) * r * load_f(gamma, gt, d * gs));
}

__global__ void softmax_kernel(const void* x, DType xt, std::int64_t xs, void* y, DType yt, std::int64_t ys,
                               std::int64_t D) {
  __shared__ float shared[32];
  const std::int64_t row = blockIdx.x;
  float m = -INFINITY;
  for (std::int64_t d = threadIdx.x; d < D; d += blockDim.x) m = fmaxf(m, load_f(x, xt, row * xs + d));
  m = block_reduce<float>(
      m, [](float a, float b) { return fmaxf(a, b); }, -INFINITY, shared);
  // A row that is all -inf (fully masked) would give exp(-inf + inf) = NaN: measured from 0 its
  // terms are 0, the sum is 0 and the row comes out as zeros.
  if (m == -INFINITY) m = 0.f;
  float s = 0.f;
  for (std::int64_t d = threadIdx.x; d < D; d += blockDim.x) s += expf(load_f(x, xt, row * xs + d) - m);
  s = block_reduce<float>(
      s, [](float a, float b) { return a + b; }, 0.f, shared);
  const float inv = s > 0.f ? 1.f / s : 0.f;
  for (std::int64_t d = threadIdx.x; d < D; d += blockDim.x)
    store_f(y, yt, row * ys + d, expf(load_f(x, xt, row * xs + d) - m) * inv);
}

}  // namespace

void group_norm_sums(ExecContext& ctx, const Tensor& x, int groups, const Tensor& sums) {
  fill(ctx, sums, 0.0);
  const std::int64_t jobs = x.size(0) * groups;
  const std::int64_t per_group = x.size(1) / groups * x.size(2) * x.size(3);
  if (jobs == 0 || per_group == 0) return;
  // Enough blocks to fill the GPU (about 4 per SM), each with at least 16 elements per thread.
  const std::int64_t sms = ctx.cuda->properties().multiProcessorCount;
  const std::int64_t by_work = (per_group + 16 * kThreads - 1) / (16 * kThreads);
  const std::int64_t by_fill = (4 * sms + jobs - 1) / jobs;
  const int splits = static_cast<int>(std::clamp<std::int64_t>(std::min(by_work, by_fill), 1, 1024));
  VINF_CHECK(jobs <= 0x7fffffff, "group_norm_sums: too many (sample, group) pairs");
  group_sums_kernel<<<dim3(static_cast<unsigned>(jobs), static_cast<unsigned>(splits)), kThreads, 0, stream_of(ctx)>>>(
      view4(x), groups, static_cast<double*>(sums.data), sums.stride(0), sums.stride(1), sums.stride(2), splits);
  VINF_CHECK_LAUNCH();
}

void group_norm_apply(ExecContext& ctx, const Tensor& x, const Tensor& sums, double count, const Tensor& gamma,
                      const Tensor& beta, const Tensor& y, const exec::GroupNormParams& p) {
  const std::int64_t N = x.size(0), C = x.size(1);
  if (x.numel() == 0) return;
  Allocation ab = ctx.arena->allocate(static_cast<std::size_t>(N * C) * sizeof(float2));
  group_affine_kernel<<<grid_for(N * C), kThreads, 0, stream_of(ctx)>>>(
      static_cast<const double*>(sums.data), sums.stride(0), sums.stride(1), sums.stride(2), count, gamma.data,
      gamma.dtype, gamma.stride(0), beta.data, beta.dtype, beta.stride(0), N, C, p.groups, p.eps,
      static_cast<float2*>(ab.data()));
  VINF_CHECK_LAUNCH();
  group_apply_kernel<<<grid_for(x.numel()), kThreads, 0, stream_of(ctx)>>>(
      view4(x), view4(y), static_cast<const float2*>(ab.data()), p.act);
  VINF_CHECK_LAUNCH();
}

bool group_norm_runs(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                     const exec::GroupNormParams& p) {
  // (C, T, S) one run per sample: the views as_nc_ts makes fold contiguous dims into S (T = 1,
  // its stride 0).
  const auto runs = [](const Tensor& t) {
    return t.stride(3) == 1 && (t.size(2) == 1 || t.stride(2) == t.size(3)) && t.stride(1) == t.size(2) * t.size(3);
  };
  const std::int64_t N = x.size(0), C = x.size(1), per_channel = x.size(2) * x.size(3);
  const std::int64_t cg = C / p.groups;
  const std::int64_t shared_limit = 32 * 1024 / static_cast<std::int64_t>(sizeof(float2));
  if (x.dtype != y.dtype || !runs(x) || !runs(y) || x.numel() == 0 || cg * per_channel > 0x7fffffff ||
      cg > shared_limit || N * p.groups > 0x7fffffff)
    return false;
  const GroupRun r{x.stride(0), y.stride(0), static_cast<unsigned>(cg), static_cast<unsigned>(per_channel), p.groups,
                   p.eps,       p.act};
  switch (x.dtype) {
    case DType::f32: launch_group_norm_run<float>(ctx, x, gamma, beta, y, r); return true;
    case DType::f16: launch_group_norm_run<__half>(ctx, x, gamma, beta, y, r); return true;
    case DType::bf16: launch_group_norm_run<__nv_bfloat16>(ctx, x, gamma, beta, y, r); return true;
    default: return false;
  }
}

void layer_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                float eps) {
  const std::int64_t M = x.size(0);
  if (M == 0) return;
  VINF_CHECK(M <= 0x7fffffff, "layer_norm: too many rows");
  layer_norm_kernel<<<static_cast<unsigned>(M), kThreads, 0, stream_of(ctx)>>>(
      x.data, x.dtype, x.stride(0), y.data, y.dtype, y.stride(0), gamma.data, gamma.dtype, gamma.stride(0), beta.data,
      beta.dtype, beta.stride(0), x.size(1), eps);
  VINF_CHECK_LAUNCH();
}

void rms_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& y, float eps) {
  const std::int64_t M = x.size(0);
  if (M == 0) return;
  VINF_CHECK(M <= 0x7fffffff, "rms_norm: too many rows");
  rms_norm_kernel<<<static_cast<unsigned>(M), kThreads, 0, stream_of(ctx)>>>(
      x.data, x.dtype, x.stride(0), y.data, y.dtype, y.stride(0), gamma.data, gamma.dtype, gamma.stride(0), x.size(1),
      eps);
  VINF_CHECK_LAUNCH();
}

void softmax(ExecContext& ctx, const Tensor& x, const Tensor& out) {
  const std::int64_t M = x.size(0);
  if (M == 0) return;
  VINF_CHECK(M <= 0x7fffffff, "softmax: too many rows");
  softmax_kernel<<<static_cast<unsigned>(M), kThreads, 0, stream_of(ctx)>>>(x.data, x.dtype, x.stride(0), out.data,
                                                                            out.dtype, out.stride(0), x.size(1));
  VINF_CHECK_LAUNCH();
}

}  // namespace vinf::cuda
