// CUDA backend state for one device: the stream every op is queued on, the cuBLAS and cuDNN
// handles bound to it, and cached convolution algorithm choices. Passed explicitly; nothing here
// relies on a current device or the default stream.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <memory>
#include <string>
#include <unordered_map>

#include "core/arena.hpp"
#include "exec/profile.hpp"
#include "cuda/owned.hpp"
#include "exec/staging_ring.hpp"

namespace vinf::cuda {

// A linear layer's cuBLASLt matmul for one shape, layout and alignment (cuda/gemm.cpp): made
// once, with the heuristic's first algorithm for kLtWorkspaceBytes of workspace; `runs` false
// where cuBLASLt offers none (the cuBLAS way is taken).
struct LtPlan {
  Owned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> desc;
  Owned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> w, x, y;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;
  bool runs = false;
};

struct ConvAlgo {
  cudnnConvolutionFwdAlgo_t algo;
  std::size_t workspace = 0;
};

// A point on a stream for the staging ring (exec/staging_ring.hpp): an event recorded there.
struct EventFence {
  std::shared_ptr<CUevent_st> event;
  bool done() const { return cudaEventQuery(event.get()) != cudaErrorNotReady; }  // an error surfaces later
  void wait() const {
    count_host_sync();
    (void)cudaEventSynchronize(event.get());
  }
};

class CudaContext {
 public:
  explicit CudaContext(int device);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_.get(); }
  cublasHandle_t cublas() const { return cublas_.get(); }
  cudnnHandle_t cudnn() const { return cudnn_.get(); }
  // cuBLASLt's handle, made on first use (the GEMM epilogues of VINF_GPU_KERNELS=gemm-epilogues).
  cublasLtHandle_t cublas_lt();
  const cudaDeviceProp& properties() const { return props_; }
  std::unordered_map<std::string, ConvAlgo>& conv_algos() { return conv_algos_; }
  // cuBLASLt's plans by key, and the workspace they share on the stream (made on first use).
  std::unordered_map<std::string, std::unique_ptr<LtPlan>>& lt_plans() { return lt_plans_; }
  void* lt_workspace();
  static constexpr std::size_t kLtWorkspaceBytes = 32 << 20;
  void synchronize();
  // Page-locked space for a host-to-device copy of n bytes (VINF_GPU_KERNELS=staged-uploads),
  // so that the host does not wait for it: nullptr when n is over kStagingLargest. Fill it, queue
  // the copy from it on stream(), then call staged(), also when something failed in between.
  void* stage(std::size_t n);
  void staged() noexcept;
  static constexpr std::size_t kStagingBytes = 1 << 20, kStagingLargest = 64 << 10;

 private:
  int device_;
  cudaDeviceProp props_{};
  // Declared in creation order: members are destroyed in reverse, the handles before the stream
  // they are bound to, and a constructor that throws halfway frees what it had made.
  Owned<cudaStream_t, cudaStreamDestroy> stream_;
  Owned<cublasHandle_t, cublasDestroy> cublas_;
  Owned<cudnnHandle_t, cudnnDestroy> cudnn_;
  std::unordered_map<std::string, ConvAlgo> conv_algos_;
  Owned<void*, cudaFreeHost> staging_memory_;  // made on first use
  Owned<cublasLtHandle_t, cublasLtDestroy> cublas_lt_;  // made on first use
  Owned<void*, cudaFree> lt_workspace_;  // made on first use
  std::unordered_map<std::string, std::unique_ptr<LtPlan>> lt_plans_;
  exec::StagingRing<EventFence> staging_{kStagingBytes};
};

// cudaMalloc-backed memory for an Arena on `device`.
std::unique_ptr<RawMemory> device_memory(int device);

// Page-locked host memory for an Arena (staging buffers of the MPI transport).
std::unique_ptr<RawMemory> pinned_memory();

// The device's UUID and PCI address, as nvidia-smi shows them: what tells two ranks that they
// were given the same GPU.
std::string device_identity(int device);

// The device's memory in bytes (what cudaMemGetInfo calls total); 0 when it cannot be read.
double memory_capacity_bytes(int device);

// The device memory's peak bandwidth in bytes per second (memory clock x 2 x bus width), as the
// vendor's datasheets give it; 0 when it cannot be read.
double memory_bandwidth_bytes(int device);

// --profile's marks on the context's stream (exec/profile.hpp): CUDA events, read after the call.
std::unique_ptr<ProfileTimer> make_event_timer(CudaContext& cc);

// Usable devices; 0 when there is no driver or no visible device (the error is cleared).
int device_count();

}  // namespace vinf::cuda
