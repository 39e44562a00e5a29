// Row-major f32 matrix products on strided matrix views, on the OpenMP threads every other CPU
// kernel runs on: oneDNN's matmul primitive, or on request OpenBLAS's sgemm (the build links
// OpenBLAS's OpenMP variant where it finds it, Debian's libopenblas0-openmp: the pthread variant's
// own threads compete with OpenMP's for the cores, which halved the speed of 2-thread runs).
#pragma once

#include <cstdint>

#include "core/tensor.hpp"
#include "exec/context.hpp"

namespace vinf::cpu {

// How a matrix product can read a 2-D view: as stored (row-major, leading dimension ld) or
// transposed; f32, or bf16 (raw bits) for --dtype bf16 on CPUs with AVX-512 BF16.
struct BlasMatrix {
  const void* data = nullptr;
  bool transposed = false;
  std::int64_t ld = 0;
  bool bf16 = false;
};

// False when neither of the view's two strides is 1 (the caller copies it first); see
// exec::matrix_layout.
bool as_blas_matrix(const Tensor& m, BlasMatrix& out);

// Which library runs the products (decided once): oneDNN unless VINF_CPU_GEMM=openblas. On the
// machine measured the two were within noise of each other once both ran on OpenMP
// (perf/RESULTS.md); oneDNN also ignores OPENBLAS_CORETYPE and picks its kernels from the CPU.
enum class GemmLibrary { onednn, openblas };
GemmLibrary gemm_library();
const char* gemm_library_name();

// What a product does to its result before storing it (oneDNN post-ops, in this order): GELU
// (erf form), then a multiplication by a matrix of the result's shape (f32, row stride ld_mul,
// batch stride mul_batch), stored as bf16 when bf16_out (bf16 operands only).
struct GemmEpilogue {
  bool gelu = false;
  const float* mul = nullptr;
  std::int64_t ld_mul = 0, mul_batch = 0;
  bool bf16_out = false;
};

// A batch of `batch` products, matrix i at offsets i * a_batch, i * b_batch, i * c_batch (elements;
// 0 repeats one matrix):
//   c (M x N, row stride ldc, unit column stride) = alpha * op(a) (M x K) * op(b) (K x N)
//                                                  + bias (N, stride bias_stride, when given) + beta * c.
// A bias goes with alpha 1 only. a and b are both f32 or both bf16 (then oneDNN multiplies them with
// f32 accumulation whatever VINF_CPU_GEMM says); the bias is f32, c f32 unless the epilogue says bf16.
void gemm(ExecContext& ctx, std::int64_t batch, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
          const BlasMatrix& a, std::int64_t a_batch, const BlasMatrix& b, std::int64_t b_batch, float beta, void* c,
          std::int64_t ldc, std::int64_t c_batch, const float* bias = nullptr, std::int64_t bias_stride = 1,
          const GemmEpilogue& epilogue = {});

// One product: gemm with batch 1.
inline void sgemm(ExecContext& ctx, std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const BlasMatrix& a,
                  const BlasMatrix& b, float beta, float* c, std::int64_t ldc) {
  gemm(ctx, 1, M, N, K, alpha, a, 0, b, 0, beta, c, ldc, 0);
}

}  // namespace vinf::cpu
