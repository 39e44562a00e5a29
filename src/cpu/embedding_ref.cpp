// Naive sinusoidal timestep embedding, in double.
#include <cmath>

#include "cpu/cpu.hpp"
#include "cpu/strided.hpp"

namespace vinf::cpu::ref {

void timestep_embedding(const Tensor& t, const Tensor& out, const exec::TimestepEmbeddingParams& p) {
  const std::int64_t B = out.size(0), dim = out.size(1), half = dim / 2;
  for (std::int64_t b = 0; b < B; ++b) {
    const double tv = load_as_double(t.data, t.dtype, b * t.strides[0]);
    for (std::int64_t j = 0; j < half; ++j) {
      const double freq = std::exp(-std::log(static_cast<double>(p.max_period)) * static_cast<double>(j) /
                                   (static_cast<double>(half) - p.shift));
      const double arg = tv * freq;
      const double first = p.flip_sin_to_cos ? std::cos(arg) : std::sin(arg);
      const double second = p.flip_sin_to_cos ? std::sin(arg) : std::cos(arg);
      at_f32(out, b, j) = static_cast<float>(first);
      at_f32(out, b, half + j) = static_cast<float>(second);
    }
    if (dim % 2) at_f32(out, b, dim - 1) = 0.f;
  }
}

}  // namespace vinf::cpu::ref
