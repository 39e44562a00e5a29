// Pointwise activations and GEGLU.
#pragma once

#include "exec/activation.hpp"
#include "ops/context.hpp"

namespace vinf::ops {

// none, silu (x * sigmoid(x)), gelu (exact: x * (1 + erf(x / sqrt 2)) / 2), quick_gelu
// (x * sigmoid(1.702 x)), gelu_tanh
// (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): PyTorch's approximate="tanh").
using exec::Activation;
const char* activation_name(Activation a);

// out = act(x); shapes equal, any strides.
void activation(ExecContext& ctx, Activation act, const Tensor& x, const Tensor& out);

// x [..., 2D] -> out [..., D] = x[..., :D] * gelu(x[..., D:]) (value half first, gate second).
void geglu(ExecContext& ctx, const Tensor& x, const Tensor& out);

}  // namespace vinf::ops
