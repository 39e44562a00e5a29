#include "model/unet3d.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/arena.hpp"
#include "core/error.hpp"
#include "ops/activation.hpp"
#include "ops/conv.hpp"
#include "ops/elementwise.hpp"
#include "ops/embedding.hpp"
#include "ops/gemm.hpp"
#include "ops/norm.hpp"
#include "ops/resample.hpp"

namespace vinf::model {

UNet3D::UNet3D(UNetConfig config, Weights weights)
    : config_(std::move(config)), layout_(unet_layout(config_)), weights_(std::move(weights)) {}

void UNet3D::set_tensor_group(TensorGroup* group) {
  const TensorShard& s = weights_.shard();
  VINF_CHECK(group == nullptr || (group->rank() == s.rank && group->size() == s.size), "UNet3D: a tensor group of ",
             group ? group->size() : 0, " for weights of tensor shard ", s.rank, " of ", s.size);
  tensor_group_ = group;
}

namespace {

// An activation: owned by whoever still needs it (the current layer, the skip stack).
using Act = std::shared_ptr<OwnedTensor>;

// One forward call's state: where it runs, the clip's batch and frame counts, the hooks.
class Forward {
 public:
  Forward(const UNetConfig& c, const Weights& w, ExecContext& ctx, TemporalContext& tc, TensorGroup* tg,
          const UNet3D::Observer& observe, std::int64_t batch, std::int64_t frames)
      : c_(c), w_(w), ctx_(ctx), tc_(tc), tg_(tg), observe_(observe), dtype_(w.dtype()), b_(batch), f_(frames) {}

  // Tensor parallelism: the heads of this rank's shard out of `heads`; the partial outputs of the
  // row-parallel projections summed over the group, their biases added on its first rank only.
  int local_heads(int heads) const {
    return static_cast<int>(split_units(heads, w_.shard().rank, w_.shard().size).second);
  }
  const Tensor* split_bias(const std::string& name) const { return w_.shard().rank == 0 ? &w(name) : nullptr; }
  void sum_partials(const Tensor& y) const {
    if (w_.shard().size > 1) tg_->sum(ctx_, y);
  }

  Act empty(const Shape& s) const { return empty(s, dtype_); }
  Act empty(const Shape& s, DType dt) const { return std::make_shared<OwnedTensor>(ctx_.arena->empty(dt, s)); }
  // Images (N, C, H, W) that a convolution reads or writes, or a product reads as rows of pixels:
  // on the CPU's fast path stored channels-last (N, H, W, C), the layout of oneDNN's convolutions,
  // which then reorder nothing, and rows with unit stride for the products (the norms and sums
  // around them read and write it); elsewhere as empty().
  Act empty_for_conv(const Shape& s) const {
    if (!ctx_.device.is_cpu() || ctx_.cpu_impl != CpuImpl::fast) return empty(s);
    Allocation mem = ctx_.arena->allocate(s.numel() * dtype_size(dtype_));
    const Tensor nhwc = Tensor::wrap(mem.data(), dtype_, ctx_.device, {s[0], s[2], s[3], s[1]});
    return std::make_shared<OwnedTensor>(std::move(mem), nhwc.permute({0, 3, 1, 2}));
  }
  const Tensor& w(const std::string& name) const { return w_.get(name); }
  void observe(const std::string& name, const Tensor& t) const {
    if (observe_) observe_(name, t);
  }
  // (B*F, C, H, W) -> the clip view (B, C, F, H*W) the temporal ops take.
  Tensor clip(const Tensor& x) const {
    return x.reshape({b_, x.size(0) / b_, x.size(1), x.size(2) * x.size(3)}).permute({0, 2, 1, 3});
  }

  // time_embedding(sinusoid(t)) + fps_embedding(sinusoid(fps)), then SiLU for the resnets: one
  // row per sample [B, 4 C0], or with one timestep per frame one row per frame [B*F, 4 C0]
  // (row b*F + f; `timesteps` holds F values, the same for every sample).
  void embeddings(std::span<const std::int64_t> timesteps, double fps) {
    const ProfileModule module(ctx_, "time_embedding");
    const std::int64_t c0 = c_.block_out_channels.front(), e = c_.time_embed_dim();
    per_frame_ = timesteps.size() > 1;
    const std::int64_t rows = per_frame_ ? b_ * f_ : b_;
    std::vector<float> t(static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r)
      t[static_cast<std::size_t>(r)] = static_cast<float>(timesteps[per_frame_ ? static_cast<std::size_t>(r % f_) : 0]);
    temb_ = embedding_mlp("time_embedding", t, c0, e);
    if (c_.fps_cond) {
      Act fe = embedding_mlp("fps_embedding", std::vector<float>(t.size(), static_cast<float>(fps)), c0, e);
      ops::add(ctx_, *temb_, *fe, *temb_);
    }
    observe("time_embedding", *temb_);
    temb_act_ = empty({rows, e});
    ops::activation(ctx_, ops::Activation::silu, *temb_, *temb_act_);
  }

  // `for_conv`: the output feeds (through a norm) another convolution, or a sum that turns it
  // (empty_for_conv).
  Act conv2d(const Tensor& x, const std::string& p, int stride, int pad, bool for_conv = false) const {
    const ProfileModule module(ctx_, p);
    const Tensor& wt = w(p + ".weight");
    ops::Conv2dParams cp{stride, pad};
    std::int64_t ho = 0, wo = 0;
    ops::conv2d_output_size(x, wt, cp, ho, wo);
    const Shape ys{x.size(0), wt.size(0), ho, wo};
    Act y = for_conv ? empty_for_conv(ys) : empty(ys);
    ops::conv2d(ctx_, x, wt, &w(p + ".bias"), *y, cp);
    return y;
  }

  // A resnet's 1x1 shortcut. On the CPU's fast path a product over each image's pixels, reading
  // x as its rows transposed in place and writing the result the same way: a convolution there
  // reorders x to channels-last and its output back, which cost it three times the product at
  // 32x32 (x is the up blocks' concatenation, in the usual layout).
  Act conv_shortcut(const Tensor& x, const std::string& p) const {
    if (!ctx_.device.is_cpu() || ctx_.cpu_impl != CpuImpl::fast) return conv2d(x, p, 1, 0);
    const ProfileModule module(ctx_, p);
    const Tensor& wt = w(p + ".weight");
    const std::int64_t n = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3), co = wt.size(0);
    Act y = empty({n, co, x.size(2), x.size(3)});
    ops::linear(ctx_, x.reshape({n, c, hw}).permute({0, 2, 1}), wt.reshape({co, c}), &w(p + ".bias"),
                y->reshape({n, co, hw}).permute({0, 2, 1}));
    return y;
  }

  // Per-frame GroupNorm (statistics over the group's channels x H x W of each frame-image);
  // `for_conv`: its output feeds a convolution or a product over the pixels (empty_for_conv).
  Act group_norm_frames(const Tensor& x, const std::string& p, float eps, ops::Activation act,
                        bool for_conv = false) const {
    const ProfileModule module(ctx_, p);
    Act y = for_conv ? empty_for_conv(x.shape) : empty(x.shape);
    const Shape s4{x.size(0), x.size(1), 1, x.size(2) * x.size(3)};
    ops::group_norm(ctx_, x.reshape(s4), w(p + ".weight"), w(p + ".bias"), y->reshape(s4),
                    {c_.norm_num_groups, eps, act});
    return y;
  }

  Act resnet(const Tensor& x, const std::string& p, float output_scale) const {
    const ProfileModule module(ctx_, p);
    Act h;
    {
      Act a = group_norm_frames(x, p + ".norm1", c_.norm_eps, ops::Activation::silu, true);
      h = conv2d(*a, p + ".conv1", 1, 1, true);  // -> time embedding, norm2, conv2
    }
    const std::int64_t cout = h->size(1), hw = h->size(2) * h->size(3);
    {
      Act tp = empty({temb_act_->size(0), cout});
      ops::linear(ctx_, *temb_act_, w(p + ".time_emb_proj.weight"), &w(p + ".time_emb_proj.bias"), *tp);
      const Tensor h4 = h->reshape({b_, f_, cout, hw});
      ops::add(ctx_, h4, tp->reshape({b_, per_frame_ ? f_ : 1, cout, 1}).expand(h4.shape), h4);
    }
    Act out;
    {
      Act a = group_norm_frames(*h, p + ".norm2", c_.norm_eps, ops::Activation::silu, true);
      h.reset();
      out = conv2d(*a, p + ".conv2", 1, 1, true);  // channels-last on the CPU: the sum below turns it
    }
    // The sum in the usual layout: into the shortcut's output, or a new tensor beside x.
    const bool shortcut = w_.find(p + ".conv_shortcut.weight") != nullptr;
    Act res = shortcut ? conv_shortcut(x, p + ".conv_shortcut") : empty(out->shape);
    ops::add(ctx_, *out, shortcut ? *res : x, *res);
    out.reset();
    if (output_scale != 1.f) ops::scale(ctx_, *res, 1.f / output_scale, *res);
    return res;
  }

  // TemporalConvLayer: 4 x [temporal GroupNorm -> SiLU -> Conv3d (3,1,1)] + residual, with the
  // context's halo frames (if any) around the clip and cropped after the last conv.
  Act temporal_conv(const Act& x, const std::string& p) const {
    const ProfileModule module(ctx_, p);
    observe(p + ".in", *x);
    const Halo halo = tc_.conv_halo();
    const std::int64_t ch = x->size(1), hh = x->size(2), ww = x->size(3);
    const std::int64_t fp = f_ + halo.total();
    Act cur = x;
    if (halo.total() > 0) {
      cur = empty({b_ * fp, ch, hh, ww});
      const Tensor frames = cur->reshape({b_, fp, ch, hh * ww});
      ops::copy(ctx_, x->reshape({b_, f_, ch, hh * ww}), frames.slice(1, halo.left, f_));
      tc_.fill_conv_halo(ctx_, clip(*cur), halo, p);
    }
    for (int s = 1; s <= 4; ++s) {
      const std::string stage = p + ".conv" + std::to_string(s);
      const std::string conv = stage + (s == 1 ? ".2" : ".3");
      const ProfileModule stage_module(ctx_, stage);
      Act a = empty_for_conv(cur->shape);
      tc_.group_norm(ctx_, clip(*cur), w(stage + ".0.weight"), w(stage + ".0.bias"), clip(*a),
                     {c_.norm_num_groups, 1e-5f, ops::Activation::silu}, halo, stage);
      // Channels-last on the CPU: the next norm reads it so, and the last is added to x below.
      Act y = empty_for_conv(cur->shape);
      ops::temporal_conv(ctx_, clip(*a), w(conv + ".weight").reshape({ch, ch, 3}), &w(conv + ".bias"), clip(*y), 1);
      cur = y;
    }
    Act out = empty(x->shape);
    const Tensor own = cur->reshape({b_, fp, ch, hh * ww}).slice(1, halo.left, f_);
    ops::add(ctx_, x->reshape({b_, f_, ch, hh * ww}), own, out->reshape({b_, f_, ch, hh * ww}));
    observe(p + ".out", *out);
    return out;
  }

  AttentionWeights attention_weights(const std::string& p, int heads) const {
    AttentionWeights a;
    a.to_q = w(p + ".to_q.weight");
    a.to_k = w(p + ".to_k.weight");
    a.to_v = w(p + ".to_v.weight");
    a.to_out_weight = w(p + ".to_out.0.weight");
    a.to_out_bias = w(p + ".to_out.0.bias");
    a.heads = heads;
    a.head_dim = static_cast<int>(a.to_q.size(0)) / heads;
    return a;
  }

  // x += to_out(attention): the residual step of both attentions of a transformer block. The
  // projected attention output is observed as `<module>.out` when a module name is given.
  void add_projected(const Tensor& x, const Tensor& attn, const AttentionWeights& a, const std::string& module = {},
                     const Shape& observed_shape = {}) const {
    if (w_.shard().size == 1 && !observe_) {  // one pass: the product adds itself onto x
      ops::linear_add(ctx_, attn, a.to_out_weight, &a.to_out_bias, x);
      return;
    }
    Act y = empty(x.shape);
    ops::linear(ctx_, attn, a.to_out_weight, w_.shard().rank == 0 ? &a.to_out_bias : nullptr, *y);
    sum_partials(*y);
    if (!module.empty()) observe(module + ".out", y->reshape(observed_shape));
    ops::add(ctx_, x, *y, x);
  }

  // `product` names the weights of the products that read the result alone: it is stored in their
  // dtype (bf16 on the CPU under --dtype bf16, which those products would otherwise round it to).
  Act layer_norm(const Tensor& x, const std::string& p, const Tensor* product = nullptr) const {
    Act y = empty(x.shape, product ? product->dtype : dtype_);
    ops::layer_norm(ctx_, x, w(p + ".weight"), w(p + ".bias"), *y, 1e-5f);
    return y;
  }

  // GEGLU feed-forward with residual, in row chunks that bound the 8 x inner projection (its
  // shard's columns under tensor parallelism).
  void feed_forward(const Tensor& x, const std::string& p) const {
    const ProfileModule module(ctx_, p, ".ff");
    const std::int64_t m = x.size(0), inner = x.size(1), ff = w(p + ".ff.net.2.weight").size(1);
    const std::int64_t rows = std::max<std::int64_t>(1, std::min(m, kFeedForwardChunkElements / (2 * ff)));
    // The normalised rows and the gated activations only feed products: stored in the weights'
    // dtype (bf16 on the CPU under --dtype bf16, where the products would round them anyway).
    const Tensor& proj_w = w(p + ".ff.net.0.proj.weight");
    Act n = layer_norm(x, p + ".norm3", &proj_w);
    Act gated = empty({rows, ff}, proj_w.dtype);
    const Act y = w_.shard().size == 1 ? nullptr : empty({rows, inner});  // the row-parallel partial sums
    for (std::int64_t r0 = 0; r0 < m; r0 += rows) {
      const std::int64_t r = std::min(rows, m - r0);
      ops::linear_geglu(ctx_, n->slice(0, r0, r), proj_w, &w(p + ".ff.net.0.proj.bias"), gated->slice(0, 0, r));
      if (w_.shard().size == 1) {  // the product adds itself onto x
        ops::linear_add(ctx_, gated->slice(0, 0, r), w(p + ".ff.net.2.weight"), &w(p + ".ff.net.2.bias"),
                        x.slice(0, r0, r));
        continue;
      }
      ops::linear(ctx_, gated->slice(0, 0, r), w(p + ".ff.net.2.weight"), split_bias(p + ".ff.net.2.bias"),
                  y->slice(0, 0, r));
      sum_partials(y->slice(0, 0, r));
      ops::add(ctx_, x.slice(0, r0, r), y->slice(0, 0, r), x.slice(0, r0, r));
    }
  }

  // Transformer2DModel: per-frame GroupNorm, linear proj_in, self-attention over the frame's
  // pixels, cross-attention to the text of the frame's batch element, GEGLU, proj_out, residual.
  Act spatial_transformer(const Tensor& x, const std::string& p, const Tensor& text) const {
    const ProfileModule module(ctx_, p);
    const std::int64_t n = x.size(0), ch = x.size(1), s = x.size(2) * x.size(3);
    const int heads = local_heads(transformer_heads(c_, static_cast<int>(ch)));
    const std::string blk = p + ".transformer_blocks.0";
    const std::int64_t inner = w(blk + ".attn1.to_q.weight").size(0);  // the shard's heads
    Act hs = empty({n * s, ch});
    {  // the product reads the normalised frames' pixels as its rows (channels-last on the CPU)
      Act normed = group_norm_frames(x, p + ".norm", 1e-6f, ops::Activation::none, true);
      ops::linear(ctx_, normed->reshape({n, ch, s}).permute({0, 2, 1}), w(p + ".proj_in.weight"),
                  &w(p + ".proj_in.bias"), hs->reshape({n, s, ch}));
    }
    {
      const ProfileModule attn(ctx_, blk, ".attn1");
      const AttentionWeights a = attention_weights(blk + ".attn1", heads);
      Act nrm = layer_norm(*hs, blk + ".norm1", &a.to_q);
      Act out = empty({n, s, inner});
      self_attention(ctx_, a, nrm->reshape({n, s, ch}), *out, attention_params(a));
      add_projected(*hs, out->reshape({n * s, inner}), a);
    }
    {
      const ProfileModule attn(ctx_, blk, ".attn2");
      const AttentionWeights a = attention_weights(blk + ".attn2", heads);
      Act nrm = layer_norm(*hs, blk + ".norm2", &a.to_q);
      Act q = empty({n, s, inner}), out = empty({n, s, inner});
      ops::linear(ctx_, nrm->reshape({n, s, ch}), a.to_q, nullptr, *q);
      nrm.reset();
      // The text keys and values are the same for every frame of a batch element: project the
      // B x L text rows once and broadcast them over the frames (stride 0).
      const std::int64_t l = text.size(1);
      Act k = empty({b_, l, inner}), v = empty({b_, l, inner});
      ops::linear(ctx_, text, a.to_k, nullptr, *k);
      ops::linear(ctx_, text, a.to_v, nullptr, *v);
      const ops::AttentionParams ap = attention_params(a);
      for (std::int64_t b = 0; b < b_; ++b) {
        const Shape kv_shape{f_, heads, l, a.head_dim};
        const Tensor kb = split_heads(k->slice(0, b, 1), heads).expand(kv_shape);
        const Tensor vb = split_heads(v->slice(0, b, 1), heads).expand(kv_shape);
        attend(ctx_, split_heads(q->slice(0, b * f_, f_), heads), kb, vb, split_heads(out->slice(0, b * f_, f_), heads),
               ap);
      }
      add_projected(*hs, out->reshape({n * s, inner}), a);
    }
    feed_forward(*hs, blk);
    // out = x + proj_out(hs), the product written transposed (channels by pixels) onto x + bias.
    Act out = empty(x.shape);
    const Tensor o = out->reshape({n, ch, s});
    ops::add(ctx_, x.reshape({n, ch, s}), w(p + ".proj_out.bias").reshape({1, ch, 1}).expand(o.shape), o);
    ops::linear_add(ctx_, hs->reshape({n, s, ch}), w(p + ".proj_out.weight"), nullptr, o.permute({0, 2, 1}));
    return out;
  }

  // TransformerTemporalModel: temporal GroupNorm, one sequence of F frames per pixel, two
  // self-attentions through the temporal context, GEGLU, residual. `all_heads` of the model; the
  // shard's under tensor parallelism.
  Act temporal_transformer(const Act& x, const std::string& p, int all_heads) const {
    const ProfileModule module(ctx_, p);
    const int heads = local_heads(all_heads);
    observe(p + ".in", *x);
    const std::int64_t ch = x->size(1), s = x->size(2) * x->size(3), rows = b_ * s;
    const std::int64_t inner = w(p + ".proj_in.weight").size(0);
    Act hs = empty({rows * f_, inner});
    {  // one sequence of frames per pixel: the product reads the frames' pixels as its rows
      Act normed = empty_for_conv(x->shape);  // channels-last on the CPU: rows with unit stride
      tc_.group_norm(ctx_, clip(*x), w(p + ".norm.weight"), w(p + ".norm.bias"), clip(*normed),
                     {c_.norm_num_groups, 1e-6f, ops::Activation::none}, Halo{}, p + ".norm");
      ops::linear(ctx_, normed->reshape({b_, f_, ch, s}).permute({0, 3, 1, 2}), w(p + ".proj_in.weight"),
                  &w(p + ".proj_in.bias"), hs->reshape({b_, s, f_, inner}));
    }
    const std::string blk = p + ".transformer_blocks.0";
    for (const char* attn : {".attn1", ".attn2"}) {
      const ProfileModule attn_module(ctx_, blk, attn);
      const AttentionWeights a = attention_weights(blk + attn, heads);
      Act nrm = layer_norm(*hs, blk + (attn[5] == '1' ? ".norm1" : ".norm2"));
      const std::int64_t shard_inner = a.to_q.size(0);
      Act out = empty({rows, f_, shard_inner});
      observe(blk + attn + ".in", nrm->reshape({rows, f_, inner}));
      tc_.attention(ctx_, a, nrm->reshape({rows, f_, inner}), *out, blk + attn);
      nrm.reset();
      add_projected(*hs, out->reshape({rows * f_, shard_inner}), a, blk + attn, {rows, f_, inner});
    }
    feed_forward(*hs, blk);
    // out = x + proj_out(hs), the product written back in the frames' layout onto x + bias.
    Act out = empty(x->shape);
    const Tensor o = out->reshape({b_, f_, ch, s});
    ops::add(ctx_, x->reshape({b_, f_, ch, s}), w(p + ".proj_out.bias").reshape({1, 1, ch, 1}).expand(o.shape), o);
    ops::linear_add(ctx_, hs->reshape({b_, s, f_, inner}), w(p + ".proj_out.weight"), nullptr, o.permute({0, 3, 1, 2}));
    observe(p + ".out", *out);
    return out;
  }

  // resnet -> temporal conv -> (spatial transformer -> temporal transformer) of one block layer.
  Act layer(const Act& x, const std::string& p, int j, bool cross, const Tensor& text, float output_scale = 1.f) const {
    const std::string k = dot_index(j);
    Act h = resnet(*x, p + ".resnets" + k, output_scale);
    observe(p + ".resnets" + k, *h);
    h = temporal_conv(h, p + ".temp_convs" + k);
    if (cross) {
      h = spatial_transformer(*h, p + ".attentions" + k, text);
      h = temporal_transformer(h, p + ".temp_attentions" + k, transformer_heads(c_, static_cast<int>(h->size(1))));
    }
    return h;
  }

  // Channel concatenation [current, skip] of the up path.
  Act concat(const Tensor& a, const Tensor& b) const {
    Act y = empty({a.size(0), a.size(1) + b.size(1), a.size(2), a.size(3)});
    const Tensor parts[] = {a, b};
    ops::concat(ctx_, parts, 1, *y);
    return y;
  }

  Act upsample(const Tensor& x, std::int64_t h, std::int64_t wd) const {
    Act y = empty({x.size(0), x.size(1), h, wd});
    ops::upsample_nearest(ctx_, x, *y);
    return y;
  }

 private:
  Act embedding_mlp(const std::string& p, std::vector<float> host, std::int64_t c0, std::int64_t e) const {
    const auto rows = static_cast<std::int64_t>(host.size());
    OwnedTensor values = ctx_.arena->empty(DType::f32, {rows});
    ops::copy(ctx_, Tensor::wrap(host.data(), DType::f32, Device::cpu(), {rows}), values);
    OwnedTensor sinus = ctx_.arena->empty(DType::f32, {rows, c0});
    ops::timestep_embedding(ctx_, values, sinus, {true, 0.f, 10000.f});
    Act x = empty({rows, c0}), h = empty({rows, e}), y = empty({rows, e});
    ops::copy(ctx_, sinus, *x);
    ops::linear(ctx_, *x, w(p + ".linear_1.weight"), &w(p + ".linear_1.bias"), *h);
    ops::activation(ctx_, ops::Activation::silu, *h, *h);
    ops::linear(ctx_, *h, w(p + ".linear_2.weight"), &w(p + ".linear_2.bias"), *y);
    return y;
  }

  const UNetConfig& c_;
  const Weights& w_;
  ExecContext& ctx_;
  TemporalContext& tc_;
  TensorGroup* tg_;
  const UNet3D::Observer& observe_;
  DType dtype_;
  std::int64_t b_, f_;
  bool per_frame_ = false;  // the time embedding has a row per frame
  Act temb_, temb_act_;
};

}  // namespace

void UNet3D::forward(ExecContext& ctx, const Tensor& sample, std::int64_t timestep, double fps, const Tensor& text,
                     const Tensor& out, TemporalContext& temporal, const Observer& observe) const {
  forward(ctx, sample, std::span<const std::int64_t>(&timestep, 1), fps, text, out, temporal, observe);
}

void UNet3D::forward(ExecContext& ctx, const Tensor& sample, std::span<const std::int64_t> timesteps, double fps,
                     const Tensor& text, const Tensor& out, TemporalContext& temporal, const Observer& observe) const {
  const UNetConfig& c = config_;
  VINF_INPUT_CHECK(sample.rank() == 5 && sample.size(1) == c.in_channels, "the UNet takes a sample (B, ", c.in_channels,
                   ", F, H, W); got ", sample.shape.str());
  const std::int64_t b = sample.size(0), f = sample.size(2), h = sample.size(3), wd = sample.size(4);
  VINF_INPUT_CHECK(b > 0 && f > 0 && h > 0 && wd > 0, "the sample ", sample.shape.str(), " is empty");
  VINF_INPUT_CHECK(text.rank() == 3 && text.size(0) == b && text.size(2) == c.cross_attention_dim && text.size(1) > 0,
                   "the text embeddings must be (B = ", b, ", L, ", c.cross_attention_dim, ") for this model; got ",
                   text.shape.str());
  VINF_INPUT_CHECK(out.rank() == 5 && out.size(0) == b && out.size(1) == c.out_channels && out.size(2) == f &&
                       out.size(3) == h && out.size(4) == wd,
                   "the UNet output must be (", b, ", ", c.out_channels, ", ", f, ", ", h, ", ", wd, "); got ",
                   out.shape.str());
  VINF_CHECK(weights_.shard().size == 1 || tensor_group_ != nullptr, "UNet3D: weights of a tensor shard (",
             weights_.shard().size, " ranks) need set_tensor_group before forward");
  VINF_INPUT_CHECK(timesteps.size() == 1 || static_cast<std::int64_t>(timesteps.size()) == f,
                   "the UNet takes one timestep, or one per frame (", f, "); got ", timesteps.size());
  // Frames all at one timestep are the call of one timestep, by construction.
  bool same = true;
  for (std::int64_t t : timesteps) same = same && t == timesteps[0];
  if (same) timesteps = timesteps.first(1);
  const ProfileCall profile_call(ctx);
  temporal.begin_call(timesteps[0]);
  Forward fw(c, weights_, ctx, temporal, tensor_group_, observe, b, f);
  fw.embeddings(timesteps, fps);

  // Text in the compute dtype, contiguous: the cross-attention keys and values come from it.
  Act txt = fw.empty(text.shape);
  ops::copy(ctx, text, *txt);

  Act x = fw.empty({b * f, c.in_channels, h, wd});
  ops::copy(ctx, sample.permute({0, 2, 1, 3, 4}), x->reshape({b, f, c.in_channels, h, wd}));
  x = fw.conv2d(*x, "conv_in", 1, 1);
  fw.observe("conv_in", *x);
  x = fw.temporal_transformer(x, "transformer_in", UNetConfig::kTransformerInHeads);
  fw.observe("transformer_in", *x);

  std::vector<Act> skips{x};
  for (const BlockLayout& blk : layout_.down) {
    const ProfileModule block(ctx, blk.prefix);
    for (std::size_t j = 0; j < blk.resnet_in.size(); ++j) {
      x = fw.layer(x, blk.prefix, static_cast<int>(j), blk.cross, *txt);
      skips.push_back(x);
    }
    if (blk.resample) {
      x = fw.conv2d(*x, blk.prefix + ".downsamplers.0.conv", 2, c.downsample_padding);
      skips.push_back(x);
    }
    fw.observe(blk.prefix, *x);
  }

  {
    const ProfileModule block(ctx, "mid_block");
    x = fw.layer(x, "mid_block", 0, true, *txt, c.mid_block_scale_factor);
    const std::string k = "mid_block.resnets.1";
    x = fw.resnet(*x, k, c.mid_block_scale_factor);
    fw.observe(k, *x);
    x = fw.temporal_conv(x, "mid_block.temp_convs.1");
  }
  fw.observe("mid_block", *x);

  for (const BlockLayout& blk : layout_.up) {
    const ProfileModule block(ctx, blk.prefix);
    for (std::size_t j = 0; j < blk.resnet_in.size(); ++j) {
      Act skip = skips.back();
      skips.pop_back();
      x = fw.concat(*x, *skip);
      skip.reset();
      x = fw.layer(x, blk.prefix, static_cast<int>(j), blk.cross, *txt);
    }
    if (blk.resample) {
      // Up to the size of the skip the next block joins: 2x, or the odd size a stride-2
      // downsampler rounded up from.
      const Tensor& next = *skips.back();
      x = fw.upsample(*x, next.size(2), next.size(3));
      x = fw.conv2d(*x, blk.prefix + ".upsamplers.0.conv", 1, 1);
    }
    fw.observe(blk.prefix, *x);
  }
  VINF_CHECK(skips.empty(), "UNet3D: ", skips.size(), " skip tensors left after the up path");

  x = fw.group_norm_frames(*x, "conv_norm_out", c.norm_eps, ops::Activation::none);
  fw.observe("conv_norm_out", *x);
  ops::activation(ctx, ops::Activation::silu, *x, *x);
  x = fw.conv2d(*x, "conv_out", 1, 1);
  fw.observe("conv_out", *x);
  ops::copy(ctx, x->reshape({b, f, c.out_channels, h, wd}), out.permute({0, 2, 1, 3, 4}));
}

std::vector<std::string> observed_module_names(const UNetConfig& c) {
  std::vector<std::string> names{"time_embedding", "conv_in"};
  auto temporal_transformer = [&](const std::string& p) {
    names.push_back(p + ".in");
    for (const char* attn : {".attn1", ".attn2"})
      for (const char* end : {".in", ".out"}) names.push_back(p + ".transformer_blocks.0" + attn + end);
    names.push_back(p + ".out");
  };
  auto layer = [&](const std::string& p, std::size_t j, bool cross) {
    const std::string k = dot_index(j);
    names.push_back(p + ".resnets" + k);
    names.push_back(p + ".temp_convs" + k + ".in");
    names.push_back(p + ".temp_convs" + k + ".out");
    if (cross) temporal_transformer(p + ".temp_attentions" + k);
  };
  temporal_transformer("transformer_in");
  names.push_back("transformer_in");
  const UNetLayout l = unet_layout(c);
  for (const BlockLayout& blk : l.down) {
    for (std::size_t j = 0; j < blk.resnet_in.size(); ++j) layer(blk.prefix, j, blk.cross);
    names.push_back(blk.prefix);
  }
  layer("mid_block", 0, true);
  layer("mid_block", 1, false);
  names.push_back("mid_block");
  for (const BlockLayout& blk : l.up) {
    for (std::size_t j = 0; j < blk.resnet_in.size(); ++j) layer(blk.prefix, j, blk.cross);
    names.push_back(blk.prefix);
  }
  names.push_back("conv_norm_out");
  names.push_back("conv_out");
  return names;
}

}  // namespace vinf::model
