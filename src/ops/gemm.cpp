#include "ops/gemm.hpp"

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
  VINF_CHECK(x.rank() >= 1 && x.size(-1) == K, op, ": x ", x.describe(), " must end in ", K, " to match w ", w.describe());
  VINF_CHECK(y.rank() == x.rank() && y.size(-1) == N, op, ": y ", y.describe(), " must be x's shape with last dim ", N);
  for (int d = 0; d + 1 < x.rank(); ++d)
    VINF_CHECK(x.size(d) == y.size(d), op, ": x ", x.describe(), " and y ", y.describe(), " differ in dim ", d);
  detail::check_operands(ctx, op, {&x, &y});
  detail::check_weights(ctx, op, w);
  if (bias) {
    VINF_CHECK(bias->rank() == 1 && bias->size(0) == N, op, ": bias must be [", N, "], got ", bias->describe());
    check_on_device(ctx, op, "bias", *bias);
    detail::check_compute_dtype(ctx, op, "bias", *bias);
  }
  const Tensor rx = detail::as_rows(op, "x", x), ry = detail::as_rows(op, "y", y);
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
    OwnedTensor hold;
    cpu::ref::linear(rx, detail::widened_weights(ctx, w, hold), bias, ry);
    return;
  }
  cpu::fast::linear(ctx, rx, w, bias, ry, accumulate ? 1.f : 0.f);
}

}  // namespace

void linear(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) {
  linear_into(ctx, x, w, bias, y, false);
}

void linear_add(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) {
  linear_into(ctx, x, w, bias, y, true);
}

void bmm(ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out, float alpha, float beta) {
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
