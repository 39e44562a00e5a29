#include "infinity/tensor_group.hpp"

#include "core/arena.hpp"
#include "core/error.hpp"
#include "ops/elementwise.hpp"

namespace vinf::infinity {

void CommTensorGroup::sum(ExecContext& ctx, const Tensor& t) {
  VINF_CHECK(t.is_contiguous(), "tensor group sum: a contiguous tensor expected, got ", t.describe());
  if (t.dtype == DType::f32 || t.dtype == DType::f64) {  // f64: statistics (a norm's sums)
    comm_.all_reduce_sum(ctx, t);
    return;
  }
  OwnedTensor wide = ctx.arena->empty(DType::f32, t.shape);
  ops::copy(ctx, t, wide);
  comm_.all_reduce_sum(ctx, wide);
  ops::copy(ctx, wide, t);
}

}  // namespace vinf::infinity
