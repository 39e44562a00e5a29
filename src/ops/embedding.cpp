#include "ops/embedding.hpp"

#include "ops/dispatch.hpp"

namespace vinf::ops {

void timestep_embedding(ExecContext& ctx, const Tensor& t, const Tensor& out, const TimestepEmbeddingParams& p) {
  const ProfileOp profile_op(ctx, "timestep_embedding");
  const char* op = "timestep_embedding";
  check_rank(op, "t", t, 1);
  check_rank(op, "out", out, 2);
  VINF_CHECK(out.size(0) == t.size(0), op, ": out ", out.describe(), " must have one row per timestep in ",
             t.describe());
  VINF_CHECK(out.size(1) >= 2, op, ": embedding dim must be at least 2, got ", out.size(1));
  VINF_CHECK(static_cast<float>(out.size(1) / 2) != p.shift, op, ": shift ", p.shift, " equals half the dim");
  VINF_CHECK(t.dtype == DType::i64 || t.dtype == DType::f32, op, ": t must be i64 or f32, got ", t.describe());
  check_on_device(ctx, op, "t", t);
  check_on_device(ctx, op, "out", out);
  detail::check_compute_dtype(ctx, op, "out", out);
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::timestep_embedding(ctx, t, out, p));
    return;
  }
  detail::reference(ctx) ? cpu::ref::timestep_embedding(t, out, p) : cpu::fast::timestep_embedding(t, out, p);
}

void rotary(ExecContext& ctx, const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out) {
  const ProfileOp profile_op(ctx, "rotary");
  const char* op = "rotary";
  check_rank(op, "x", x, 4);
  check_same_shape(op, "x", x, "out", out);
  detail::check_operands(ctx, op, {&x, &out});
  VINF_CHECK(x.size(3) % 2 == 0, op, ": the head dim of x ", x.describe(), " must be even");
  VINF_CHECK(x.stride(3) == 1 && out.stride(3) == 1, op, ": the last dim of x and out must be contiguous");
  for (const Tensor* t : {&cos, &sin}) {
    check_rank(op, "cos/sin", *t, 2);
    check_dtype(op, "cos/sin", *t, DType::f32);
    check_on_device(ctx, op, "cos/sin", *t);
    VINF_CHECK(t->size(0) == x.size(1) && t->size(1) == x.size(3) / 2, op, ": cos/sin ", t->describe(),
               " must be [L, D/2] for x ", x.describe());
  }
  if (ctx.device.is_cuda()) {
    VINF_ON_CUDA(cuda::rotary(ctx, x, cos, sin, out));
    return;
  }
  cpu::ref::rotary(x, cos, sin, out);
}

}  // namespace vinf::ops
