// Attention with an additive bias and a banded key pattern, the core of Video-Infinity's dual-scope
// temporal attention, and plain full attention (spatial self-attention, cross-attention) as the
// special case "no band, no global keys".
//
// Query row i sees the local keys j in [lo_i, hi_i], lo_i = max(0, i + band_lo),
// hi_i = min(Lk - 1, i + band_hi), plus every global key. Scores are
//   s_ij = q_i . k_j * scale * f_i + (local_bias | global_bias)
// with f_i = log(n_i) / log(token_count_log_base) when that base is > 0 (n_i = keys row i sees),
// else 1; softmax over the visible keys; out_i = sum_j p_ij v_j. A row that sees no key gets zeros.
// Nothing of size rows x keys is materialised: the CPU path streams key blocks through an online
// softmax with a fixed per-thread workspace, the CUDA kernel keeps its tiles in shared memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/params.hpp"
#include "ops/context.hpp"

namespace vinf::ops {

// scale (usually attn_scale / sqrt(head_dim)), band_lo and band_hi (row i sees the local keys
// i + band_lo .. i + band_hi, clamped to [0, Lk - 1]; unbounded by default), local_bias,
// global_bias, token_count_log_base (> 0 enables the per-row factor log(n_i) / log(base)).
using exec::AttentionParams;
// The visible local range of row i (empty when lo > hi), shared by every implementation.
using exec::attention_band;

// q [B, H, Lq, d]; k [B, H, Lk, d]; v [B, H, Lk, dv]; global keys kg [B, H, G, d] and values
// vg [B, H, G, dv], or both null; out [B, H, Lq, dv]. The last dimension of every tensor must be
// contiguous; other strides are free (split heads of a (B, L, H*d) projection are a permuted view,
// a stride-0 batch broadcasts keys). f32 on the CPU; f32, f16 or bf16 on CUDA.
// lse, when given (f32 [B, H, Lq], contiguous, whatever the operands' dtype), gets each row's
// log-sum-exp of its scores, log sum_j exp(s_ij) (-inf for a row that sees no key): what merging
// the outputs of attentions over parts of the keys takes (ring attention).
void attention(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* kg,
               const Tensor* vg, const Tensor& out, const AttentionParams& p, const Tensor* lse = nullptr);

// Whether attention() runs these arguments through the fused tensor-core kernel (CUDA,
// VINF_GPU_KERNELS=flash-attention): f16 or bf16 operands, head dims 16, 32, 64 or 128 equal for
// keys and values (128 where the GPU gives a block 137 KiB of shared memory: sm_80, sm_90), at
// least 64 rows and one key, every key visible to every row, no global keys, biases, token-count
// scale or log-sum-exp. Callers that would otherwise form the score matrix (the GEMM
// path of model::attend) ask it first.
bool fused_attention_applies(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor* kg, const AttentionParams& p, const Tensor* lse);

// The workspace attention() takes from ctx.arena for these arguments. It depends on head sizes and
// thread count only, not on the numbers of rows or keys.
std::size_t attention_workspace_bytes(const ExecContext& ctx, const Tensor& q, const Tensor& v);
// The CPU kernel's share of that per thread, for estimates made without a context (vinf plan).
std::size_t cpu_attention_scratch_bytes(std::int64_t head_dim, std::int64_t value_dim);

}  // namespace vinf::ops
