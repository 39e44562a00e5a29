#include "model/flops.hpp"

namespace vinf::model {

namespace {

class Counter {
 public:
  Counter(const UNetConfig& c, double b, double f, double l) : c_(c), b_(b), n_(b * f), f_(f), l_(l) {}

  void conv(double s_out, double cin, double cout, double k) { n.conv += 2 * n_ * s_out * cin * cout * k * k; }
  void linear(double rows, double in, double out) { n.linear += 2 * rows * in * out; }
  void resnet(double s, double cin, double cout) {
    conv(s, cin, cout, 3);
    conv(s, cout, cout, 3);
    if (cin != cout) conv(s, cin, cout, 1);
    linear(b_, c_.time_embed_dim(), cout);
  }
  void temporal_conv(double s, double ch) { n.temporal_conv += 4 * 2 * n_ * s * ch * ch * 3; }
  // Attention core over `queries` rows of length-lq sequences against lk keys, width `inner`.
  void core(double sequences, double lq, double lk, double inner) { n.attention += 4 * sequences * lq * lk * inner; }
  void block(double rows, double inner, double kv_rows, double kv_width) {
    linear(rows, inner, 3 * inner);  // attn1 q, k, v
    linear(rows, inner, inner);      // attn1 out
    linear(rows, inner, inner);      // attn2 q
    linear(kv_rows, kv_width, 2 * inner);
    linear(rows, inner, inner);      // attn2 out
    linear(rows, inner, 8 * inner);  // GEGLU projection
    linear(rows, 4 * inner, inner);
  }
  void spatial_transformer(double s, double ch) {
    const double rows = n_ * s;
    linear(rows, ch, ch);
    block(rows, ch, b_ * l_, c_.cross_attention_dim);
    core(n_, s, s, ch);
    core(n_, s, l_, ch);
    linear(rows, ch, ch);
  }
  void temporal_transformer(double s, double ch, double inner) {
    const double rows = n_ * s;
    linear(rows, ch, inner);
    block(rows, inner, rows, inner);
    core(b_ * s, f_, f_, inner);
    core(b_ * s, f_, f_, inner);
    linear(rows, inner, ch);
  }
  void layer(double s, double cin, double cout, bool cross) {
    resnet(s, cin, cout);
    temporal_conv(s, cout);
    if (cross) {
      spatial_transformer(s, cout);
      temporal_transformer(s, cout, cout);
    }
  }

  FlopCount n;

 private:
  const UNetConfig& c_;
  double b_, n_, f_, l_;
};

}  // namespace

FlopCount unet_flops(const UNetConfig& c, std::int64_t batch, std::int64_t frames, std::int64_t height,
                     std::int64_t width, std::int64_t text_tokens) {
  Counter k(c, static_cast<double>(batch), static_cast<double>(frames), static_cast<double>(text_tokens));
  const double c0 = c.block_out_channels.front(), e = c.time_embed_dim();
  const double mlp_rows = static_cast<double>(batch);
  k.linear(mlp_rows, c0, e);
  k.linear(mlp_rows, e, e);
  if (c.fps_cond) {
    k.linear(mlp_rows, c0, e);
    k.linear(mlp_rows, e, e);
  }
  std::int64_t h = height, w = width;
  auto s = [&] { return static_cast<double>(h * w); };
  k.conv(s(), c.in_channels, c0, 3);
  k.temporal_transformer(s(), c0, UNetConfig::kTransformerInHeads * c.attention_head_dim);
  const UNetLayout l = unet_layout(c);
  std::vector<std::pair<std::int64_t, std::int64_t>> sizes{{h, w}};  // spatial size of each skip
  for (const BlockLayout& b : l.down) {
    for (int cin : b.resnet_in) {
      k.layer(s(), cin, b.out_channels, b.cross);
      sizes.push_back({h, w});
    }
    if (b.resample) {
      h = (h + 1) / 2;
      w = (w + 1) / 2;
      k.conv(s(), b.out_channels, b.out_channels, 3);
      sizes.push_back({h, w});
    }
  }
  k.layer(s(), l.mid_channels, l.mid_channels, true);
  k.resnet(s(), l.mid_channels, l.mid_channels);
  k.temporal_conv(s(), l.mid_channels);
  for (const BlockLayout& b : l.up) {
    for (int cin : b.resnet_in) {
      sizes.pop_back();
      k.layer(s(), cin, b.out_channels, b.cross);
    }
    if (b.resample) {
      h = sizes.back().first;
      w = sizes.back().second;
      k.conv(s(), b.out_channels, b.out_channels, 3);
    }
  }
  k.conv(s(), c0, c.out_channels, 3);
  return k.n;
}

}  // namespace vinf::model
