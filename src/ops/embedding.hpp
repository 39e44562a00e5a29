// Sinusoidal timestep embedding (diffusers `Timesteps` / `get_timestep_embedding`).
#pragma once

#include "exec/params.hpp"
#include "ops/context.hpp"

namespace vinf::ops {

// flip_sin_to_cos (default true: output [cos | sin] instead of [sin | cos]), shift
// (downscale_freq_shift, default 0), max_period (default 10000).
using exec::TimestepEmbeddingParams;

// t [B] (i64 or f32, on the context's device), out [B, dim]: with half = dim / 2,
// freq_j = exp(-ln(max_period) * j / (half - shift)), arg = t * freq_j; an odd dim gets a zero
// column at the end.
void timestep_embedding(ExecContext& ctx, const Tensor& t, const Tensor& out, const TimestepEmbeddingParams& p);

// Rotary position embedding on interleaved pairs: x [B, L, H, D] (any strides, the last one 1),
// cos and sin [L, D/2] (f32, the angle of pair i at position l), out like x (may be x itself):
//   out[.., 2i]     = x[.., 2i] cos - x[.., 2i+1] sin
//   out[.., 2i + 1] = x[.., 2i] sin + x[.., 2i+1] cos
// (x viewed as D/2 complex numbers multiplied by exp(i angle), as Wan's attention does).
void rotary(ExecContext& ctx, const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out);

}  // namespace vinf::ops
