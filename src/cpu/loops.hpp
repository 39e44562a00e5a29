// Loop helpers for the CPU fast paths: joint coalescing of same-shaped strided views, an OpenMP
// loop over their rows, and dispatch over element types.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/half.hpp"
#include "core/tensor.hpp"

namespace vinf::cpu {

// Below this many elements a loop runs on one thread (OpenMP start-up costs more than it saves).
constexpr std::int64_t kParallelGrain = 1 << 15;

template <int N>
struct JointLayout {
  int rank = 0;
  std::array<std::int64_t, kMaxDims> size{};
  std::array<std::array<std::int64_t, kMaxDims>, N> stride{};
};

// Drops size-1 dims and merges neighbours that are contiguous with each other in every tensor.
template <int N>
JointLayout<N> joint_layout(const std::array<const Tensor*, N>& ts) {
  JointLayout<N> l;
  const Tensor& t0 = *ts[0];
  for (int d = 0; d < t0.rank(); ++d) {
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

struct F16 {
  std::uint16_t bits;
};
struct BF16 {
  std::uint16_t bits;
};

inline double widen(float v) { return v; }
inline double widen(double v) { return v; }
inline double widen(std::int64_t v) { return static_cast<double>(v); }
inline double widen(F16 v) { return f16_bits_to_f32(v.bits); }
inline double widen(BF16 v) { return bf16_bits_to_f32(v.bits); }

template <class T>
T narrow(double v);
template <>
inline float narrow<float>(double v) { return static_cast<float>(v); }
template <>
inline double narrow<double>(double v) { return v; }
template <>
inline std::int64_t narrow<std::int64_t>(double v) { return static_cast<std::int64_t>(v); }
template <>
inline F16 narrow<F16>(double v) { return F16{f32_to_f16_bits(static_cast<float>(v))}; }
template <>
inline BF16 narrow<BF16>(double v) { return BF16{f32_to_bf16_bits(static_cast<float>(v))}; }

// Calls fn(T{}) with the C++ type of dtype.
template <class Fn>
decltype(auto) dispatch_dtype(DType dt, Fn&& fn) {
  switch (dt) {
    case DType::f32: return fn(float{});
    case DType::f16: return fn(F16{});
    case DType::bf16: return fn(BF16{});
    case DType::f64: return fn(double{});
    case DType::i64: return fn(std::int64_t{});
  }
  return fn(float{});
}

}  // namespace vinf::cpu
