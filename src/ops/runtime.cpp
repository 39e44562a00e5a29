#include "ops/runtime.hpp"

#include <unistd.h>

#include <fstream>

#include "core/error.hpp"
#include "exec/gpu_kernels.hpp"
#include "cpu/context.hpp"
#include "cpu/cpu.hpp"

#if VINF_WITH_CUDA
#include "cuda/context.hpp"
#else
namespace vinf::cuda {
class CudaContext {};
}  // namespace vinf::cuda
#endif

namespace vinf {

bool built_with_cuda() { return VINF_WITH_CUDA != 0; }

int cpu_threads() { return cpu::thread_count(); }

void set_cpu_threads(int n) { cpu::set_thread_count(n); }

bool cpu_bf16() { return cpu::bf16_supported(); }

bool cpu_has_bf16_hardware() { return cpu::bf16_hardware(); }

bool cpu_matmul_scratch() { return cpu::matmul_packs_weights(); }

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const std::size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const std::size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "an unknown CPU" : line.substr(start);
  }
  return "an unknown CPU";
}

int cuda_device_count() {
#if VINF_WITH_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

std::string device_identity(const Device& device) {
  if (!device.is_cuda()) return "";
#if VINF_WITH_CUDA
  return cuda::device_identity(device.index);
#else
  VINF_FAIL("cannot query ", device.name(), ": this vinf was built without CUDA");
#endif
}

std::unique_ptr<RawMemory> pinned_host_memory() {
#if VINF_WITH_CUDA
  return cuda::pinned_memory();
#else
  return nullptr;
#endif
}

double memory_bandwidth_bytes(const Device& device) {
  if (device.is_cpu()) return 0.0;
#if VINF_WITH_CUDA
  return cuda::memory_bandwidth_bytes(device.index);
#else
  return 0.0;
#endif
}

double memory_capacity_bytes(const Device& device) {
  if (device.is_cpu()) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
  }
#if VINF_WITH_CUDA
  return cuda::memory_capacity_bytes(device.index);
#else
  return 0.0;
#endif
}

std::unique_ptr<Profiler> make_profiler(ExecContext& ctx) {
#if VINF_WITH_CUDA
  if (ctx.device.is_cuda() && ctx.cuda) return std::make_unique<Profiler>(cuda::make_event_timer(*ctx.cuda));
#else
  (void)ctx;
#endif
  return std::make_unique<Profiler>(std::make_unique<ClockProfileTimer>());
}

void synchronize(ExecContext& ctx) {
  count_host_sync();
#if VINF_WITH_CUDA
  if (ctx.device.is_cuda() && ctx.cuda) ctx.cuda->synchronize();
#else
  (void)ctx;
#endif
}

Runtime::Runtime(Device device, CpuImpl cpu_impl) {
  ctx_.gpu_kernels = gpu_kernels_from_environment();  // a bad VINF_GPU_KERNELS is an input error, on the CPU too
  ctx_.device = device;
  ctx_.cpu_impl = cpu_impl;
  if (device.is_cpu()) {
    arena_ = std::make_unique<Arena>(host_memory(device));
    cpu_ = std::make_unique<cpu::CpuContext>();
    ctx_.cpu = cpu_.get();
  } else {
#if VINF_WITH_CUDA
    cuda_ = std::make_unique<cuda::CudaContext>(device.index);
    arena_ = std::make_unique<Arena>(cuda::device_memory(device.index));
    ctx_.cuda = cuda_.get();
#else
    VINF_FAIL("cannot run on ", device.name(), ": this vinf was built without CUDA");
#endif
  }
  ctx_.arena = arena_.get();
}

Runtime::~Runtime() {
  // The arena's blocks must go back before the stream and handles they were used with.
  arena_.reset();
}

void Runtime::synchronize() { vinf::synchronize(ctx_); }

std::string gpu_kernels_note(const ExecContext& ctx) {
  if (!ctx.device.is_cuda() || ctx.gpu_kernels == 0) return {};
  return " (VINF_GPU_KERNELS: " + gpu_kernels_text(ctx.gpu_kernels) + ")";
}

}  // namespace vinf
