// Matrix products: CPU through oneDNN matmul (OpenBLAS sgemm with VINF_CPU_GEMM=openblas), CUDA
// through cuBLAS with f32 accumulation.
#pragma once

#include "ops/context.hpp"

namespace vinf::ops {

// y[..., N] = x[..., K] * w[N, K]^T (+ bias[N]). The leading dims of x and y are flattened; the
// last dim of x, w and y must be contiguous.
void linear(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y);
// y[..., N] += x[..., K] * w[N, K]^T (+ bias[N]): a residual added by the product itself on the
// CPU (oneDNN's sum post-op: no separate pass over y); CUDA computes it as linear, then add.
void linear_add(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y);

// out[b] = alpha * a[b] @ b[b] + beta * out[b]; a [B, M, K], b [B, K, N], out [B, M, N]. Each
// matrix may be transposed in memory (one of its two strides must be 1, the batch stride is free,
// 0 broadcasts).
void bmm(ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out, float alpha = 1.f, float beta = 0.f);

}  // namespace vinf::ops
