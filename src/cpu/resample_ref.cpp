// Naive nearest upsampling: one output element at a time.
#include <cmath>

#include "cpu/cpu.hpp"
#include "cpu/strided.hpp"

namespace vinf::cpu::ref {

void upsample_nearest(const Tensor& x, const Tensor& y) {
  const std::int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), Ho = y.size(2), Wo = y.size(3);
  const float sh = static_cast<float>(H) / static_cast<float>(Ho), sw = static_cast<float>(W) / static_cast<float>(Wo);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t i = 0; i < Ho; ++i)
        for (std::int64_t j = 0; j < Wo; ++j) {
          const std::int64_t si = std::min(static_cast<std::int64_t>(std::floor(static_cast<float>(i) * sh)), H - 1);
          const std::int64_t sj = std::min(static_cast<std::int64_t>(std::floor(static_cast<float>(j) * sw)), W - 1);
          at_f32(y, n, c, i, j) = at_f32(x, n, c, si, sj);
        }
}

}  // namespace vinf::cpu::ref
