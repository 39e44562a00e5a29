// cuBLAS and cuBLASLt, loaded when the first CUDA context needs them rather than when vinf starts.
//
// Why: the two libraries carry about 450,000 relocations, which the dynamic loader applies to
// ~26,000 pages at every process start, about 0.1 s of CPU per process (perf stat on `vinf
// --version`: 27k page faults and 130 ms with them linked, under 1k without). Every rank of every
// job paid it, GPU or not; the test suite, which starts vinf thousands of times, paid minutes.
//
// How: vinf is not linked against them. This file defines the cuBLAS entry points vinf calls,
// hidden (never exported, so nothing else in the process can bind to them), each forwarding to the
// real function, looked up once with dlsym. The call sites use the normal headers and names. The
// libraries are looked up by soname (LD_LIBRARY_PATH, the program's RUNPATH, ldconfig), then in the
// directory libcudart was loaded from, where the CUDA toolkit installs them. A missing library is
// an error naming what was searched.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
// The cuBLAS declarations hidden from the start (this file is compiled alone, outside the unity
// build, so that no use comes before them).
#pragma GCC visibility push(hidden)
#include <cublasLt.h>
#include <cublas_v2.h>
#pragma GCC visibility pop

#include <mutex>
#include <string>
#include <utility>

#include "core/error.hpp"

namespace vinf::cuda {
namespace {

// One of the two libraries: opened on the first lookup (a failed open is tried again next time).
struct CublasLibrary {
  CublasLibrary(const char* w, std::string name) : what(w), soname(std::move(name)) {}
  const char* what;
  std::string soname;
  std::once_flag opened;
  void* handle = nullptr;
};

CublasLibrary kBlas{"cuBLAS", "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR)};
CublasLibrary kBlasLt{"cuBLASLt", "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR)};

// The directory of the libcudart this process runs with ("" when it cannot be told).
std::string cudart_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudaRuntimeGetVersion), &info) == 0 || info.dli_fname == nullptr) return "";
  const std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

void* open_library(const CublasLibrary& lib) {
  if (void* h = dlopen(lib.soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  const std::string first_error = dlerror();
  const std::string dir = cudart_directory();
  if (!dir.empty()) {
    if (void* h = dlopen((dir + "/" + lib.soname).c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  }
  throw Error(detail::concat(lib.what, " could not be loaded (", first_error, "; also looked in ",
                             dir.empty() ? std::string("libcudart's directory, which is unknown") : dir,
                             "). The CUDA device needs CUDA ", CUBLAS_VER_MAJOR, "'s ", lib.soname,
                             ": install cuBLAS or add its directory to LD_LIBRARY_PATH."));
}

template <typename Fn>
Fn* find_symbol(CublasLibrary& lib, const char* name) {
  std::call_once(lib.opened, [&] { lib.handle = open_library(lib); });
  void* sym = dlsym(lib.handle, name);
  if (sym == nullptr) {
    throw Error(detail::concat(lib.what, " (", lib.soname, ") lacks ", name, ": this vinf was built against cuBLAS ",
                               CUBLAS_VER_MAJOR, ".", CUBLAS_VER_MINOR, " or newer; the library found is older"));
  }
  return reinterpret_cast<Fn*>(sym);
}

}  // namespace
}  // namespace vinf::cuda

// Each forwarder resolves its function on its first call (thread-safe static initialization).
#define VINF_CUBLAS_FN(lib, name) \
  static auto* const real = ::vinf::cuda::find_symbol<decltype(::name)>(::vinf::cuda::lib, #name)
#define VINF_HIDDEN __attribute__((visibility("hidden")))  // (already so; said where it matters)

extern "C" {

VINF_HIDDEN cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  VINF_CUBLAS_FN(kBlas, cublasCreate_v2);
  return real(handle);
}

VINF_HIDDEN cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  VINF_CUBLAS_FN(kBlas, cublasDestroy_v2);
  return real(handle);
}

VINF_HIDDEN cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  VINF_CUBLAS_FN(kBlas, cublasSetStream_v2);
  return real(handle, stream);
}

VINF_HIDDEN const char* cublasGetStatusString(cublasStatus_t status) {
  // Called to describe a failure, also the failure to load: then the number is all there is.
  try {
    VINF_CUBLAS_FN(kBlas, cublasGetStatusString);
    return real(status);
  } catch (const vinf::Error&) {
    return "cuBLAS status (the library is not loaded)";
  }
}

VINF_HIDDEN cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                                      cublasOperation_t transb, int m, int n, int k, const void* alpha,
                                                      const void* A, cudaDataType Atype, int lda, long long int strideA,
                                                      const void* B, cudaDataType Btype, int ldb, long long int strideB,
                                                      const void* beta, void* C, cudaDataType Ctype, int ldc,
                                                      long long int strideC, int batchCount,
                                                      cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  // (The header overloads this name for C++ with an inline shim, so the type is written out.)
  using Fn =
      cublasStatus_t(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
                     cudaDataType, int, long long int, const void*, cudaDataType, int, long long int, const void*,
                     void*, cudaDataType, int, long long int, int, cublasComputeType_t, cublasGemmAlgo_t);
  static auto* const real = vinf::cuda::find_symbol<Fn>(vinf::cuda::kBlas, "cublasGemmStridedBatchedEx");
  return real(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype,
              ldc, strideC, batchCount, computeType, algo);
}

VINF_HIDDEN cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  VINF_CUBLAS_FN(kBlasLt, cublasLtCreate);
  return real(handle);
}

VINF_HIDDEN cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  VINF_CUBLAS_FN(kBlasLt, cublasLtDestroy);
  return real(handle);
}

VINF_HIDDEN cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                          const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                                          cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                                          cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                                          const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                          cudaStream_t stream) {
  VINF_CUBLAS_FN(kBlasLt, cublasLtMatmul);
  return real(handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace, workspace_bytes,
              stream);
}

VINF_HIDDEN cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                                    cudaDataType_t scale) {
  VINF_CUBLAS_FN(kBlasLt, cublasLtMatmulDescCreate);
  return real(desc, compute, scale);
}

VINF_HIDDEN cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  VINF_CUBLAS_FN(kBlasLt, cublasLtMatmulDescDestroy);
  return real(desc);
}

VINF_HIDDEN cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                          cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                          size_t bytes) {
  VINF_CUBLAS_FN(kBlasLt, cublasLtMatmulDescSetAttribute);
  return real(desc, attr, buf, bytes);
}

VINF_HIDDEN cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                                      uint64_t cols, int64_t ld) {
  VINF_CUBLAS_FN(kBlasLt, cublasLtMatrixLayoutCreate);
  return real(layout, type, rows, cols, ld);
}

VINF_HIDDEN cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  VINF_CUBLAS_FN(kBlasLt, cublasLtMatrixLayoutDestroy);
  return real(layout);
}

VINF_HIDDEN cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  VINF_CUBLAS_FN(kBlasLt, cublasLtMatmulPreferenceCreate);
  return real(pref);
}

VINF_HIDDEN cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  VINF_CUBLAS_FN(kBlasLt, cublasLtMatmulPreferenceDestroy);
  return real(pref);
}

VINF_HIDDEN cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                cublasLtMatmulPreferenceAttributes_t attr,
                                                                const void* buf, size_t bytes) {
  VINF_CUBLAS_FN(kBlasLt, cublasLtMatmulPreferenceSetAttribute);
  return real(pref, attr, buf, bytes);
}

VINF_HIDDEN cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                          cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                          cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                          cublasLtMatmulPreference_t pref, int requested,
                                                          cublasLtMatmulHeuristicResult_t* results, int* returned) {
  VINF_CUBLAS_FN(kBlasLt, cublasLtMatmulAlgoGetHeuristic);
  return real(handle, desc, Adesc, Bdesc, Cdesc, Ddesc, pref, requested, results, returned);
}

}  // extern "C"

#undef VINF_CUBLAS_FN
#undef VINF_HIDDEN
