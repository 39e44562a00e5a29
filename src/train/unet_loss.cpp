#include "train/unet_loss.hpp"

#include <chrono>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "model/params.hpp"
#include "ops/backward.hpp"
#include "ops/elementwise.hpp"
#include "ops/embedding.hpp"
#include "ops/runtime.hpp"

namespace vinf::train {
namespace {

// The UNet of model/unet3d.cpp on frame-major activations (B*F, C, H, W), as graph ops.
class UNetGraph {
 public:
  UNetGraph(Graph& g, const model::UNetConfig& c, std::int64_t batch, std::int64_t frames)
      : g_(g), c_(c), b_(batch), f_(frames) {}

  // The resnets' time embedding, SiLU applied (a checkpointed block's leaf).
  void set_time_embedding(const Var& temb_act) { temb_act_ = temb_act; }
  const Var& time_embedding() const { return temb_act_; }

  // time_embedding(sinusoid(t)) + fps_embedding(sinusoid(fps)), SiLU: one row per sample.
  void embeddings(const std::vector<std::int64_t>& timesteps, double fps) {
    std::vector<float> t(timesteps.begin(), timesteps.end());
    Var temb = embedding_mlp("time_embedding", t);
    if (c_.fps_cond)
      temb = g_.add(temb, embedding_mlp("fps_embedding", std::vector<float>(t.size(), static_cast<float>(fps))));
    temb_act_ = g_.activation(temb, ops::Activation::silu);
  }

  Var resnet(const Var& x, const std::string& p, float output_scale) {
    const int groups = c_.norm_num_groups;
    Var h = g_.conv2d(g_.group_norm(x, p + ".norm1", groups, c_.norm_eps, ops::Activation::silu), p + ".conv1", 1, 1);
    h = g_.add_per_sample(h, g_.linear(temb_act_, p + ".time_emb_proj"), b_);
    h = g_.conv2d(g_.group_norm(h, p + ".norm2", groups, c_.norm_eps, ops::Activation::silu), p + ".conv2", 1, 1);
    const bool shortcut = g_.has_param(p + ".conv_shortcut.weight");
    Var out = g_.add(h, shortcut ? g_.conv2d(x, p + ".conv_shortcut", 1, 0) : x);
    return output_scale == 1.f ? out : g_.scale(out, 1.f / output_scale);
  }

  // 4 x [temporal GroupNorm -> SiLU -> Conv3d (3,1,1)] + residual.
  Var temporal_conv(const Var& x, const std::string& p) {
    Var cur = x;
    for (int s = 1; s <= 4; ++s) {
      const std::string stage = p + ".conv" + std::to_string(s);
      Var a = g_.group_norm(cur, stage + ".0", c_.norm_num_groups, 1e-5f, ops::Activation::silu, b_);
      cur = g_.temporal_conv(a, stage + (s == 1 ? ".2" : ".3"), b_, 1);
    }
    return g_.add(x, cur);
  }

  // Transformer2DModel: per-frame GroupNorm, proj_in over pixels, self-attention, cross-attention
  // to the text of the frame's sample, GEGLU, proj_out, residual.
  Var spatial_transformer(const Var& x, const std::string& p, const Var& text) {
    const Shape xs = x->value.shape;
    const std::int64_t n = xs[0], ch = xs[1], s = xs[2] * xs[3];
    const int heads = model::transformer_heads(c_, static_cast<int>(ch));
    const std::string blk = p + ".transformer_blocks.0";
    Var normed = g_.group_norm(x, p + ".norm", c_.norm_num_groups, 1e-6f, ops::Activation::none);
    Var rows = g_.copy_of_view(
        normed, [n, ch, s](const Tensor& t) { return t.reshape({n, ch, s}).permute({0, 2, 1}); }, {n, s, ch});
    Var hs = g_.linear(rows, p + ".proj_in");
    hs = g_.add(hs, self_attention(g_.layer_norm(hs, blk + ".norm1", 1e-5f), blk + ".attn1", heads));
    {
      const std::string a = blk + ".attn2";
      Var q = g_.linear(g_.layer_norm(hs, blk + ".norm2", 1e-5f), a + ".to_q", false);
      // The text keys and values, projected once per sample and repeated over its frames.
      Var k = g_.repeat(g_.linear(text, a + ".to_k", false), f_);
      Var v = g_.repeat(g_.linear(text, a + ".to_v", false), f_);
      hs = g_.add(hs, g_.linear(g_.attention(q, k, v, heads, params_for(q, heads)), a + ".to_out.0"));
    }
    hs = feed_forward(hs, blk);
    Var proj = g_.linear(hs, p + ".proj_out");
    Var back = g_.copy_of_view(proj, [](const Tensor& t) { return t.permute({0, 2, 1}); }, xs);
    return g_.add(x, back);
  }

  // TransformerTemporalModel: temporal GroupNorm, one sequence of F frames per pixel, two
  // self-attentions, GEGLU, residual.
  Var temporal_transformer(const Var& x, const std::string& p, int heads) {
    const Shape xs = x->value.shape;
    const std::int64_t ch = xs[1], s = xs[2] * xs[3], b = b_, f = f_;
    Var normed = g_.group_norm(x, p + ".norm", c_.norm_num_groups, 1e-6f, ops::Activation::none, b_);
    Var seq = g_.copy_of_view(
        normed, [b, f, ch, s](const Tensor& t) { return t.reshape({b, f, ch, s}).permute({0, 3, 1, 2}); },
        {b * s, f, ch});
    Var hs = g_.linear(seq, p + ".proj_in");
    const std::string blk = p + ".transformer_blocks.0";
    hs = g_.add(hs, self_attention(g_.layer_norm(hs, blk + ".norm1", 1e-5f), blk + ".attn1", heads));
    hs = g_.add(hs, self_attention(g_.layer_norm(hs, blk + ".norm2", 1e-5f), blk + ".attn2", heads));
    hs = feed_forward(hs, blk);
    Var proj = g_.linear(hs, p + ".proj_out");
    Var back = g_.copy_of_view(
        proj, [b, f, ch, s](const Tensor& t) { return t.reshape({b, s, f, ch}).permute({0, 2, 3, 1}); }, xs);
    return g_.add(x, back);
  }

  Var layer(const Var& x, const std::string& p, int j, bool cross, const Var& text, float output_scale = 1.f) {
    const std::string k = model::dot_index(static_cast<std::size_t>(j));
    Var h = resnet(x, p + ".resnets" + k, output_scale);
    h = temporal_conv(h, p + ".temp_convs" + k);
    if (cross) {
      h = spatial_transformer(h, p + ".attentions" + k, text);
      h = temporal_transformer(h, p + ".temp_attentions" + k,
                               model::transformer_heads(c_, static_cast<int>(h->value.size(1))));
    }
    return h;
  }

 private:
  Var embedding_mlp(const std::string& p, const std::vector<float>& host) {
    const auto rows = static_cast<std::int64_t>(host.size());
    const std::int64_t c0 = c_.block_out_channels.front();
    ExecContext& ctx = g_.ctx();
    OwnedTensor values = ctx.arena->empty(DType::f32, {rows});
    ops::copy(ctx, Tensor::wrap(const_cast<float*>(host.data()), DType::f32, Device::cpu(), {rows}), values);
    OwnedTensor sinus = ctx.arena->empty(DType::f32, {rows, c0});
    ops::timestep_embedding(ctx, values, sinus, {true, 0.f, 10000.f});
    Var h = g_.activation(g_.linear(g_.input(sinus, false), p + ".linear_1"), ops::Activation::silu);
    return g_.linear(h, p + ".linear_2");
  }

  ops::AttentionParams params_for(const Var& q, int heads) const {
    ops::AttentionParams ap;
    ap.scale = 1.f / std::sqrt(static_cast<float>(q->value.size(-1) / heads));
    return ap;
  }

  Var self_attention(const Var& x, const std::string& p, int heads) {
    Var q = g_.linear(x, p + ".to_q", false);
    Var k = g_.linear(x, p + ".to_k", false);
    Var v = g_.linear(x, p + ".to_v", false);
    return g_.linear(g_.attention(q, k, v, heads, params_for(q, heads)), p + ".to_out.0");
  }

  Var feed_forward(const Var& hs, const std::string& blk) {
    Var gated = g_.geglu(g_.linear(g_.layer_norm(hs, blk + ".norm3", 1e-5f), blk + ".ff.net.0.proj"));
    return g_.add(hs, g_.linear(gated, blk + ".ff.net.2"));
  }

  Graph& g_;
  const model::UNetConfig& c_;
  std::int64_t b_, f_;
  Var temb_act_;
};

// The batch fits the model: latents, noise of their shape, a timestep per sample, the text.
void check_loss_batch(const model::UNetConfig& c, const LossBatch& batch, std::int64_t loss_elements) {
  const Tensor& x0 = batch.x0;
  VINF_INPUT_CHECK(x0.rank() == 5 && x0.size(1) == c.in_channels, "training takes latents (B, ", c.in_channels,
                   ", F, H, W); got ", x0.shape.str());
  VINF_INPUT_CHECK(batch.eps.shape == x0.shape, "the noise ", batch.eps.shape.str(), " must have the latents' shape ",
                   x0.shape.str());
  VINF_INPUT_CHECK(c.out_channels == c.in_channels, "training predicts the noise: the model needs out_channels = ",
                   "in_channels, got ", c.out_channels, " and ", c.in_channels);
  const std::int64_t b = x0.size(0);
  VINF_INPUT_CHECK(static_cast<std::int64_t>(batch.timesteps.size()) == b, "training takes one timestep per sample (",
                   b, "); got ", batch.timesteps.size());
  VINF_INPUT_CHECK(batch.text.rank() == 3 && batch.text.size(0) == b && batch.text.size(2) == c.cross_attention_dim,
                   "the text embeddings must be (B = ", b, ", L, ", c.cross_attention_dim, "); got ",
                   batch.text.shape.str());
  VINF_CHECK(loss_elements > 0, "unet_loss_backward: the loss's element count must be positive");

}

}  // namespace

LossResult unet_loss_backward(ExecContext& ctx, const model::UNetConfig& c,
                              const ParamLookup& params, ParamGrads& grads,
                              const std::vector<float>& alphas_cumprod, const LossBatch& batch,
                              std::int64_t loss_elements, const Tensor* grad_x0, bool checkpoint_activations,
                              float lora_scale, Graph::Profile* profile, DType products) {
  check_loss_batch(c, batch, loss_elements);
  const Tensor& x0 = batch.x0;
  const std::int64_t b = x0.size(0), f = x0.size(2), h = x0.size(3), w = x0.size(4), ch = x0.size(1);

  // noisy = sqrt(abar_t) x0 + sqrt(1 - abar_t) eps, per sample.
  std::vector<float> sqrt_abar(static_cast<std::size_t>(b)), sqrt_rest(static_cast<std::size_t>(b));
  OwnedTensor noisy = ctx.arena->empty(DType::f32, x0.shape);
  for (std::int64_t i = 0; i < b; ++i) {
    const std::int64_t t = batch.timesteps[static_cast<std::size_t>(i)];
    VINF_INPUT_CHECK(t >= 0 && t < static_cast<std::int64_t>(alphas_cumprod.size()), "timestep ", t,
                     " is outside the noise schedule's 0..", alphas_cumprod.size() - 1);
    const float abar = alphas_cumprod[static_cast<std::size_t>(t)];
    sqrt_abar[static_cast<std::size_t>(i)] = std::sqrt(abar);
    sqrt_rest[static_cast<std::size_t>(i)] = std::sqrt(1.f - abar);
    ops::axpby(ctx, sqrt_abar[static_cast<std::size_t>(i)], x0.select(0, i), sqrt_rest[static_cast<std::size_t>(i)],
               batch.eps.select(0, i), noisy.select(0, i));
  }

  using Clock = std::chrono::steady_clock;
  synchronize(ctx);
  const auto t_forward = Clock::now();
  Graph g(ctx, params, &grads, lora_scale);
  g.set_profile(profile);
  g.set_products(products);
  UNetGraph net(g, c, b, f);
  net.embeddings(batch.timesteps, batch.fps);
  const Var text = g.input(batch.text, false);
  Var sample = g.input(noisy.permute({0, 2, 1, 3, 4}), grad_x0 != nullptr, {b * f, ch, h, w});
  noisy = OwnedTensor();

  // One block layer, or the mid block (j < 0), on x: as it is, or checkpointed (its inputs are x,
  // the time embedding and the text; the block builds its own UNetGraph on the graph it runs in).
  auto block = [&](const Var& in, const std::string& prefix, int j, bool cross) {
    const Graph::Block run = [&c, b, f, prefix, j, cross](Graph& sg, const std::vector<Var>& v) {
      UNetGraph n(sg, c, b, f);
      n.set_time_embedding(v[1]);
      if (j >= 0) return n.layer(v[0], prefix, j, cross, v[2]);
      Var y = n.layer(v[0], "mid_block", 0, true, v[2], c.mid_block_scale_factor);
      y = n.resnet(y, "mid_block.resnets.1", c.mid_block_scale_factor);
      return n.temporal_conv(y, "mid_block.temp_convs.1");
    };
    const std::vector<Var> inputs{in, net.time_embedding(), text};
    return checkpoint_activations ? g.checkpoint(inputs, run) : run(g, inputs);
  };

  Var x = g.conv2d(sample, "conv_in", 1, 1);
  x = net.temporal_transformer(x, "transformer_in", model::UNetConfig::kTransformerInHeads);
  const model::UNetLayout layout = model::unet_layout(c);
  std::vector<Var> skips{x};
  for (const model::BlockLayout& blk : layout.down) {
    for (std::size_t j = 0; j < blk.resnet_in.size(); ++j) {
      x = block(x, blk.prefix, static_cast<int>(j), blk.cross);
      skips.push_back(x);
    }
    if (blk.resample) {
      x = g.conv2d(x, blk.prefix + ".downsamplers.0.conv", 2, c.downsample_padding);
      skips.push_back(x);
    }
  }
  x = block(x, "mid_block", -1, true);
  for (const model::BlockLayout& blk : layout.up) {
    for (std::size_t j = 0; j < blk.resnet_in.size(); ++j) {
      x = g.concat_channels(x, skips.back());
      skips.pop_back();
      x = block(x, blk.prefix, static_cast<int>(j), blk.cross);
    }
    if (blk.resample) {
      const Var& next = skips.back();
      x = g.upsample_nearest(x, next->value.size(2), next->value.size(3));
      x = g.conv2d(x, blk.prefix + ".upsamplers.0.conv", 1, 1);
    }
  }
  VINF_CHECK(skips.empty(), "unet_loss_backward: ", skips.size(), " skip tensors left after the up path");
  x = g.group_norm(x, "conv_norm_out", c.norm_num_groups, c.norm_eps, ops::Activation::silu);
  const Var pred = g.conv2d(x, "conv_out", 1, 1);
  x = nullptr;

  synchronize(ctx);
  const auto t_backward = Clock::now();
  // d loss / d pred = 2 (pred - eps) / loss_elements, in the frame-major layout.
  const Shape fm{b, f, ch, h, w};
  OwnedTensor diff = ctx.arena->empty(DType::f32, pred->value.shape);
  ops::axpby(ctx, 1.f, pred->value.reshape(fm), -1.f, batch.eps.permute({0, 2, 1, 3, 4}), diff.reshape(fm));
  LossResult res;
  res.elements = diff.numel();
  {
    std::vector<float> host(static_cast<std::size_t>(diff.numel()));
    ops::copy(ctx, diff, Tensor::wrap(host.data(), DType::f32, Device::cpu(), diff.shape));
    for (float d : host) res.sum_squares += static_cast<double>(d) * d;
  }
  ops::scale(ctx, diff, static_cast<float>(2.0 / static_cast<double>(loss_elements)), diff);
  g.backward(pred, diff);
  synchronize(ctx);
  res.forward_seconds = std::chrono::duration<double>(t_backward - t_forward).count();
  res.backward_seconds = std::chrono::duration<double>(Clock::now() - t_backward).count();

  // d loss / d x0 = sqrt(abar_t) d loss / d noisy, back in the (B, C, F, H, W) layout.
  if (grad_x0 != nullptr) {
    VINF_CHECK(grad_x0->shape == x0.shape, "unet_loss_backward: grad_x0 ", grad_x0->describe(), " for x0 ",
               x0.shape.str());
    const Tensor dn = g.grad(sample).reshape(fm);
    for (std::int64_t i = 0; i < b; ++i) {
      const Tensor gi = grad_x0->select(0, i);
      ops::axpby(ctx, 1.f, gi, sqrt_abar[static_cast<std::size_t>(i)], dn.select(0, i).permute({1, 0, 2, 3}), gi);
    }
  }
  return res;
}

}  // namespace vinf::train
