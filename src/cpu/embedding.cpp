// Fast sinusoidal timestep embedding: f32 arithmetic in diffusers' order.
#include <cmath>

#include "cpu/cpu.hpp"
#include "cpu/strided.hpp"

namespace vinf::cpu::fast {

void timestep_embedding(const Tensor& t, const Tensor& out, const exec::TimestepEmbeddingParams& p) {
  // f32 arithmetic in the order diffusers uses: exponent = -ln(max_period) * j / (half - shift).
  const std::int64_t B = out.size(0), dim = out.size(1), half = dim / 2;
  const float neg_log_period = -std::log(p.max_period);
  for (std::int64_t b = 0; b < B; ++b) {
    const float tv = static_cast<float>(load_as_double(t.data, t.dtype, b * t.strides[0]));
    for (std::int64_t j = 0; j < half; ++j) {
      const float freq = std::exp(neg_log_period * static_cast<float>(j) / (static_cast<float>(half) - p.shift));
      const float arg = tv * freq;
      at_f32(out, b, j) = p.flip_sin_to_cos ? std::cos(arg) : std::sin(arg);
      at_f32(out, b, half + j) = p.flip_sin_to_cos ? std::sin(arg) : std::cos(arg);
    }
    if (dim % 2) at_f32(out, b, dim - 1) = 0.f;
  }
}

}  // namespace vinf::cpu::fast
