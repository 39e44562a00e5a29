#include "cuda/context.hpp"

#include "core/error.hpp"
#include "cuda/check.hpp"

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

}  // namespace

std::unique_ptr<RawMemory> device_memory(int device) { return std::make_unique<DeviceMemory>(device); }

}  // namespace vinf::cuda
