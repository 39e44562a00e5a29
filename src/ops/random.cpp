#include "ops/random.hpp"

#include "ops/dispatch.hpp"
#include "ops/elementwise.hpp"

namespace vinf::ops {

void normal(ExecContext& ctx, const Tensor& out, std::uint64_t seed, std::uint64_t stream, std::uint64_t offset) {
  const ProfileOp profile_op(ctx, "normal");
  check_on_device(ctx, "normal", "out", out);
  check_float("normal", "out", out);
  if (!out.is_contiguous()) {  // draw in row-major order, then scatter into the view
    OwnedTensor tmp = ctx.arena->empty(out.dtype, out.shape);
    normal(ctx, tmp, seed, stream, offset);
    copy(ctx, tmp, out);
    return;
  }
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::normal(ctx, out, seed, stream, offset));
    return;
  }
  detail::reference(ctx) ? cpu::ref::normal(out, seed, stream, offset) : cpu::fast::normal(out, seed, stream, offset);
}

}  // namespace vinf::ops
