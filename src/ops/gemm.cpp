#include "ops/gemm.hpp"

#include "ops/activation.hpp"
#include "ops/dispatch.hpp"
#include "ops/elementwise.hpp"
#include "ops/views.hpp"

namespace vinf::ops {

namespace {

// y (+)= x w^T (+ bias), accumulating onto y when `accumulate`.
void linear_into(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                 bool accumulate) {
  const char* op = accumulate ? "linear_add" : "linear";
  check_rank(op, "w", w, 2);
  const std::int64_t N = w.size(0), K = w.size(1);
  VINF_CHECK(x.rank() >= 1 && x.size(-1) == K, op, ": x ", x.describe(), " must end in ", K, " to match w ",
             w.describe());
  VINF_CHECK(y.rank() == x.rank() && y.size(-1) == N, op, ": y ", y.describe(), " must be x's shape with last dim ", N);
  for (int d = 0; d + 1 < x.rank(); ++d)
    VINF_CHECK(x.size(d) == y.size(d), op, ": x ", x.describe(), " and y ", y.describe(), " differ in dim ", d);
  detail::check_weights(ctx, op, w);
  detail::check_product_operand(ctx, op, "x", x, w);
  detail::check_operands(ctx, op, {&y});
  if (bias) {
    VINF_CHECK(bias->rank() == 1 && bias->size(0) == N, op, ": bias must be [", N, "], got ", bias->describe());
    check_on_device(ctx, op, "bias", *bias);
    detail::check_compute_dtype(ctx, op, "bias", *bias);
  }
  Tensor rx, ry;
  if (!detail::rows_view(x, rx) || !detail::rows_view(y, ry)) {
    // Rows that do not merge (a permuted activation, an output written transposed): the CPU's
    // products read and write such views in place; elsewhere they go through contiguous copies.
    if (ctx.device.is_cpu() && !detail::reference(ctx)) {
      cpu::fast::linear(ctx, x, w, bias, y, accumulate ? 1.f : 0.f);
      return;
    }
    OwnedTensor cx, cy = ctx.arena->empty(y.dtype, y.shape);
    if (!detail::rows_view(x, rx)) {
      cx = ctx.arena->empty(x.dtype, x.shape);
      copy(ctx, x, cx);
    }
    linear_into(ctx, cx.data ? Tensor(cx) : x, w, bias, cy, false);
    if (accumulate)
      add(ctx, y, cy, y);
    else
      copy(ctx, cy, y);
    return;
  }
  if (accumulate && (ctx.device.is_cuda() || detail::reference(ctx))) {  // the product, then the sum
    OwnedTensor product = ctx.arena->empty(y.dtype, ry.shape);
    linear_into(ctx, rx, w, bias, product, false);
    add(ctx, ry, product, ry);
    return;
  }
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::linear(ctx, rx, w, bias, ry));
    return;
  }
  if (detail::reference(ctx)) {
    OwnedTensor hold, hold_x;
    cpu::ref::linear(detail::widened_weights(ctx, rx, hold_x), detail::widened_weights(ctx, w, hold), bias, ry);
    return;
  }
  cpu::fast::linear(ctx, rx, w, bias, ry, accumulate ? 1.f : 0.f);
}

}  // namespace

void linear(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) {
  const ProfileOp profile_op(ctx, "linear");
  linear_into(ctx, x, w, bias, y, false);
}

void linear_add(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) {
  const ProfileOp profile_op(ctx, "linear_add");
  linear_into(ctx, x, w, bias, y, true);
}

void linear_geglu(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) {
  const ProfileOp profile_op(ctx, "linear_geglu");
  const char* op = "linear_geglu";
  check_rank(op, "w", w, 2);
  const std::int64_t F = w.size(0) / 2, K = w.size(1);
  VINF_CHECK(w.size(0) % 2 == 0, op, ": w ", w.describe(), " must have an even number of rows (hidden, then gate)");
  VINF_CHECK(x.rank() >= 1 && x.size(-1) == K, op, ": x ", x.describe(), " must end in ", K, " to match w ",
             w.describe());
  VINF_CHECK(out.rank() == x.rank() && out.size(-1) == F, op, ": out ", out.describe(),
             " must be x's shape with last dim ", F);
  for (int d = 0; d + 1 < x.rank(); ++d)
    VINF_CHECK(x.size(d) == out.size(d), op, ": x ", x.describe(), " and out ", out.describe(), " differ in dim ", d);
  detail::check_weights(ctx, op, w);
  detail::check_product_operand(ctx, op, "x", x, w);
  detail::check_product_operand(ctx, op, "out", out, w);
  if (bias) {
    VINF_CHECK(bias->rank() == 1 && bias->size(0) == 2 * F, op, ": bias must be [", 2 * F, "], got ", bias->describe());
    check_on_device(ctx, op, "bias", *bias);
    detail::check_compute_dtype(ctx, op, "bias", *bias);
  }
  const Tensor rx = detail::as_rows(op, "x", x), rout = detail::as_rows(op, "out", out);
  if (ctx.device.is_cpu() && !detail::reference(ctx)) {
    cpu::fast::linear_geglu(ctx, rx, w, bias, rout);
    return;
  }
  // Elsewhere: the product, then the gate.
  const DType dt = ctx.device.is_cpu() ? DType::f32 : out.dtype;
  OwnedTensor proj = ctx.arena->empty(dt, {rx.size(0), 2 * F});
  linear(ctx, rx, w, bias, proj);
  if (out.dtype == dt) {
    geglu(ctx, proj, rout);
    return;
  }
  OwnedTensor gated = ctx.arena->empty(dt, rout.shape);
  geglu(ctx, proj, gated);
  copy(ctx, gated, rout);
}

void bmm(ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out, float alpha, float beta) {
  const ProfileOp profile_op(ctx, "bmm");
  const char* op = "bmm";
  check_rank(op, "a", a, 3);
  check_rank(op, "b", b, 3);
  check_rank(op, "out", out, 3);
  VINF_CHECK(a.size(0) == out.size(0) && b.size(0) == out.size(0) && a.size(1) == out.size(1) &&
                 b.size(2) == out.size(2) && a.size(2) == b.size(1),
             op, ": shapes do not chain: a ", a.describe(), " @ b ", b.describe(), " -> out ", out.describe());
  detail::check_operands(ctx, op, {&a, &b, &out});
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::bmm(ctx, a, b, out, alpha, beta));
    return;
  }
  detail::reference(ctx) ? cpu::ref::bmm(a, b, out, alpha, beta) : cpu::fast::bmm(ctx, a, b, out, alpha, beta);
}

}  // namespace vinf::ops
