#include "ops/norm.hpp"

#include "core/arena.hpp"
#include "ops/dispatch.hpp"
#include "exec/gpu_kernels.hpp"
#include "ops/views.hpp"

namespace vinf::ops {
namespace {

void check_affine(const ExecContext& ctx, const char* op, const Tensor& p, std::int64_t c, const char* name) {
  VINF_CHECK(p.rank() == 1 && p.size(0) == c, op, ": ", name, " must be [", c, "], got ", p.describe());
  check_on_device(ctx, op, name, p);
  detail::check_compute_dtype(ctx, op, name, p);
}

Tensor check_group_norm_input(const ExecContext& ctx, const char* op, const Tensor& x, int groups,
                              const Tensor* y = nullptr) {
  check_on_device(ctx, op, "x", x);
  detail::check_compute_dtype(ctx, op, "x", x);
  const Tensor v = detail::as_nc_ts(op, "x", x, y);
  VINF_CHECK(groups > 0 && v.size(1) % groups == 0, op, ": ", v.size(1), " channels do not split into ", groups,
             " groups");
  return v;
}

void check_sums(const ExecContext& ctx, const char* op, const Tensor& sums, std::int64_t n, int groups) {
  check_on_device(ctx, op, "sums", sums);
  check_dtype(op, "sums", sums, DType::f64);
  VINF_CHECK(sums.rank() == 3 && sums.size(0) == n && sums.size(1) == groups && sums.size(2) == 2, op,
             ": sums must be f64[", n, ",", groups, ",2], got ", sums.describe());
}

}  // namespace

void group_norm_sums(ExecContext& ctx, const Tensor& x, int groups, const Tensor& sums) {
  const ProfileOp profile_op(ctx, "group_norm_sums");
  const Tensor v = check_group_norm_input(ctx, "group_norm_sums", x, groups);
  check_sums(ctx, "group_norm_sums", sums, v.size(0), groups);
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::group_norm_sums(ctx, v, groups, sums));
    return;
  }
  detail::reference(ctx) ? cpu::ref::group_norm_sums(v, groups, sums) : cpu::fast::group_norm_sums(v, groups, sums);
}

void group_norm_apply(ExecContext& ctx, const Tensor& x, const Tensor& sums, double count, const Tensor& gamma,
                      const Tensor& beta, const Tensor& y, const GroupNormParams& p) {
  const ProfileOp profile_op(ctx, "group_norm_apply");
  const char* op = "group_norm_apply";
  check_same_shape(op, "x", x, "y", y);
  const Tensor v = check_group_norm_input(ctx, op, x, p.groups, &y);
  check_on_device(ctx, op, "y", y);
  detail::check_compute_dtype(ctx, op, "y", y);
  const Tensor vy = detail::as_nc_ts(op, "y", y, &x);
  check_sums(ctx, op, sums, v.size(0), p.groups);
  check_affine(ctx, op, gamma, v.size(1), "gamma");
  check_affine(ctx, op, beta, v.size(1), "beta");
  VINF_CHECK(count > 0, op, ": element count must be positive, got ", count);
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::group_norm_apply(ctx, v, sums, count, gamma, beta, vy, p));
    return;
  }
  detail::reference(ctx) ? cpu::ref::group_norm_apply(v, sums, count, gamma, beta, vy, p)
                         : cpu::fast::group_norm_apply(v, sums, count, gamma, beta, vy, p);
}

void group_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                const GroupNormParams& p) {
  const ProfileOp profile_op(ctx, "group_norm");
  const Tensor v = check_group_norm_input(ctx, "group_norm", x, p.groups);
  if (ctx.device.is_cuda() && gpu_kernel_enabled(ctx, GpuKernel::group_norm)) {
    // One kernel where the layout allows (the arguments checked as group_norm_apply checks them).
    const char* op = "group_norm";
    check_same_shape(op, "x", x, "y", y);
    check_on_device(ctx, op, "y", y);
    detail::check_compute_dtype(ctx, op, "y", y);
    const Tensor vy = detail::as_nc_ts(op, "y", y, &x);
    check_affine(ctx, op, gamma, v.size(1), "gamma");
    check_affine(ctx, op, beta, v.size(1), "beta");
    bool done = false;
    VINF_ON_CUDA(done = cuda::group_norm_runs(ctx, v, gamma, beta, vy, p));
    if (done) return;
  }
  OwnedTensor sums = ctx.arena->empty(DType::f64, {v.size(0), p.groups, 2});
  group_norm_sums(ctx, x, p.groups, sums);
  const double count = static_cast<double>(v.size(1) / p.groups * v.size(2) * v.size(3));
  group_norm_apply(ctx, x, sums, count, gamma, beta, y, p);
}

void layer_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                float eps) {
  const ProfileOp profile_op(ctx, "layer_norm");
  const char* op = "layer_norm";
  check_same_shape(op, "x", x, "y", y);
  check_on_device(ctx, op, "x", x);
  check_on_device(ctx, op, "y", y);
  detail::check_compute_dtype(ctx, op, "x", x);
  // On the CPU y may also be bf16: the input of bf16 products (--dtype bf16), rounded once here.
  const bool cpu_bf16_y = ctx.device.is_cpu() && y.dtype == DType::bf16;
  if (!cpu_bf16_y) detail::check_compute_dtype(ctx, op, "y", y);
  const Tensor rx = detail::as_rows(op, "x", x), ry = detail::as_rows(op, "y", y);
  VINF_CHECK(rx.stride(1) == 1 && ry.stride(1) == 1, op, ": the last dim of x and y must be contiguous");
  check_affine(ctx, op, gamma, rx.size(1), "gamma");
  check_affine(ctx, op, beta, rx.size(1), "beta");
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::layer_norm(ctx, rx, gamma, beta, ry, eps));
    return;
  }
  if (!detail::reference(ctx)) {
    cpu::fast::layer_norm(rx, gamma, beta, ry, eps);
    return;
  }
  if (!cpu_bf16_y) {
    cpu::ref::layer_norm(rx, gamma, beta, ry, eps);
    return;
  }
  OwnedTensor normed = ctx.arena->empty(DType::f32, rx.shape);
  cpu::ref::layer_norm(rx, gamma, beta, normed, eps);
  cpu::ref::copy(normed, ry);
}

void rms_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& y, float eps) {
  const ProfileOp profile_op(ctx, "rms_norm");
  const char* op = "rms_norm";
  check_same_shape(op, "x", x, "y", y);
  detail::check_operands(ctx, op, {&x, &y});
  const Tensor rx = detail::as_rows(op, "x", x), ry = detail::as_rows(op, "y", y);
  VINF_CHECK(rx.stride(1) == 1 && ry.stride(1) == 1, op, ": the last dim of x and y must be contiguous");
  check_affine(ctx, op, gamma, rx.size(1), "gamma");
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::rms_norm(ctx, rx, gamma, ry, eps));
    return;
  }
  cpu::ref::rms_norm(rx, gamma, ry, eps);
}

}  // namespace vinf::ops
