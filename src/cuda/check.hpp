// Status checks for the CUDA runtime, cuBLAS, cuDNN and NCCL, all built on VINF_CHECK_STATUS: a
// failure throws vinf::Error naming the statement, the library's error text, file:line, host,
// rank and device.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#include "core/error.hpp"
#include "exec/profile.hpp"

namespace vinf::cuda {

const char* cublas_status_text(cublasStatus_t s);

}  // namespace vinf::cuda

#define VINF_CHECK_CUDA(stmt)                                    \
  VINF_CHECK_STATUS("CUDA", stmt, #stmt, status_ == cudaSuccess, \
                    ::vinf::detail::concat(cudaGetErrorName(status_), ": ", cudaGetErrorString(status_)))
#define VINF_CHECK_CUBLAS(stmt) \
  VINF_CHECK_STATUS("cuBLAS", stmt, #stmt, status_ == CUBLAS_STATUS_SUCCESS, ::vinf::cuda::cublas_status_text(status_))
#define VINF_CHECK_CUDNN(stmt) \
  VINF_CHECK_STATUS("cuDNN", stmt, #stmt, status_ == CUDNN_STATUS_SUCCESS, cudnnGetErrorString(status_))
#define VINF_CHECK_NCCL(stmt)                                    \
  VINF_CHECK_STATUS("NCCL", stmt, #stmt, status_ == ncclSuccess, \
                    ::vinf::detail::concat(ncclGetErrorString(status_), " (", ncclGetLastError(nullptr), ")"))

// After a kernel launch: launch-configuration errors surface here, not at the next sync; the
// launch is counted for --profile (exec/profile.hpp).
#define VINF_CHECK_LAUNCH()              \
  do {                                   \
    ::vinf::count_launch();              \
    VINF_CHECK_CUDA(cudaGetLastError()); \
  } while (0)
