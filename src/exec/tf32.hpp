// Whether f32 GEMMs (cuBLAS) and convolutions (cuDNN) on CUDA may round their inputs to TF32 (10
// mantissa bits) on the tensor cores. Process-wide, off by default; the CUDA backend reads it at
// every GEMM and convolution, so it may be set at any time (`--tf32`, ops/runtime.hpp).
#pragma once

namespace vinf {

void set_allow_tf32(bool on);
bool allow_tf32();

}  // namespace vinf
