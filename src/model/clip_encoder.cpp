#include "model/clip_encoder.hpp"

#include "core/arena.hpp"
#include "core/error.hpp"
#include "model/weights.hpp"
#include "ops/elementwise.hpp"
#include "ops/gemm.hpp"
#include "ops/norm.hpp"

namespace vinf::model {

void run_clip_encoder(ExecContext& ctx, const Weights& weights, const std::string& prefix, const ClipEncoderShape& s,
                      const Tensor& h, const ops::AttentionParams& attention) {
  VINF_CHECK(h.rank() == 3 && h.size(2) == s.hidden_size, "run_clip_encoder: h ", h.shape.str());
  const std::int64_t batch = h.size(0), tokens = h.size(1), d = s.hidden_size, dh = d / s.heads;
  auto w = [&](const std::string& name) -> const Tensor& { return weights.get(name); };
  auto empty = [&](const Shape& shape) { return ctx.arena->empty(weights.dtype(), shape); };
  const Shape split{batch, tokens, s.heads, dh};
  OwnedTensor a = empty({batch, tokens, d}), q = empty({batch, tokens, d}), k = empty({batch, tokens, d}),
              v = empty({batch, tokens, d}), o = empty({batch, tokens, d}), m = empty({batch, tokens, s.intermediate_size});
  for (int i = 0; i < s.layers; ++i) {
    const std::string l = prefix + dot_index(static_cast<std::size_t>(i));
    ops::layer_norm(ctx, h, w(l + ".layer_norm1.weight"), w(l + ".layer_norm1.bias"), a, s.layer_norm_eps);
    ops::linear(ctx, a, w(l + ".self_attn.q_proj.weight"), &w(l + ".self_attn.q_proj.bias"), q);
    ops::linear(ctx, a, w(l + ".self_attn.k_proj.weight"), &w(l + ".self_attn.k_proj.bias"), k);
    ops::linear(ctx, a, w(l + ".self_attn.v_proj.weight"), &w(l + ".self_attn.v_proj.bias"), v);
    auto heads_of = [&](const Tensor& t) { return t.reshape(split).permute({0, 2, 1, 3}); };
    ops::attention(ctx, heads_of(q), heads_of(k), heads_of(v), nullptr, nullptr, heads_of(o), attention);
    ops::linear(ctx, o, w(l + ".self_attn.out_proj.weight"), &w(l + ".self_attn.out_proj.bias"), a);
    ops::add(ctx, h, a, h);
    ops::layer_norm(ctx, h, w(l + ".layer_norm2.weight"), w(l + ".layer_norm2.bias"), a, s.layer_norm_eps);
    ops::linear(ctx, a, w(l + ".mlp.fc1.weight"), &w(l + ".mlp.fc1.bias"), m);
    ops::activation(ctx, s.act, m, m);
    ops::linear(ctx, m, w(l + ".mlp.fc2.weight"), &w(l + ".mlp.fc2.bias"), a);
    ops::add(ctx, h, a, h);
  }
}

}  // namespace vinf::model
