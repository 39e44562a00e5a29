// Naive Philox normal noise: each element drawn on its own from its stream index.
#include "core/philox.hpp"
#include "cpu/cpu.hpp"
#include "cpu/strided.hpp"

namespace vinf::cpu::ref {

void normal(const Tensor& out, std::uint64_t seed, std::uint64_t stream, std::uint64_t offset) {
  for (std::int64_t i = 0, n = out.numel(); i < n; ++i)
    store_from_double(out.data, out.dtype, offset_of(out, i),
                      philox::normal_at(seed, stream, offset + static_cast<std::uint64_t>(i)));
}

}  // namespace vinf::cpu::ref
