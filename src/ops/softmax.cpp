#include "ops/softmax.hpp"

#include "ops/dispatch.hpp"
#include "ops/views.hpp"

namespace vinf::ops {

void softmax(ExecContext& ctx, const Tensor& x, const Tensor& out) {
  const ProfileOp profile_op(ctx, "softmax");
  check_same_shape("softmax", "x", x, "out", out);
  check_on_device(ctx, "softmax", "x", x);
  check_on_device(ctx, "softmax", "out", out);
  detail::check_compute_dtype(ctx, "softmax", "x", x);
  detail::check_compute_dtype(ctx, "softmax", "out", out);
  const Tensor rx = detail::as_rows("softmax", "x", x), ro = detail::as_rows("softmax", "out", out);
  VINF_CHECK(rx.stride(1) == 1 && ro.stride(1) == 1, "softmax: the last dim of x and out must be contiguous");
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::softmax(ctx, rx, ro));
    return;
  }
  detail::reference(ctx) ? cpu::ref::softmax(rx, ro) : cpu::fast::softmax(rx, ro);
}

}  // namespace vinf::ops
