// The optimizer's element-wise work, on the CPU or on CUDA, so that the trained parameters, their
// gradients and the optimizer's state stay where the model runs.
#pragma once

#include "ops/context.hpp"

namespace vinf::ops {

// One AdamW step's constants (train/adamw.hpp has the formula): c1 = 1 - beta1^t, c2 =
// sqrt(1 - beta2^t), decay = 1 - lr * weight_decay, and the factor the gradients are read with
// (the clipping).
struct AdamWUpdate {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, decay = 1, c1 = 1, c2 = 1, grad_scale = 1;
};

// On p (the f32 master weights), g (their gradients), m and v (the moments), contiguous f32 of one
// size on the context's device, in place, in double arithmetic:
//   gs = g * grad_scale;  m = b1 m + (1 - b1) gs;  v = b2 v + (1 - b2) gs^2;
//   p = p * decay - lr / c1 * m / (sqrt(v) / c2 + eps)
// (m, v and p rounded to f32 once, as they are stored). `copy`, when given (any float dtype, the
// same size, contiguous), receives the new p rounded to its dtype: the bf16 copy a mixed-precision
// model computes with.
void adamw_update(ExecContext& ctx, const AdamWUpdate& s, const Tensor& p, const Tensor& g, const Tensor& m,
                  const Tensor& v, const Tensor* copy = nullptr);

// The sum of x's squared elements (contiguous f32 on the context's device), accumulated in double.
// The CPU sums in a fixed order for a given number of threads, CUDA in a fixed order for a given size.
double sum_squares(ExecContext& ctx, const Tensor& x);

}  // namespace vinf::ops
