// Loop helpers for the CPU fast paths: joint coalescing of same-shaped strided views and an OpenMP
// loop over their rows (exec/layout.hpp, exec/loops.hpp), and dispatch over element types.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/half.hpp"
#include "core/tensor.hpp"
#include "exec/layout.hpp"
#include "exec/loops.hpp"

namespace vinf::cpu {

using exec::for_each_row;
using exec::joint_layout;
using exec::JointLayout;
using exec::kParallelGrain;
using exec::parallel_chunks;

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
