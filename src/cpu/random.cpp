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
    float v[4];
    const std::uint64_t block = first_block + static_cast<std::uint64_t>(bi);
    philox::normals4(seed, stream, block, v);
    for (int lane = 0; lane < 4; ++lane) {
      const std::uint64_t idx = block * 4 + static_cast<std::uint64_t>(lane);
      if (idx < offset || idx >= offset + static_cast<std::uint64_t>(n)) continue;
      const std::int64_t k = static_cast<std::int64_t>(idx - offset);
      store_from_double(out.data, out.dtype, k, v[lane]);
    }
  }
}

}  // namespace vinf::cpu::fast
