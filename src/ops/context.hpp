// The explicit execution context every op takes: where it runs, which arena holds its workspace,
// and the backend handles. Nothing in the op library reads hidden global state.
#pragma once

#include "core/arena.hpp"
#include "core/tensor.hpp"

namespace vinf {

namespace cpu {
class CpuContext;
}
namespace cuda {
class CudaContext;
}

// On the CPU every op has a naive reference (simple, frozen, the oracle in tests) and a fast path.
enum class CpuImpl { reference, fast };

struct ExecContext {
  Device device{};
  Arena* arena = nullptr;                 // workspace memory on `device`
  CpuImpl cpu_impl = CpuImpl::fast;
  cpu::CpuContext* cpu = nullptr;         // oneDNN engine/stream and primitive cache (CPU)
  cuda::CudaContext* cuda = nullptr;      // stream, cuBLAS and cuDNN handles (CUDA)
};

// Checks that a tensor is where the context runs; names the op and argument otherwise.
void check_on_device(const ExecContext& ctx, const char* op, const char* arg, const Tensor& t);

}  // namespace vinf
