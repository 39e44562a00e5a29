// Shared by the unit tests: GPU detection with one clear skip message, fixture paths, host
// tensors.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "ops/runtime.hpp"

namespace vinf::test {

// True when a CUDA device can be used; otherwise prints why the calling test is skipped.
inline bool gpu_or_skip(const char* what) {
  if (cuda_device_count() > 0) return true;
  MESSAGE("skipped " << what << ": " << (built_with_cuda() ? "no GPU visible" : "built without CUDA"));
  return false;
}

inline std::string fixture(const std::string& rel) { return std::string(VINF_TEST_FIXTURES) + "/" + rel; }

// A contiguous f32 host tensor that owns its storage.
struct HostTensor {
  std::vector<float> data;
  Tensor t;
  explicit HostTensor(const Shape& s) : data(static_cast<std::size_t>(s.numel())) {
    t = Tensor::wrap(data.data(), DType::f32, Device::cpu(), s);
  }
  HostTensor(const Shape& s, std::vector<float> v) : data(std::move(v)) {
    t = Tensor::wrap(data.data(), DType::f32, Device::cpu(), s);
  }
  operator const Tensor&() const { return t; }
};

}  // namespace vinf::test
