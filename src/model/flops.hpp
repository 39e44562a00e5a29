// Floating-point operations of one UNet call (1 multiply-add = 2 FLOP), counted from the config and
// the input shape by walking the same layout the forward pass runs: GEMM-like work only (convs,
// linears, attention cores); norms and pointwise ops are left out (model-spec §8: ~37.8 TFLOP for
// VideoCrafter2 at B = 2, F = 24, 40 x 64, 77 tokens).
#pragma once

#include <cstdint>

#include "model/config.hpp"

namespace vinf::model {

struct FlopCount {
  double conv = 0;           // 2-D convolutions (incl. 1x1 shortcuts, resamplers)
  double temporal_conv = 0;  // Conv3d (3,1,1) of the temporal conv layers
  double linear = 0;         // projections, feed-forwards, embedding MLPs, text K/V
  double attention = 0;      // QK^T and PV of every attention
  double total() const { return conv + temporal_conv + linear + attention; }
};

FlopCount unet_flops(const UNetConfig& c, std::int64_t batch, std::int64_t frames, std::int64_t height,
                     std::int64_t width, std::int64_t text_tokens);

}  // namespace vinf::model
