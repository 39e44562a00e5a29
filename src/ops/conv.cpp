#include "ops/conv.hpp"

#include "ops/dispatch.hpp"
#include "ops/views.hpp"

namespace vinf::ops {
namespace {

void check_bias(const ExecContext& ctx, const char* op, const Tensor* bias, std::int64_t cout) {
  if (!bias) return;
  VINF_CHECK(bias->rank() == 1 && bias->size(0) == cout, op, ": bias must be [", cout, "], got ", bias->describe());
  check_on_device(ctx, op, "bias", *bias);
  detail::check_compute_dtype(ctx, op, "bias", *bias);
}

}  // namespace

void conv2d_output_size(const Tensor& x, const Tensor& w, const Conv2dParams& p, std::int64_t& ho, std::int64_t& wo) {
  VINF_CHECK(p.stride >= 1 && p.padding >= 0, "conv2d: stride ", p.stride, " and padding ", p.padding, " are invalid");
  ho = (x.size(2) + 2 * p.padding - w.size(2)) / p.stride + 1;
  wo = (x.size(3) + 2 * p.padding - w.size(3)) / p.stride + 1;
}

void conv2d(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
            const Conv2dParams& p) {
  const ProfileOp profile_op(ctx, "conv2d");
  const char* op = "conv2d";
  check_rank(op, "x", x, 4);
  check_rank(op, "w", w, 4);
  check_rank(op, "y", y, 4);
  VINF_CHECK(x.size(1) == w.size(1), op, ": x ", x.describe(), " has ", x.size(1), " channels, w ", w.describe(),
             " expects ", w.size(1));
  VINF_CHECK(x.size(2) + 2 * p.padding >= w.size(2) && x.size(3) + 2 * p.padding >= w.size(3), op, ": kernel ",
             w.describe(), " is larger than the padded input ", x.describe());
  std::int64_t ho, wo;
  conv2d_output_size(x, w, p, ho, wo);
  VINF_CHECK(y.size(0) == x.size(0) && y.size(1) == w.size(0) && y.size(2) == ho && y.size(3) == wo, op,
             ": y must be [", x.size(0), ",", w.size(0), ",", ho, ",", wo, "], got ", y.describe());
  detail::check_operands(ctx, op, {&x, &y});
  detail::check_weights(ctx, op, w);
  check_bias(ctx, op, bias, w.size(0));
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::conv2d(ctx, x, w, bias, y, p));
    return;
  }
  if (detail::reference(ctx)) {
    OwnedTensor hold;
    cpu::ref::conv2d(x, detail::widened_weights(ctx, w, hold), bias, y, p);
    return;
  }
  cpu::fast::conv2d(ctx, x, w, bias, y, p);
}

void temporal_conv(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, int pad) {
  const ProfileOp profile_op(ctx, "temporal_conv");
  const char* op = "temporal_conv";
  check_rank(op, "w", w, 3);
  VINF_CHECK(x.rank() == 4 && y.rank() == 4, op, ": x and y must be (N, C, T, S), got ", x.describe(), " and ",
             y.describe());
  VINF_CHECK(x.size(1) == w.size(1), op, ": x ", x.describe(), " has ", x.size(1), " channels, w ", w.describe(),
             " expects ", w.size(1));
  VINF_CHECK(pad >= 0, op, ": negative padding ", pad);
  const std::int64_t to = x.size(2) + 2 * pad - w.size(2) + 1;
  VINF_CHECK(to >= 1, op, ": ", x.size(2), " frames with padding ", pad, " are fewer than the kernel's ", w.size(2));
  VINF_CHECK(y.size(0) == x.size(0) && y.size(1) == w.size(0) && y.size(2) == to && y.size(3) == x.size(3), op,
             ": y must be [", x.size(0), ",", w.size(0), ",", to, ",", x.size(3), "], got ", y.describe());
  detail::check_operands(ctx, op, {&x, &y});
  detail::check_weights(ctx, op, w);
  check_bias(ctx, op, bias, w.size(0));
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::temporal_conv(ctx, x, w, bias, y, pad));
    return;
  }
  if (detail::reference(ctx)) {
    OwnedTensor hold;
    cpu::ref::temporal_conv(x, detail::widened_weights(ctx, w, hold), bias, y, pad);
    return;
  }
  cpu::fast::temporal_conv(ctx, x, w, bias, y, pad);
}

}  // namespace vinf::ops
