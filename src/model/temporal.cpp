#include "model/temporal.hpp"

#include <cmath>

#include "core/arena.hpp"
#include "core/error.hpp"
#include "ops/gemm.hpp"

namespace vinf::model {

void TemporalContext::group_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 const Tensor& y, const ops::GroupNormParams& p, int halo, const std::string& module) {
  (void)module;
  VINF_CHECK(halo == 0, "the plain temporal context gives no halo frames, yet ", module, " has ", halo);
  ops::group_norm(ctx, x, gamma, beta, y, p);
}

void TemporalContext::fill_conv_halo(ExecContext& ctx, const Tensor& padded, int halo, const std::string& module) {
  (void)ctx;
  (void)padded;
  VINF_CHECK(halo == 0, "the plain temporal context gives no halo frames, yet ", module, " asked for ", halo);
}

void TemporalContext::attention(ExecContext& ctx, const AttentionWeights& w, const Tensor& x, const Tensor& out,
                                const std::string& module) {
  (void)module;
  ops::AttentionParams p;
  p.scale = 1.f / std::sqrt(static_cast<float>(w.head_dim));
  self_attention(ctx, w, x, out, p);
}

Tensor split_heads(const Tensor& x, int heads) {
  const std::int64_t r = x.size(0), l = x.size(1), inner = x.size(2);
  return x.reshape({r, l, heads, inner / heads}).permute({0, 2, 1, 3});
}

void self_attention(ExecContext& ctx, const AttentionWeights& w, const Tensor& x, const Tensor& out,
                    const ops::AttentionParams& p) {
  const std::int64_t r = x.size(0), l = x.size(1), inner = w.to_q.size(0);
  OwnedTensor q = ctx.arena->empty(x.dtype, {r, l, inner});
  OwnedTensor k = ctx.arena->empty(x.dtype, {r, l, inner});
  OwnedTensor v = ctx.arena->empty(x.dtype, {r, l, inner});
  ops::linear(ctx, x, w.to_q, nullptr, q);
  ops::linear(ctx, x, w.to_k, nullptr, k);
  ops::linear(ctx, x, w.to_v, nullptr, v);
  ops::attention(ctx, split_heads(q, w.heads), split_heads(k, w.heads), split_heads(v, w.heads), nullptr, nullptr,
                 split_heads(out, w.heads), p);
}

}  // namespace vinf::model
