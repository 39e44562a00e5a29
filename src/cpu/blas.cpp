#include "cpu/blas.hpp"

#include <cblas.h>

#include <algorithm>

#include "core/error.hpp"

namespace vinf::cpu {

bool as_blas_matrix(const Tensor& m, BlasMatrix& out) {
  const std::int64_t rows = m.size(0), cols = m.size(1), s0 = m.stride(0), s1 = m.stride(1);
  out.data = m.ptr<float>();
  if ((s1 == 1 || cols == 1) && (rows == 1 || s0 >= cols)) {
    out.transposed = false;
    out.ld = rows == 1 ? std::max<std::int64_t>(1, cols) : std::max<std::int64_t>(s0, 1);
    return true;
  }
  if ((s0 == 1 || rows == 1) && (cols == 1 || s1 >= rows)) {
    out.transposed = true;
    out.ld = cols == 1 ? std::max<std::int64_t>(1, rows) : std::max<std::int64_t>(s1, 1);
    return true;
  }
  return false;
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
