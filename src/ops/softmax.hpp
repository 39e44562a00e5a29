// Softmax over the last dimension (which must be contiguous), computed in f32.
#pragma once

#include "ops/context.hpp"

namespace vinf::ops {

void softmax(ExecContext& ctx, const Tensor& x, const Tensor& out);

}  // namespace vinf::ops
