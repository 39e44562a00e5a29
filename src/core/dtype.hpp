// Element types and devices: the two facts every tensor carries besides its shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vinf {

// f64 is internal (GroupNorm partial sums that ranks all-reduce); models store f32/f16/bf16,
// token ids are i64.
enum class DType : std::uint8_t { f32, f16, bf16, f64, i64 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::f64: return 8;
    case DType::i64: return 8;
  }
  return 0;
}

constexpr bool is_floating(DType t) { return t != DType::i64; }

const char* dtype_name(DType t);
// Accepts "f32|float32|fp32", "f16|float16|fp16|half", "bf16|bfloat16", "f64", "i64".
// Returns false for anything else.
bool parse_dtype(std::string_view text, DType& out);

enum class DeviceKind : std::uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static constexpr Device cpu() { return {DeviceKind::cpu, 0}; }
  static constexpr Device cuda(int i) { return {DeviceKind::cuda, i}; }
  constexpr bool is_cpu() const { return kind == DeviceKind::cpu; }
  constexpr bool is_cuda() const { return kind == DeviceKind::cuda; }
  friend constexpr bool operator==(Device a, Device b) { return a.kind == b.kind && a.index == b.index; }
  // "cpu", "cuda:1". A CPU device with index N > 0 ("cpu:N") is host memory that the device
  // checks treat as a memory space of its own: tests use it as a stand-in for a GPU, so that a
  // host tensor passed where device memory belongs is caught without one.
  std::string name() const;
};

}  // namespace vinf
