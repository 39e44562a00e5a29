// Host loops over jointly coalesced views (exec/layout.hpp), spread over OpenMP threads: the CPU
// kernels' loops and the host side of CUDA's transfers.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "exec/layout.hpp"

namespace vinf::exec {

// Below this many elements a loop runs on one thread (OpenMP start-up costs more than it saves).
constexpr std::int64_t kParallelGrain = 1 << 15;

// Calls fn(base_offsets, inner_count, inner_strides) for every row (all dims but the last),
// rows spread over OpenMP threads.
template <int N, class Fn>
void for_each_row(const JointLayout<N>& l, Fn&& fn) {
  const int r = l.rank;
  const std::int64_t inner = l.size[r - 1];
  std::int64_t rows = 1;
  for (int d = 0; d < r - 1; ++d) rows *= l.size[d];
  std::array<std::int64_t, N> inner_stride;
  for (int k = 0; k < N; ++k) inner_stride[k] = l.stride[k][r - 1];
#pragma omp parallel for schedule(static) if (rows * inner >= kParallelGrain && rows > 1)
  for (std::int64_t row = 0; row < rows; ++row) {
    std::array<std::int64_t, N> base{};
    std::int64_t rem = row;
    for (int d = r - 2; d >= 0; --d) {
      const std::int64_t idx = rem % l.size[d];
      rem /= l.size[d];
      for (int k = 0; k < N; ++k) base[k] += idx * l.stride[k][d];
    }
    fn(base, inner, inner_stride);
  }
}

// A single long contiguous run: split it over threads instead of over (one) row.
template <class Fn>
void parallel_chunks(std::int64_t n, Fn&& fn) {
  constexpr std::int64_t kChunk = 1 << 14;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelGrain)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = c * kChunk;
    fn(begin, std::min(n, begin + kChunk));
  }
}

}  // namespace vinf::exec
