// exec::copy_host, the gather and scatter around CUDA's transfers of strided host tensors, and
// those transfers themselves when a GPU is visible.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../support.hpp"
#include "core/error.hpp"
#include "exec/host_copy.hpp"
#include "ops/elementwise.hpp"

using namespace vinf;

namespace {

// Distinct bit patterns (no value is interpreted, so any pattern must survive).
template <class T>
std::vector<T> patterns(std::size_t n, std::uint64_t salt) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<T>((i + 1) * 0x9E3779B97F4A7C15ull ^ salt);
  return v;
}

template <class T>
void check_gather_and_scatter(DType dt) {
  INFO("dtype " << std::string(dtype_name(dt)));
  // Gather: a permuted view (3, 5, 7) -> (7, 3, 5) into a contiguous block.
  auto src = patterns<T>(3 * 5 * 7, 0x1234);
  std::vector<T> dst(src.size());
  const Tensor s = Tensor::wrap(src.data(), dt, Device::cpu(), {3, 5, 7});
  exec::copy_host(s.permute({2, 0, 1}), Tensor::wrap(dst.data(), dt, Device::cpu(), {7, 3, 5}));
  int bad = 0;
  for (int k = 0; k < 7; ++k)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j) bad += dst[(k * 3 + i) * 5 + j] != src[(i * 5 + j) * 7 + k];
  CHECK(bad == 0);

  // Scatter: (4, 3) into columns 5..7 of a (4, 9) block; the other columns keep their values.
  auto part = patterns<T>(12, 0x55);
  auto block = patterns<T>(36, 0xAA);
  const auto before = block;
  exec::copy_host(Tensor::wrap(part.data(), dt, Device::cpu(), {4, 3}),
                  Tensor::wrap(block.data(), dt, Device::cpu(), {4, 9}).slice(1, 5, 3));
  bad = 0;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 9; ++c) bad += block[r * 9 + c] != (c >= 5 && c < 8 ? part[r * 3 + (c - 5)] : before[r * 9 + c]);
  CHECK(bad == 0);

  // Large enough for the threaded loops: a transpose of 64 x 700 and a contiguous run of the same size.
  auto big = patterns<T>(64 * 700, 0x77);
  std::vector<T> out(big.size()), flat(big.size());
  const Tensor b = Tensor::wrap(big.data(), dt, Device::cpu(), {64, 700});
  exec::copy_host(b.transpose(0, 1), Tensor::wrap(out.data(), dt, Device::cpu(), {700, 64}));
  exec::copy_host(b, Tensor::wrap(flat.data(), dt, Device::cpu(), {64, 700}));
  bad = 0;
  for (int r = 0; r < 700; ++r)
    for (int c = 0; c < 64; ++c) bad += out[r * 64 + c] != big[c * 700 + r];
  CHECK(bad == 0);
  CHECK(flat == big);
}

}  // namespace

TEST_CASE("exec::copy_host gathers strided host views and scatters into them, bits unchanged, 2-, 4- and 8-byte elements") {
  check_gather_and_scatter<std::uint16_t>(DType::bf16);
  check_gather_and_scatter<std::uint32_t>(DType::f32);
  check_gather_and_scatter<std::uint64_t>(DType::i64);
}

TEST_CASE("exec::copy_host refuses views of different dtypes or shapes") {
  std::vector<float> a(6);
  std::vector<std::uint16_t> h(6);
  const Tensor f = Tensor::wrap(a.data(), DType::f32, Device::cpu(), {2, 3});
  auto error_of = [](auto fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  CHECK(error_of([&] { exec::copy_host(f, Tensor::wrap(h.data(), DType::f16, Device::cpu(), {2, 3})); })
            .find("not a copy between same host views") != std::string::npos);
  CHECK(error_of([&] { exec::copy_host(f, f.reshape({3, 2})); }).find("not a copy between same host views") !=
        std::string::npos);
}

TEST_CASE("CUDA copy: strided host views to the device and back (host gather and scatter), also with a cast") {
  if (!test::gpu_or_skip("CUDA strided host copies")) return;
  Runtime gpu(Device::cuda(0));
  std::vector<float> src(4 * 6 * 5);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 0.25f - 7.f;
  const Tensor s = Tensor::wrap(src.data(), DType::f32, Device::cpu(), {4, 6, 5});
  for (DType dev_dtype : {DType::f32, DType::bf16}) {
    INFO("device dtype " << std::string(dtype_name(dev_dtype)));
    OwnedTensor d = gpu.arena().empty(dev_dtype, {5, 4, 6});
    ops::copy(gpu.ctx(), s.permute({2, 0, 1}), d);  // host gather, then transfer (and cast)
    std::vector<float> back(5 * 4 * 8, std::numeric_limits<float>::quiet_NaN());
    const Tensor bt = Tensor::wrap(back.data(), DType::f32, Device::cpu(), {5, 4, 8});
    ops::copy(gpu.ctx(), d, bt.slice(2, 1, 6));  // transfer, then host scatter
    int bad = 0, untouched = 0;
    for (int k = 0; k < 5; ++k)
      for (int i = 0; i < 4; ++i)
        for (int c = 0; c < 8; ++c) {
          const float got = back[(k * 4 + i) * 8 + c];
          if (c == 0 || c == 7) {
            untouched += got != got;  // NaN: never written
            continue;
          }
          // Values are multiples of 1/4 below 2^5 in magnitude: exact in bf16 too.
          bad += got != src[(i * 6 + (c - 1)) * 5 + k];
        }
    CHECK(bad == 0);
    CHECK(untouched == 5 * 4 * 2);
  }
}
