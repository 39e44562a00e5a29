// Standard normal noise from the counter-based Philox generator (core/philox.hpp): element k of
// `out` (in row-major order of its shape) is value offset + k of the stream (seed, stream). CPU and
// CUDA give bit-identical f32 values.
#pragma once

#include <cstdint>

#include "ops/context.hpp"

namespace vinf::ops {

void normal(ExecContext& ctx, const Tensor& out, std::uint64_t seed, std::uint64_t stream, std::uint64_t offset);

}  // namespace vinf::ops
