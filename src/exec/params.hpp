// The parameters of the ops whose backends take more than tensors: the op API (src/ops) passes
// them through unchanged, the CPU and CUDA kernels read them. Their meaning is documented with the
// op (ops/attention.hpp, ops/conv.hpp, ops/embedding.hpp, ops/norm.hpp).
#pragma once

#include <cstdint>

#include "exec/activation.hpp"

namespace vinf::exec {

struct AttentionParams {
  static constexpr std::int64_t kUnbounded = std::int64_t{1} << 40;
  float scale = 1.f;                       // usually attn_scale / sqrt(head_dim)
  std::int64_t band_lo = -kUnbounded;      // row i sees local keys from i + band_lo ...
  std::int64_t band_hi = kUnbounded;       // ... to i + band_hi (clamped to [0, Lk - 1])
  float local_bias = 0.f;
  float global_bias = 0.f;
  float token_count_log_base = 0.f;        // > 0 enables the per-row factor log(n_i) / log(base)
  // --dtype bf16 on the CPU, whose activations stay f32: the fast kernel rounds q, k, the
  // probabilities and v to bf16 for its two products (f32 sums, f32 softmax) where the CPU has
  // AVX-512 BF16, and computes in f32 elsewhere. The reference ignores it; CUDA computes in the
  // tensors' own dtype.
  bool bf16_products = false;
};

// The visible local range of row i (empty when lo > hi), shared by every implementation.
inline void attention_band(const AttentionParams& p, std::int64_t i, std::int64_t lk, std::int64_t& lo,
                           std::int64_t& hi) {
  lo = i + p.band_lo < 0 ? 0 : i + p.band_lo;
  hi = i + p.band_hi > lk - 1 ? lk - 1 : i + p.band_hi;
}

struct Conv2dParams {
  int stride = 1;
  int padding = 0;
};

struct TimestepEmbeddingParams {
  bool flip_sin_to_cos = true;  // output [cos | sin] instead of [sin | cos]
  float shift = 0.f;            // downscale_freq_shift
  float max_period = 10000.f;
};

struct GroupNormParams {
  int groups = 32;
  float eps = 1e-5f;
  Activation act = Activation::none;  // fused after the affine transform (silu in resnets)
};

}  // namespace vinf::exec
