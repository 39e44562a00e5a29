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

void rotary(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out) {
  const std::int64_t B = x.size(0), L = x.size(1), H = x.size(2), half = x.size(3) / 2;
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t l = 0; l < L; ++l) {
      const float* c = cos.ptr<float>() + l * cos.strides[0];
      const float* s = sin.ptr<float>() + l * sin.strides[0];
      for (std::int64_t h = 0; h < H; ++h) {
        const float* xr = x.ptr<float>() + b * x.strides[0] + l * x.strides[1] + h * x.strides[2];
        float* yr = out.ptr<float>() + b * out.strides[0] + l * out.strides[1] + h * out.strides[2];
        for (std::int64_t i = 0; i < half; ++i) {
          const double re = xr[2 * i], im = xr[2 * i + 1], cv = c[i * cos.strides[1]], sv = s[i * sin.strides[1]];
          yr[2 * i] = static_cast<float>(re * cv - im * sv);
          yr[2 * i + 1] = static_cast<float>(re * sv + im * cv);
        }
      }
    }
}

}  // namespace vinf::cpu::ref
