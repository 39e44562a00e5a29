// Backward passes of the ops the UNet uses, for training. Each takes what its forward op took plus
// the gradient of the loss with respect to the forward output (dy) and ADDS the gradients it
// computes into its outputs (+=): a tensor read by several ops collects every contribution, and a
// caller that wants one gradient alone zeroes it first. A null output is not computed (a frozen
// parameter, an input that needs no gradient). Intermediates are recomputed from the forward
// inputs (the normalisation statistics, the attention probabilities), never stored by the forward.
//
// Both backends compute in f32 (the norms' statistics and sums in double): the CPU in a fixed
// order; CUDA (src/cuda/backward.cu, simple kernels written for correctness before speed) with
// atomic adds where threads share an output element, so those sums' order varies from run to run.
// linear_backward's products go through the matrix-product op (oneDNN, cuBLAS); on CUDA the
// convolutions' dw must be contiguous (a parameter's gradient is).
#pragma once

#include "ops/activation.hpp"
#include "ops/attention.hpp"
#include "ops/conv.hpp"
#include "ops/context.hpp"
#include "ops/norm.hpp"

namespace vinf::ops {

// dx += dy * act'(x).
void activation_backward(ExecContext& ctx, Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx);
// x [..., 2D], dy [..., D], dx [..., 2D] (geglu's value half first, gate second).
// With dx_overwrite, dx = the gradient: dx's old contents (uninitialised memory, say) are not read.
void geglu_backward(ExecContext& ctx, const Tensor& x, const Tensor& dy, const Tensor& dx, bool dx_overwrite = false);

// Of y = x w^T + bias: dx += dy w, dw += dy^T x, db += the column sums of dy. x and dy must be
// views whose leading dims merge into rows. With dx_overwrite, dx = dy w: dx's old contents
// (uninitialised memory, say) are not read.
void linear_backward(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor* dx,
                     const Tensor* dw, const Tensor* db, bool dx_overwrite = false);

// Of conv2d (w contiguous) and temporal_conv (w [Cout, Cin, kt] contiguous).
void conv2d_backward(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, const Conv2dParams& p,
                     const Tensor* dx, const Tensor* dw, const Tensor* db);
void temporal_conv_backward(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, int pad,
                            const Tensor* dx, const Tensor* dw, const Tensor* db);

// Of group_norm with its fused activation (statistics from x itself), and of layer_norm.
void group_norm_backward(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& dy,
                         const GroupNormParams& p, const Tensor* dx, const Tensor* dgamma, const Tensor* dbeta);
void layer_norm_backward(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& dy, float eps,
                         const Tensor* dx, const Tensor* dgamma, const Tensor* dbeta);

// Of softmax, from its output y: dx += y * (dy - sum(dy * y)) per row.
void softmax_backward(ExecContext& ctx, const Tensor& y, const Tensor& dy, const Tensor& dx);

// Of attention without global keys (kg, vg null), from q, k, v and dout: the probabilities are
// recomputed row by row, nothing of size rows x keys is stored. dq, dk, dv have the shapes of q, k,
// v, the last dimension contiguous and no broadcast (stride-0) dimension: the gradient of keys a
// forward call broadcast is summed by the caller (accumulate).
// `out`, when given, is the forward op's output (dout's shape): the CPU's small-head kernel takes
// each row's dout . out from it instead of a pass over the keys.
void attention_backward(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                        const AttentionParams& p, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        const Tensor* out = nullptr);

// Of upsample_nearest: each output pixel's gradient onto its source pixel.
void upsample_nearest_backward(ExecContext& ctx, const Tensor& dy, const Tensor& dx);

// dst += src for same-shaped views; where dst has a broadcast dimension (stride 0, the view an
// expand() made) the elements of src that map to one element of dst are summed into it: the
// backward pass of expand, of a bias added over rows, of a repeat.
void accumulate(ExecContext& ctx, const Tensor& src, const Tensor& dst);

}  // namespace vinf::ops
