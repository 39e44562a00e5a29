// Row-major sgemm on strided matrix views through OpenBLAS.
#pragma once

#include <cstdint>

#include "core/tensor.hpp"

namespace vinf::cpu {

// How BLAS can read a 2-D f32 view: as stored (row-major, leading dimension ld) or transposed.
struct BlasMatrix {
  const float* data = nullptr;
  bool transposed = false;
  std::int64_t ld = 0;
};

// False when neither of the view's two strides is 1 (the caller copies it first); see
// exec::matrix_layout.
bool as_blas_matrix(const Tensor& m, BlasMatrix& out);

// c (M x N, row stride ldc, unit column stride) = alpha * op(a) (M x K) * op(b) (K x N) + beta * c.
void sgemm(std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const BlasMatrix& a, const BlasMatrix& b,
           float beta, float* c, std::int64_t ldc);

}  // namespace vinf::cpu
