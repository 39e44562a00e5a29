#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/tensor.hpp"

using namespace vinf;

namespace {
float at(const Tensor& t, std::initializer_list<std::int64_t> idx) { return *static_cast<float*>(t.at(idx)); }
}  // namespace

TEST_CASE("tensor views: slice, select, permute, reshape, expand never copy") {
  std::vector<float> v(2 * 3 * 4);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  const Tensor t = Tensor::wrap(v.data(), DType::f32, Device::cpu(), {2, 3, 4});
  CHECK(t.is_contiguous());
  CHECK(t.stride(0) == 12);
  CHECK(t.stride(-1) == 1);

  const Tensor s = t.slice(2, 1, 2);  // [2,3,2]
  CHECK(s.shape == Shape{2, 3, 2});
  CHECK_FALSE(s.is_contiguous());
  CHECK(at(s, {1, 2, 1}) == 1 * 12 + 2 * 4 + 2);

  const Tensor p = t.permute({2, 0, 1});  // [4,2,3]
  CHECK(p.shape == Shape{4, 2, 3});
  CHECK(at(p, {3, 1, 2}) == at(t, {1, 2, 3}));
  CHECK(p.data == t.data);

  const Tensor sel = t.select(1, 2);  // [2,4]
  CHECK(sel.shape == Shape{2, 4});
  CHECK(at(sel, {1, 3}) == 1 * 12 + 2 * 4 + 3);

  const Tensor r = t.reshape({6, -1});
  CHECK(r.shape == Shape{6, 4});
  CHECK_THROWS_AS(p.reshape({24}), Error);  // the view's order cannot be one block

  // Views reshape where their dims split and merge within blocks: channels-last images
  // (N, C, H, W) with C innermost in memory, as frames (B, F, C, H*W).
  std::vector<float> cl(2 * 3 * 4 * 5);
  for (std::size_t i = 0; i < cl.size(); ++i) cl[i] = static_cast<float>(i);
  const Tensor nhwc = Tensor::wrap(cl.data(), DType::f32, Device::cpu(), {2, 4, 5, 3});
  const Tensor nchw = nhwc.permute({0, 3, 1, 2});  // [2,3,4,5], not contiguous
  REQUIRE_FALSE(nchw.is_contiguous());
  const Tensor frames = nchw.reshape({1, 2, 3, 20});
  CHECK(frames.shape == Shape{1, 2, 3, 20});
  int wrong = 0;
  for (std::int64_t n = 0; n < 2; ++n)
    for (std::int64_t c = 0; c < 3; ++c)
      for (std::int64_t y = 0; y < 4; ++y)
        for (std::int64_t x = 0; x < 5; ++x)
          wrong += *static_cast<float*>(frames.at({0, n, c, y * 5 + x})) != *static_cast<float*>(nchw.at({n, c, y, x}));
  CHECK(wrong == 0);
  CHECK(frames.data == nchw.data);
  CHECK(nchw.reshape({2, 3, 4, 5, 1}).stride(3) == 3);
  CHECK_THROWS_AS(nchw.reshape({6, 20}), Error);     // C and N are not one block
  CHECK_THROWS_AS(nchw.reshape({2, 60}), Error);     // nor are C and H x W
  CHECK(nchw.reshape({2, 3, 2, 10}).stride(2) == 30);  // H x W is: it splits anew
  CHECK_THROWS_AS(t.slice(2, 1, 2).reshape({12}), Error);
  CHECK(t.slice(2, 1, 2).reshape({6, 2}).stride(0) == 4);  // rows of a column slice merge

  const Tensor row = Tensor::wrap(v.data(), DType::f32, Device::cpu(), {4}).unsqueeze(0);
  const Tensor e = row.expand({3, 4});
  CHECK(e.stride(0) == 0);
  CHECK(at(e, {2, 3}) == 3.f);

  CHECK(t.transpose(0, 2).shape == Shape{4, 3, 2});
  CHECK(t.unsqueeze(1).shape == Shape{2, 1, 3, 4});
}

TEST_CASE("coalesced merges contiguous neighbours and drops size-1 dims") {
  std::vector<float> v(2 * 5 * 7);
  const Tensor t = Tensor::wrap(v.data(), DType::f32, Device::cpu(), {2, 1, 5, 7});
  CHECK(t.coalesced().shape == Shape{70});
  const Tensor s = t.slice(3, 0, 3);
  CHECK(s.coalesced().shape == Shape{10, 3});
  const Tensor p = t.permute({0, 2, 1, 3}).reshape({2, 5, 7}).permute({1, 0, 2});
  CHECK(p.coalesced().shape == Shape{5, 2, 7});
}

TEST_CASE("shape errors name the problem, the place and the process") {
  std::vector<float> v(6);
  const Tensor t = Tensor::wrap(v.data(), DType::f32, Device::cpu(), {2, 3});
  try {
    (void)t.slice(1, 2, 5);
    FAIL("slice out of range did not throw");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("slice [2, 7) of dimension 1 is out of range for f32[2,3] cpu") != std::string::npos);
    CHECK(msg.find("src/core/tensor.cpp:") != std::string::npos);
    CHECK(msg.find("host ") != std::string::npos);
  }
  CHECK_THROWS_AS(t.permute({0, 0}), Error);
  CHECK_THROWS_AS(t.expand({3, 3}), Error);
  CHECK_THROWS_AS(Shape({1, 2, 3, 4, 5, 6, 7}), Error);
}

TEST_CASE("Tensor::every: an even stride of one dimension, checked against its range") {
  std::vector<float> buf(4 * 10 * 3);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(i);
  const Tensor t = Tensor::wrap(buf.data(), DType::f32, Device::cpu(), {4, 10, 3});
  const Tensor e = t.every(1, 1, 3, 3);  // indices 1, 4, 7
  CHECK(e.shape == Shape{4, 3, 3});
  CHECK(e.stride(1) == 9);
  CHECK(*static_cast<float*>(e.at({2, 2, 1})) == buf[(2 * 10 + 7) * 3 + 1]);
  CHECK(t.every(1, 9, 5, 1).shape == Shape{4, 1, 3});
  CHECK(t.every(1, 0, 2, 0).numel() == 0);
  CHECK_THROWS_WITH_AS(t.every(1, 1, 3, 4), doctest::Contains("out of range"), Error);  // 10 is past the end
  CHECK_THROWS_AS(t.every(1, 0, 0, 2), Error);
}
