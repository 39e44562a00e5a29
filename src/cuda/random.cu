// Philox normal noise, bit-identical to the CPU (core/philox.hpp avoids libm and FMA contraction).
#include "core/philox.hpp"
#include "cuda/common.cuh"
#include "cuda/ops.hpp"

namespace vinf::cuda {
namespace {

// One thread per Philox block of four values.
__global__ void normal_kernel(void* out, DType dt, std::int64_t n, std::uint64_t seed, std::uint64_t stream,
                              std::uint64_t offset, std::uint64_t first_block, std::int64_t blocks) {
  for (std::int64_t bi = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; bi < blocks;
       bi += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    philox::write_block(seed, stream, first_block + static_cast<std::uint64_t>(bi), offset, static_cast<std::uint64_t>(n),
                        [&](std::uint64_t k, float v) { store_f(out, dt, static_cast<std::int64_t>(k), v); });
  }
}

}  // namespace

void normal(ExecContext& ctx, const Tensor& out, std::uint64_t seed, std::uint64_t stream, std::uint64_t offset) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  const std::uint64_t first_block = offset >> 2, last_block = (offset + static_cast<std::uint64_t>(n) + 3) >> 2;
  const std::int64_t blocks = static_cast<std::int64_t>(last_block - first_block);
  normal_kernel<<<grid_for(blocks), kThreads, 0, stream_of(ctx)>>>(out.data, out.dtype, n, seed, stream, offset,
                                                                   first_block, blocks);
  VINF_CHECK_LAUNCH();
}

}  // namespace vinf::cuda
