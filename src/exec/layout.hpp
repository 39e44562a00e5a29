// Stride arithmetic shared by the CPU loops and the CUDA launches: joint coalescing of same-shaped
// strided views, and how a 2-D view reads as a GEMM operand.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "core/tensor.hpp"

namespace vinf::exec {

template <int N>
struct JointLayout {
  int rank = 0;
  std::array<std::int64_t, kMaxDims> size{};
  std::array<std::array<std::int64_t, kMaxDims>, N> stride{};
};

// Drops size-1 dims and merges neighbours that are contiguous with each other in every tensor.
// The dims go in the memory order of the last tensor (the output: outermost first, by its strides,
// ties in their own order), so that a channels-last output, say, is written along its channels.
template <int N>
JointLayout<N> joint_layout(const std::array<const Tensor*, N>& ts) {
  JointLayout<N> l;
  const Tensor& t0 = *ts[0];
  const Tensor& last = *ts[N - 1];
  std::array<int, kMaxDims> order{};
  for (int d = 0; d < t0.rank(); ++d) order[d] = d;
  std::stable_sort(order.begin(), order.begin() + t0.rank(),
                   [&](int a, int b) { return last.strides[a] > last.strides[b]; });
  for (int i = 0; i < t0.rank(); ++i) {
    const int d = order[i];
    const std::int64_t n = t0.shape[d];
    if (n == 1) continue;
    bool merge = l.rank > 0;
    for (int k = 0; k < N && merge; ++k) merge = l.stride[k][l.rank - 1] == ts[k]->strides[d] * n;
    if (merge) {
      l.size[l.rank - 1] *= n;
      for (int k = 0; k < N; ++k) l.stride[k][l.rank - 1] = ts[k]->strides[d];
    } else {
      l.size[l.rank] = n;
      for (int k = 0; k < N; ++k) l.stride[k][l.rank] = ts[k]->strides[d];
      ++l.rank;
    }
  }
  if (l.rank == 0) {
    l.rank = 1;
    l.size[0] = 1;
    for (int k = 0; k < N; ++k) l.stride[k][0] = 1;
  }
  return l;
}

// How a row-major GEMM (BLAS, cuBLAS) can read a 2-D view: as stored (leading dimension ld) or as
// the transpose of a stored matrix.
struct MatrixLayout {
  bool transposed = false;
  std::int64_t ld = 0;
};

// False when neither of the view's two strides is 1 (the caller copies it first). Reads the
// shape and strides only, so any dtype.
inline bool matrix_layout(const Tensor& m, MatrixLayout& out) {
  const std::int64_t rows = m.size(0), cols = m.size(1), s0 = m.stride(0), s1 = m.stride(1);
  if ((s1 == 1 || cols == 1) && (rows == 1 || s0 >= cols)) {
    out.transposed = false;
    out.ld = rows == 1 ? std::max<std::int64_t>(1, cols) : std::max<std::int64_t>(s0, 1);
    return true;
  }
  if ((s0 == 1 || rows == 1) && (cols == 1 || s1 >= rows)) {
    out.transposed = true;
    out.ld = cols == 1 ? std::max<std::int64_t>(1, rows) : std::max<std::int64_t>(s1, 1);
    return true;
  }
  return false;
}

}  // namespace vinf::exec
