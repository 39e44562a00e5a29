// Fast GEMMs: one (batched) matrix product on the views as they are (cpu/blas.hpp); a view the
// product cannot read is copied first, and the bias is added by the product itself.
#include <algorithm>
#include <numeric>

#include "cpu/blas.hpp"
#include "cpu/cpu.hpp"
#include "cpu/loops.hpp"
#include "exec/layout.hpp"

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

// x rounded to bf16 (--dtype bf16: the products multiply bf16). A dense view keeps its memory
// order (a permuted activation stays readable with the same strides, without a layout copy).
OwnedTensor rounded_to_bf16(ExecContext& ctx, const Tensor& x) {
  std::array<int, kMaxDims> order{};
  std::iota(order.begin(), order.begin() + x.rank(), 0);
  std::stable_sort(order.begin(), order.begin() + x.rank(), [&](int a, int b) { return x.stride(a) > x.stride(b); });
  Tensor mem = x;  // x's dims in memory order, outermost first
  mem.shape = Shape();
  for (int i = 0; i < x.rank(); ++i) {
    mem.shape.push_back(x.size(order[i]));
    mem.strides[i] = x.stride(order[i]);
  }
  if (!mem.is_contiguous()) {
    OwnedTensor hx = ctx.arena->empty(DType::bf16, x.shape);
    copy(x, hx);
    return hx;
  }
  OwnedTensor hx = ctx.arena->empty(DType::bf16, mem.shape);
  copy(mem, hx);
  Tensor view = hx;  // back in x's order
  view.shape = x.shape;
  for (int i = 0; i < x.rank(); ++i) view.strides[order[i]] = hx.stride(i);
  static_cast<Tensor&>(hx) = view;
  return hx;
}

// The 2-D view of t over (dim d, last dim).
Tensor matrix_over(const Tensor& t, int d) {
  Tensor m = t;
  m.shape = Shape{t.size(d), t.size(-1)};
  m.strides[0] = t.stride(d);
  m.strides[1] = t.stride(-1);
  return m;
}

// How y = x w^T maps onto batched products: the leading dim whose (dim, last) matrices both views
// can read (x either way, y row- or column-major), the longest other leading dim as the
// products' batch, and the rest looped over.
struct ProductSplit {
  int row = -1, batch = -1;
  exec::MatrixLayout x, y;
};

bool split_product(const Tensor& x, const Tensor& y, ProductSplit& s) {
  const int lead = x.rank() - 1;
  for (int d = 0; d < lead; ++d) {
    exec::MatrixLayout lx, ly;
    if (!exec::matrix_layout(matrix_over(x, d), lx) || !exec::matrix_layout(matrix_over(y, d), ly)) continue;
    if (s.row >= 0 && x.size(d) <= x.size(s.row)) continue;
    s.row = d;
    s.x = lx;
    s.y = ly;
  }
  if (s.row < 0) return false;
  for (int d = 0; d < lead; ++d)
    if (d != s.row && x.size(d) > 1 && (s.batch < 0 || x.size(d) > x.size(s.batch))) s.batch = d;
  return true;
}

}  // namespace

void linear(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, float beta) {
  const std::int64_t N = w.size(0), K = w.size(1);
  if (y.numel() == 0) return;
  OwnedTensor hx, hw, hy;
  Tensor xs = x;
  if (w.dtype == DType::bf16 && x.dtype != DType::bf16) {  // --dtype bf16: the rows rounded to bf16 once
    hx = rounded_to_bf16(ctx, x);
    xs = hx;
  }
  ProductSplit s;
  if (!split_product(xs, y, s)) {  // no layout the products can read: contiguous copies
    const Tensor dense_y = Tensor::wrap(y.data, y.dtype, y.device, y.shape);  // a probe of x's side only
    if (!split_product(xs, dense_y, s)) {
      OwnedTensor cx = ctx.arena->empty(xs.dtype, xs.shape);
      copy(xs, cx);
      hx = std::move(cx);
      xs = hx;
    }
    s = ProductSplit{};
    if (!split_product(xs, y, s)) {
      hy = ctx.arena->empty(DType::f32, y.shape);
      if (beta != 0.f) copy(y, hy);
      linear(ctx, xs, w, bias, hy, beta);
      copy(hy, y);
      return;
    }
  }
  BlasMatrix wm;
  readable_or_copy(ctx, w, hw, wm);
  BlasMatrix xm;
  xm.bf16 = xs.dtype == DType::bf16;
  xm.transposed = s.x.transposed;
  xm.ld = s.x.ld;
  const std::int64_t rows = xs.size(s.row), batch = s.batch < 0 ? 1 : xs.size(s.batch);
  const std::int64_t x_batch = s.batch < 0 ? 0 : xs.stride(s.batch), y_batch = s.batch < 0 ? 0 : y.stride(s.batch);
  const bool y_columns = s.y.transposed;  // y's matrices column-major: the product computes y^T = w x^T
  if (y_columns && bias) {  // y^T's rows get the bias: added first, the product then accumulates
    const Tensor b = bias->expand(y.shape);
    if (beta == 0.f) copy(b, y);
    else axpby(beta, y, 1.f, b, y);
    beta = 1.f;
  }
  // The remaining leading dims: an odometer over them.
  const int lead = xs.rank() - 1;
  std::array<std::int64_t, kMaxDims> idx{};
  for (;;) {
    std::int64_t xo = 0, yo = 0;
    for (int d = 0; d < lead; ++d) {
      xo += idx[d] * xs.stride(d);
      yo += idx[d] * y.stride(d);
    }
    xm.data = static_cast<const char*>(xs.data) + xo * static_cast<std::int64_t>(dtype_size(xs.dtype));
    float* c = y.ptr<float>() + yo;
    if (!y_columns) {
      BlasMatrix wt = wm;
      wt.transposed = !wt.transposed;  // y = x * w^T
      gemm(ctx, batch, rows, N, K, 1.f, xm, x_batch, wt, 0, beta, c, s.y.ld, y_batch, bias ? bias->ptr<float>() : nullptr,
           bias ? bias->stride(0) : 1);
    } else {
      BlasMatrix xt = xm;
      xt.transposed = !xt.transposed;  // y^T = w * x^T
      gemm(ctx, batch, N, rows, K, 1.f, wm, 0, xt, x_batch, beta, c, s.y.ld, y_batch);
    }
    int d = 0;
    for (; d < lead; ++d) {
      if (d == s.row || d == s.batch) continue;
      if (++idx[d] < xs.size(d)) break;
      idx[d] = 0;
    }
    if (d == lead) break;
  }
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

namespace vinf::cpu::fast {

void linear_geglu(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) {
  const std::int64_t M = x.size(0), K = x.size(1), F = out.size(1);
  OwnedTensor hx, hx2, hwh, hwg, hout;
  Tensor xs = x;
  if (w.dtype == DType::bf16 && x.dtype != DType::bf16) {
    hx = rounded_to_bf16(ctx, x);
    xs = hx;
  }
  BlasMatrix xm, wh, wg;
  readable_or_copy(ctx, xs, hx2, xm);
  readable_or_copy(ctx, w.slice(0, 0, F), hwh, wh);
  readable_or_copy(ctx, w.slice(0, F, F), hwg, wg);
  wh.transposed = !wh.transposed;  // x * w^T
  wg.transposed = !wg.transposed;
  const float* bh = bias ? bias->ptr<float>() : nullptr;
  const float* bg = bias ? bias->ptr<float>() + F * bias->stride(0) : nullptr;
  const std::int64_t bs = bias ? bias->stride(0) : 1;
  // gelu(x w_gate^T + b_gate), then (x w_hidden^T + b_hidden) times it, stored in out's dtype.
  OwnedTensor gate = ctx.arena->empty(DType::f32, {M, F});
  GemmEpilogue gelu;
  gelu.gelu = true;
  gemm(ctx, 1, M, F, K, 1.f, xm, 0, wg, 0, 0.f, gate.data, F, 0, bg, bs, gelu);
  Tensor dst = out;
  if (out.stride(1) != 1 || (M > 1 && out.stride(0) < F)) {
    hout = ctx.arena->empty(out.dtype, out.shape);
    dst = hout;
  }
  GemmEpilogue mul;
  mul.mul = gate.ptr<float>();
  mul.ld_mul = F;
  mul.bf16_out = dst.dtype == DType::bf16;
  gemm(ctx, 1, M, F, K, 1.f, xm, 0, wh, 0, 0.f, dst.data, M == 1 ? F : dst.stride(0), 0, bh, bs, mul);
  if (hout.data) copy(hout, out);
}

}  // namespace vinf::cpu::fast
