// The activation functions themselves, one definition for the CPU reference (double), the CPU
// fast paths (float) and the CUDA kernels (float).
#pragma once

#include <math.h>

#include "core/hd.hpp"
#include "exec/activation.hpp"

namespace vinf::exec {

VINF_HD float math_exp(float x) { return expf(x); }
VINF_HD double math_exp(double x) { return exp(x); }
VINF_HD float math_erf(float x) { return erff(x); }
VINF_HD double math_erf(double x) { return erf(x); }
VINF_HD float math_tanh(float x) { return tanhf(x); }
VINF_HD double math_tanh(double x) { return tanh(x); }

template <class T>
VINF_HD T silu(T x) {
  return x / (T(1) + math_exp(-x));
}
template <class T>
VINF_HD T gelu(T x) {  // exact: x * Phi(x)
  return T(0.5) * x * (T(1) + math_erf(x * T(0.70710678118654752440)));
}
template <class T>
VINF_HD T quick_gelu(T x) {
  return x / (T(1) + math_exp(T(-1.702) * x));
}

template <class T>
VINF_HD T gelu_tanh(T x) {  // PyTorch's GELU(approximate="tanh"), transformers' gelu_new
  return T(0.5) * x * (T(1) + math_tanh(T(0.79788456080286535588) * (x + T(0.044715) * x * x * x)));
}

template <class T>
VINF_HD T activate(Activation act, T x) {
  switch (act) {
    case Activation::silu: return silu(x);
    case Activation::gelu: return gelu(x);
    case Activation::quick_gelu: return quick_gelu(x);
    case Activation::gelu_tanh: return gelu_tanh(x);
    default: return x;
  }
}

// d act(x) / dx, for the backward passes.
template <class T>
VINF_HD T activate_grad(Activation act, T x) {
  switch (act) {
    case Activation::silu: {
      const T s = T(1) / (T(1) + math_exp(-x));
      return s * (T(1) + x * (T(1) - s));
    }
    case Activation::gelu:  // Phi(x) + x phi(x)
      return T(0.5) * (T(1) + math_erf(x * T(0.70710678118654752440))) +
             x * T(0.39894228040143267794) * math_exp(T(-0.5) * x * x);
    case Activation::quick_gelu: {
      const T s = T(1) / (T(1) + math_exp(T(-1.702) * x));
      return s * (T(1) + T(1.702) * x * (T(1) - s));
    }
    case Activation::gelu_tanh: {
      const T k = T(0.79788456080286535588), u = k * (x + T(0.044715) * x * x * x), th = math_tanh(u);
      return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * k * (T(1) + T(3 * 0.044715) * x * x);
    }
    default: return T(1);
  }
}

}  // namespace vinf::exec
