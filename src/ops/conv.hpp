// Convolutions: 2-D (NCHW, any kernel, stride and zero padding) and the temporal convolution of
// TemporalConvLayer, a Conv3d with kernel (kt, 1, 1): a 1-D convolution along frames at every pixel.
#pragma once

#include "exec/params.hpp"
#include "ops/context.hpp"

namespace vinf::ops {

// stride (default 1) and zero padding (default 0), the same along both axes.
using exec::Conv2dParams;

// x [N, Cin, H, W], w [Cout, Cin, kh, kw], bias [Cout] or null, y [N, Cout, Ho, Wo] with
// Ho = (H + 2 pad - kh) / stride + 1.
void conv2d(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
            const Conv2dParams& p);
void conv2d_output_size(const Tensor& x, const Tensor& w, const Conv2dParams& p, std::int64_t& ho, std::int64_t& wo);

// x (N, Cin, T, S) viewed like GroupNorm's input (frames T, pixels S; frame-major storage is a
// permuted view), w [Cout, Cin, kt] (a Conv3d weight [Cout, Cin, kt, 1, 1] reshaped), bias [Cout]
// or null, y (N, Cout, T + 2 pad - kt + 1, S). Missing frames are zeros.
// y[n, o, t, s] = bias[o] + sum_{i,k} w[o, i, k] * x[n, i, t + k - pad, s].
void temporal_conv(ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y, int pad);

}  // namespace vinf::ops
