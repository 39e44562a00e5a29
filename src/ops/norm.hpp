// GroupNorm and LayerNorm, f32 statistics (f64 partial sums).
//
// GroupNorm sees its input as (N, C, T, S): N independent samples, C channels in `groups` groups,
// and a trailing extent T x S over which statistics are taken along with the group's channels.
// Per-frame GroupNorm on frame-images (B*F, C, H, W) is N = B*F, T = 1, S = H*W; the temporal
// GroupNorm of a clip stored frame-major (B*F, C, H, W) is the strided view
// (B, C, F, H*W) = x.reshape({B, F, C, H*W}).permute({0, 2, 1, 3}). Inputs of rank 3 (N, C, S)
// are accepted as T = 1.
#pragma once

#include "exec/params.hpp"
#include "ops/activation.hpp"
#include "ops/context.hpp"

namespace vinf::ops {

// groups (default 32), eps (default 1e-5), act (an activation fused after the affine transform:
// silu in resnets; none by default).
using exec::GroupNormParams;

// y = (x - mean) / sqrt(var + eps) * gamma[c] + beta[c], statistics from x itself.
void group_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                const GroupNormParams& p);

// The two halves, for statistics that are reduced elsewhere (the distributed GroupNorm all-reduces
// these sums across ranks): sums is f64 [N, groups, 2] = {sum x, sum x^2} over this tensor's part.
void group_norm_sums(ExecContext& ctx, const Tensor& x, int groups, const Tensor& sums);
// Normalises x with statistics sums over `count` elements per (n, group).
void group_norm_apply(ExecContext& ctx, const Tensor& x, const Tensor& sums, double count, const Tensor& gamma,
                      const Tensor& beta, const Tensor& y, const GroupNormParams& p);

// Over the last dimension (contiguous); gamma, beta [D]. On the CPU y may be bf16 (the input of
// bf16 products under --dtype bf16: normalised in f32, rounded once).
void layer_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                float eps);

// RMS norm over the last dimension (contiguous): y = x / sqrt(mean(x^2) + eps) * gamma, gamma [D]
// (T5's layer norm, torch.nn.RMSNorm; no mean subtracted, no bias). Statistics in f32 or better.
void rms_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& y, float eps);

}  // namespace vinf::ops
