// Nearest-neighbour upsampling (N, C, H, W) -> (N, C, Ho, Wo), as PyTorch's "nearest":
// source index = floor(dst * in / out). Ho = 2H, Wo = 2W is the 2x upsampler; other sizes serve
// latents that are not multiples of 8 (upsample to the skip tensor's size).
#pragma once

#include "ops/context.hpp"

namespace vinf::ops {

void upsample_nearest(ExecContext& ctx, const Tensor& x, const Tensor& y);

}  // namespace vinf::ops
