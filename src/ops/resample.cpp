#include "ops/resample.hpp"

#include "ops/dispatch.hpp"

namespace vinf::ops {

void upsample_nearest(ExecContext& ctx, const Tensor& x, const Tensor& y) {
  const ProfileOp profile_op(ctx, "upsample_nearest");
  const char* op = "upsample_nearest";
  check_rank(op, "x", x, 4);
  check_rank(op, "y", y, 4);
  VINF_CHECK(x.size(0) == y.size(0) && x.size(1) == y.size(1) && y.size(2) >= x.size(2) && y.size(3) >= x.size(3) &&
                 x.size(2) > 0 && x.size(3) > 0,
             op, ": cannot upsample ", x.describe(), " to ", y.describe());
  detail::check_operands(ctx, op, {&x, &y});
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::upsample_nearest(ctx, x, y));
    return;
  }
  detail::reference(ctx) ? cpu::ref::upsample_nearest(x, y) : cpu::fast::upsample_nearest(x, y);
}

}  // namespace vinf::ops
