#include "model/params.hpp"

#include <cmath>
#include <string_view>

namespace vinf::model {

namespace {

class Grammar {
 public:
  explicit Grammar(std::vector<ParamSpec>& out) : out_(out) {}

  void add(const std::string& name, Shape shape, ParamSplit split = {}) { out_.push_back({name, shape, {}, split}); }
  void affine(const std::string& p, std::int64_t c) {  // a GroupNorm or LayerNorm
    add(p + ".weight", {c});
    add(p + ".bias", {c});
  }
  void linear(const std::string& p, std::int64_t out, std::int64_t in, bool bias = true, ParamSplit split = {}) {
    add(p + ".weight", {out, in}, split);
    if (bias) add(p + ".bias", {out}, split.kind == ParamSplit::geglu_rows ? split : ParamSplit{});
  }
  void conv(const std::string& p, std::int64_t out, std::int64_t in, std::int64_t k) {
    add(p + ".weight", {out, in, k, k});
    add(p + ".bias", {out});
  }
  void resnet(const std::string& p, std::int64_t cin, std::int64_t cout, std::int64_t temb) {
    affine(p + ".norm1", cin);
    conv(p + ".conv1", cout, cin, 3);
    linear(p + ".time_emb_proj", cout, temb);
    affine(p + ".norm2", cout);
    conv(p + ".conv2", cout, cout, 3);
    if (cin != cout) conv(p + ".conv_shortcut", cout, cin, 1);
  }
  void temporal_conv(const std::string& p, std::int64_t c) {
    for (int s = 1; s <= 4; ++s) {
      const std::string stage = p + ".conv" + std::to_string(s);
      affine(stage + ".0", c);
      const std::string conv = stage + (s == 1 ? ".2" : ".3");
      add(conv + ".weight", {c, c, 3, 1, 1});
      add(conv + ".bias", {c});
    }
  }
  // Transformer2DModel (kv = cross_attention_dim) or TransformerTemporalModel (kv = inner), with
  // `heads` attention heads.
  void transformer(const std::string& p, std::int64_t c, std::int64_t inner, std::int64_t kv, std::int64_t heads) {
    affine(p + ".norm", c);
    linear(p + ".proj_in", inner, c);
    const std::string b = p + ".transformer_blocks.0";
    affine(b + ".norm1", inner);
    attention(b + ".attn1", inner, inner, heads);
    affine(b + ".norm2", inner);
    attention(b + ".attn2", inner, kv, heads);
    affine(b + ".norm3", inner);
    linear(b + ".ff.net.0.proj", 8 * inner, inner, true, {ParamSplit::geglu_rows, 4 * inner, 1});
    linear(b + ".ff.net.2", inner, 4 * inner, true, {ParamSplit::ff_cols, 4 * inner, 1});
    linear(p + ".proj_out", c, inner);
  }
  void attention(const std::string& p, std::int64_t inner, std::int64_t kv, std::int64_t heads) {
    const ParamSplit rows{ParamSplit::heads_rows, heads, inner / heads};
    linear(p + ".to_q", inner, inner, false, rows);
    linear(p + ".to_k", inner, kv, false, rows);
    linear(p + ".to_v", inner, kv, false, rows);
    linear(p + ".to_out.0", inner, inner, true, {ParamSplit::heads_cols, heads, inner / heads});
  }

 private:
  std::vector<ParamSpec>& out_;
};

}  // namespace

std::vector<ParamSpec> unet_parameters(const UNetConfig& c) {
  std::vector<ParamSpec> out;
  Grammar g(out);
  const std::int64_t c0 = c.block_out_channels.front(), e = c.time_embed_dim(), kv = c.cross_attention_dim;
  g.conv("conv_in", c0, c.in_channels, 3);
  g.linear("time_embedding.linear_1", e, c0);
  g.linear("time_embedding.linear_2", e, e);
  if (c.fps_cond) {
    g.linear("fps_embedding.linear_1", e, c0);
    g.linear("fps_embedding.linear_2", e, e);
  }
  g.transformer("transformer_in", c0, UNetConfig::kTransformerInHeads * c.attention_head_dim,
                UNetConfig::kTransformerInHeads * c.attention_head_dim, UNetConfig::kTransformerInHeads);
  const UNetLayout l = unet_layout(c);
  // resnet, temporal conv and (cross blocks) both transformers of every layer, then the resampler.
  auto block = [&](const BlockLayout& b, const char* resampler) {
    const std::int64_t ch = b.out_channels;
    for (std::size_t j = 0; j < b.resnet_in.size(); ++j) {
      const std::string k = dot_index(j);
      g.resnet(b.prefix + ".resnets" + k, b.resnet_in[j], ch, e);
      g.temporal_conv(b.prefix + ".temp_convs" + k, ch);
      if (b.cross) {
        const std::int64_t heads = transformer_heads(c, static_cast<int>(ch));
        g.transformer(b.prefix + ".attentions" + k, ch, ch, kv, heads);
        g.transformer(b.prefix + ".temp_attentions" + k, ch, ch, ch, heads);
      }
    }
    if (b.resample) g.conv(b.prefix + resampler, ch, ch, 3);
  };
  for (const BlockLayout& b : l.down) block(b, ".downsamplers.0.conv");
  const std::int64_t m = l.mid_channels;
  g.resnet("mid_block.resnets.0", m, m, e);
  g.resnet("mid_block.resnets.1", m, m, e);
  g.temporal_conv("mid_block.temp_convs.0", m);
  g.temporal_conv("mid_block.temp_convs.1", m);
  const std::int64_t mid_heads = transformer_heads(c, static_cast<int>(m));
  g.transformer("mid_block.attentions.0", m, m, kv, mid_heads);
  g.transformer("mid_block.temp_attentions.0", m, m, m, mid_heads);
  for (const BlockLayout& b : l.up) block(b, ".upsamplers.0.conv");
  g.affine("conv_norm_out", c0);
  g.conv("conv_out", c.out_channels, c0, 3);
  return out;
}

std::pair<std::int64_t, std::int64_t> split_units(std::int64_t units, int rank, int size) {
  const std::int64_t first = rank * units / size;
  return {first, (rank + 1) * units / size - first};
}

ParamShard param_shard(const ParamSpec& p, int rank, int size) {
  ParamShard s;
  s.shape = p.shape;
  if (size == 1 || p.split.kind == ParamSplit::none) return s;
  const auto [first, count] = split_units(p.split.units, rank, size);
  const std::int64_t at = first * p.split.unit, n = count * p.split.unit;
  switch (p.split.kind) {
    case ParamSplit::heads_rows:
    case ParamSplit::geglu_rows: s.dim = 0; break;
    default: s.dim = 1;
  }
  s.ranges.push_back({at, n});
  if (p.split.kind == ParamSplit::geglu_rows) s.ranges.push_back({p.split.units * p.split.unit + at, n});
  s.shape[s.dim] = n * static_cast<std::int64_t>(s.ranges.size());
  return s;
}

std::int64_t parameter_count(const std::vector<ParamSpec>& params) {
  std::int64_t n = 0;
  for (const ParamSpec& p : params) n += p.shape.numel();
  return n;
}

RandomInit random_init(const ParamSpec& p) {
  RandomInit r;
  const auto ends_with = [&](std::string_view suffix) {
    return p.name.size() >= suffix.size() && p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with(".gamma")) {
    r.shift = 1.f;  // the Wan VAE's RMS norms: a scale per channel, stored [C, 1, 1(, 1)]
  } else if (p.shape.rank() >= 2) {
    r.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.shape.numel() / p.shape[0])));
  } else if (ends_with(".weight")) {
    r.shift = 1.f;  // a norm's scale
  }
  return r;
}

std::string parameter_group(const std::string& name) {
  const auto dot = name.find('.');
  const std::string head = name.substr(0, dot);
  if ((head == "down_blocks" || head == "up_blocks") && dot != std::string::npos) {
    const auto dot2 = name.find('.', dot + 1);
    return name.substr(0, dot2);
  }
  return head;
}

}  // namespace vinf::model
