// Owns what an ExecContext points to for one device: the arena and the backend handles.
#pragma once

#include <memory>
#include <string>

#include "exec/gpu_kernels.hpp"
#include "exec/profile.hpp"
#include "exec/tf32.hpp"
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

// --tf32: f32 GEMMs (cuBLAS) and convolutions (cuDNN) on CUDA may round their inputs to TF32
// (10 mantissa bits) on the tensor cores: set_allow_tf32() and allow_tf32() (exec/tf32.hpp).
// Process-wide, off by default; read at every GEMM and convolution, so it may be set at any time.
// No effect on the CPU or on f16/bf16 runs.
inline constexpr const char* kTf32OptionHelp =
    "use TF32 tensor cores for f32 GEMMs and convolutions on CUDA (about 1e-3 relative error; off: full f32)";
// Whether TF32 actually applies to a run on `device` in `dtype` (allowed, CUDA and f32): what the
// logs and run.json report.
inline bool tf32_in_effect(const Device& device, DType dtype) {
  return allow_tf32() && device.is_cuda() && dtype == DType::f32;
}

// For a run's log line on `device`: " (VINF_GPU_KERNELS: temporal-attention,index32)" when kernels
// that are off by default are on (exec/gpu_kernels.hpp) and the device is CUDA, else "".
std::string gpu_kernels_note(const ExecContext& ctx);

// Number of usable CUDA devices: 0 when this build has no CUDA, when no driver is installed or
// when no device is visible. Never throws.
int cuda_device_count();
// True when this build contains the CUDA backend.
bool built_with_cuda();
// The OpenMP threads the CPU kernels run on (OMP_NUM_THREADS, else the cores this process may use),
// as the calling thread sees it.
int cpu_threads();
// Sets the calling thread's: the kernels it runs from now on use n threads (at least 1). Threads
// started later begin with the process's default again.
void set_cpu_threads(int n);
// The threads each of `ranks` ranks sharing the calling thread's gets (ranks on threads of one
// process, or ranks of one node sharing its cores): an equal share, at least 1, so that together
// they run no more threads than there are cores.
inline int cpu_threads_per_rank(int ranks) {
  const int all = cpu_threads();
  return ranks > 1 ? (all / ranks > 0 ? all / ranks : 1) : all;
}
// Whether the CPU multiplies bf16 (AVX-512 BF16): what --dtype bf16 on the CPU needs.
bool cpu_bf16();
// Whether the CPU has AVX-512 BF16 whatever VINF_CPU_LEVEL says (cpu_bf16 honours the cap).
bool cpu_has_bf16_hardware();
// Whether the CPU's matrix products take a per-thread scratchpad (oneDNN's AVX-512 kernels).
bool cpu_matmul_scratch();
// /proc/cpuinfo's "model name" of the first CPU ("an unknown CPU" where there is none).
std::string cpu_model_name();
// What identifies a CUDA device across processes ("GPU-<uuid> (PCI <address>)"); "" for a CPU
// device. Throws vinf::Error when the device cannot be queried.
std::string device_identity(const Device& device);
// Page-locked host memory for an Arena, or nullptr in builds without CUDA.
std::unique_ptr<RawMemory> pinned_host_memory();
// How much memory `device` has in all: the node's physical memory for the CPU, the GPU's memory for
// CUDA; 0 when it cannot be told.
double memory_capacity_bytes(const Device& device);
// A GPU's peak memory bandwidth in bytes per second (what the op benchmark's "% of HBM" divides
// by); 0 for the CPU or when it cannot be told.
double memory_bandwidth_bytes(const Device& device);
// A profiler of calls on ctx (exec/profile.hpp): its marks are CUDA events on a GPU, the steady
// clock on the CPU. Set ctx.profiler to it while profiling.
std::unique_ptr<Profiler> make_profiler(ExecContext& ctx);

// --profile over a scope: ctx is profiled from construction to destruction.
class Profiling {
 public:
  explicit Profiling(ExecContext& ctx) : ctx_(ctx), profiler_(make_profiler(ctx)) { ctx_.profiler = profiler_.get(); }
  ~Profiling() { ctx_.profiler = nullptr; }
  Profiling(const Profiling&) = delete;
  Profiling& operator=(const Profiling&) = delete;
  ProfileReport report() const { return profiler_->report(); }

 private:
  ExecContext& ctx_;
  std::unique_ptr<Profiler> profiler_;
};

// Waits for the work queued on the context's device (nothing to wait for on the CPU).
void synchronize(ExecContext& ctx);

// --dtype of the commands that run the model: auto (the default) is bf16 on CUDA, where tensor
// cores make it several times faster than f32, and f32 on the CPU; bf16 on the CPU keeps the
// weights of the products and convolutions in bf16 (AVX-512 BF16 CPUs only).
inline constexpr const char* kDtypeOptionHelp =
    "compute dtype: auto (bf16 on CUDA, f32 on the CPU) | f32 | bf16 (on the CPU: bf16 weights and f32 activations, "
    "on CPUs with AVX-512 BF16) | f16 (CUDA only)";

}  // namespace vinf
