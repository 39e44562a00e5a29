#include "model/wan_transformer.hpp"

#include <cmath>
#include <filesystem>

#include "core/arena.hpp"
#include "core/error.hpp"
#include "io/path_query.hpp"
#include "ops/activation.hpp"
#include "ops/attention.hpp"
#include "ops/elementwise.hpp"
#include "ops/embedding.hpp"
#include "ops/gemm.hpp"
#include "ops/norm.hpp"
#include "ops/runtime.hpp"

namespace fs = std::filesystem;

namespace vinf::model {

namespace {

// A view of `base`'s memory from element `offset` with the given sizes and strides.
Tensor strided_view(const Tensor& base, std::int64_t offset, const Shape& shape,
                    std::initializer_list<std::int64_t> strides) {
  Tensor v = base;
  v.data = static_cast<char*>(base.data) + offset * static_cast<std::int64_t>(dtype_size(base.dtype));
  v.shape = shape;
  int i = 0;
  for (std::int64_t s : strides) v.strides[static_cast<std::size_t>(i++)] = s;
  return v;
}

// The pieces a forward pass shares between its blocks.
struct Pass {
  ExecContext& ctx;
  const Weights& w;
  const WanTransformerConfig& c;
  const WanProbe& probe;
  WanSelfAttention* self_attention;
  TensorGroup* tensor_group;  // with the weights of a tensor shard of 2 or more ranks
  std::int64_t B, L, D;
  std::int64_t G;  // timestep groups per sample: 1, or the frames (diffusion forcing's per-frame timesteps)
  DType dt;
  OwnedTensor ones, zeros;  // [D]: the affine parameters of the norms that have none
  std::int64_t block_tokens = 0;  // block-causal self-attention: the tokens of a causal block (0: none)

  OwnedTensor empty(const Shape& s) const { return ctx.arena->empty(dt, s); }
  const Tensor& p(const std::string& name) const { return w.get(name); }
  void linear(const std::string& name, const Tensor& x, const Tensor& y) const {
    ops::linear(ctx, x, p(name + ".weight"), &p(name + ".bias"), y);
  }
  // A row-parallel product under tensor parallelism: each rank's partial sum over its share of the
  // inner width, the bias added once (rank 0), summed over the group into y.
  void linear_summed(const std::string& name, const Tensor& x, const Tensor& y) const {
    if (!tensor_group) return linear(name, x, y);
    ops::linear(ctx, x, p(name + ".weight"), tensor_group->rank() == 0 ? &p(name + ".bias") : nullptr, y);
    tensor_group->sum(ctx, y);
  }
  // RMS norm over the whole inner width `full` of x [B, L, width] in place. A rank that holds a
  // share of the heads has `width` of them: the sums of squares go over the group, and each rank
  // scales its share (a group norm of one group whose mean is taken as 0 is the RMS norm).
  void rms_norm(const Tensor& x, const Tensor& gamma, std::int64_t full) const {
    if (!tensor_group) return ops::rms_norm(ctx, x, gamma, x, c.eps);
    const std::int64_t width = x.size(2);
    const Tensor x3 = x.reshape({x.size(0) * x.size(1), width, 1});
    OwnedTensor sums = ctx.arena->empty(DType::f64, {x3.size(0), 1, 2});
    ops::group_norm_sums(ctx, x3, 1, sums);
    ops::fill(ctx, sums.view().select(2, 0), 0.0);
    tensor_group->sum(ctx, sums);
    ops::GroupNormParams gp;
    gp.groups = 1;
    gp.eps = c.eps;
    ops::group_norm_apply(ctx, x3, sums, static_cast<double>(full), gamma, zeros.view().slice(0, 0, width), x3, gp);
  }
  void show(const std::string& name, const Tensor& t) const {
    if (probe) probe(name, t);
  }

  // y = layer_norm(x) * (1 + scale) + shift, scale and shift [B, D] rows broadcast over tokens.
  // `norm_name` shows the norm's own output (the reference's module) before the modulation.
  // With G timestep groups: scale and shift [B, G, D], each row over its group's L / G tokens.
  void modulated_norm(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& y,
                      const char* norm_name = nullptr) const {
    ops::layer_norm(ctx, x, ones, zeros, y, c.eps);
    if (norm_name) show(norm_name, y);
    OwnedTensor s1 = empty({B, G, D});
    ops::add(ctx, scale, ones.view().reshape({1, 1, D}).expand({B, G, D}), s1);
    const Shape grouped{B, G, L / G, D};
    const Tensor yg = y.reshape(grouped);
    ops::mul(ctx, yg, s1.view().unsqueeze(2).expand(grouped), yg);
    ops::add(ctx, yg, shift.unsqueeze(2).expand(grouped), yg);
  }

  // x += y * gate, gate [B, G, D] broadcast over each group's tokens (y is overwritten).
  void gated_residual(const Tensor& x, const Tensor& y, const Tensor& gate) const {
    const Shape grouped{B, G, L / G, D};
    const Tensor yg = y.reshape(grouped);
    ops::mul(ctx, yg, gate.unsqueeze(2).expand(grouped), yg);
    ops::add(ctx, x, y, x);
  }

  // Attention module `a` (attn1 or attn2): queries from x [B, L, D], keys and values from kv
  // [B, Lk, D]; rotary angles on q and k when given. Writes to_out's result into y [B, L, D].
  // `image` [B, Li, D] (attn2 of an image-to-video model): the image tokens' own keys and values
  // (add_k_proj, norm_added_k, add_v_proj), attended with the same queries, the two results summed.
  void attention(const std::string& a, const Tensor& x, const Tensor& kv, const Tensor* cos, const Tensor* sin,
                 const Tensor& y, const Tensor* image = nullptr) const {
    // This rank's heads: all of them, or its share under tensor parallelism.
    const std::int64_t hd = c.head_dim, Dh = p(a + ".to_q.weight").size(0), H = Dh / hd, Lk = kv.size(1);
    OwnedTensor q = empty({B, L, Dh}), k = empty({B, Lk, Dh}), v = empty({B, Lk, Dh});
    linear(a + ".to_q", x, q);
    linear(a + ".to_k", kv, k);
    linear(a + ".to_v", kv, v);
    rms_norm(q, p(a + ".norm_q.weight"), D);
    rms_norm(k, p(a + ".norm_k.weight"), D);
    const Tensor qh = q.view().reshape({B, L, H, hd}), kh = k.view().reshape({B, Lk, H, hd});
    if (cos) {
      ops::rotary(ctx, qh, *cos, *sin, qh);
      ops::rotary(ctx, kh, *cos, *sin, kh);
    }
    OwnedTensor o = empty({B, L, Dh});
    ops::AttentionParams ap;
    ap.scale = 1.f / std::sqrt(static_cast<float>(hd));
    auto heads_first = [&](const Tensor& t, std::int64_t len) {
      return t.reshape({B, len, H, hd}).permute({0, 2, 1, 3});
    };
    if (cos && self_attention) {
      self_attention->attend(ctx, heads_first(q, L), heads_first(k, Lk), heads_first(v, Lk), heads_first(o, L), ap);
    } else if (cos && block_tokens > 0) {
      // Block-causal: the queries of block b see the keys of blocks 0..b.
      for (std::int64_t b0 = 0; b0 < L; b0 += block_tokens) {
        const std::int64_t n = std::min(block_tokens, L - b0), seen = b0 + n;
        ops::attention(ctx, heads_first(q, L).slice(2, b0, n), heads_first(k, Lk).slice(2, 0, seen),
                       heads_first(v, Lk).slice(2, 0, seen), nullptr, nullptr, heads_first(o, L).slice(2, b0, n), ap);
      }
    } else {
      ops::attention(ctx, heads_first(q, L), heads_first(k, Lk), heads_first(v, Lk), nullptr, nullptr,
                     heads_first(o, L), ap);
    }
    if (image) {
      const std::int64_t Li = image->size(1);
      OwnedTensor ki = empty({B, Li, Dh}), vi = empty({B, Li, Dh}), oi = empty({B, L, Dh});
      linear(a + ".add_k_proj", *image, ki);
      linear(a + ".add_v_proj", *image, vi);
      rms_norm(ki, p(a + ".norm_added_k.weight"), D);
      ops::attention(ctx, heads_first(q, L), heads_first(ki, Li), heads_first(vi, Li), nullptr, nullptr,
                     heads_first(oi, L), ap);
      ops::add(ctx, o, oi, o);
    }
    linear_summed(a + ".to_out.0", o, y);
  }
};

// Conditioning: the timestep's sinusoids through two products (temb), its six modulation rows
// (timestep_proj), and the text through two products with a tanh-GELU between. The intermediate
// tensors stay held with the results, as long as the call.
struct Conditioning {
  OwnedTensor sinus, t1, temb, tproj, e1, enc;
};

// Diffusion forcing's sinusoids of per-frame timesteps t [B, G] (on the device), as the reference
// computes them: in f64 (omega_i = 10000^(-i / half), the cosines first), stored as f32.
void frame_sinusoids(ExecContext& ctx, const Tensor& t, const Tensor& out, std::int64_t freq_dim) {
  std::vector<double> ts(static_cast<std::size_t>(t.numel()));
  ops::copy(ctx, t, Tensor::wrap(ts.data(), DType::f64, Device::cpu(), t.shape));
  synchronize(ctx);
  const auto half = static_cast<std::size_t>(freq_dim / 2), width = static_cast<std::size_t>(freq_dim);
  std::vector<float> host(ts.size() * width);
  for (std::size_t r = 0; r < ts.size(); ++r)
    for (std::size_t i = 0; i < half; ++i) {
      const double angle = ts[r] * std::pow(10000.0, -static_cast<double>(i) / static_cast<double>(half));
      host[r * width + i] = static_cast<float>(std::cos(angle));
      host[r * width + half + i] = static_cast<float>(std::sin(angle));
    }
  ops::copy(ctx, Tensor::wrap(host.data(), DType::f32, Device::cpu(), out.shape), out);
}

Conditioning condition(Pass& ps, const Tensor& t, const Tensor& text, int fps) {
  const WanTransformerConfig& c = ps.c;
  ExecContext& ctx = ps.ctx;
  const std::int64_t B = ps.B * ps.G, D = ps.D;  // one row per timestep group
  const std::string ce = "condition_embedder.";
  Conditioning r;
  r.sinus = ps.empty({B, c.freq_dim});
  if (t.rank() == 2)
    frame_sinusoids(ctx, t, r.sinus, c.freq_dim);
  else
    ops::timestep_embedding(ctx, t, r.sinus, {true, 0.f, 10000.f});
  r.t1 = ps.empty({B, D});
  r.temb = ps.empty({B, D});
  r.tproj = ps.empty({B, 6 * D});
  ps.linear(ce + "time_embedder.linear_1", r.sinus, r.t1);
  ops::activation(ctx, ops::Activation::silu, r.t1, r.t1);
  ps.linear(ce + "time_embedder.linear_2", r.t1, r.temb);
  ops::activation(ctx, ops::Activation::silu, r.temb, r.t1);
  ps.linear(ce + "time_proj", r.t1, r.tproj);
  if (c.inject_sample_info) {
    // SkyReels-V2's frame rate: row 0 of its table for 16 fps, row 1 otherwise, through a
    // Linear, SiLU, Linear into the six modulation rows of every timestep group.
    OwnedTensor e = ps.empty({1, D}), f1 = ps.empty({1, D}), f6 = ps.empty({1, 6 * D});
    ops::copy(ctx, ps.p("fps_embedding.weight").slice(0, fps == 16 ? 0 : 1, 1), e);
    ps.linear("fps_projection.net.0.proj", e, f1);
    ops::activation(ctx, ops::Activation::silu, f1, f1);
    ps.linear("fps_projection.net.2", f1, f6);
    ops::add(ctx, r.tproj, f6.view().expand({B, 6 * D}), r.tproj);
  }
  ps.show(ce + "temb", r.temb);
  ps.show(ce + "timestep_proj", r.tproj);
  const std::int64_t Lt = text.size(1);
  r.e1 = ps.empty({ps.B, Lt, D});
  r.enc = ps.empty({ps.B, Lt, D});
  ps.linear(ce + "text_embedder.linear_1", text, r.e1);
  ops::activation(ctx, ops::Activation::gelu_tanh, r.e1, r.e1);
  ps.linear(ce + "text_embedder.linear_2", r.e1, r.enc);
  ps.show(ce + "encoder_hidden_states", r.enc);
  return r;
}

// The image embedder of an image-to-video model: the CLIP states [1 or B, Li, image_dim] (plus the
// position table of a first-and-last-frame model), LayerNorm, Linear, erf-GELU, Linear, LayerNorm,
// then broadcast to the batch: [B, Li, D].
OwnedTensor embed_image(Pass& ps, const Tensor& image) {
  const WanTransformerConfig& c = ps.c;
  ExecContext& ctx = ps.ctx;
  const std::string ie = "condition_embedder.image_embedder.";
  const std::int64_t n = image.size(0), Li = image.size(1), E = c.image_dim, D = ps.D;
  OwnedTensor in = ps.empty({n, Li, E}), a = ps.empty({n, Li, E}), b = ps.empty({n, Li, E}), d = ps.empty({n, Li, D});
  ops::copy(ctx, image, in);
  if (c.pos_embed_seq_len > 0) {
    ops::add(ctx, in, ps.p(ie + "pos_embed").expand({n, Li, E}), in);
    ps.show(ie + "in", in);
  }
  ops::layer_norm(ctx, in, ps.p(ie + "norm1.weight"), ps.p(ie + "norm1.bias"), a, 1e-5f);
  ps.linear(ie + "ff.net.0.proj", a, b);
  ops::activation(ctx, ops::Activation::gelu, b, b);
  ps.linear(ie + "ff.net.2", b, d);
  OwnedTensor e = ps.empty({n, Li, D}), out = ps.empty({ps.B, Li, D});
  ops::layer_norm(ctx, d, ps.p(ie + "norm2.weight"), ps.p(ie + "norm2.bias"), e, 1e-5f);
  ops::copy(ctx, e.view().expand({ps.B, Li, D}), out);
  ps.show("condition_embedder.encoder_hidden_states_image", out);
  return out;
}

}  // namespace

WanTransformer::WanTransformer(WanTransformerConfig config, Weights weights)
    : config_(std::move(config)), weights_(std::move(weights)) {}

void WanTransformer::set_tensor_group(TensorGroup* group) {
  const TensorShard& s = weights_.shard();
  VINF_CHECK(s.size == (group ? group->size() : 1) && (!group || group->rank() == s.rank),
             "WanTransformer: a tensor group of ", group ? group->size() : 1, " for the weights of tensor shard ",
             s.rank, " of ", s.size);
  tensor_group_ = group;
}

WanTransformer WanTransformer::load(const std::string& dir, Runtime& rt, DType dtype, bool allow_unexpected,
                                    std::vector<std::string>* warnings, TensorShard shard) {
  fs::path d(dir);
  if (!io::path_exists(d / "config.json") && io::path_exists(d / "transformer" / "config.json")) d /= "transformer";
  const ModelFiles files = find_model_files(d.string());
  WanTransformerConfig c = load_wan_transformer_config(files.config, warnings);
  VINF_INPUT_CHECK(activation_dtype(dtype, rt.device()) == dtype,
                   "the Wan transformer computes in one dtype: ", dtype_name(dtype), " on ", rt.device().name(),
                   " is not supported (use --dtype f32 on the CPU)");
  const WeightFiles wf(files);
  VINF_INPUT_CHECK(shard.size <= c.heads, "--parallel.tensor ", shard.size, " splits the Wan transformer's ", c.heads,
                   " heads: use at most ", c.heads, " tensor ranks (", files.config, ")");
  Weights w(wf, wan_transformer_parameters(c), rt, dtype, allow_unexpected, warnings, shard);
  return WanTransformer(std::move(c), std::move(w));
}

namespace {

// A call's latent shape in patches.
struct WanGeometry {
  std::int64_t B = 0, F = 0, Hs = 0, Ws = 0, pt = 1, ph = 1, pw = 1, Fp = 0, Hp = 0, Wp = 0, L = 0;
  std::int64_t total = 0;  // the video's latent frames
};

// The call's shapes against the config and each other. InputError for latents the model cannot
// take; vinf::Error for a caller's inconsistent tensors.
WanGeometry wan_geometry(const WanTransformerConfig& c, const Tensor& x, const Tensor& t, const Tensor& text,
                         const Tensor& out, const WanFrames& frames, const Tensor* image) {
  const char* op = "WanTransformer";
  VINF_CHECK(x.rank() == 5 && x.size(1) == c.in_channels, op, ": x ", x.describe(), " must be [B, ", c.in_channels,
             ", F, H, W]");
  WanGeometry g;
  g.B = x.size(0), g.F = x.size(2), g.Hs = x.size(3), g.Ws = x.size(4);
  g.pt = c.patch_size[0], g.ph = c.patch_size[1], g.pw = c.patch_size[2];
  VINF_INPUT_CHECK(g.F % g.pt == 0 && g.Hs % g.ph == 0 && g.Ws % g.pw == 0, "the Wan transformer's latents ",
                   x.shape.str(), " must divide by its patch size (", g.pt, ", ", g.ph, ", ", g.pw,
                   ") in frames, height and width");
  g.Fp = g.F / g.pt, g.Hp = g.Hs / g.ph, g.Wp = g.Ws / g.pw, g.L = g.Fp * g.Hp * g.Wp;
  g.total = frames.total > 0 ? frames.total : g.F;
  VINF_CHECK(frames.first >= 0 && frames.first + g.F <= g.total && frames.first % g.pt == 0 && g.total % g.pt == 0, op,
             ": frames [", frames.first, ", ", frames.first + g.F, ") of ", g.total,
             " do not fit the video or the patch size");
  const std::int64_t Ft = g.total / g.pt;
  VINF_INPUT_CHECK(Ft <= c.rope_max_seq_len && g.Hp <= c.rope_max_seq_len && g.Wp <= c.rope_max_seq_len,
                   "the Wan transformer's rotary table covers ", c.rope_max_seq_len,
                   " positions per axis (rope_max_seq_len), but the latents are ", Ft, " x ", g.Hp, " x ", g.Wp,
                   " patches");
  VINF_CHECK((t.rank() == 1 && t.size(0) == g.B) || (t.rank() == 2 && t.size(0) == g.B && t.size(1) == g.Fp), op,
             ": t ", t.describe(), " must hold one timestep per sample, or (diffusion forcing) one per frame [", g.B,
             ", ", g.Fp, "]");
  VINF_CHECK(text.rank() == 3 && text.size(0) == g.B && text.size(2) == c.text_dim, op, ": text ", text.describe(),
             " must be [", g.B, ", L, ", c.text_dim, "]");
  VINF_CHECK(out.rank() == 5 && out.size(0) == g.B && out.size(1) == c.out_channels && out.size(2) == g.F &&
                 out.size(3) == g.Hs && out.size(4) == g.Ws,
             op, ": out ", out.describe());
  VINF_CHECK(out.is_contiguous(), op, ": out must be contiguous");
  VINF_CHECK((image != nullptr) == c.image_conditioned(), op,
             ": an image-to-video model takes the image's CLIP states, a text-to-video model none");
  VINF_CHECK(
      !image || (image->rank() == 3 && (image->size(0) == 1 || image->size(0) == g.B) &&
                 image->size(2) == c.image_dim && (c.pos_embed_seq_len == 0 || image->size(1) == c.pos_embed_seq_len)),
      op, ": image ", image ? image->describe() : "", " must be [1 or ", g.B, ", tokens, ", c.image_dim, "]",
      c.pos_embed_seq_len > 0 ? " with the position table's tokens" : "");
  return g;
}

// Patch embedding: a Conv3d whose stride is its kernel is one product over the patches, each
// flattened in the weight's (channel, frame, row, column) order. Returns the tokens [B, L, D].
OwnedTensor wan_embed_patches(Pass& ps, const Tensor& x, const WanGeometry& g) {
  ExecContext& ctx = ps.ctx;
  OwnedTensor xc;
  const Tensor* xin = &x;
  if (!x.is_contiguous()) {
    xc = ps.empty(x.shape);
    ops::copy(ctx, x, xc);
    xin = &xc;
  }
  const std::int64_t C = ps.c.in_channels, K = C * g.pt * g.ph * g.pw, D = ps.D;
  const std::int64_t sb = C * g.F * g.Hs * g.Ws, sc = g.F * g.Hs * g.Ws, sf = g.Hs * g.Ws;
  OwnedTensor patches = ps.empty({g.B, g.L, K});
  for (std::int64_t b = 0; b < g.B; ++b)
    for (std::int64_t kt = 0; kt < g.pt; ++kt)
      ops::copy(ctx,
                strided_view(*xin, b * sb + kt * sf, {g.Fp, g.Hp, g.Wp, C, g.ph, g.pw},
                             {g.pt * sf, g.ph * g.Ws, g.pw, sc, g.Ws, 1}),
                strided_view(patches, b * g.L * K + kt * g.ph * g.pw, {g.Fp, g.Hp, g.Wp, C, g.ph, g.pw},
                             {g.Hp * g.Wp * K, g.Wp * K, K, g.pt * g.ph * g.pw, g.pw, 1}));
  OwnedTensor h = ps.empty({g.B, g.L, D});
  ops::linear(ctx, patches, ps.p("patch_embedding.weight").reshape({D, K}), &ps.p("patch_embedding.bias"), h);
  ps.show("patch_embedding.out", h.view().reshape({g.B, g.Fp, g.Hp, g.Wp, D}).permute({0, 4, 1, 2, 3}));
  return h;
}

// What the blocks share within a call: the buffers and the conditioning.
struct WanBlockInputs {
  const Tensor &h, &n, &y, &mod, &ff, &tproj, &enc, &cos, &sin;
  const Tensor* image;  // the image tokens [B, Li, D], or null
};

// Block `blk`: the self-attention, the cross-attention (to the text and the image tokens) and the
// feed-forward, each modulated by the timestep's rows (shift, scale, gate).
void wan_run_block(Pass& ps, std::int64_t blk, const WanBlockInputs& in) {
  ExecContext& ctx = ps.ctx;
  const WanTransformerConfig& c = ps.c;
  const std::int64_t B = ps.B, G = ps.G, D = ps.D;
  const std::string k = "blocks." + std::to_string(blk) + ".";
  const ProfileModule block(ctx, k, "modulation");
  ops::add(ctx, in.tproj.reshape({B, G, 6, D}), ps.p(k + "scale_shift_table").unsqueeze(0).expand({B, G, 6, D}),
           in.mod);
  auto row = [&](int i) { return in.mod.select(2, i); };
  {
    const ProfileModule attn(ctx, k, "attn1");
    ps.modulated_norm(in.h, row(1), row(0), in.n);
    ps.attention(k + "attn1", in.n, in.n, &in.cos, &in.sin, in.y);
    ps.gated_residual(in.h, in.y, row(2));
  }
  {
    const ProfileModule attn(ctx, k, "attn2");
    if (c.cross_attn_norm)
      ops::layer_norm(ctx, in.h, ps.p(k + "norm2.weight"), ps.p(k + "norm2.bias"), in.n, c.eps);
    else
      ops::copy(ctx, in.h, in.n);
    ps.attention(k + "attn2", in.n, in.enc, nullptr, nullptr, in.y, in.image);
    if (blk == 0) ps.show(k + "attn2.out", in.y);
    ops::add(ctx, in.h, in.y, in.h);
  }
  const ProfileModule ffn(ctx, k, "ffn");
  ps.modulated_norm(in.h, row(4), row(3), in.n);
  ps.linear(k + "ffn.net.0.proj", in.n, in.ff);
  ops::activation(ctx, ops::Activation::gelu_tanh, in.ff, in.ff);
  ps.linear_summed(k + "ffn.net.2", in.ff, in.y);
  ps.gated_residual(in.h, in.y, row(5));
  ps.show(k + "out", in.h);
}

// Output: shift and scale from the final table plus temb, the norm, the projection to patches,
// then unpatchify into out (each patch's columns are (frame, row, column, channel)).
void wan_write_output(Pass& ps, const Tensor& h, const Tensor& n, const Tensor& temb, const WanGeometry& g,
                      const Tensor& out) {
  ExecContext& ctx = ps.ctx;
  const std::int64_t B = ps.B, G = ps.G, D = ps.D;
  OwnedTensor fin = ps.empty({B, G, 2, D});
  ops::add(ctx, temb.reshape({B, G, 1, D}).expand({B, G, 2, D}),
           ps.p("scale_shift_table").unsqueeze(0).expand({B, G, 2, D}), fin);
  ps.modulated_norm(h, fin.view().select(2, 1), fin.view().select(2, 0), n, "norm_out.out");
  const std::int64_t Co = ps.c.out_channels, Ko = Co * g.pt * g.ph * g.pw, L = g.L;
  OwnedTensor po = ps.empty({B, L, Ko});
  ps.linear("proj_out", n, po);
  ps.show("proj_out.out", po);
  const std::int64_t ob = Co * g.F * g.Hs * g.Ws, oc = g.F * g.Hs * g.Ws, sf = g.Hs * g.Ws;
  const std::int64_t Fp = g.Fp, Hp = g.Hp, Wp = g.Wp, ph = g.ph, pw = g.pw;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t kt = 0; kt < g.pt; ++kt)
      ops::copy(ctx,
                strided_view(po, b * L * Ko + kt * ph * pw * Co, {Co, Fp, Hp, ph, Wp, pw},
                             {1, Hp * Wp * Ko, Wp * Ko, pw * Co, Ko, Co}),
                strided_view(out, b * ob + kt * sf, {Co, Fp, Hp, ph, Wp, pw}, {oc, g.pt * sf, ph * g.Ws, g.Ws, pw, 1}));
}

}  // namespace

void WanTransformer::forward(ExecContext& ctx, const Tensor& x, const Tensor& t, const Tensor& text, const Tensor& out,
                             const WanProbe& probe, const WanFrames& frames, WanSelfAttention* self_attention,
                             const Tensor* image) const {
  const WanTransformerConfig& c = config_;
  const WanGeometry g = wan_geometry(c, x, t, text, out, frames, image);
  const ProfileCall profile_call(ctx);
  VINF_CHECK(weights_.shard().size == 1 || tensor_group_ != nullptr, "WanTransformer: the weights of a tensor shard (",
             weights_.shard().size, " ranks) need set_tensor_group before forward");
  const DType dt = weights_.dtype();
  const std::int64_t B = g.B, L = g.L, D = c.dim();
  Pass ps{ctx,
          weights_,
          c,
          probe,
          self_attention,
          weights_.shard().size > 1 ? tensor_group_ : nullptr,
          B,
          L,
          D,
          t.rank() == 2 ? g.Fp : 1,
          dt,
          ctx.arena->empty(dt, {D}),
          ctx.arena->empty(dt, {D})};
  ops::fill(ctx, ps.ones, 1.0);
  ops::fill(ctx, ps.zeros, 0.0);
  const std::int64_t block_tokens = frames.block_frames > 1 ? frames.block_frames / g.pt * g.Hp * g.Wp : 0;
  VINF_INPUT_CHECK(block_tokens == 0 || (frames.block_frames % g.pt == 0 && g.total % frames.block_frames == 0),
                   "the Wan transformer's causal blocks of ", frames.block_frames, " frames must divide its ", g.total,
                   " latent frames (and the patch's ", g.pt, ")");
  if (self_attention) {
    // The attention over every rank's tokens applies the mask itself, or cannot.
    VINF_INPUT_CHECK(self_attention->set_causal_block(block_tokens), "causal blocks of ", frames.block_frames,
                     " frames need the whole video's attention (one rank, or --vi.mode exact), not windows");
  } else {
    VINF_CHECK(block_tokens == 0 || g.total == g.F, "WanTransformer: causal blocks over a part of the video (", g.F,
               " of ", g.total, " frames) without the attention that sees the rest");
    ps.block_tokens = block_tokens;
  }

  // Rotary angles of every patch, from the frame (in the whole video), row and column it sits at.
  const RotaryTable rt = wan_rotary_table(c, g.total / g.pt, g.Hp, g.Wp);
  OwnedTensor cos = ctx.arena->empty(DType::f32, {L, rt.half}), sin = ctx.arena->empty(DType::f32, {L, rt.half});
  const auto skip = static_cast<std::size_t>(frames.first / g.pt * g.Hp * g.Wp * rt.half);
  ops::copy(ctx, Tensor::wrap(const_cast<float*>(rt.cos.data() + skip), DType::f32, Device::cpu(), cos.shape), cos);
  ops::copy(ctx, Tensor::wrap(const_cast<float*>(rt.sin.data() + skip), DType::f32, Device::cpu(), sin.shape), sin);

  OwnedTensor image_tokens;
  const OwnedTensor h = [&] {
    const ProfileModule embed(ctx, "patch_embedding");
    return wan_embed_patches(ps, x, g);
  }();
  const Conditioning cond = [&] {
    const ProfileModule embed(ctx, "condition_embedder");
    return condition(ps, t, text, frames.fps);
  }();
  if (image) {
    const ProfileModule embed(ctx, "condition_embedder.image_embedder");
    image_tokens = embed_image(ps, *image);
  }
  const Tensor image_view = image ? image_tokens.view() : Tensor{};

  const TensorShard& shard = weights_.shard();
  const OwnedTensor n = ps.empty({B, L, D}), y = ps.empty({B, L, D}), mod = ps.empty({B, ps.G, 6, D});
  const OwnedTensor ff = ps.empty({B, L, split_units(c.ffn_dim, shard.rank, shard.size).second});  // this rank's share
  const WanBlockInputs in{h, n, y, mod, ff, cond.tproj, cond.enc, cos, sin, image ? &image_view : nullptr};
  for (std::int64_t blk = 0; blk < c.layers; ++blk) wan_run_block(ps, blk, in);
  const ProfileModule output(ctx, "proj_out");
  wan_write_output(ps, h, n, cond.temb, g, out);
}

}  // namespace vinf::model
