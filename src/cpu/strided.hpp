// Element access helpers shared by the CPU kernels.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/error.hpp"
#include "core/half.hpp"
#include "core/tensor.hpp"

namespace vinf::cpu {

// Offset (in elements) of the element with row-major linear index `linear` in a strided view.
inline std::int64_t offset_of(const Tensor& t, std::int64_t linear) {
  std::int64_t off = 0;
  for (int d = t.rank() - 1; d >= 0; --d) {
    const std::int64_t n = t.shape[d];
    off += (linear % n) * t.strides[d];
    linear /= n;
  }
  return off;
}

inline double load_as_double(const void* base, DType dt, std::int64_t off) {
  switch (dt) {
    case DType::f32: return static_cast<const float*>(base)[off];
    case DType::f16: return f16_bits_to_f32(static_cast<const std::uint16_t*>(base)[off]);
    case DType::bf16: return bf16_bits_to_f32(static_cast<const std::uint16_t*>(base)[off]);
    case DType::f64: return static_cast<const double*>(base)[off];
    case DType::i64: return static_cast<double>(static_cast<const std::int64_t*>(base)[off]);
  }
  return 0;
}

inline void store_from_double(void* base, DType dt, std::int64_t off, double v) {
  switch (dt) {
    case DType::f32: static_cast<float*>(base)[off] = static_cast<float>(v); break;
    case DType::f16: static_cast<std::uint16_t*>(base)[off] = f32_to_f16_bits(static_cast<float>(v)); break;
    case DType::bf16: static_cast<std::uint16_t*>(base)[off] = f32_to_bf16_bits(static_cast<float>(v)); break;
    case DType::f64: static_cast<double*>(base)[off] = v; break;
    case DType::i64: static_cast<std::int64_t*>(base)[off] = static_cast<std::int64_t>(v); break;
  }
}

// f32 element at a multi-index of up to 6 dims.
inline float& at_f32(const Tensor& t, std::int64_t i0, std::int64_t i1 = 0, std::int64_t i2 = 0, std::int64_t i3 = 0) {
  return static_cast<float*>(t.data)[i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2] + i3 * t.strides[3]];
}

}  // namespace vinf::cpu
