#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "../support.hpp"
#include "core/philox.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"

using namespace vinf;

TEST_CASE("Philox-4x32-10 matches the Random123 known-answer vectors") {
  struct Kat {
    philox::U32x4 ctr;
    std::uint32_t k0, k1;
    philox::U32x4 expect;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat& k : kats) {
    const philox::U32x4 r = philox::philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) CHECK(r.v[i] == k.expect.v[i]);
  }
}

TEST_CASE("the exact-operation log and sincos agree with libm") {
  double worst_log = 0, worst_trig = 0;
  for (std::uint32_t i = 1; i < (1u << 23); i += 977) {
    const float u = philox::uniform_open(i << 9);
    worst_log = std::max(worst_log, std::fabs(philox::log_exact_ops(u) - std::log(static_cast<double>(u))));
    float s, c;
    philox::sincos_turns(u, s, c);
    const double a = 2 * M_PI * static_cast<double>(u);
    worst_trig = std::max({worst_trig, std::fabs(static_cast<double>(s) - std::sin(a)), std::fabs(static_cast<double>(c) - std::cos(a))});
  }
  CHECK(worst_log < 2e-6);   // absolute, |ln u| up to 16
  CHECK(worst_trig < 1e-6);
  CHECK(philox::uniform_open(0) > 0.f);
  CHECK(philox::uniform_open(0xffffffffu) < 1.f);
}

TEST_CASE("normals are Box-Muller of the Philox words (checked with libm) and pinned bit-exactly") {
  // Independent recomputation in double from the raw words.
  for (std::uint64_t block : {0ull, 1ull, 12345ull, (1ull << 40) + 7}) {
    const philox::U32x4 r = philox::block(42, 3, block);
    float v[4];
    philox::normals4(42, 3, block, v);
    for (int pair = 0; pair < 2; ++pair) {
      const double u1 = ((r.v[2 * pair] >> 9) + 0.5) / 8388608.0, u2 = ((r.v[2 * pair + 1] >> 9) + 0.5) / 8388608.0;
      const double rad = std::sqrt(-2 * std::log(u1));
      CHECK(v[2 * pair] == doctest::Approx(rad * std::cos(2 * M_PI * u2)).epsilon(1e-5));
      CHECK(v[2 * pair + 1] == doctest::Approx(rad * std::sin(2 * M_PI * u2)).epsilon(1e-5));
    }
  }
  // The stream is part of vinf's noise contract (seed + global frame index -> latent): any change
  // to these bits changes every video made with a given seed.
  const std::uint32_t pinned[8] = {0x3f7dbb2f, 0xbf6cb6b3, 0xbf1e1ba1, 0xbef6d1a9,
                                   0xbe1d5355, 0x3e392a68, 0x3f54ec98, 0x3e4a2d9a};
  Runtime rt(Device::cpu());
  float got[8];
  ops::normal(rt.ctx(), Tensor::wrap(got, DType::f32, Device::cpu(), {8}), 0, 0, 0);
  for (int i = 0; i < 8; ++i) {
    INFO("value " << i << " = " << got[i]);
    CHECK(std::bit_cast<std::uint32_t>(got[i]) == pinned[i]);
  }
}

TEST_CASE("normal(): moments, offsets and streams") {
  Runtime rt(Device::cpu());
  std::vector<float> a(1 << 20), b(1000);
  ops::normal(rt.ctx(), Tensor::wrap(a.data(), DType::f32, Device::cpu(), {1 << 20}), 7, 0, 0);
  double m1 = 0, m2 = 0, m4 = 0;
  for (float x : a) {
    m1 += x;
    m2 += double(x) * x;
    m4 += double(x) * x * x * x;
  }
  const double n = static_cast<double>(a.size());
  m1 /= n;
  m2 /= n;
  m4 /= n;
  CHECK(std::fabs(m1) < 5.0 / std::sqrt(n));          // 5 sigma
  CHECK(std::fabs(m2 - 1) < 5.0 * std::sqrt(2.0 / n));
  CHECK(std::fabs(m4 - 3) < 5.0 * std::sqrt(96.0 / n));
  // An offset window of the stream equals the same slice of the whole stream.
  ops::normal(rt.ctx(), Tensor::wrap(b.data(), DType::f32, Device::cpu(), {1000}), 7, 0, 4097);
  CHECK(std::memcmp(b.data(), a.data() + 4097, 1000 * sizeof(float)) == 0);
  // Another stream is different.
  ops::normal(rt.ctx(), Tensor::wrap(b.data(), DType::f32, Device::cpu(), {1000}), 7, 1, 4097);
  CHECK(std::memcmp(b.data(), a.data() + 4097, 1000 * sizeof(float)) != 0);
}

TEST_CASE("CUDA Philox normals are bit-identical to the CPU's") {
  if (!test::gpu_or_skip("CPU/CUDA Philox bit equality")) return;
  Runtime cpu(Device::cpu()), gpu(Device::cuda(0));
  const std::int64_t n = (1 << 20) + 3;
  std::vector<float> host(static_cast<std::size_t>(n)), back(static_cast<std::size_t>(n));
  ops::normal(cpu.ctx(), Tensor::wrap(host.data(), DType::f32, Device::cpu(), {n}), 2024, 11, 5);
  OwnedTensor d = gpu.arena().empty(DType::f32, {n});
  ops::normal(gpu.ctx(), d, 2024, 11, 5);
  ops::copy(gpu.ctx(), d, Tensor::wrap(back.data(), DType::f32, Device::cpu(), {n}));
  std::int64_t differing = 0;
  for (std::int64_t i = 0; i < n; ++i) differing += std::bit_cast<std::uint32_t>(host[i]) != std::bit_cast<std::uint32_t>(back[i]);
  CHECK(differing == 0);
}
