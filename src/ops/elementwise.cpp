#include "ops/elementwise.hpp"

#include <utility>

#include "ops/dispatch.hpp"

namespace vinf::ops {

void copy(ExecContext& ctx, const Tensor& src, const Tensor& dst) {
  const ProfileOp profile_op(ctx, "copy");
  check_same_shape("copy", "src", src, "dst", dst);
  ++ctx.copy_calls;
  if (src.device.is_cpu() && dst.device.is_cpu()) {
    detail::reference(ctx) ? cpu::ref::copy(src, dst) : cpu::fast::copy(src, dst);
    return;
  }
  VINF_CHECK(ctx.device.is_cuda(), "copy: a copy that involves a CUDA tensor needs a CUDA context (", src.describe(),
             " -> ", dst.describe(), ")");
  VINF_ON_CUDA(cuda::copy(ctx, src, dst));
}

std::vector<FrameRun> frame_runs(std::span<const std::int64_t> src_index, std::span<const std::int64_t> dst_index) {
  VINF_CHECK(src_index.size() == dst_index.size(), "copy_frames: ", src_index.size(), " source indices for ",
             dst_index.size(), " destination indices");
  std::vector<FrameRun> runs;
  for (std::size_t i = 0; i < src_index.size(); ++i) {
    const std::int64_t s = src_index[i], d = dst_index[i];
    if (!runs.empty()) {
      FrameRun& r = runs.back();
      const std::int64_t ds = s - (r.src + (r.count - 1) * r.src_step), dd = d - (r.dst + (r.count - 1) * r.dst_step);
      if (r.count == 1 && ds >= 1 && dd >= 1) {  // a second index fixes the run's steps
        r.src_step = ds;
        r.dst_step = dd;
        ++r.count;
        continue;
      }
      if (r.count > 1 && ds == r.src_step && dd == r.dst_step) {
        ++r.count;
        continue;
      }
    }
    runs.push_back({s, 1, d, 1, 1});
  }
  return runs;
}

namespace {
// t with dimension dim moved to the front (the others keep their order).
Tensor dim_first(const Tensor& t, int dim) {
  Tensor u = t;
  for (int k = dim < 0 ? dim + t.rank() : dim; k > 0; --k) {
    std::swap(u.shape[k], u.shape[k - 1]);
    std::swap(u.strides[k], u.strides[k - 1]);
  }
  return u;
}
}  // namespace

void copy_frames(ExecContext& ctx, const Tensor& src, int src_dim, std::span<const std::int64_t> src_index,
                 const Tensor& dst, int dst_dim, std::span<const std::int64_t> dst_index) {
  const ProfileOp profile_op(ctx, "copy_frames");
  for (const FrameRun& r : frame_runs(src_index, dst_index))
    copy(ctx, dim_first(src.every(src_dim, r.src, r.src_step, r.count), src_dim),
         dim_first(dst.every(dst_dim, r.dst, r.dst_step, r.count), dst_dim));
}

void fill(ExecContext& ctx, const Tensor& dst, double value) {
  const ProfileOp profile_op(ctx, "fill");
  check_on_device(ctx, "fill", "dst", dst);
  ++ctx.copy_calls;
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::fill(ctx, dst, value));
    return;
  }
  detail::reference(ctx) ? cpu::ref::fill(dst, value) : cpu::fast::fill(dst, value);
}

namespace {
void check_binary(const ExecContext& ctx, const char* op, const Tensor& a, const Tensor& b, const Tensor& out) {
  check_same_shape(op, "a", a, "out", out);
  check_same_shape(op, "b", b, "out", out);
  detail::check_operands(ctx, op, {&a, &b, &out});
}
}  // namespace

void axpby(ExecContext& ctx, float alpha, const Tensor& a, float beta, const Tensor& b, const Tensor& out) {
  const ProfileOp profile_op(ctx, "axpby");
  check_binary(ctx, "axpby", a, b, out);
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::axpby(ctx, alpha, a, beta, b, out));
    return;
  }
  detail::reference(ctx) ? cpu::ref::axpby(alpha, a, beta, b, out) : cpu::fast::axpby(alpha, a, beta, b, out);
}

void mul(ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  const ProfileOp profile_op(ctx, "mul");
  check_binary(ctx, "mul", a, b, out);
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::mul(ctx, a, b, out));
    return;
  }
  detail::reference(ctx) ? cpu::ref::mul(a, b, out) : cpu::fast::mul(a, b, out);
}

void scale(ExecContext& ctx, const Tensor& x, float alpha, const Tensor& out) {
  const ProfileOp profile_op(ctx, "scale");
  axpby(ctx, alpha, x, 0.f, x, out);
}

void concat(ExecContext& ctx, std::span<const Tensor> inputs, int axis, const Tensor& out) {
  const ProfileOp profile_op(ctx, "concat");
  VINF_CHECK(!inputs.empty(), "concat: no inputs");
  const int ax = axis < 0 ? axis + out.rank() : axis;
  VINF_CHECK(ax >= 0 && ax < out.rank(), "concat: axis ", axis, " out of range for ", out.describe());
  std::int64_t at = 0;
  for (const Tensor& in : inputs) {
    VINF_CHECK(in.rank() == out.rank(), "concat: input ", in.describe(), " and output ", out.describe(),
               " differ in rank");
    for (int d = 0; d < out.rank(); ++d)
      VINF_CHECK(d == ax || in.size(d) == out.size(d), "concat: input ", in.describe(), " does not match output ",
                 out.describe(), " outside axis ", ax);
    VINF_CHECK(at + in.size(ax) <= out.size(ax), "concat: inputs are longer than the output along axis ", ax);
    copy(ctx, in, out.slice(ax, at, in.size(ax)));
    at += in.size(ax);
  }
  VINF_CHECK(at == out.size(ax), "concat: inputs fill ", at, " of ", out.size(ax), " along axis ", ax);
}

}  // namespace vinf::ops
