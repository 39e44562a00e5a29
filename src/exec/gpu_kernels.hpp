// CUDA kernels that no GPU has checked yet stay off by default, beside the kernels they would
// replace; the environment variable VINF_GPU_KERNELS turns them on by name, for scripts/gpu-check
// (which runs the op table and the benchmarks with them, against the CPU reference) and for
// trying them. A comma-separated list of:
//   temporal-attention  banded + global attention with one block per (sample, head) and up to 32
//                       query rows, every key and value row staged once (the temporal layers:
//                       about 24 queries against at most 56 keys)
//   index32             32-bit index arithmetic (division by multiply-high) in copies, fills and
//                       pointwise kernels when every offset of every view fits in 31 bits
//   flash-attention     full attention (spatial, cross, Wan) on the tensor cores with an online
//                       softmax, no score matrix in memory, f16/bf16 and head dims 16-128 (in
//                       place of two GEMMs and a softmax, or of the banded kernel)
//   gemm-epilogues      linear layers through cuBLASLt, planned once per shape (the heuristic's
//                       algorithm for a 32 MiB workspace) and the bias added by the GEMM's
//                       epilogue, not by a broadcast copy into the output that the GEMM reads back
//   staged-uploads      host-to-device copies of up to 64 KiB through a page-locked ring of the
//                       context, so that the host does not wait for them (the timesteps and
//                       other small inputs of every model call); not a kernel, but unrun as well
//   group-norm          GroupNorm (+ SiLU) in one kernel per (sample, group) run of memory:
//                       statistics in one read, scale, shift and activation in one read and one
//                       write, 16-byte accesses (in place of a fill and three kernels)
//   qkv-gemm            a self-attention's Q, K and V as one GEMM over their stacked weights (x
//                       read once, one launch instead of three), attention reading the three from
//                       its strided output, as the CPU does; not a kernel either
//   all, none
// A switch of the execution context (ExecContext::gpu_kernels), which each Runtime sets from the
// environment when it is made; a name it does not know is an input error (exit status 2). No
// effect on the CPU.
#pragma once

#include <string>
#include <string_view>

#include "exec/context.hpp"

namespace vinf {

enum class GpuKernel : unsigned {
  temporal_attention = 1u << 0,
  index32 = 1u << 1,
  staged_uploads = 1u << 2,
  flash_attention = 1u << 3,
  gemm_epilogues = 1u << 4,
  qkv_gemm = 1u << 5,
  group_norm = 1u << 6,
};
inline constexpr unsigned kAllGpuKernels = 0x7f;

// Whether the kernel is on for calls on `ctx`.
inline bool gpu_kernel_enabled(const ExecContext& ctx, GpuKernel k) {
  return (ctx.gpu_kernels & static_cast<unsigned>(k)) != 0;
}
// A list as VINF_GPU_KERNELS takes it; throws InputError naming the entry it does not know and
// the names it does.
unsigned parse_gpu_kernels(std::string_view list);
// "none", or the names of the kernels that are on ("temporal-attention,index32").
std::string gpu_kernels_text(unsigned mask);
// The kernels VINF_GPU_KERNELS turns on; throws InputError for a name it does not know.
unsigned gpu_kernels_from_environment();

}  // namespace vinf
