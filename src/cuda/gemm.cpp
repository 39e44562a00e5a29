// GEMMs through cuBLAS: row-major products mapped onto column-major cuBLAS by computing
// C^T = op(B)^T op(A)^T, f32 accumulation for every storage type (TF32 inputs for f32 only
// when allow_tf32()).
#include "cuda/gemm.hpp"

#include <cublasLt.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/error.hpp"
#include "cuda/check.hpp"
#include "cuda/context.hpp"
#include "cuda/ops.hpp"
#include "exec/gpu_kernels.hpp"
#include "exec/layout.hpp"
#include "exec/tf32.hpp"

namespace vinf::cuda {

cudaDataType_t cuda_dtype(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: VINF_FAIL("no cuBLAS type for ", dtype_name(t));
  }
}

void gemm_rowmajor(ExecContext& ctx, DType dtype, DType c_dtype, std::int64_t M, std::int64_t N, std::int64_t K,
                   float alpha, const GemmOperand& a, const GemmOperand& b, float beta, void* c, std::int64_t ldc,
                   std::int64_t batch, std::int64_t stride_c) {
  if (M == 0 || N == 0 || batch == 0) return;
  constexpr std::int64_t kMax = 0x7fffffff;
  VINF_CHECK(M <= kMax && N <= kMax && K <= kMax && a.ld <= kMax && b.ld <= kMax && ldc <= kMax && batch <= kMax,
             "GEMM dimensions exceed cuBLAS's 32-bit interface (M=", M, ", N=", N, ", K=", K, ")");
  VINF_CHECK(c_dtype == dtype || c_dtype == DType::f32, "GEMM: ", dtype_name(dtype), " inputs give ", dtype_name(dtype),
             " or f32, not ", dtype_name(c_dtype));
  const cudaDataType_t t = cuda_dtype(dtype), tc = cuda_dtype(c_dtype);
  const cublasComputeType_t compute =
      dtype == DType::f32 && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  count_library_call();
  VINF_CHECK_CUBLAS(cublasGemmStridedBatchedEx(
      ctx.cuda->cublas(), b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha, b.data, t, static_cast<int>(b.ld),
      b.batch_stride, a.data, t, static_cast<int>(a.ld), a.batch_stride, &beta, c, tc,
      static_cast<int>(std::max<std::int64_t>(ldc, 1)), stride_c, static_cast<int>(batch), compute,
      CUBLAS_GEMM_DEFAULT));
}

namespace {

// cuBLAS reads views with one unit stride; anything else is copied to a contiguous block.
GemmOperand operand(ExecContext& ctx, const Tensor& m3, OwnedTensor& hold) {
  // m3 is [batch, rows, cols]; all batch entries share the layout of entry 0.
  exec::MatrixLayout bm;
  const Tensor m = m3.select(0, 0);
  Tensor src = m3;
  if (!exec::matrix_layout(m, bm)) {
    hold = ctx.arena->empty(m3.dtype, m3.shape);
    cuda::copy(ctx, m3, hold);
    src = hold;
    exec::matrix_layout(hold.select(0, 0), bm);
  }
  return {src.data, bm.transposed, bm.ld, src.size(0) > 1 ? src.stride(0) : 0};
}

template <class Value>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const Value& value) {
  VINF_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

// The largest power of two up to 256 that divides the address: what cuBLASLt may assume of it.
std::uint32_t alignment_of(const void* p) {
  std::uint32_t a = 256;
  while (a > 1 && reinterpret_cast<std::uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

// The cuBLASLt plan of a linear layer (see linear_lt): descriptors, layouts and the heuristic's
// algorithm for operands of the given alignments.
std::unique_ptr<LtPlan> make_lt_plan(ExecContext& ctx, DType dtype, std::int64_t M, std::int64_t N, std::int64_t K,
                                     const GemmOperand& a, const GemmOperand& b, bool bias, std::int64_t ldc,
                                     const std::uint32_t (&align)[3]) {
  auto p = std::make_unique<LtPlan>();
  const cudaDataType_t t = cuda_dtype(dtype);
  const cublasComputeType_t compute =
      dtype == DType::f32 && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  VINF_CHECK_CUBLAS(cublasLtMatmulDescCreate(p->desc.put(), compute, CUDA_R_32F));
  const cublasOperation_t op_w = b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                          op_x = a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attribute(p->desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, op_w);
  set_attribute(p->desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, op_x);
  if (bias) {
    set_attribute(p->desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_attribute(p->desc.get(), CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<std::int32_t>(t));
  }
  // The stored matrices, before their transposes: w is N x K (or K x N), x is K x M (or M x K).
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  VINF_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(p->w.put(), t, op_w == CUBLAS_OP_N ? u(N) : u(K),
                                               op_w == CUBLAS_OP_N ? u(K) : u(N), b.ld));
  VINF_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(p->x.put(), t, op_x == CUBLAS_OP_N ? u(K) : u(M),
                                               op_x == CUBLAS_OP_N ? u(M) : u(K), a.ld));
  VINF_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(p->y.put(), t, u(N), u(M), std::max<std::int64_t>(ldc, 1)));
  Owned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> pref;
  VINF_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(pref.put()));
  const std::uint64_t workspace = CudaContext::kLtWorkspaceBytes;
  VINF_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &workspace, sizeof workspace));
  const cublasLtMatmulPreferenceAttributes_t aligned[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  const std::uint32_t of[] = {align[0], align[1], align[2], align[2]};  // w, x, y (C and D)
  for (int i = 0; i < 4; ++i)
    VINF_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref.get(), aligned[i], &of[i], sizeof of[i]));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(ctx.cuda->cublas_lt(), p->desc.get(), p->w.get(), p->x.get(),
                                                          p->y.get(), p->y.get(), pref.get(), 1, &result, &found);
  if (s == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    p->algo = result.algo;
    p->workspace = result.workspaceSize;
    p->runs = true;
  }
  return p;
}

// y (M x N, row stride ldc) = x w^T (+ bias) in one cuBLASLt call (VINF_GPU_KERNELS=
// gemm-epilogues): the plan made once per shape, layout and alignment and kept by the context,
// the workspace the context's, the bias added by the GEMM's epilogue instead of a broadcast copy
// that the GEMM then reads back. The same column-major mapping as gemm_rowmajor: D (N x M) =
// op(w) op(x), the bias a column of N added to every one of D's M columns. False, with nothing
// queued, where cuBLASLt has no kernel for it (the caller takes the cuBLAS way).
bool linear_lt(ExecContext& ctx, DType dtype, std::int64_t M, std::int64_t N, std::int64_t K, const GemmOperand& a,
               const GemmOperand& b, const Tensor* bias, void* out, std::int64_t ldc) {
  // The bias epilogue reads the bias in 16-byte pieces: an unaligned one (a slice) takes the cuBLAS way.
  if ((bias && (bias->dtype != dtype || !bias->is_contiguous() || alignment_of(bias->data) < 16)) || M == 0 || N == 0 ||
      K == 0)
    return false;
  const std::uint32_t align[3] = {alignment_of(b.data), alignment_of(a.data), alignment_of(out)};
  const std::string key =
      detail::concat(dtype_name(dtype), ' ', M, ' ', N, ' ', K, ' ', a.transposed, b.transposed, ' ', a.ld, ' ', b.ld,
                     ' ', ldc, ' ', bias != nullptr, allow_tf32(), ' ', align[0], ' ', align[1], ' ', align[2]);
  auto& plans = ctx.cuda->lt_plans();
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_lt_plan(ctx, dtype, M, N, K, a, b, bias, ldc, align)).first;
  LtPlan& p = *it->second;
  if (!p.runs) return false;
  if (bias) set_attribute(p.desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias->data));
  const float alpha = 1.f, beta = 0.f;
  const cublasStatus_t s =
      cublasLtMatmul(ctx.cuda->cublas_lt(), p.desc.get(), &alpha, b.data, p.w.get(), a.data, p.x.get(), &beta, out,
                     p.y.get(), out, p.y.get(), &p.algo, ctx.cuda->lt_workspace(), p.workspace, ctx.cuda->stream());
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) {
    p.runs = false;
    return false;
  }
  VINF_CHECK_CUBLAS(s);
  count_library_call();
  return true;
}

void check_same_dtype(const char* op, std::initializer_list<const Tensor*> ts) {
  const DType d = (*ts.begin())->dtype;
  for (const Tensor* t : ts)
    VINF_CHECK(t->dtype == d, op, ": CUDA needs one dtype for all operands, got ", dtype_name(d), " and ",
               t->describe());
}

}  // namespace

void linear(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) {
  check_same_dtype("linear", {&x, &w, &y});
  const std::int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  OwnedTensor hx, hw, hy;
  const GemmOperand a = operand(ctx, x.unsqueeze(0), hx);
  GemmOperand b = operand(ctx, w.unsqueeze(0), hw);
  b.transposed = !b.transposed;  // y = x w^T
  Tensor out = y;
  if (!(y.stride(1) == 1 && (M == 1 || y.stride(0) >= N))) {
    hy = ctx.arena->empty(y.dtype, y.shape);
    out = hy;
  }
  if (gpu_kernel_enabled(ctx, GpuKernel::gemm_epilogues) &&
      linear_lt(ctx, y.dtype, M, N, K, a, b, bias, out.data, M == 1 ? N : out.stride(0))) {
    if (out.data != y.data) cuda::copy(ctx, out, y);
    return;
  }
  float beta = 0.f;
  if (bias) {
    cuda::copy(ctx, bias->unsqueeze(0).expand(out.shape), out);
    beta = 1.f;
  }
  gemm_rowmajor(ctx, y.dtype, y.dtype, M, N, K, 1.f, a, b, beta, out.data, M == 1 ? N : out.stride(0), 1, 0);
  if (out.data != y.data) cuda::copy(ctx, out, y);
}

void bmm(ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out, float alpha, float beta) {
  // a and b share a dtype; out is that dtype or f32 (attention scores of 16-bit q and k stay f32).
  check_same_dtype("bmm", {&a, &b});
  if (out.dtype != DType::f32) check_same_dtype("bmm", {&a, &out});
  const std::int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  OwnedTensor ha, hb, ho;
  const GemmOperand ma = operand(ctx, a, ha), mb = operand(ctx, b, hb);
  Tensor dst = out;
  const bool direct = out.stride(2) == 1 && (M == 1 || out.stride(1) >= N) && (B == 1 || out.stride(0) != 0);
  if (!direct) {
    ho = ctx.arena->empty(out.dtype, out.shape);
    if (beta != 0.f) cuda::copy(ctx, out, ho);
    dst = ho;
  }
  gemm_rowmajor(ctx, a.dtype, out.dtype, M, N, K, alpha, ma, mb, beta, dst.data, M == 1 ? N : dst.stride(1), B,
                B > 1 ? dst.stride(0) : 0);
  if (!direct) cuda::copy(ctx, dst, out);
}

}  // namespace vinf::cuda
