// 32-bit index arithmetic for the CUDA kernels over strided views, shared with the host so that
// the CPU tests check it: division by a divisor fixed at launch as a multiply-high, an add and a
// shift (exact for dividends below 2^31), and a joint layout's offsets in 32 bits where every
// offset of every view fits. 64-bit division costs tens of instructions per element on a GPU.
#pragma once

#include <array>
#include <cstdint>

#include "core/hd.hpp"
#include "exec/layout.hpp"

namespace vinf::exec {

// n / d and n % d for 0 <= n < 2^31 and 1 <= d <= 2^31 (Granlund and Montgomery: with
// l = ceil(log2 d) and m = floor(2^32 (2^l - d) / d) + 1, n / d = (mulhi(m, n) + n) >> l; the
// add cannot overflow because n < 2^31).
struct FastDivmod {
  std::uint32_t divisor = 1, multiplier = 0, shift = 0;

  FastDivmod() = default;
  explicit FastDivmod(std::uint32_t d) : divisor(d) {
    while ((std::uint64_t{1} << shift) < d) ++shift;
    multiplier = static_cast<std::uint32_t>((((std::uint64_t{1} << shift) - d) << 32) / d + 1);
  }
  VINF_HD std::uint32_t div(std::uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const std::uint32_t hi = __umulhi(multiplier, n);
#else
    const auto hi = static_cast<std::uint32_t>((static_cast<std::uint64_t>(multiplier) * n) >> 32);
#endif
    return (hi + n) >> shift;
  }
  VINF_HD void divmod(std::uint32_t n, std::uint32_t& q, std::uint32_t& r) const {
    q = div(n);
    r = n - q * divisor;
  }
};

inline constexpr std::int64_t kIndex32Limit = std::int64_t{1} << 31;

// A joint layout of N views (joint_layout) with 32-bit offsets: the same elements in the same
// order as the 64-bit form.
template <int N>
struct Index32 {
  int rank = 1;
  std::uint32_t count = 0;  // elements
  FastDivmod size[kMaxDims];
  std::uint32_t stride[N][kMaxDims] = {};

  // The offset of element `linear` (in the layout's order) in each view.
  VINF_HD void offsets(std::uint32_t linear, std::uint32_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      std::uint32_t q, r;
      if (d == 0) {
        r = linear;
      } else {
        size[d].divmod(linear, q, r);
        linear = q;
      }
      for (int k = 0; k < N; ++k) off[k] += r * stride[k][d];
    }
  }
};

// Fills `out` and returns true when the layout has between 1 and 2^31 - 1 elements and every view's
// offsets (all strides >= 0) stay below 2^31; false: the kernels keep 64-bit indices.
template <int N>
bool to_index32(const JointLayout<N>& l, Index32<N>& out) {
  std::int64_t count = 1;
  for (int d = 0; d < l.rank; ++d) count *= l.size[d];
  if (count == 0 || count >= kIndex32Limit) return false;
  for (int k = 0; k < N; ++k) {
    std::int64_t last = 0;
    for (int d = 0; d < l.rank; ++d) {
      if (l.stride[k][d] < 0) return false;
      last += (l.size[d] - 1) * l.stride[k][d];
    }
    if (last >= kIndex32Limit) return false;
  }
  out = {};
  out.rank = l.rank;
  out.count = static_cast<std::uint32_t>(count);
  for (int d = 0; d < l.rank; ++d) {
    out.size[d] = FastDivmod(static_cast<std::uint32_t>(l.size[d]));
    for (int k = 0; k < N; ++k) out.stride[k][d] = static_cast<std::uint32_t>(l.stride[k][d]);
  }
  return true;
}

}  // namespace vinf::exec
