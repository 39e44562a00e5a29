// Matrix products: CPU through oneDNN matmul (OpenBLAS sgemm with VINF_CPU_GEMM=openblas), CUDA
// through cuBLAS with f32 accumulation.
#pragma once

#include "ops/context.hpp"

namespace vinf::ops {

// y[..., N] = x[..., K] * w[N, K]^T (+ bias[N]); x and y share their leading dims, in any strides.
// Views whose leading dims merge are one product over rows; others (a permuted activation, an
// output written transposed) are read and written in place by the CPU's products, and go through
// contiguous copies elsewhere. On the CPU with bf16 weights x may be bf16 too (a product's input
// that an earlier op stored rounded).
void linear(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y);
// y[..., N] += x[..., K] * w[N, K]^T (+ bias[N]): a residual added by the product itself on the
// CPU (oneDNN's sum post-op: no separate pass over y); CUDA computes it as linear, then add.
void linear_add(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y);
// out[..., F] = geglu(x[..., K] * w[2F, K]^T + bias[2F]): the feed-forward's first product and its
// gate in one (the CPU runs the GELU and the multiplication as the products' post-ops, without the
// 2F-wide intermediate). On the CPU with bf16 weights out may be bf16, the next product's input.
void linear_geglu(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out);

// out[b] = alpha * a[b] @ b[b] + beta * out[b]; a [B, M, K], b [B, K, N], out [B, M, N]. Each
// matrix may be transposed in memory (one of its two strides must be 1, the batch stride is free,
// 0 broadcasts).
void bmm(ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out, float alpha = 1.f, float beta = 0.f);

}  // namespace vinf::ops
