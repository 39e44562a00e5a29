#include "cuda/context.hpp"

#include <cstdio>

#include "core/error.hpp"
#include "cuda/check.hpp"
#include "cuda/ops.hpp"

namespace vinf::cuda {

const char* cublas_status_text(cublasStatus_t s) {
  // cublasGetStatusString exists since CUDA 11.4; name and text in one.
  return cublasGetStatusString(s);
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" / "no device" error
    return 0;
  }
  return n;
}

CudaContext::CudaContext(int device) : device_(device) {
  const int n = device_count();
  VINF_CHECK(device >= 0 && device < n, "CUDA device ", device, " is not available (", n,
             " visible; check CUDA_VISIBLE_DEVICES and the driver with nvidia-smi)");
  VINF_CHECK_CUDA(cudaSetDevice(device));
  VINF_CHECK_CUDA(cudaGetDeviceProperties(&props_, device));
  VINF_CHECK_CUDA(cudaStreamCreateWithFlags(stream_.put(), cudaStreamNonBlocking));
  VINF_CHECK_CUBLAS(cublasCreate(cublas_.put()));
  VINF_CHECK_CUBLAS(cublasSetStream(cublas_.get(), stream_.get()));
  VINF_CHECK_CUDNN(cudnnCreate(cudnn_.put()));
  VINF_CHECK_CUDNN(cudnnSetStream(cudnn_.get(), stream_.get()));
  set_process_device("cuda:" + std::to_string(device));
}

CudaContext::~CudaContext() {
  // Queued work finishes before the members free the handles and then the stream.
  if (stream_) (void)cudaStreamSynchronize(stream_.get());
}

void CudaContext::synchronize() { VINF_CHECK_CUDA(cudaStreamSynchronize(stream_.get())); }

std::size_t shared_memory_optin(const ExecContext& ctx) { return ctx.cuda->properties().sharedMemPerBlockOptin; }

cublasLtHandle_t CudaContext::cublas_lt() {
  if (!cublas_lt_) VINF_CHECK_CUBLAS(cublasLtCreate(cublas_lt_.put()));
  return cublas_lt_.get();
}

void* CudaContext::lt_workspace() {
  if (!lt_workspace_) VINF_CHECK_CUDA(cudaMalloc(lt_workspace_.put(), kLtWorkspaceBytes));
  return lt_workspace_.get();
}

void* CudaContext::stage(std::size_t n) {
  if (n > kStagingLargest || !staging_.fits(n)) return nullptr;
  VINF_CHECK_CUDA(cudaSetDevice(device_));  // the event of staged() belongs to this device
  if (!staging_memory_) VINF_CHECK_CUDA(cudaHostAlloc(staging_memory_.put(), kStagingBytes, cudaHostAllocPortable));
  return static_cast<char*>(staging_memory_.get()) + staging_.acquire(n);
}

void CudaContext::staged() noexcept {
  cudaEvent_t e = nullptr;
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess &&
      cudaEventRecord(e, stream_.get()) == cudaSuccess) {
    staging_.hold(EventFence{std::shared_ptr<CUevent_st>(e, [](cudaEvent_t x) { (void)cudaEventDestroy(x); })});
    return;
  }
  // No event: wait for the copy itself, so that the piece can be handed out again at once (the
  // error surfaces at the next CUDA call that checks).
  if (e) (void)cudaEventDestroy(e);
  (void)cudaStreamSynchronize(stream_.get());
  staging_.drop();
}

namespace {

class DeviceMemory final : public RawMemory {
 public:
  explicit DeviceMemory(int device) : device_(device) {}
  void* allocate(std::size_t bytes) override {
    VINF_CHECK_CUDA(cudaSetDevice(device_));
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      std::size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      VINF_FAIL("out of GPU memory allocating ", bytes >> 20, " MiB on cuda:", device_, " (", free_b >> 20, " of ",
                total_b >> 20, " MiB free): ", cudaGetErrorString(e));
    }
    return p;
  }
  void release(void* p) noexcept override {
    (void)cudaSetDevice(device_);
    // Blocks go back to the system only when an arena is trimmed or destroyed; make sure no
    // queued kernel still reads them.
    (void)cudaDeviceSynchronize();
    (void)cudaFree(p);
  }
  Device device() const override { return Device::cuda(device_); }

 private:
  int device_;
};

// Page-locked host memory: copies to and from it run at the link's full speed and truly
// asynchronously (so the buffer must outlive the copy: callers synchronize before giving it back).
class PinnedMemory final : public RawMemory {
 public:
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      VINF_FAIL("cannot pin ", bytes >> 20, " MiB of host memory: ", cudaGetErrorString(e));
    }
    return p;
  }
  void release(void* p) noexcept override { (void)cudaFreeHost(p); }
  Device device() const override { return Device::cpu(); }
};

}  // namespace

std::unique_ptr<RawMemory> device_memory(int device) { return std::make_unique<DeviceMemory>(device); }

std::unique_ptr<RawMemory> pinned_memory() { return std::make_unique<PinnedMemory>(); }

double memory_capacity_bytes(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0.0;
  }
  return static_cast<double>(p.totalGlobalMem);
}

double memory_bandwidth_bytes(int device) {
  int khz = 0, bits = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0.0;
  }
  return 2.0 * khz * 1e3 * bits / 8.0;  // two transfers per clock
}

std::string device_identity(int device) {
  cudaDeviceProp p{};
  VINF_CHECK_CUDA(cudaGetDeviceProperties(&p, device));
  // As nvidia-smi prints it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, then the PCI address.
  const auto* u = reinterpret_cast<const unsigned char*>(p.uuid.bytes);
  char text[96];
  std::snprintf(text, sizeof text,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x (PCI %04x:%02x:%02x.0)", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15],
                p.pciDomainID, p.pciBusID, p.pciDeviceID);
  return text;
}

}  // namespace vinf::cuda
