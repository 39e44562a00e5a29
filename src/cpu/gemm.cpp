// Fast GEMMs: OpenBLAS sgemm on the views as they are; a view BLAS cannot read is copied first.
#include "cpu/blas.hpp"
#include "cpu/cpu.hpp"
#include "cpu/loops.hpp"

namespace vinf::cpu::fast {
namespace {

// A BLAS-readable version of m: m itself, or a contiguous copy held in `hold`.
BlasMatrix blas_or_copy(ExecContext& ctx, const Tensor& m, OwnedTensor& hold) {
  BlasMatrix b;
  if (as_blas_matrix(m, b)) return b;
  hold = ctx.arena->empty(DType::f32, m.shape);
  copy(m, hold);
  as_blas_matrix(hold, b);
  return b;
}

}  // namespace

void linear(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) {
  const std::int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  OwnedTensor hx, hw, hy;
  const BlasMatrix a = blas_or_copy(ctx, x, hx);
  BlasMatrix b = blas_or_copy(ctx, w, hw);
  b.transposed = !b.transposed;  // y = x * w^T
  Tensor out = y;
  const bool direct = y.stride(1) == 1 && (M == 1 || y.stride(0) >= N);
  if (!direct) {
    hy = ctx.arena->empty(DType::f32, y.shape);
    out = hy;
  }
  float beta = 0.f;
  if (bias) {
    copy(bias->unsqueeze(0).expand(out.shape), out);  // sgemm then accumulates onto the bias
    beta = 1.f;
  }
  sgemm(M, N, K, 1.f, a, b, beta, out.ptr<float>(), M == 1 ? N : out.stride(0));
  if (!direct) copy(out, y);
}

void bmm(ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out, float alpha, float beta) {
  const std::int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  const bool direct = out.stride(2) == 1 && (M == 1 || out.stride(1) >= N);
  OwnedTensor hold;
  Tensor dst = out;
  if (!direct) {
    hold = ctx.arena->empty(DType::f32, out.shape);
    if (beta != 0.f) copy(out, hold);
    dst = hold;
  }
  for (std::int64_t i = 0; i < B; ++i) {
    OwnedTensor ha, hb;
    const BlasMatrix ma = blas_or_copy(ctx, a.select(0, i), ha);
    const BlasMatrix mb = blas_or_copy(ctx, b.select(0, i), hb);
    const Tensor c = dst.select(0, i);
    sgemm(M, N, K, alpha, ma, mb, beta, c.ptr<float>(), M == 1 ? N : c.stride(0));
  }
  if (!direct) copy(dst, out);
}

}  // namespace vinf::cpu::fast
