// The one door through which the UNet's temporal modules see frames that are not in their clip.
// Temporal attention (every attention of transformer_in and temp_attentions), the temporal
// convolution layers and the temporal GroupNorms call a TemporalContext; the plain context
// (`--vi.mode off`) treats the clip as the whole video. Video-Infinity's context supplies halo
// frames, global frames, masks, phase biases and synchronised statistics behind the same calls,
// so the model never knows about ranks or MPI.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.hpp"
#include "ops/attention.hpp"
#include "ops/context.hpp"
#include "ops/norm.hpp"

namespace vinf::model {

// One attention module's projections (diffusers `Attention`: to_q/to_k/to_v without bias, to_out.0
// with bias) and its head split (channel index = head * head_dim + i).
struct AttentionWeights {
  Tensor to_q, to_k, to_v, to_out_weight, to_out_bias;
  int heads = 1;
  int head_dim = 1;
};

// Frames of outside context around a clip: `left` before its first frame, `right` after its last.
struct Halo {
  int left = 0, right = 0;
  int total() const { return left + right; }
};

class TemporalContext {
 public:
  virtual ~TemporalContext() = default;

  // Called at the start of every UNet call with its integer timestep.
  virtual void begin_call(std::int64_t timestep) { (void)timestep; }

  // GroupNorm over a clip: x and y are (B, C, T, S) views (frames T, pixels S). The `halo` frames
  // at the ends of T are context from outside the clip (TemporalConvLayer padding), not own frames.
  virtual void group_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                          const ops::GroupNormParams& p, Halo halo, const std::string& module);

  // Frames of context a TemporalConvLayer gets on each side (none: the convolution pads with
  // zeros as the plain model does).
  virtual Halo conv_halo() const { return {}; }
  // Fills the halo frames at the ends of padded (B, C, halo.left + F + halo.right, S); the clip's
  // own frames are already in the middle.
  virtual void fill_conv_halo(ExecContext& ctx, const Tensor& padded, Halo halo, const std::string& module);

  // One temporal self-attention: x (R, F, inner) holds R = B * H * W sequences of the clip's F
  // frames; writes out (R, F, inner), the heads merged, before to_out.
  virtual void attention(ExecContext& ctx, const AttentionWeights& w, const Tensor& x, const Tensor& out,
                         const std::string& module);
};

// The plain model: every clip is a whole video (`--vi.mode off`).
using PlainTemporalContext = TemporalContext;

// The attention parameters of w's module: scale factor / sqrt(head_dim), and bf16 products where
// w's projections are bf16 (--dtype bf16; on the CPU the activations stay f32).
ops::AttentionParams attention_params(const AttentionWeights& w, float factor = 1.f);

// Self-attention of x (R, L, inner) with w's projections, heads merged into out (R, L, inner);
// the attention pattern (band, global keys, biases) comes from p. Shared by every context. x may
// be stored in the projections' dtype (bf16 on the CPU under --dtype bf16); Q, K and V take out's.
void self_attention(ExecContext& ctx, const AttentionWeights& w, const Tensor& x, const Tensor& out,
                    const ops::AttentionParams& p);

// ops::attention's contract on q (R, h, Lq, d), k (R, h, Lk, d), v (R, h, Lk, dv), out
// (R, h, Lq, dv), no global keys. Two ways to compute it: the streaming kernel (ops::attention),
// or two batched GEMMs around a softmax, one row r at a time (workspace h x Lq x Lk). `automatic`
// takes the GEMMs for plain full attention over long sequences on CUDA (spatial self- and
// cross-attention, where cuBLAS beats the kernel) and the kernel otherwise (on the CPU the kernel
// is faster: 5.8 s against 7.5 s for a small-preset UNet call).
enum class AttentionPath { automatic, kernel, gemm };
void attend(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
            const ops::AttentionParams& p, AttentionPath path = AttentionPath::automatic);

// (R, L, inner) -> the (R, heads, L, head_dim) view that ops::attention takes.
Tensor split_heads(const Tensor& x, int heads);

}  // namespace vinf::model
