// Fast GEMMs: one (batched) matrix product on the views as they are (cpu/blas.hpp); a view the
// product cannot read is copied first, and the bias is added by the product itself.
#include "cpu/blas.hpp"
#include "cpu/cpu.hpp"
#include "cpu/loops.hpp"

namespace vinf::cpu::fast {
namespace {

// A readable version of m: m itself, or a contiguous copy held in `hold`. For a batch of matrices
// (rank 3) the layout of the first one stands for all (the strides are shared).
Tensor readable_or_copy(ExecContext& ctx, const Tensor& m, OwnedTensor& hold, BlasMatrix& out) {
  const Tensor first = m.rank() == 3 ? m.select(0, 0) : m;
  if (as_blas_matrix(first, out)) return m;
  hold = ctx.arena->empty(m.dtype, m.shape);
  copy(m, hold);
  as_blas_matrix(m.rank() == 3 ? Tensor(hold).select(0, 0) : Tensor(hold), out);
  return hold;
}

}  // namespace

void linear(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, float beta) {
  const std::int64_t M = x.size(0), N = w.size(0), K = x.size(1);
  OwnedTensor hx, hw, hy;
  BlasMatrix a, b;
  if (w.dtype == DType::bf16 && x.dtype != DType::bf16) {  // --dtype bf16: the rows rounded to bf16 once
    hx = ctx.arena->empty(DType::bf16, x.shape);
    round_to_bf16(x, hx);
    as_blas_matrix(hx, a);
  } else {
    readable_or_copy(ctx, x, hx, a);
  }
  readable_or_copy(ctx, w, hw, b);
  b.transposed = !b.transposed;  // y = x * w^T
  Tensor out = y;
  const bool direct = y.stride(1) == 1 && (M == 1 || y.stride(0) >= N);
  if (!direct) {
    hy = ctx.arena->empty(DType::f32, y.shape);
    if (beta != 0.f) copy(y, hy);
    out = hy;
  }
  gemm(ctx, 1, M, N, K, 1.f, a, 0, b, 0, beta, out.ptr<float>(), M == 1 ? N : out.stride(0), 0,
       bias ? bias->ptr<float>() : nullptr, bias ? bias->stride(0) : 1);
  if (!direct) copy(out, y);
}

void bmm(ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out, float alpha, float beta) {
  const std::int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  if (B == 0 || M == 0 || N == 0) return;
  const bool direct = out.stride(2) == 1 && (M == 1 || out.stride(1) >= N);
  OwnedTensor hold, ha, hb;
  Tensor dst = out;
  if (!direct) {
    hold = ctx.arena->empty(DType::f32, out.shape);
    if (beta != 0.f) copy(out, hold);
    dst = hold;
  }
  BlasMatrix ma, mb;
  const Tensor as = readable_or_copy(ctx, a, ha, ma);
  const Tensor bs = readable_or_copy(ctx, b, hb, mb);
  gemm(ctx, B, M, N, K, alpha, ma, B > 1 ? as.stride(0) : 0, mb, B > 1 ? bs.stride(0) : 0, beta, dst.ptr<float>(),
       M == 1 ? N : dst.stride(1), B > 1 ? dst.stride(0) : 0);
  if (!direct) copy(dst, out);
}

}  // namespace vinf::cpu::fast
