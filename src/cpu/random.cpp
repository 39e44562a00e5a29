// Fast Philox normal noise: whole blocks of four values per iteration, OpenMP over blocks.
#include "core/philox.hpp"
#include "cpu/cpu.hpp"
#include "cpu/loops.hpp"
#include "cpu/strided.hpp"

namespace vinf::cpu::fast {

void normal(const Tensor& out, std::uint64_t seed, std::uint64_t stream, std::uint64_t offset) {
  // Whole Philox blocks (4 values) at a time; `out` is contiguous (the op layer ensures it).
  const std::int64_t n = out.numel();
  const std::uint64_t first_block = offset >> 2, last_block = (offset + static_cast<std::uint64_t>(n) + 3) >> 2;
  const std::int64_t blocks = static_cast<std::int64_t>(last_block - first_block);
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (std::int64_t bi = 0; bi < blocks; ++bi) {
    philox::write_block(seed, stream, first_block + static_cast<std::uint64_t>(bi), offset, static_cast<std::uint64_t>(n),
                        [&](std::uint64_t k, float v) { store_from_double(out.data, out.dtype, static_cast<std::int64_t>(k), v); });
  }
}

}  // namespace vinf::cpu::fast
