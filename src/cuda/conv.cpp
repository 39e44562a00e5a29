// Convolutions on CUDA: conv2d through cuDNN (algorithm chosen once per shape), temporal_conv as
// strided-batched cuBLAS GEMMs over frames, one call per sample and tap.
#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "cuda/check.hpp"
#include "cuda/context.hpp"
#include "cuda/gemm.hpp"
#include "cuda/ops.hpp"
#include "cuda/owned.hpp"
#include "exec/tf32.hpp"

namespace vinf::cuda {
namespace {

cudnnDataType_t cudnn_dtype(DType t) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: VINF_FAIL("no cuDNN type for ", dtype_name(t));
  }
}

// The descriptors of one call. Each is owned on its own: when a later create throws, the ones
// already made are freed.
struct Descriptors {
  Owned<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor> x, y;
  Owned<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor> w;
  Owned<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor> conv;
  Descriptors() {
    VINF_CHECK_CUDNN(cudnnCreateTensorDescriptor(x.put()));
    VINF_CHECK_CUDNN(cudnnCreateTensorDescriptor(y.put()));
    VINF_CHECK_CUDNN(cudnnCreateFilterDescriptor(w.put()));
    VINF_CHECK_CUDNN(cudnnCreateConvolutionDescriptor(conv.put()));
  }
};

void set_tensor(cudnnTensorDescriptor_t d, const Tensor& t) {
  int dims[4], strides[4];
  for (int i = 0; i < 4; ++i) {
    VINF_CHECK(t.size(i) <= 0x7fffffff && t.stride(i) <= 0x7fffffff, "conv2d: ", t.describe(),
               " is too large for cuDNN");
    dims[i] = static_cast<int>(t.size(i));
    strides[i] = static_cast<int>(t.stride(i));
  }
  VINF_CHECK_CUDNN(cudnnSetTensorNdDescriptor(d, cudnn_dtype(t.dtype), 4, dims, strides));
}

constexpr std::size_t kMaxWorkspace = std::size_t{2} << 30;

// Runs the convolution y = conv(x, w) + beta * y; false when cuDNN has no algorithm for it.
bool run_cudnn(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& y, const exec::Conv2dParams& p,
               float beta) {
  CudaContext& cc = *ctx.cuda;
  Descriptors d;
  set_tensor(d.x.get(), x);
  set_tensor(d.y.get(), y);
  VINF_CHECK_CUDNN(cudnnSetFilter4dDescriptor(d.w.get(), cudnn_dtype(w.dtype), CUDNN_TENSOR_NCHW,
                                              static_cast<int>(w.size(0)), static_cast<int>(w.size(1)),
                                              static_cast<int>(w.size(2)), static_cast<int>(w.size(3))));
  VINF_CHECK_CUDNN(cudnnSetConvolution2dDescriptor(d.conv.get(), p.padding, p.padding, p.stride, p.stride, 1, 1,
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  // f32 stays true f32 (FMA kernels, no TF32) unless allow_tf32(), so by default results compare
  // with the CPU at f32 tolerance. With TF32 allowed, tensor-op math lets cuDNN round f32 inputs
  // to TF32 on the tensor cores (Ampere and later); not the ..._ALLOW_CONVERSION mode, which may
  // also convert f32 tensors to f16 and overflow where f32 does not.
  const bool tf32 = x.dtype == DType::f32 && allow_tf32();
  VINF_CHECK_CUDNN(cudnnSetConvolutionMathType(d.conv.get(),
                                               x.dtype == DType::f32 && !tf32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
  // The math mode is part of the key: an algorithm chosen for one may not exist for the other.
  const std::string key = x.describe() + "|" + w.describe() + "|" + y.describe() + "|" + std::to_string(p.stride) +
                          "," + std::to_string(p.padding) + (tf32 ? "|tf32" : "");
  auto it = cc.conv_algos().find(key);
  if (it == cc.conv_algos().end()) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    VINF_CHECK_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(cc.cudnn(), d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
    ConvAlgo chosen{};
    bool found = false;
    for (int i = 0; i < returned && !found; ++i) {
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxWorkspace) {
        chosen = {perf[i].algo, perf[i].memory};
        found = true;
      }
    }
    if (!found) return false;
    it = cc.conv_algos().emplace(key, chosen).first;
  }
  Allocation ws;
  if (it->second.workspace > 0) ws = ctx.arena->allocate(it->second.workspace);
  const float alpha = 1.f;
  count_library_call();
  VINF_CHECK_CUDNN(cudnnConvolutionForward(cc.cudnn(), &alpha, d.x.get(), x.data, d.w.get(), w.data, d.conv.get(),
                                           it->second.algo, ws.data(), it->second.workspace, &beta, d.y.get(), y.data));
  return true;
}

}  // namespace

namespace {

// cuDNN refuses tensors of more than 2^31 - 1 elements (its descriptors count them in int).
constexpr std::int64_t kMaxCudnnElements = 0x7fffffff;

// y (+)= conv(x, w) for one batch range that cuDNN can describe, with the f32 fallback.
void conv2d_part(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& y, const exec::Conv2dParams& p,
                 float beta) {
  if (run_cudnn(ctx, x, w, y, p, beta)) return;
  // No cuDNN algorithm for this dtype/layout (bf16 NCHW on some versions): compute in f32.
  VINF_CHECK(x.dtype != DType::f32, "conv2d: cuDNN offers no algorithm for x ", x.describe(), ", w ", w.describe());
  OwnedTensor xf = ctx.arena->empty(DType::f32, x.shape), wf = ctx.arena->empty(DType::f32, w.shape),
              yf = ctx.arena->empty(DType::f32, y.shape);
  cuda::copy(ctx, x, xf);
  cuda::copy(ctx, w, wf);
  if (beta != 0.f) cuda::copy(ctx, y, yf);
  VINF_CHECK(run_cudnn(ctx, xf, wf, yf, p, beta), "conv2d: cuDNN offers no algorithm for x ", x.describe());
  cuda::copy(ctx, yf, y);
}

}  // namespace

void conv2d(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
            const exec::Conv2dParams& p) {
  VINF_CHECK(x.dtype == w.dtype && x.dtype == y.dtype, "conv2d: CUDA needs one dtype for x, w and y, got ",
             x.describe(), ", ", w.describe(), ", ", y.describe());
  // The filter descriptor has no strides: weights must be packed OIHW.
  OwnedTensor wc;
  Tensor wv = w;
  if (!w.is_contiguous()) {
    wc = ctx.arena->empty(w.dtype, w.shape);
    cuda::copy(ctx, w, wc);
    wv = wc;
  }
  float beta = 0.f;
  if (bias) {
    cuda::copy(ctx, bias->unsqueeze(1).unsqueeze(2).unsqueeze(0).expand(y.shape), y);
    beta = 1.f;
  }
  // Batches whose x or y exceed cuDNN's element count (many frames at full resolution) run in
  // slices of whole samples.
  const std::int64_t N = x.size(0);
  if (N == 0) return;
  const std::int64_t per_sample = std::max(x.numel() / N, y.numel() / N);
  VINF_CHECK(per_sample <= kMaxCudnnElements, "conv2d: one sample of x ", x.describe(), " or y ", y.describe(),
             " exceeds cuDNN's 2^31 - 1 elements");
  const std::int64_t step = std::max<std::int64_t>(1, kMaxCudnnElements / std::max<std::int64_t>(per_sample, 1));
  for (std::int64_t n0 = 0; n0 < N; n0 += step) {
    const std::int64_t n = std::min(step, N - n0);
    conv2d_part(ctx, n == N ? x : x.slice(0, n0, n), wv, n == N ? y : y.slice(0, n0, n), p, beta);
  }
}

void temporal_conv(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, int pad) {
  VINF_CHECK(x.dtype == w.dtype && x.dtype == y.dtype, "temporal_conv: CUDA needs one dtype for x, w and y");
  const std::int64_t N = x.size(0), Ci = x.size(1), T = x.size(2), S = x.size(3);
  const std::int64_t Co = w.size(0), KT = w.size(2), To = y.size(2);
  // Weights as kt matrices (Cout, Cin): wk[k] = w[:, :, k].
  OwnedTensor wk = ctx.arena->empty(w.dtype, {KT, Co, Ci});
  cuda::copy(ctx, w.permute({2, 0, 1}), wk);
  OwnedTensor hx, hy;
  Tensor xs = x, ys = y;
  if (x.stride(3) != 1 || x.stride(1) < S) {
    hx = ctx.arena->empty(x.dtype, x.shape);
    cuda::copy(ctx, x, hx);
    xs = hx;
  }
  if (y.stride(3) != 1 || y.stride(1) < S) {
    hy = ctx.arena->empty(y.dtype, y.shape);
    ys = hy;
  }
  if (bias)
    cuda::copy(ctx, bias->unsqueeze(1).unsqueeze(0).unsqueeze(3).expand(ys.shape), ys);
  else
    cuda::fill(ctx, ys, 0.0);
  const std::size_t es = dtype_size(x.dtype);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t k = 0; k < KT; ++k) {
      // Output frames whose tap k reads a real input frame: t + k - pad in [0, T).
      const std::int64_t t0 = std::max<std::int64_t>(0, pad - k), t1 = std::min<std::int64_t>(To, T + pad - k);
      if (t1 <= t0) continue;
      const GemmOperand a{static_cast<const char*>(wk.data) + k * Co * Ci * es, false, Ci, 0};
      const GemmOperand b{static_cast<const char*>(xs.data) + (n * xs.stride(0) + (t0 + k - pad) * xs.stride(2)) * es,
                          false, xs.stride(1), xs.stride(2)};
      void* c = static_cast<char*>(ys.data) + (n * ys.stride(0) + t0 * ys.stride(2)) * es;
      gemm_rowmajor(ctx, y.dtype, y.dtype, Co, S, Ci, 1.f, a, b, 1.f, c, ys.stride(1), t1 - t0, ys.stride(2));
    }
  if (ys.data != y.data) cuda::copy(ctx, ys, y);
}

}  // namespace vinf::cuda
