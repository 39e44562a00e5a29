// Philox-4x32-10 (Salmon et al., SC'11) and a normal sampler built only from IEEE-exact float
// operations (+, -, *, /, sqrt, integer bit tricks; no libm, no fused multiply-add), so that the
// CPU and CUDA builds give bit-identical numbers. Included by .cpp and .cu files alike.
//
// Stream layout: value n (a 64-bit index) of the stream (seed, stream) is lane n % 4 of the Philox
// block with counter {lo(n/4), hi(n/4), lo(stream), hi(stream)} and key {lo(seed), hi(seed)};
// lanes (0,1) and (2,3) are Box-Muller pairs. Any element can be drawn on its own, so noise keyed
// by (seed, global frame, element) does not depend on how the video is split over ranks.
#pragma once

#include <cstdint>

#include "core/hd.hpp"

namespace vinf::philox {

struct U32x4 {
  std::uint32_t v[4];
};

VINF_HD void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

VINF_HD U32x4 philox4x32_10(U32x4 ctr, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kM0, ctr.v[0], hi0, lo0);
    mulhilo(kM1, ctr.v[2], hi1, lo1);
    ctr = U32x4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
  }
  return ctr;
}

VINF_HD U32x4 block(std::uint64_t seed, std::uint64_t stream, std::uint64_t block_index) {
  const U32x4 ctr{{static_cast<std::uint32_t>(block_index), static_cast<std::uint32_t>(block_index >> 32),
                   static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)}};
  return philox4x32_10(ctr, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// Arithmetic that nvcc must not contract into FMAs (the host compiler is told the same with
// -ffp-contract=off on the files that include this).
#if defined(__CUDA_ARCH__)
VINF_HD float fmul(float a, float b) { return __fmul_rn(a, b); }
VINF_HD float fadd(float a, float b) { return __fadd_rn(a, b); }
VINF_HD float fsub(float a, float b) { return __fsub_rn(a, b); }
VINF_HD float fdiv(float a, float b) { return __fdiv_rn(a, b); }
VINF_HD float fsqrt(float a) { return __fsqrt_rn(a); }
VINF_HD float bits_to_float(std::uint32_t u) { return __uint_as_float(u); }
VINF_HD std::uint32_t float_to_bits(float f) { return __float_as_uint(f); }
#else
VINF_HD float fmul(float a, float b) { return a * b; }
VINF_HD float fadd(float a, float b) { return a + b; }
VINF_HD float fsub(float a, float b) { return a - b; }
VINF_HD float fdiv(float a, float b) { return a / b; }
VINF_HD float fsqrt(float a) { return __builtin_sqrtf(a); }
VINF_HD float bits_to_float(std::uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
VINF_HD std::uint32_t float_to_bits(float f) {
  std::uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}
#endif

// Uniform in (0, 1): the top 23 bits plus one half, times 2^-23; every step is exact in float.
VINF_HD float uniform_open(std::uint32_t x) {
  return fmul(fadd(static_cast<float>(x >> 9), 0.5f), 1.1920928955078125e-07f);
}

// Natural log for x in (0, 1], |error| < 2e-7 relative: x = m * 2^e with m in [sqrt(1/2), sqrt(2)),
// ln m = 2 atanh(s), s = (m - 1) / (m + 1), as an odd series in s (|s| < 0.172).
VINF_HD float log_exact_ops(float x) {
  std::uint32_t u = float_to_bits(x);
  int e = static_cast<int>((u >> 23) & 0xffu) - 127;
  u = (u & 0x7fffffu) | 0x3f800000u;  // m in [1, 2)
  float m = bits_to_float(u);
  if (m > 1.41421356f) {
    m = fmul(m, 0.5f);
    e += 1;
  }
  const float s = fdiv(fsub(m, 1.0f), fadd(m, 1.0f));
  const float s2 = fmul(s, s);
  // 2 * (1 + s2/3 + s2^2/5 + s2^3/7 + s2^4/9), Horner.
  float p = 0.2222222222f;
  p = fadd(fmul(p, s2), 0.2857142857f);
  p = fadd(fmul(p, s2), 0.4f);
  p = fadd(fmul(p, s2), 0.6666666667f);
  p = fadd(fmul(p, s2), 2.0f);
  const float ln_m = fmul(s, p);
  // e * ln 2 split into a high part exact for |e| < 2^8 and a low correction.
  const float ef = static_cast<float>(e);
  return fadd(fadd(fmul(ef, 0.693145751953125f), fmul(ef, 1.428606765330187e-06f)), ln_m);
}

// sin and cos of 2*pi*u for u in [0, 1). The reduction is exact: u has 24 fractional bits, so the
// quadrant and the remainder r in [-1/8, 1/8] turns come out without rounding.
VINF_HD void sincos_turns(float u, float& s, float& c) {
  const float q = fmul(u, 4.0f);  // exact (power of two)
  float k = static_cast<float>(static_cast<int>(fadd(q, 0.5f)));
  const float r = fmul(fsub(q, k), 0.25f);  // in [-1/8, 1/8] turns, exact
  const int quadrant = static_cast<int>(k) & 3;
  const float x = fmul(r, 6.283185307179586f);  // radians, |x| <= pi/4
  const float x2 = fmul(x, x);
  // Taylor polynomials, enough terms for |x| <= pi/4 at float precision.
  float sp = -2.505210838544172e-08f;
  sp = fadd(fmul(sp, x2), 2.755731922398589e-06f);
  sp = fadd(fmul(sp, x2), -1.984126984126984e-04f);
  sp = fadd(fmul(sp, x2), 8.333333333333333e-03f);
  sp = fadd(fmul(sp, x2), -1.666666666666667e-01f);
  const float sin_x = fadd(x, fmul(fmul(sp, x2), x));
  float cp = 2.087675698786810e-09f;
  cp = fadd(fmul(cp, x2), -2.755731922398589e-07f);
  cp = fadd(fmul(cp, x2), 2.480158730158730e-05f);
  cp = fadd(fmul(cp, x2), -1.388888888888889e-03f);
  cp = fadd(fmul(cp, x2), 4.166666666666667e-02f);
  cp = fadd(fmul(cp, x2), -0.5f);
  const float cos_x = fadd(1.0f, fmul(cp, x2));
  switch (quadrant) {
    case 0: s = sin_x; c = cos_x; break;
    case 1: s = cos_x; c = -sin_x; break;
    case 2: s = -sin_x; c = -cos_x; break;
    default: s = -cos_x; c = sin_x; break;
  }
}

// Four standard normal values from one Philox block (two Box-Muller pairs).
VINF_HD void normals4(std::uint64_t seed, std::uint64_t stream, std::uint64_t block_index, float out[4]) {
  const U32x4 r = block(seed, stream, block_index);
  for (int pair = 0; pair < 2; ++pair) {
    const float u1 = uniform_open(r.v[2 * pair]);
    const float u2 = uniform_open(r.v[2 * pair + 1]);
    const float radius = fsqrt(fmul(-2.0f, log_exact_ops(u1)));
    float s, c;
    sincos_turns(u2, s, c);
    out[2 * pair] = fmul(radius, c);
    out[2 * pair + 1] = fmul(radius, s);
  }
}

// Writes the values of Philox block `block_index` that fall in [offset, offset + n) of the
// stream to store(k, value), k counted from offset. Fill loops on every backend go through here.
template <class Store>
VINF_HD void write_block(std::uint64_t seed, std::uint64_t stream, std::uint64_t block_index, std::uint64_t offset,
                         std::uint64_t n, Store store) {
  float v[4];
  normals4(seed, stream, block_index, v);
  for (int lane = 0; lane < 4; ++lane) {
    const std::uint64_t idx = block_index * 4 + static_cast<std::uint64_t>(lane);
    if (idx >= offset && idx < offset + n) store(idx - offset, v[lane]);
  }
}

// Value n of the stream.
VINF_HD float normal_at(std::uint64_t seed, std::uint64_t stream, std::uint64_t n) {
  float v[4];
  normals4(seed, stream, n >> 2, v);
  return v[n & 3];
}

}  // namespace vinf::philox
