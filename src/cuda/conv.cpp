// Convolutions on CUDA: conv2d through cuDNN (algorithm chosen once per shape), temporal_conv as
// strided-batched cuBLAS GEMMs over frames, one call per sample and tap.
#include <string>

#include "core/error.hpp"
#include "cuda/check.hpp"
#include "cuda/context.hpp"
#include "cuda/gemm.hpp"
#include "cuda/ops.hpp"
#include "ops/elementwise.hpp"

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

// RAII holders for the descriptors of one call.
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Descriptors() {
    VINF_CHECK_CUDNN(cudnnCreateTensorDescriptor(&x));
    VINF_CHECK_CUDNN(cudnnCreateTensorDescriptor(&y));
    VINF_CHECK_CUDNN(cudnnCreateFilterDescriptor(&w));
    VINF_CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&conv));
  }
  ~Descriptors() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
};

void set_tensor(cudnnTensorDescriptor_t d, const Tensor& t) {
  int dims[4], strides[4];
  for (int i = 0; i < 4; ++i) {
    VINF_CHECK(t.size(i) <= 0x7fffffff && t.stride(i) <= 0x7fffffff, "conv2d: ", t.describe(), " is too large for cuDNN");
    dims[i] = static_cast<int>(t.size(i));
    strides[i] = static_cast<int>(t.stride(i));
  }
  VINF_CHECK_CUDNN(cudnnSetTensorNdDescriptor(d, cudnn_dtype(t.dtype), 4, dims, strides));
}

constexpr std::size_t kMaxWorkspace = std::size_t{2} << 30;

// Runs the convolution y = conv(x, w) + beta * y; false when cuDNN has no algorithm for it.
bool run_cudnn(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& y, const ops::Conv2dParams& p,
               float beta) {
  CudaContext& cc = *ctx.cuda;
  Descriptors d;
  set_tensor(d.x, x);
  set_tensor(d.y, y);
  VINF_CHECK_CUDNN(cudnnSetFilter4dDescriptor(d.w, cudnn_dtype(w.dtype), CUDNN_TENSOR_NCHW, static_cast<int>(w.size(0)),
                                              static_cast<int>(w.size(1)), static_cast<int>(w.size(2)),
                                              static_cast<int>(w.size(3))));
  VINF_CHECK_CUDNN(cudnnSetConvolution2dDescriptor(d.conv, p.padding, p.padding, p.stride, p.stride, 1, 1,
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  // f32 stays true f32 (no TF32), so results compare with the CPU at f32 tolerance.
  VINF_CHECK_CUDNN(cudnnSetConvolutionMathType(d.conv, x.dtype == DType::f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
  const std::string key = x.describe() + "|" + w.describe() + "|" + y.describe() + "|" + std::to_string(p.stride) +
                          "," + std::to_string(p.padding);
  auto it = cc.conv_algos().find(key);
  if (it == cc.conv_algos().end()) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    VINF_CHECK_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(cc.cudnn(), d.x, d.w, d.conv, d.y,
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
  VINF_CHECK_CUDNN(cudnnConvolutionForward(cc.cudnn(), &alpha, d.x, x.data, d.w, w.data, d.conv, it->second.algo,
                                           ws.data(), it->second.workspace, &beta, d.y, y.data));
  return true;
}

}  // namespace

void conv2d(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
            const ops::Conv2dParams& p) {
  VINF_CHECK(x.dtype == w.dtype && x.dtype == y.dtype, "conv2d: CUDA needs one dtype for x, w and y, got ",
             x.describe(), ", ", w.describe(), ", ", y.describe());
  // The filter descriptor has no strides: weights must be packed OIHW.
  OwnedTensor wc;
  Tensor wv = w;
  if (!w.is_contiguous()) {
    wc = ctx.arena->empty(w.dtype, w.shape);
    ops::copy(ctx, w, wc);
    wv = wc;
  }
  float beta = 0.f;
  if (bias) {
    ops::copy(ctx, bias->unsqueeze(1).unsqueeze(2).unsqueeze(0).expand(y.shape), y);
    beta = 1.f;
  }
  if (run_cudnn(ctx, x, wv, y, p, beta)) return;
  // No cuDNN algorithm for this dtype/layout (bf16 NCHW on some versions): compute in f32.
  VINF_CHECK(x.dtype != DType::f32, "conv2d: cuDNN offers no algorithm for x ", x.describe(), ", w ", w.describe());
  OwnedTensor xf = ctx.arena->empty(DType::f32, x.shape), wf = ctx.arena->empty(DType::f32, w.shape),
              yf = ctx.arena->empty(DType::f32, y.shape);
  ops::copy(ctx, x, xf);
  ops::copy(ctx, wv, wf);
  if (bias) ops::copy(ctx, y, yf);
  VINF_CHECK(run_cudnn(ctx, xf, wf, yf, p, beta), "conv2d: cuDNN offers no algorithm for x ", x.describe());
  ops::copy(ctx, yf, y);
}

void temporal_conv(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, int pad) {
  VINF_CHECK(x.dtype == w.dtype && x.dtype == y.dtype, "temporal_conv: CUDA needs one dtype for x, w and y");
  const std::int64_t N = x.size(0), Ci = x.size(1), T = x.size(2), S = x.size(3);
  const std::int64_t Co = w.size(0), KT = w.size(2), To = y.size(2);
  // Weights as kt matrices (Cout, Cin): wk[k] = w[:, :, k].
  OwnedTensor wk = ctx.arena->empty(w.dtype, {KT, Co, Ci});
  ops::copy(ctx, w.permute({2, 0, 1}), wk);
  OwnedTensor hx, hy;
  Tensor xs = x, ys = y;
  if (x.stride(3) != 1 || x.stride(1) < S) {
    hx = ctx.arena->empty(x.dtype, x.shape);
    ops::copy(ctx, x, hx);
    xs = hx;
  }
  if (y.stride(3) != 1 || y.stride(1) < S) {
    hy = ctx.arena->empty(y.dtype, y.shape);
    ys = hy;
  }
  if (bias) ops::copy(ctx, bias->unsqueeze(1).unsqueeze(0).unsqueeze(3).expand(ys.shape), ys);
  else ops::fill(ctx, ys, 0.0);
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
      gemm_rowmajor(ctx, y.dtype, Co, S, Ci, 1.f, a, b, 1.f, c, ys.stride(1), t1 - t0, ys.stride(2));
    }
  if (ys.data != y.data) ops::copy(ctx, ys, y);
}

}  // namespace vinf::cuda
