#include "ops/optim.hpp"

#include <cmath>

#include "core/error.hpp"
#include "ops/dispatch.hpp"
#include "ops/elementwise.hpp"

namespace vinf::ops {
namespace {

void check_flat_f32(const ExecContext& ctx, const char* op, const char* name, const Tensor& t, std::int64_t n) {
  check_on_device(ctx, op, name, t);
  check_dtype(op, name, t, DType::f32);
  VINF_CHECK(t.is_contiguous() && t.numel() == n, op, ": ", name, " must be contiguous with ", n, " elements, got ",
             t.describe());
}

}  // namespace

void adamw_update(ExecContext& ctx, const AdamWUpdate& s, const Tensor& p, const Tensor& g, const Tensor& m,
                  const Tensor& v, const Tensor* copy) {
  const ProfileOp profile_op(ctx, "adamw_update");
  const char* op = "adamw_update";
  const std::int64_t n = p.numel();
  check_flat_f32(ctx, op, "p", p, n);
  check_flat_f32(ctx, op, "g", g, n);
  check_flat_f32(ctx, op, "m", m, n);
  check_flat_f32(ctx, op, "v", v, n);
  if (copy) {
    check_on_device(ctx, op, "copy", *copy);
    VINF_CHECK(copy->is_contiguous() && copy->numel() == n && is_floating(copy->dtype), op,
               ": copy must be a contiguous float tensor of ", n, " elements, got ", copy->describe());
  }
  if (n == 0) return;
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(
        cuda::adamw_update(ctx, s.lr / s.c1, s.beta1, s.beta2, s.eps, s.decay, s.c2, s.grad_scale, p, g, m, v, copy));
    return;
  }
  float* pp = p.ptr<float>();
  const float* gg = g.ptr<float>();
  float* mm = m.ptr<float>();
  float* vv = v.ptr<float>();
  const double step = s.lr / s.c1;
#pragma omp parallel for schedule(static) if (n >= 4096)
  for (std::int64_t i = 0; i < n; ++i) {
    const double gi = static_cast<double>(gg[i]) * s.grad_scale;
    const double mi = s.beta1 * mm[i] + (1.0 - s.beta1) * gi;
    const double vi = s.beta2 * vv[i] + (1.0 - s.beta2) * gi * gi;
    mm[i] = static_cast<float>(mi);
    vv[i] = static_cast<float>(vi);
    pp[i] = static_cast<float>(pp[i] * s.decay - step * mi / (std::sqrt(vi) / s.c2 + s.eps));
  }
  if (copy) ops::copy(ctx, p, *copy);
}

double sum_squares(ExecContext& ctx, const Tensor& x) {
  const ProfileOp profile_op(ctx, "sum_squares");
  check_flat_f32(ctx, "sum_squares", "x", x, x.numel());
  if (x.numel() == 0) return 0;
  if (ctx.device.is_cuda()) {
    double sum = 0;
    VINF_ON_CUDA(sum = cuda::sum_squares(ctx, x));
    return sum;
  }
  const float* g = x.ptr<float>();
  const std::int64_t n = x.numel();
  double sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(g[i]) * g[i];
  return sum;
}

}  // namespace vinf::ops
