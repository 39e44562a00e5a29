// Copies, casts, fills and elementwise arithmetic over strided views. Shapes must match exactly;
// broadcast by passing an expanded view (Tensor::expand, stride 0). An output may be the same view
// as an input (in place); partially overlapping views are not allowed.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ops/context.hpp"

namespace vinf::ops {

// dst = src with dtype conversion (any of f32/f16/bf16/f64/i64 to any) and any strides. src and
// dst may live on different devices (host<->device copies); then ctx is the CUDA side's context.
void copy(ExecContext& ctx, const Tensor& src, const Tensor& dst);
// dst's indices dst_index[i] of dst_dim = src's src_index[i] of src_dim (both lists of one
// length; the other dims of the two views match once those are dropped). Issues one strided copy
// per run of the lists that steps evenly on both sides (frame_runs), not one per index: a list
// that is a range or an arithmetic progression is one copy.
void copy_frames(ExecContext& ctx, const Tensor& src, int src_dim, std::span<const std::int64_t> src_index,
                 const Tensor& dst, int dst_dim, std::span<const std::int64_t> dst_index);
// The runs copy_frames issues: index lists split greedily into pieces in which both step evenly
// (step >= 1 on each side; a single index has step 1).
struct FrameRun {
  std::int64_t src = 0, src_step = 1, dst = 0, dst_step = 1, count = 0;
};
std::vector<FrameRun> frame_runs(std::span<const std::int64_t> src_index, std::span<const std::int64_t> dst_index);
void fill(ExecContext& ctx, const Tensor& dst, double value);

// out = alpha * a + beta * b
void axpby(ExecContext& ctx, float alpha, const Tensor& a, float beta, const Tensor& b, const Tensor& out);
inline void add(ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out) {
  const ProfileOp profile_op(ctx, "add");
  axpby(ctx, 1.f, a, 1.f, b, out);
}
// out = a * b
void mul(ExecContext& ctx, const Tensor& a, const Tensor& b, const Tensor& out);
// out = alpha * x
void scale(ExecContext& ctx, const Tensor& x, float alpha, const Tensor& out);

// Joins inputs along `axis` into out (whose size there is the sum of theirs).
void concat(ExecContext& ctx, std::span<const Tensor> inputs, int axis, const Tensor& out);

}  // namespace vinf::ops
