// Bad arguments are rejected with a message that names the op, the argument and the shapes.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "../support.hpp"
#include "core/error.hpp"
#include "ops/attention.hpp"
#include "ops/conv.hpp"
#include "ops/elementwise.hpp"
#include "ops/gemm.hpp"
#include "ops/norm.hpp"

using namespace vinf;
using test::contains;
using test::HostTensor;

namespace {

template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}


}  // namespace

TEST_CASE("op argument errors say what is wrong") {
  Runtime rt(Device::cpu());
  ExecContext& ctx = rt.ctx();

  HostTensor x({2, 5, 9, 11}), w({7, 6, 3, 3}), y({2, 7, 9, 11});
  std::string m = error_of([&] { ops::conv2d(ctx, x, w, nullptr, y, {1, 1}); });
  CHECK(contains(m, "conv2d: x f32[2,5,9,11] cpu has 5 channels, w f32[7,6,3,3] cpu expects 6"));
  CHECK(contains(m, "src/ops/conv.cpp:"));

  HostTensor w2({7, 5, 3, 3}), y2({2, 7, 8, 11});
  m = error_of([&] { ops::conv2d(ctx, x, w2, nullptr, y2, {1, 1}); });
  CHECK(contains(m, "conv2d: y must be [2,7,9,11], got f32[2,7,8,11] cpu"));

  HostTensor a({3, 33}), lw({19, 32}), ly({3, 19});
  m = error_of([&] { ops::linear(ctx, a, lw, nullptr, ly); });
  CHECK(contains(m, "linear: x f32[3,33] cpu must end in 32"));

  std::vector<std::uint16_t> half(12);
  const Tensor h = Tensor::wrap(half.data(), DType::f16, Device::cpu(), {3, 4});
  HostTensor hf({3, 4});
  m = error_of([&] { ops::add(ctx, h, hf, hf); });
  CHECK(contains(m, "axpby: argument must be f32, got f16[3,4] cpu"));

  HostTensor g({6}), b({6}), gx({2, 6, 4}), gy({2, 6, 4});
  m = error_of([&] { ops::group_norm(ctx, gx, g, b, gy, {4, 1e-5f}); });
  CHECK(contains(m, "group_norm: 6 channels do not split into 4 groups"));

  HostTensor q({1, 2, 5, 8}), k({1, 2, 7, 8}), v({1, 2, 6, 8}), o({1, 2, 5, 8});
  m = error_of([&] { ops::attention(ctx, q, k, v, nullptr, nullptr, o, {}); });
  CHECK(contains(m, "attention: k f32[1,2,7,8] cpu and v f32[1,2,6,8] cpu hold different key counts"));
  HostTensor v7({1, 2, 7, 8});
  ops::AttentionParams bad;
  bad.band_lo = 3;
  bad.band_hi = 1;
  m = error_of([&] { ops::attention(ctx, q, k, v7, nullptr, nullptr, o, bad); });
  CHECK(contains(m, "attention: band [3, 1] is empty"));

  HostTensor c1({2, 3}), c2({2, 3}), cy({2, 5});
  const Tensor parts[] = {c1, c2};
  m = error_of([&] { ops::concat(ctx, parts, 1, cy); });
  CHECK(contains(m, "concat: inputs are longer than the output along axis 1"));
}

TEST_CASE("asking for CUDA where there is none is a clear error, not a crash") {
  if (cuda_device_count() > 0) {
    MESSAGE("skipped: a GPU is visible");
    return;
  }
  const std::string m = error_of([] { Runtime rt(Device::cuda(0)); });
  if (built_with_cuda()) CHECK(contains(m, "CUDA device 0 is not available (0 visible"));
  else CHECK(contains(m, "built without CUDA"));
}
