// The explicit execution context every op and every backend kernel takes: where it runs, which
// arena holds its workspace, and the backend handles. Nothing below the op API reads hidden global
// state (the one process-wide switch, TF32, is in exec/tf32.hpp).
#pragma once

#include <cstdint>

#include "core/arena.hpp"
#include "core/tensor.hpp"

namespace vinf {

namespace cpu {
class CpuContext;
}
namespace cuda {
class CudaContext;
}
class Profiler;

// On the CPU every op has a naive reference (simple, frozen, the oracle in tests) and a fast path.
enum class CpuImpl { reference, fast };

struct ExecContext {
  Device device{};
  Arena* arena = nullptr;  // workspace memory on `device`
  CpuImpl cpu_impl = CpuImpl::fast;
  cpu::CpuContext* cpu = nullptr;  // oneDNN engine/stream and primitive cache (CPU)
  cuda::CudaContext* cuda = nullptr;  // stream, cuBLAS and cuDNN handles (CUDA)
  // The CUDA kernels that are off by default and on for this context (GpuKernel bits,
  // exec/gpu_kernels.hpp): the Runtime sets them from VINF_GPU_KERNELS; no effect on the CPU.
  unsigned gpu_kernels = 0;
  // ops::copy and ops::fill calls on this context (each is a kernel launch or a transfer on CUDA):
  // what the tests count to keep per-frame copies out of the hot paths.
  std::uint64_t copy_calls = 0;
  // Set while --profile times this context's ops (exec/profile.hpp); not owned.
  Profiler* profiler = nullptr;
};

}  // namespace vinf
