// Fast nearest upsampling: rows spread over OpenMP threads, the 2x case without index arithmetic.
#include <cmath>

#include "cpu/cpu.hpp"
#include "cpu/loops.hpp"

namespace vinf::cpu::fast {

void upsample_nearest(const Tensor& x, const Tensor& y) {
  const std::int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), Ho = y.size(2), Wo = y.size(3);
  const float sh = static_cast<float>(H) / static_cast<float>(Ho), sw = static_cast<float>(W) / static_cast<float>(Wo);
  const std::int64_t planes = N * C;
  const float* xp = x.ptr<float>();
  float* yp = y.ptr<float>();
#pragma omp parallel for schedule(static) if (y.numel() >= kParallelGrain)
  for (std::int64_t pc = 0; pc < planes * Ho; ++pc) {
    const std::int64_t i = pc % Ho, c = (pc / Ho) % C, n = pc / (Ho * C);
    const std::int64_t si = std::min(static_cast<std::int64_t>(std::floor(static_cast<float>(i) * sh)), H - 1);
    const float* src = xp + n * x.strides[0] + c * x.strides[1] + si * x.strides[2];
    float* dst = yp + n * y.strides[0] + c * y.strides[1] + i * y.strides[2];
    if (Wo == 2 * W) {
      for (std::int64_t j = 0; j < W; ++j) dst[2 * j * y.strides[3]] = dst[(2 * j + 1) * y.strides[3]] = src[j * x.strides[3]];
    } else {
      for (std::int64_t j = 0; j < Wo; ++j) {
        const std::int64_t sj = std::min(static_cast<std::int64_t>(std::floor(static_cast<float>(j) * sw)), W - 1);
        dst[j * y.strides[3]] = src[sj * x.strides[3]];
      }
    }
  }
}

}  // namespace vinf::cpu::fast
