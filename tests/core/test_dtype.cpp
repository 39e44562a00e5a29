#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/dtype.hpp"
#include "core/half.hpp"

using namespace vinf;

TEST_CASE("f16 conversion: known values, rounding and specials") {
  CHECK(f32_to_f16_bits(1.0f) == 0x3c00);
  CHECK(f32_to_f16_bits(-2.0f) == 0xc000);
  CHECK(f32_to_f16_bits(65504.0f) == 0x7bff);                // largest finite
  CHECK(f32_to_f16_bits(65519.0f) == 0x7bff);                // rounds down
  CHECK(f32_to_f16_bits(65520.0f) == 0x7c00);                // rounds to inf
  CHECK(f32_to_f16_bits(std::ldexp(1.0f, -24)) == 0x0001);   // smallest subnormal
  CHECK(f32_to_f16_bits(std::ldexp(1.0f, -25)) == 0x0000);   // half of it: ties to even (0)
  CHECK(f32_to_f16_bits(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(f32_to_f16_bits(std::ldexp(1.0f, -14)) == 0x0400);   // smallest normal
  CHECK(f32_to_f16_bits(0.1f) == 0x2e66);
  CHECK(f32_to_f16_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie -> even
  CHECK(f32_to_f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie -> even (up)
  CHECK(f32_to_f16_bits(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK((f32_to_f16_bits(std::numeric_limits<float>::quiet_NaN()) & 0x7c00) == 0x7c00);
  CHECK(std::isnan(f16_bits_to_f32(0x7e00)));
  CHECK(f16_bits_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(f16_bits_to_f32(0x3555) == doctest::Approx(0.33325195).epsilon(1e-7));
}

TEST_CASE("f16 conversion round-trips every finite half exactly") {
  int bad = 0;
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaN payloads
    if (f32_to_f16_bits(f16_bits_to_f32(static_cast<std::uint16_t>(h))) != h) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("bf16 conversion: truncation with round-to-nearest-even") {
  CHECK(f32_to_bf16_bits(1.0f) == 0x3f80);
  CHECK(f32_to_bf16_bits(3.14159265f) == 0x4049);
  CHECK(f32_to_bf16_bits(std::bit_cast<float>(0x3f808000u)) == 0x3f80);  // tie -> even
  CHECK(f32_to_bf16_bits(std::bit_cast<float>(0x3f818000u)) == 0x3f82);  // tie -> even (up)
  CHECK(f32_to_bf16_bits(std::bit_cast<float>(0x3f808001u)) == 0x3f81);
  CHECK(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(round_to_bf16(1.00390625f) == 1.0f);
}

TEST_CASE("dtype names and parsing") {
  DType d;
  CHECK(parse_dtype("bf16", d));
  CHECK(d == DType::bf16);
  CHECK(parse_dtype("float16", d));
  CHECK(d == DType::f16);
  CHECK_FALSE(parse_dtype("int8", d));
  CHECK(std::string(dtype_name(DType::i64)) == "i64");
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(Device::cuda(3).name() == "cuda:3");
}
