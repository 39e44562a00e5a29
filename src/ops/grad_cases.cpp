#include "ops/grad_cases.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "core/error.hpp"
#include "ops/backward.hpp"
#include "ops/activation.hpp"
#include "ops/elementwise.hpp"
#include "ops/gemm.hpp"
#include "ops/resample.hpp"
#include "ops/softmax.hpp"

namespace vinf::opcheck {
using namespace vinf::ops;

namespace {

using Ins = std::vector<Tensor>;
using Grads = std::vector<const Tensor*>;

// The frame-major clip view (B, C, F, S) of (B*F, C, S) storage, as the UNet's temporal ops see it.
Tensor clip_view(const Tensor& t, std::int64_t b) {
  return t.reshape({b, t.size(0) / b, t.size(1), t.size(2)}).permute({0, 2, 1, 3});
}

// (R, L, H*d) -> (R, H, L, d), the model's split heads.
Tensor heads(const Tensor& t, std::int64_t h) {
  return t.reshape({t.size(0), t.size(1), h, t.size(2) / h}).permute({0, 2, 1, 3});
}

void add_activation(std::vector<GradCase>& cs, Activation act, const Shape& s) {
  cs.push_back({"activation", std::string("activation ") + activation_name(act) + " " + s.str(), {{"x", s, 2.f}}, {s},
                [act](ExecContext& ctx, const Ins& in, const Ins& out) { activation(ctx, act, in[0], out[0]); },
                [act](ExecContext& ctx, const Ins& in, const Ins& dout, const Grads& d) {
                  activation_backward(ctx, act, in[0], dout[0], *d[0]);
                }});
}

void add_linear(std::vector<GradCase>& cs, const Shape& x, std::int64_t n, bool bias) {
  const std::int64_t k = x[x.rank() - 1];
  Shape y = x;
  y[y.rank() - 1] = n;
  std::vector<GradInput> ins{{"x", x}, {"w", {n, k}, 0.5f}};
  if (bias) ins.push_back({"bias", {n}, 0.5f});
  cs.push_back({"linear", "linear " + x.str() + " -> " + std::to_string(n) + (bias ? " bias" : ""), ins, {y},
                [bias](ExecContext& ctx, const Ins& in, const Ins& out) {
                  linear(ctx, in[0], in[1], bias ? &in[2] : nullptr, out[0]);
                },
                [bias](ExecContext& ctx, const Ins& in, const Ins& dout, const Grads& d) {
                  linear_backward(ctx, in[0], in[1], dout[0], d[0], d[1], bias ? d[2] : nullptr);
                }});
}

void add_conv2d(std::vector<GradCase>& cs, const Shape& x, std::int64_t cout, std::int64_t k, int stride, int pad) {
  const Conv2dParams p{stride, pad};
  const std::int64_t ho = (x[2] + 2 * pad - k) / stride + 1, wo = (x[3] + 2 * pad - k) / stride + 1;
  std::ostringstream name;
  name << "conv2d " << k << "x" << k << " s" << stride << " p" << pad << " " << x[1] << "->" << cout << " " << x[2]
       << "x" << x[3];
  cs.push_back({"conv2d", name.str(), {{"x", x}, {"w", {cout, x[1], k, k}, 0.4f}, {"bias", {cout}, 0.5f}},
                {{x[0], cout, ho, wo}},
                [p](ExecContext& ctx, const Ins& in, const Ins& out) { conv2d(ctx, in[0], in[1], &in[2], out[0], p); },
                [p](ExecContext& ctx, const Ins& in, const Ins& dout, const Grads& d) {
                  conv2d_backward(ctx, in[0], in[1], dout[0], p, d[0], d[1], d[2]);
                }});
}

// The activations and GEGLU, on contiguous and transposed views.
void add_activation_cases(std::vector<GradCase>& cs) {
  add_activation(cs, Activation::silu, {3, 37});
  add_activation(cs, Activation::gelu, {5, 11});
  cs.push_back({"activation", "activation silu transposed view [6,5]", {{"x", {5, 6}, 2.f}}, {{6, 5}},
                [](ExecContext& ctx, const Ins& in, const Ins& out) {
                  activation(ctx, Activation::silu, in[0].transpose(0, 1), out[0]);
                },
                [](ExecContext& ctx, const Ins& in, const Ins& dout, const Grads& d) {
                  activation_backward(ctx, Activation::silu, in[0].transpose(0, 1), dout[0], d[0]->transpose(0, 1));
                }});
  cs.push_back({"geglu", "geglu [7,50] -> [7,25]", {{"x", {7, 50}, 1.5f}}, {{7, 25}},
                [](ExecContext& ctx, const Ins& in, const Ins& out) { geglu(ctx, in[0], out[0]); },
                [](ExecContext& ctx, const Ins& in, const Ins& dout, const Grads& d) {
                  geglu_backward(ctx, in[0], dout[0], *d[0]);
                }});

  cs.push_back({"geglu", "geglu transposed view [7,18] -> [7,9]", {{"x", {18, 7}, 1.5f}}, {{7, 9}},
                [](ExecContext& ctx, const Ins& in, const Ins& out) { geglu(ctx, in[0].transpose(0, 1), out[0]); },
                [](ExecContext& ctx, const Ins& in, const Ins& dout, const Grads& d) {
                  geglu_backward(ctx, in[0].transpose(0, 1), dout[0], d[0]->transpose(0, 1));
                }});
}

// The linear layers, the 2-D convolutions and the temporal one.
void add_conv_cases(std::vector<GradCase>& cs) {
  add_linear(cs, {2, 5, 6}, 4, true);
  add_linear(cs, {13, 7}, 9, false);

  add_conv2d(cs, {2, 3, 5, 6}, 4, 3, 1, 1);
  add_conv2d(cs, {1, 3, 7, 6}, 4, 3, 2, 1);
  add_conv2d(cs, {2, 5, 3, 4}, 3, 1, 1, 0);
  // The temporal convolution on a frame-major clip (B*F, C, S) seen as (B, C, F, S).
  cs.push_back({"temporal_conv", "temporal_conv k3 p1 3->4 frames 5 frame-major", {{"x", {10, 3, 6}},
                {"w", {4, 3, 3}, 0.4f}, {"bias", {4}, 0.5f}}, {{10, 4, 6}},
                [](ExecContext& ctx, const Ins& in, const Ins& out) {
                  temporal_conv(ctx, clip_view(in[0], 2), in[1], &in[2], clip_view(out[0], 2), 1);
                },
                [](ExecContext& ctx, const Ins& in, const Ins& dout, const Grads& d) {
                  const Tensor dx = clip_view(*d[0], 2);
                  temporal_conv_backward(ctx, clip_view(in[0], 2), in[1], clip_view(dout[0], 2), 1, &dx, d[1], d[2]);
                }});
}

// The group and layer norms over contiguous, clip and strided views, and softmax.
void add_norm_cases(std::vector<GradCase>& cs) {
  cs.push_back({"group_norm", "group_norm silu 2 groups [2,4,3,5]",
                {{"x", {2, 4, 3, 5}, 1.5f, 0.3f}, {"gamma", {4}, 0.3f, 1.f}, {"beta", {4}, 0.3f}}, {{2, 4, 3, 5}},
                [](ExecContext& ctx, const Ins& in, const Ins& out) {
                  group_norm(ctx, in[0], in[1], in[2], out[0], {2, 1e-5f, Activation::silu});
                },
                [](ExecContext& ctx, const Ins& in, const Ins& dout, const Grads& d) {
                  group_norm_backward(ctx, in[0], in[1], in[2], dout[0], {2, 1e-5f, Activation::silu}, d[0], d[1], d[2]);
                }});
  cs.push_back({"group_norm", "group_norm clip view 3 groups frames 4",
                {{"x", {8, 6, 5}, 1.f, -0.2f}, {"gamma", {6}, 0.3f, 1.f}, {"beta", {6}, 0.3f}}, {{8, 6, 5}},
                [](ExecContext& ctx, const Ins& in, const Ins& out) {
                  group_norm(ctx, clip_view(in[0], 2), in[1], in[2], clip_view(out[0], 2), {3, 1e-6f, Activation::none});
                },
                [](ExecContext& ctx, const Ins& in, const Ins& dout, const Grads& d) {
                  const Tensor dx = clip_view(*d[0], 2);
                  group_norm_backward(ctx, clip_view(in[0], 2), in[1], in[2], clip_view(dout[0], 2),
                                      {3, 1e-6f, Activation::none}, &dx, d[1], d[2]);
                }});
  // Pixels with a stride (a channels-last view): the scalar loops rather than the rows.
  cs.push_back({"group_norm", "group_norm silu strided pixels [2,4,3,5]",
                {{"x", {2, 4, 5, 3}, 1.2f, 0.1f}, {"gamma", {4}, 0.3f, 1.f}, {"beta", {4}, 0.3f}}, {{2, 4, 3, 5}},
                [](ExecContext& ctx, const Ins& in, const Ins& out) {
                  group_norm(ctx, in[0].permute({0, 1, 3, 2}), in[1], in[2], out[0], {2, 1e-5f, Activation::silu});
                },
                [](ExecContext& ctx, const Ins& in, const Ins& dout, const Grads& d) {
                  const Tensor dx = d[0]->permute({0, 1, 3, 2});
                  group_norm_backward(ctx, in[0].permute({0, 1, 3, 2}), in[1], in[2], dout[0],
                                      {2, 1e-5f, Activation::silu}, &dx, d[1], d[2]);
                }});
  cs.push_back({"layer_norm", "layer_norm [9,12]", {{"x", {9, 12}, 1.2f, 0.4f}, {"gamma", {12}, 0.3f, 1.f},
                {"beta", {12}, 0.3f}}, {{9, 12}},
                [](ExecContext& ctx, const Ins& in, const Ins& out) { layer_norm(ctx, in[0], in[1], in[2], out[0], 1e-5f); },
                [](ExecContext& ctx, const Ins& in, const Ins& dout, const Grads& d) {
                  layer_norm_backward(ctx, in[0], in[1], dout[0], 1e-5f, d[0], d[1], d[2]);
                }});
  // More rows than one of the CPU's blocks, rows longer than a vector with a tail, apart in memory.
  cs.push_back({"layer_norm", "layer_norm [40,37] of [40,45]", {{"x", {40, 45}, 1.2f, 0.4f}, {"gamma", {37}, 0.3f, 1.f},
                {"beta", {37}, 0.3f}}, {{40, 37}},
                [](ExecContext& ctx, const Ins& in, const Ins& out) {
                  layer_norm(ctx, in[0].slice(1, 4, 37), in[1], in[2], out[0], 1e-5f);
                },
                [](ExecContext& ctx, const Ins& in, const Ins& dout, const Grads& d) {
                  const Tensor dx = d[0]->slice(1, 4, 37);
                  layer_norm_backward(ctx, in[0].slice(1, 4, 37), in[1], dout[0], 1e-5f, &dx, d[1], d[2]);
                }});
  cs.push_back({"softmax", "softmax [4,7]", {{"x", {4, 7}, 2.f}}, {{4, 7}},
                [](ExecContext& ctx, const Ins& in, const Ins& out) { softmax(ctx, in[0], out[0]); },
                [](ExecContext& ctx, const Ins& in, const Ins& dout, const Grads& d) {
                  // softmax_backward takes the forward output: recomputed here.
                  OwnedTensor y = ctx.arena->empty(DType::f32, in[0].shape);
                  softmax(ctx, in[0], y);
                  softmax_backward(ctx, y, dout[0], *d[0]);
                }});
}

// Attention: plain, the small-head kernel, given the forward's output, token-count scaling, a band, rows without keys.
void add_attention_cases(std::vector<GradCase>& cs) {
  // with_out: the backward is given the forward's output (computed again here).
  auto attention_case = [&](const std::string& name, std::int64_t r, std::int64_t h, std::int64_t lq, std::int64_t lk,
                            std::int64_t d, std::int64_t dv, AttentionParams p, bool with_out = false) {
    cs.push_back({"attention", name, {{"q", {r, lq, h * d}}, {"k", {r, lk, h * d}}, {"v", {r, lk, h * dv}}},
                  {{r, lq, h * dv}},
                  [h, p](ExecContext& ctx, const Ins& in, const Ins& out) {
                    attention(ctx, heads(in[0], h), heads(in[1], h), heads(in[2], h), nullptr, nullptr, heads(out[0], h), p);
                  },
                  [h, p, with_out](ExecContext& ctx, const Ins& in, const Ins& dout, const Grads& g) {
                    OwnedTensor out;
                    Tensor out_heads;
                    if (with_out) {
                      out = ctx.arena->empty(DType::f32, dout[0].shape);
                      attention(ctx, heads(in[0], h), heads(in[1], h), heads(in[2], h), nullptr, nullptr,
                                heads(out, h), p);
                      out_heads = heads(out, h);
                    }
                    attention_backward(ctx, heads(in[0], h), heads(in[1], h), heads(in[2], h), heads(dout[0], h), p,
                                       heads(*g[0], h), heads(*g[1], h), heads(*g[2], h),
                                       with_out ? &out_heads : nullptr);
                  }});
  };
  AttentionParams plain;
  plain.scale = 0.5f;
  attention_case("attention plain 2 heads 5x7 d4 dv3", 2, 2, 5, 7, 4, 3, plain);
  // Every row seeing every key with heads of 8 or 16: the CPU's small-head kernel, rows and keys
  // past a whole vector of them included.
  attention_case("attention small heads 2 heads 19x21 d8", 2, 2, 19, 21, 8, 8, plain);
  attention_case("attention small heads, at most 8 rows and keys, 6x8 d8", 3, 2, 6, 8, 8, 8, plain);
  attention_case("attention small heads given the forward's output 19x21 d8", 2, 2, 19, 21, 8, 8, plain, true);
  attention_case("attention given the forward's output 5x7 d4 dv3", 2, 2, 5, 7, 4, 3, plain, true);
  AttentionParams counted = plain;
  counted.scale = 0.25f;
  counted.token_count_log_base = 5.f;
  attention_case("attention small heads token-count 5x33 d16", 1, 1, 5, 33, 16, 16, counted);
  AttentionParams band = plain;
  band.band_lo = -2;
  band.band_hi = 1;
  band.local_bias = 0.7f;
  band.token_count_log_base = 5.f;
  attention_case("attention banded biased token-count 6x6 d5", 3, 1, 6, 6, 5, 5, band);
  AttentionParams empty_rows = plain;
  empty_rows.band_lo = 3;
  empty_rows.band_hi = 4;
  attention_case("attention rows without keys 5x4 d3", 1, 2, 5, 4, 3, 2, empty_rows);
}

// Nearest upsampling, and the sums of broadcasts and transposed views.
void add_shape_cases(std::vector<GradCase>& cs) {
  cs.push_back({"upsample_nearest", "upsample_nearest 2x [1,2,3,4]", {{"x", {1, 2, 3, 4}}}, {{1, 2, 6, 8}},
                [](ExecContext& ctx, const Ins& in, const Ins& out) { upsample_nearest(ctx, in[0], out[0]); },
                [](ExecContext& ctx, const Ins&, const Ins& dout, const Grads& d) {
                  upsample_nearest_backward(ctx, dout[0], *d[0]);
                }});
  cs.push_back({"upsample_nearest", "upsample_nearest odd [2,1,3,5] -> 5x9", {{"x", {2, 1, 3, 5}}}, {{2, 1, 5, 9}},
                [](ExecContext& ctx, const Ins& in, const Ins& out) { upsample_nearest(ctx, in[0], out[0]); },
                [](ExecContext& ctx, const Ins&, const Ins& dout, const Grads& d) {
                  upsample_nearest_backward(ctx, dout[0], *d[0]);
                }});
  // A broadcast (a bias over rows, text keys over frames): its backward sums.
  cs.push_back({"accumulate", "accumulate broadcast [2,1,4] over [2,3,4]", {{"x", {2, 1, 4}}}, {{2, 3, 4}},
                [](ExecContext& ctx, const Ins& in, const Ins& out) { copy(ctx, in[0].expand(out[0].shape), out[0]); },
                [](ExecContext& ctx, const Ins&, const Ins& dout, const Grads& d) {
                  accumulate(ctx, dout[0], d[0]->expand(dout[0].shape));
                }});
  // Two summed dims, one of them innermost (the resnets' time embedding over frames and pixels).
  cs.push_back({"accumulate", "accumulate broadcast [2,1,3,1] over [2,4,3,5]", {{"x", {2, 1, 3, 1}}}, {{2, 4, 3, 5}},
                [](ExecContext& ctx, const Ins& in, const Ins& out) { copy(ctx, in[0].expand(out[0].shape), out[0]); },
                [](ExecContext& ctx, const Ins&, const Ins& dout, const Grads& d) {
                  accumulate(ctx, dout[0], d[0]->expand(dout[0].shape));
                }});
  cs.push_back({"accumulate", "accumulate transposed [4,3]", {{"x", {3, 4}}}, {{4, 3}},
                [](ExecContext& ctx, const Ins& in, const Ins& out) { copy(ctx, in[0].transpose(0, 1), out[0]); },
                [](ExecContext& ctx, const Ins&, const Ins& dout, const Grads& d) {
                  accumulate(ctx, dout[0], d[0]->transpose(0, 1));
                }});
}

}  // namespace

std::vector<GradCase> grad_cases() {
  std::vector<GradCase> cs;
  add_activation_cases(cs);
  add_conv_cases(cs);
  add_norm_cases(cs);
  add_attention_cases(cs);
  add_shape_cases(cs);
  return cs;
}

GradCheck check_gradients(const GradCase& c, Runtime& rt, std::uint64_t seed, std::int64_t max_elements) {
  VINF_CHECK(rt.device().is_cpu(), "check_gradients runs on a CPU runtime");
  ExecContext& ctx = rt.ctx();
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto draw = [&](std::vector<float>& v, float scale, float shift) {
    for (float& e : v) e = normal(gen) * scale + shift;
  };
  const std::size_t ni = c.inputs.size(), no = c.outputs.size();
  std::vector<std::vector<float>> in_data(ni), out_data(no), dout_data(no), grad_data(ni);
  Ins in, out, dout;
  std::vector<Tensor> grads(ni);
  Grads gp(ni, nullptr);
  for (std::size_t i = 0; i < ni; ++i) {
    const GradInput& g = c.inputs[i];
    in_data[i].resize(static_cast<std::size_t>(g.shape.numel()));
    draw(in_data[i], g.scale, g.shift);
    in.push_back(Tensor::wrap(in_data[i].data(), DType::f32, Device::cpu(), g.shape));
    if (!g.differentiable) continue;
    grad_data[i].assign(in_data[i].size(), 0.f);
    grads[i] = Tensor::wrap(grad_data[i].data(), DType::f32, Device::cpu(), g.shape);
    gp[i] = &grads[i];
  }
  for (std::size_t o = 0; o < no; ++o) {
    out_data[o].resize(static_cast<std::size_t>(c.outputs[o].numel()));
    dout_data[o].resize(out_data[o].size());
    draw(dout_data[o], 1.f, 0.f);
    out.push_back(Tensor::wrap(out_data[o].data(), DType::f32, Device::cpu(), c.outputs[o]));
    dout.push_back(Tensor::wrap(dout_data[o].data(), DType::f32, Device::cpu(), c.outputs[o]));
  }
  c.backward(ctx, in, dout, gp);
  auto loss = [&] {
    c.forward(ctx, in, out);
    double l = 0;
    for (std::size_t o = 0; o < no; ++o)
      for (std::size_t e = 0; e < out_data[o].size(); ++e) l += static_cast<double>(out_data[o][e]) * dout_data[o][e];
    return l;
  };
  GradCheck res;
  int reported = 0;
  for (std::size_t i = 0; i < ni; ++i) {
    if (!gp[i]) continue;
    const std::vector<float>& g = grad_data[i];
    double largest = 0;
    for (float e : g) largest = std::max(largest, static_cast<double>(std::fabs(e)));
    const auto n = static_cast<std::int64_t>(g.size());
    const std::int64_t step = std::max<std::int64_t>(1, n / max_elements);
    for (std::int64_t e = 0; e < n; e += step) {
      float& x = in_data[i][static_cast<std::size_t>(e)];
      const float x0 = x;
      const float h = 1e-3f * (1.f + std::fabs(x0));
      x = x0 + h;
      const float hp = x - x0;  // the step as stored
      const double lp = loss();
      x = x0 - h;
      const float hm = x0 - x;
      const double lm = loss();
      x = x0;
      const double fd = (lp - lm) / (static_cast<double>(hp) + hm);
      const double got = g[static_cast<std::size_t>(e)];
      const double allowed = 1e-3 * largest + 2e-3 * std::fabs(fd) + 1e-6;
      const double ratio = std::fabs(got - fd) / allowed;
      res.worst_ratio = std::max(res.worst_ratio, ratio);
      ++res.checked;
      if (ratio > 1 || !std::isfinite(got)) {
        res.ok = false;
        if (reported++ < 6) {
          std::ostringstream m;
          m << "  d/d " << c.inputs[i].name << "[" << e << "]: backward " << got << ", finite difference " << fd
            << " (largest |gradient| " << largest << ")\n";
          res.report += m.str();
        }
      }
    }
  }
  return res;
}

GradCheck compare_backward(const GradCase& c, Runtime& device_rt, std::uint64_t seed) {
  Runtime cpu(Device::cpu());
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  const std::size_t ni = c.inputs.size(), no = c.outputs.size();
  // Host data, then the same on each runtime: inputs, output gradients, zeroed input gradients.
  std::vector<std::vector<float>> in_data(ni), dout_data(no);
  for (std::size_t i = 0; i < ni; ++i) {
    in_data[i].resize(static_cast<std::size_t>(c.inputs[i].shape.numel()));
    for (float& e : in_data[i]) e = normal(gen) * c.inputs[i].scale + c.inputs[i].shift;
  }
  for (std::size_t o = 0; o < no; ++o) {
    dout_data[o].resize(static_cast<std::size_t>(c.outputs[o].numel()));
    for (float& e : dout_data[o]) e = normal(gen);
  }
  auto run = [&](Runtime& rt) {
    ExecContext& ctx = rt.ctx();
    std::vector<OwnedTensor> hold;
    Ins in, dout;
    std::vector<Tensor> grads(ni);
    Grads gp(ni, nullptr);
    auto put = [&](std::vector<float>& host, const Shape& shape) {
      hold.push_back(rt.arena().empty(DType::f32, shape));
      copy(ctx, Tensor::wrap(host.data(), DType::f32, Device::cpu(), shape), hold.back());
      return Tensor(hold.back());
    };
    hold.reserve(2 * ni + no);
    for (std::size_t i = 0; i < ni; ++i) in.push_back(put(in_data[i], c.inputs[i].shape));
    for (std::size_t o = 0; o < no; ++o) dout.push_back(put(dout_data[o], c.outputs[o]));
    for (std::size_t i = 0; i < ni; ++i) {
      if (!c.inputs[i].differentiable) continue;
      hold.push_back(rt.arena().empty(DType::f32, c.inputs[i].shape));
      fill(ctx, hold.back(), 0.0);
      grads[i] = hold.back();
      gp[i] = &grads[i];
    }
    c.backward(ctx, in, dout, gp);
    std::vector<std::vector<float>> out(ni);
    for (std::size_t i = 0; i < ni; ++i) {
      if (!gp[i]) continue;
      out[i].resize(in_data[i].size());
      copy(ctx, grads[i], Tensor::wrap(out[i].data(), DType::f32, Device::cpu(), grads[i].shape));
    }
    synchronize(ctx);
    return out;
  };
  const auto want = run(cpu), got = run(device_rt);
  GradCheck res;
  int reported = 0;
  for (std::size_t i = 0; i < ni; ++i) {
    double largest = 0;
    for (float e : want[i]) largest = std::max(largest, static_cast<double>(std::fabs(e)));
    for (std::size_t e = 0; e < want[i].size(); ++e) {
      const double allowed = 1e-4 * largest + 1e-4 * std::fabs(want[i][e]) + 1e-7;
      const double ratio = std::fabs(static_cast<double>(got[i][e]) - want[i][e]) / allowed;
      res.worst_ratio = std::max(res.worst_ratio, ratio);
      ++res.checked;
      if (ratio > 1 || !std::isfinite(got[i][e])) {
        res.ok = false;
        if (reported++ < 6) {
          std::ostringstream m;
          m << "  d/d " << c.inputs[i].name << "[" << e << "]: device " << got[i][e] << ", CPU " << want[i][e] << "\n";
          res.report += m.str();
        }
      }
    }
  }
  return res;
}

}  // namespace vinf::opcheck
