// cuBLAS and cuBLASLt loaded on first use (src/cuda/cublas_loader.cpp): the entry points vinf
// calls reach the real libraries. Most of them need no GPU (status texts, cuBLASLt's descriptors),
// so this runs wherever the CUDA build does; cublasCreate itself is checked against the device
// count (it fails without a GPU, as the linked library did).
#include <doctest/doctest.h>

#if VINF_WITH_CUDA
#include <cublasLt.h>
#include <cublas_v2.h>

#include <fstream>
#include <sstream>
#include <string>

#include "cuda/check.hpp"
#include "cuda/context.hpp"

namespace {

std::string process_maps() {
  std::ifstream in("/proc/self/maps");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("cuBLAS: loaded on first use, its entry points reach the libraries") {
  // The library's own text, not the loader's fallback for a library it could not load.
  const std::string text = vinf::cuda::cublas_status_text(CUBLAS_STATUS_NOT_INITIALIZED);
  CHECK(text.find("not initialized") != std::string::npos);

  cublasLtMatrixLayout_t layout = nullptr;
  REQUIRE(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, 4, 8, 4) == CUBLAS_STATUS_SUCCESS);
  CHECK(layout != nullptr);
  CHECK(cublasLtMatrixLayoutDestroy(layout) == CUBLAS_STATUS_SUCCESS);

  cublasLtMatmulDesc_t desc = nullptr;
  REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t transpose = CUBLAS_OP_T;
  CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose) ==
        CUBLAS_STATUS_SUCCESS);
  CHECK(cublasLtMatmulDescDestroy(desc) == CUBLAS_STATUS_SUCCESS);

  const std::string maps = process_maps();
  CHECK(maps.find("libcublasLt.so.") != std::string::npos);
  CHECK(maps.find("libcublas.so.") != std::string::npos);

  cublasHandle_t handle = nullptr;
  const cublasStatus_t created = cublasCreate(&handle);
  if (vinf::cuda::device_count() > 0) {
    REQUIRE(created == CUBLAS_STATUS_SUCCESS);
    CHECK(cublasDestroy(handle) == CUBLAS_STATUS_SUCCESS);
  } else {
    MESSAGE("no GPU: cublasCreate refuses, as cuBLAS does without a device");
    CHECK(created != CUBLAS_STATUS_SUCCESS);
  }
}
#endif
