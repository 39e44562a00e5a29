// Naive convolutions: direct loops over every output, tap and input channel.
#include "cpu/cpu.hpp"
#include "cpu/strided.hpp"

namespace vinf::cpu::ref {

void conv2d(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, const exec::Conv2dParams& p) {
  const std::int64_t N = x.size(0), Ci = x.size(1), H = x.size(2), W = x.size(3);
  const std::int64_t Co = w.size(0), KH = w.size(2), KW = w.size(3), Ho = y.size(2), Wo = y.size(3);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < Co; ++o)
      for (std::int64_t oh = 0; oh < Ho; ++oh)
        for (std::int64_t ow = 0; ow < Wo; ++ow) {
          double acc = bias ? bias->ptr<float>()[o * bias->strides[0]] : 0.0;
          for (std::int64_t i = 0; i < Ci; ++i)
            for (std::int64_t kh = 0; kh < KH; ++kh) {
              const std::int64_t ih = oh * p.stride - p.padding + kh;
              if (ih < 0 || ih >= H) continue;
              for (std::int64_t kw = 0; kw < KW; ++kw) {
                const std::int64_t iw = ow * p.stride - p.padding + kw;
                if (iw < 0 || iw >= W) continue;
                acc += static_cast<double>(at_f32(x, n, i, ih, iw)) * at_f32(w, o, i, kh, kw);
              }
            }
          at_f32(y, n, o, oh, ow) = static_cast<float>(acc);
        }
}

void temporal_conv(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, int pad) {
  const std::int64_t N = x.size(0), Ci = x.size(1), T = x.size(2), S = x.size(3);
  const std::int64_t Co = w.size(0), KT = w.size(2), To = y.size(2);
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < Co; ++o)
      for (std::int64_t t = 0; t < To; ++t)
        for (std::int64_t s = 0; s < S; ++s) {
          double acc = bias ? bias->ptr<float>()[o * bias->strides[0]] : 0.0;
          for (std::int64_t k = 0; k < KT; ++k) {
            const std::int64_t ti = t + k - pad;
            if (ti < 0 || ti >= T) continue;
            for (std::int64_t i = 0; i < Ci; ++i) acc += static_cast<double>(at_f32(x, n, i, ti, s)) * at_f32(w, o, i, k);
          }
          at_f32(y, n, o, t, s) = static_cast<float>(acc);
        }
}

}  // namespace vinf::cpu::ref
