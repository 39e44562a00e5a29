// The pointwise activations an op can apply (alone, or fused after a GroupNorm).
#pragma once

namespace vinf::exec {

enum class Activation {
  none,
  silu,        // x * sigmoid(x)
  gelu,        // exact: x * (1 + erf(x / sqrt 2)) / 2
  quick_gelu,  // x * sigmoid(1.702 x)
  gelu_tanh,   // tanh approximation: x * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2
};

}  // namespace vinf::exec
