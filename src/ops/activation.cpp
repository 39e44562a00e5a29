#include "ops/activation.hpp"

#include "ops/dispatch.hpp"

namespace vinf::ops {

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::none: return "none";
    case Activation::silu: return "silu";
    case Activation::gelu: return "gelu";
    case Activation::quick_gelu: return "quick_gelu";
    case Activation::gelu_tanh: return "gelu_tanh";
  }
  return "?";
}

void activation(ExecContext& ctx, Activation act, const Tensor& x, const Tensor& out) {
  const ProfileOp profile_op(ctx, "activation");
  check_same_shape("activation", "x", x, "out", out);
  detail::check_operands(ctx, "activation", {&x, &out});
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::activation(ctx, act, x, out));
    return;
  }
  detail::reference(ctx) ? cpu::ref::activation(act, x, out) : cpu::fast::activation(act, x, out);
}

void geglu(ExecContext& ctx, const Tensor& x, const Tensor& out) {
  const ProfileOp profile_op(ctx, "geglu");
  VINF_CHECK(x.rank() == out.rank() && x.rank() >= 1, "geglu: x ", x.describe(), " and out ", out.describe(),
             " must have the same rank");
  for (int d = 0; d + 1 < x.rank(); ++d)
    VINF_CHECK(x.size(d) == out.size(d), "geglu: x ", x.describe(), " and out ", out.describe(), " differ in dim ", d);
  VINF_CHECK(x.size(-1) == 2 * out.size(-1), "geglu: the last dim of x ", x.describe(), " must be twice that of out ",
             out.describe());
  detail::check_operands(ctx, "geglu", {&x, &out});
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::geglu(ctx, x, out));
    return;
  }
  detail::reference(ctx) ? cpu::ref::geglu(x, out) : cpu::fast::geglu(x, out);
}

}  // namespace vinf::ops
