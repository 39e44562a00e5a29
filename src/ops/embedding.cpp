#include "ops/embedding.hpp"

#include "ops/dispatch.hpp"

namespace vinf::ops {

void timestep_embedding(ExecContext& ctx, const Tensor& t, const Tensor& out, const TimestepEmbeddingParams& p) {
  const char* op = "timestep_embedding";
  check_rank(op, "t", t, 1);
  check_rank(op, "out", out, 2);
  VINF_CHECK(out.size(0) == t.size(0), op, ": out ", out.describe(), " must have one row per timestep in ", t.describe());
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

}  // namespace vinf::ops
