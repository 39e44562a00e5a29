// Copies, casts, fills and elementwise arithmetic over strided views. Shapes must match exactly;
// broadcast by passing an expanded view (Tensor::expand, stride 0). An output may be the same view
// as an input (in place); partially overlapping views are not allowed.
#pragma once

#include <span>

#include "ops/context.hpp"

namespace vinf::ops {

// dst = src with dtype conversion (any of f32/f16/bf16/f64/i64 to any) and any strides. src and
// dst may live on different devices (host<->device copies); then ctx is the CUDA side's context.
void copy(ExecContext& ctx, const Tensor& src, const Tensor& dst);
void fill(ExecContext& ctx, const Tensor& dst, double value);

// out = alpha * a + beta * b
void axpby(ExecContext& ctx, float alpha, const Tensor& a, float beta, const Tensor& b, const Tensor& out);
inline void add(ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out) { axpby(ctx, 1.f, a, 1.f, b, out); }
// out = a * b
void mul(ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out);
// out = alpha * x
void scale(ExecContext& ctx, const Tensor& x, float alpha, const Tensor& out);

// Joins inputs along `axis` into out (whose size there is the sum of theirs).
void concat(ExecContext& ctx, std::span<const Tensor> inputs, int axis, const Tensor& out);

}  // namespace vinf::ops
