// Sinusoidal timestep embedding (diffusers `Timesteps` / `get_timestep_embedding`).
#pragma once

#include "ops/context.hpp"

namespace vinf::ops {

struct TimestepEmbeddingParams {
  bool flip_sin_to_cos = true;  // output [cos | sin] instead of [sin | cos]
  float shift = 0.f;            // downscale_freq_shift
  float max_period = 10000.f;
};

// t [B] (i64 or f32, on the context's device), out [B, dim]: with half = dim / 2,
// freq_j = exp(-ln(max_period) * j / (half - shift)), arg = t * freq_j; an odd dim gets a zero
// column at the end.
void timestep_embedding(ExecContext& ctx, const Tensor& t, const Tensor& out, const TimestepEmbeddingParams& p);

}  // namespace vinf::ops
