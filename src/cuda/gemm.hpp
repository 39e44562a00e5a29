// Internal: the row-major strided-batched GEMM that linear, bmm and temporal_conv share.
#pragma once

#include <library_types.h>

#include <cstdint>

#include "exec/context.hpp"

namespace vinf::cuda {

struct GemmOperand {
  const void* data;
  bool transposed;          // stored as the transpose (row-major with leading dimension ld)
  std::int64_t ld;
  std::int64_t batch_stride;  // elements between batch entries; 0 = the same matrix for all
};

cudaDataType_t cuda_dtype(DType t);

// c[i] (M x N, row stride ldc) = alpha * a[i] (M x K) * b[i] (K x N) + beta * c[i], i < batch.
// a and b are `dtype`, c is `c_dtype`: `dtype`, or f32 for 16-bit a and b (attention scores,
// which must not be rounded to 16 bits). Accumulation is f32; f32 products use TF32 tensor cores
// only when allow_tf32() (exec/tf32.hpp).
void gemm_rowmajor(ExecContext& ctx, DType dtype, DType c_dtype, std::int64_t M, std::int64_t N, std::int64_t K,
                   float alpha, const GemmOperand& a, const GemmOperand& b, float beta, void* c, std::int64_t ldc,
                   std::int64_t batch, std::int64_t stride_c);

}  // namespace vinf::cuda
