#include "model/temporal.hpp"

#include <cmath>

#include "core/arena.hpp"
#include "core/error.hpp"
#include "ops/runtime.hpp"
#include "ops/gemm.hpp"
#include "ops/elementwise.hpp"
#include "ops/softmax.hpp"

namespace vinf::model {

void TemporalContext::group_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 const Tensor& y, const ops::GroupNormParams& p, Halo halo, const std::string& module) {
  VINF_CHECK(halo.total() == 0, "the plain temporal context gives no halo frames, yet ", module, " has ", halo.total());
  ops::group_norm(ctx, x, gamma, beta, y, p);
}

void TemporalContext::fill_conv_halo(ExecContext& ctx, const Tensor& padded, Halo halo, const std::string& module) {
  (void)ctx;
  (void)padded;
  VINF_CHECK(halo.total() == 0, "the plain temporal context gives no halo frames, yet ", module, " asked for ",
             halo.total());
}

void TemporalContext::attention(ExecContext& ctx, const AttentionWeights& w, const Tensor& x, const Tensor& out,
                                const std::string& module) {
  (void)module;
  self_attention(ctx, w, x, out, attention_params(w));
}

ops::AttentionParams attention_params(const AttentionWeights& w, float factor) {
  ops::AttentionParams p;
  p.scale = factor / std::sqrt(static_cast<float>(w.head_dim));
  p.bf16_products = w.to_q.dtype == DType::bf16;
  return p;
}

Tensor split_heads(const Tensor& x, int heads) {
  const std::int64_t r = x.size(0), l = x.size(1), inner = x.size(2);
  return x.reshape({r, l, heads, inner / heads}).permute({0, 2, 1, 3});
}

namespace {

// to_q, to_k and to_v as one (3 inner x C) weight where they lie back to back in memory: Weights
// places the parameters in order at 256-byte boundaries, so they do whenever each fills whole
// boundaries (inner x C x the dtype's size a multiple of 256 bytes).
bool stacked_qkv(const AttentionWeights& w, Tensor& stacked) {
  const Tensor* parts[] = {&w.to_q, &w.to_k, &w.to_v};
  const auto bytes = static_cast<std::ptrdiff_t>(w.to_q.numel() * dtype_size(w.to_q.dtype));
  for (int i = 0; i < 3; ++i) {
    const Tensor& t = *parts[i];
    if (t.rank() != 2 || !t.is_contiguous() || !(t.shape == w.to_q.shape) || t.dtype != w.to_q.dtype ||
        static_cast<const char*>(t.data) != static_cast<const char*>(w.to_q.data) + i * bytes)
      return false;
  }
  stacked = Tensor::wrap(w.to_q.data, w.to_q.dtype, w.to_q.device, {3 * w.to_q.size(0), w.to_q.size(1)});
  return true;
}

}  // namespace

void self_attention(ExecContext& ctx, const AttentionWeights& w, const Tensor& x, const Tensor& out,
                    const ops::AttentionParams& p) {
  const std::int64_t r = x.size(0), l = x.size(1), inner = w.to_q.size(0);
  // bf16 projections on the CPU read x rounded to bf16: rounded once here, not by each of the three.
  OwnedTensor rounded;
  Tensor xp = x;
  if (ctx.device.is_cpu() && w.to_q.dtype == DType::bf16 && x.dtype != DType::bf16) {
    rounded = ctx.arena->empty(DType::bf16, x.shape);
    ops::copy(ctx, x, rounded);
    xp = rounded;
  }
  // On the CPU, one product for the three when their weights stack: x is read once, and at widths
  // of 32-128 the product of 3 x inner columns runs faster than three of inner. On CUDA the same
  // with VINF_GPU_KERNELS=qkv-gemm (exec/gpu_kernels.hpp).
  Tensor stacked;
  if ((ctx.device.is_cpu() || gpu_kernel_enabled(ctx, GpuKernel::qkv_gemm)) && stacked_qkv(w, stacked)) {
    // In the output's dtype: x may be stored in bf16 for the products (the CPU under --dtype bf16).
    OwnedTensor qkv = ctx.arena->empty(out.dtype, {r, l, 3 * inner});
    ops::linear(ctx, xp, stacked, nullptr, qkv);
    rounded = OwnedTensor();
    const Tensor parts = qkv.reshape({r, l, 3, w.heads, inner / w.heads});
    auto heads_of = [&](int i) { return parts.select(2, i).permute({0, 2, 1, 3}); };
    attend(ctx, heads_of(0), heads_of(1), heads_of(2), split_heads(out, w.heads), p);
    return;
  }
  OwnedTensor q = ctx.arena->empty(out.dtype, {r, l, inner});
  OwnedTensor k = ctx.arena->empty(out.dtype, {r, l, inner});
  OwnedTensor v = ctx.arena->empty(out.dtype, {r, l, inner});
  ops::linear(ctx, xp, w.to_q, nullptr, q);
  ops::linear(ctx, xp, w.to_k, nullptr, k);
  ops::linear(ctx, xp, w.to_v, nullptr, v);
  rounded = OwnedTensor();
  attend(ctx, split_heads(q, w.heads), split_heads(k, w.heads), split_heads(v, w.heads), split_heads(out, w.heads), p);
}

void attend(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
            const ops::AttentionParams& p, AttentionPath path) {
  const std::int64_t rows = q.size(0), heads = q.size(1), lq = q.size(2), lk = k.size(2);
  const bool plain = p.band_lo <= -lk && p.band_hi >= lq + lk && p.local_bias == 0.f && p.token_count_log_base <= 0.f;
  // On CUDA, long plain attention goes through two GEMMs (the score matrix in memory), unless the
  // fused kernel takes it (VINF_GPU_KERNELS=flash-attention).
  if (path == AttentionPath::automatic)
    path = plain && ctx.device.is_cuda() && lq * lk >= 4096 &&
                   !ops::fused_attention_applies(ctx, q, k, v, nullptr, p, nullptr)
               ? AttentionPath::gemm
               : AttentionPath::kernel;
  VINF_CHECK(path == AttentionPath::kernel || plain, "attend: the GEMM path computes plain full attention only");
  if (path == AttentionPath::kernel) {
    ops::attention(ctx, q, k, v, nullptr, nullptr, out, p);
    return;
  }
  // Scores stay f32 whatever q's dtype: f16 overflows at |q.k| * scale > 65504, bf16 keeps 8
  // mantissa bits of logits whose differences decide the softmax. Probabilities are in [0, 1] and
  // go back to the storage dtype for the product with v.
  OwnedTensor scores = ctx.arena->empty(DType::f32, {heads, lq, lk}),
              probs = ctx.arena->empty(q.dtype, {heads, lq, lk});
  for (std::int64_t r = 0; r < rows; ++r) {
    ops::bmm(ctx, q.select(0, r), k.select(0, r).transpose(1, 2), scores, p.scale, 0.f);
    ops::softmax(ctx, scores, probs);
    ops::bmm(ctx, probs, v.select(0, r), out.select(0, r), 1.f, 0.f);
  }
}

}  // namespace vinf::model
