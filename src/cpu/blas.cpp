#include "cpu/blas.hpp"

#include <cblas.h>

#include <algorithm>

#include "core/error.hpp"
#include "exec/layout.hpp"

namespace vinf::cpu {

bool as_blas_matrix(const Tensor& m, BlasMatrix& out) {
  out.data = m.ptr<float>();
  exec::MatrixLayout l;
  if (!exec::matrix_layout(m, l)) return false;
  out.transposed = l.transposed;
  out.ld = l.ld;
  return true;
}

void sgemm(std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const BlasMatrix& a, const BlasMatrix& b,
           float beta, float* c, std::int64_t ldc) {
  if (M == 0 || N == 0) return;
  constexpr std::int64_t kMax = 0x7fffffff;
  VINF_CHECK(M <= kMax && N <= kMax && K <= kMax && a.ld <= kMax && b.ld <= kMax && ldc <= kMax,
             "GEMM dimensions exceed the 32-bit BLAS interface (M=", M, ", N=", N, ", K=", K, ")");
  cblas_sgemm(CblasRowMajor, a.transposed ? CblasTrans : CblasNoTrans, b.transposed ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, a.data, static_cast<int>(a.ld),
              b.data, static_cast<int>(b.ld), beta, c, static_cast<int>(std::max<std::int64_t>(ldc, 1)));
}

}  // namespace vinf::cpu
