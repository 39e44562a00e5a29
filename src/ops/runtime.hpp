// Owns what an ExecContext points to for one device: the arena and the backend handles.
#pragma once

#include <memory>

#include "ops/context.hpp"

namespace vinf {

class Runtime {
 public:
  // Device::cpu() or Device::cuda(i). CUDA throws vinf::Error when this build has no CUDA or the
  // device cannot be used.
  explicit Runtime(Device device, CpuImpl cpu_impl = CpuImpl::fast);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  ExecContext& ctx() { return ctx_; }
  Arena& arena() { return *arena_; }
  Device device() const { return ctx_.device; }
  // Waits for the device's queued work (no-op on the CPU).
  void synchronize();

 private:
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<cpu::CpuContext> cpu_;
  std::unique_ptr<cuda::CudaContext> cuda_;
  ExecContext ctx_;
};

// Number of usable CUDA devices: 0 when this build has no CUDA, when no driver is installed or
// when no device is visible. Never throws.
int cuda_device_count();
// True when this build contains the CUDA backend.
bool built_with_cuda();

}  // namespace vinf
