#include "ops/cases.hpp"

#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "ops/activation.hpp"
#include "ops/attention.hpp"
#include "ops/conv.hpp"
#include "ops/elementwise.hpp"
#include "ops/embedding.hpp"
#include "ops/gemm.hpp"
#include "ops/norm.hpp"
#include "ops/random.hpp"
#include "ops/resample.hpp"
#include "ops/softmax.hpp"

namespace vinf::opcheck {

bool matches_filter(const OpCase& c, const std::string& filter) {
  return filter.empty() || c.name.find(filter) != std::string::npos || c.family.find(filter) != std::string::npos;
}

CaseEnv::CaseEnv(ExecContext& c, DType dt, DType round_to, std::uint64_t seed)
    : ctx(c),
      dtype(c.device.is_cpu() && dt == DType::bf16 ? DType::f32 : dt),
      weight_dtype(dt),
      round_to_(round_to),
      seed_(seed) {}

bool takes_weights(const OpCase& c) {
  return c.family == "linear" || c.family == "conv2d" || c.family == "temporal_conv";
}

Tensor CaseEnv::hold(DType dt, const Shape& shape) {
  owned_.push_back(ctx.arena->empty(dt, shape));
  return owned_.back();
}

Tensor CaseEnv::input(const Shape& shape, float scale, float shift) { return random(dtype, shape, scale, shift); }

Tensor CaseEnv::weight(const Shape& shape, float scale) { return random(weight_dtype, shape, scale, 0.f); }

Tensor CaseEnv::random(DType dt, const Shape& shape, float scale, float shift) {
  // Generated and rounded on the host, then copied to the device: identical on every backend.
  const std::int64_t n = shape.numel();
  std::vector<float> host(static_cast<std::size_t>(n));
  Arena staging(host_memory());
  ExecContext hc{Device::cpu(), &staging, CpuImpl::fast, nullptr, nullptr};
  const Tensor h = Tensor::wrap(host.data(), DType::f32, Device::cpu(), shape);
  ops::normal(hc, h, seed_, next_stream_++, 0);
  for (float& x : host) x = x * scale + shift;
  if (round_to_ != DType::f32) {  // through the 16-bit format and back
    std::vector<std::uint16_t> rounded(static_cast<std::size_t>(n));
    const Tensor r = Tensor::wrap(rounded.data(), round_to_, Device::cpu(), shape);
    ops::copy(hc, h, r);
    ops::copy(hc, r, h);
  }
  Tensor t = hold(dt, shape);
  ops::copy(ctx, h, t);
  return t;
}

Tensor CaseEnv::values(DType dt, const Shape& shape, const std::vector<double>& v) {
  VINF_CHECK(static_cast<std::int64_t>(v.size()) == shape.numel(), "values: ", v.size(), " values for ", shape.str());
  Tensor t = hold(dt, shape);
  Arena staging(host_memory());
  ExecContext hc{Device::cpu(), &staging, CpuImpl::fast, nullptr, nullptr};
  ops::copy(ctx.device.is_cpu() ? hc : ctx,
            Tensor::wrap(const_cast<double*>(v.data()), DType::f64, Device::cpu(), shape), t);
  return t;
}

Tensor CaseEnv::output(const Shape& shape) { return output(dtype, shape); }

Tensor CaseEnv::output(DType dt, const Shape& shape) {
  Tensor t = hold(dt, shape);
  ops::fill(ctx, t, std::numeric_limits<double>::quiet_NaN());
  outputs_.push_back(t);
  return t;
}

Tensor CaseEnv::scratch(DType dt, const Shape& shape) { return hold(dt, shape); }

namespace {

using Runner = std::function<void()>;
using ops::Activation;

double conv_flops(const Shape& y, std::int64_t cin, std::int64_t kh, std::int64_t kw) {
  return 2.0 * static_cast<double>(y.numel()) * static_cast<double>(cin * kh * kw);
}

// --- elementwise -------------------------------------------------------------------------------

void add_elementwise(std::vector<OpCase>& v) {
  v.push_back({"copy", "copy permuted 3x5x7 -> contiguous", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({3, 5, 7}).permute({2, 0, 1});
                 const Tensor y = e.output({7, 3, 5});
                 return [&e, x, y] { ops::copy(e.ctx, x, y); };
               }});
  v.push_back({"copy", "copy into a strided slice 4x9", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({4, 3});
                 const Tensor y = e.output({4, 9});
                 return [&e, x, y] {
                   ops::fill(e.ctx, y, 0.5);
                   ops::copy(e.ctx, x, y.slice(1, 5, 3));
                 };
               }});
  v.push_back({"fill", "fill 3x17 with -1.25", 0, [](CaseEnv& e) -> Runner {
                 const Tensor y = e.output({3, 17});
                 return [&e, y] { ops::fill(e.ctx, y, -1.25); };
               }});
  v.push_back({"axpby", "axpby 4x33x17 with broadcast b", 0, [](CaseEnv& e) -> Runner {
                 const Tensor a = e.input({4, 33, 17});
                 const Tensor b = e.input({33, 1}).expand({4, 33, 17});
                 const Tensor y = e.output({4, 33, 17});
                 return [&e, a, b, y] { ops::axpby(e.ctx, 2.5f, a, -0.5f, b, y); };
               }});
  // A channels-last output (the CPU's convolution outputs) plus a per-channel bias, as the time
  // embedding is added, and the usual layout read against it.
  v.push_back({"axpby", "axpby channels-last 3x24x5x7 with a per-channel b, in place", 0, [](CaseEnv& e) -> Runner {
                 const Tensor y = e.output({3, 5, 7, 24}).permute({0, 3, 1, 2});
                 const Tensor a = e.input({3, 5, 7, 24}).permute({0, 3, 1, 2});
                 const Tensor b = e.input({3, 24, 1, 1}).expand({3, 24, 5, 7});
                 return [&e, a, b, y] {
                   ops::copy(e.ctx, a, y);
                   ops::axpby(e.ctx, 1.f, y, 1.f, b, y);
                 };
               }});
  v.push_back({"axpby", "axpby channels-last + usual layout 2x20x3x9 -> usual", 0, [](CaseEnv& e) -> Runner {
                 const Tensor a = e.input({2, 3, 9, 20}).permute({0, 3, 1, 2});
                 const Tensor b = e.input({2, 20, 3, 9});
                 const Tensor y = e.output({2, 20, 3, 9});
                 return [&e, a, b, y] {
                   ops::axpby(e.ctx, 0.5f, a, 2.f, b, y);
                   ops::axpby(e.ctx, 1.f, y, -1.5f, a, y);  // the transposed operand second, in place
                 };
               }});
  v.push_back({"mul", "mul 5x7x9 by a per-channel scale", 0, [](CaseEnv& e) -> Runner {
                 const Tensor a = e.input({5, 7, 9});
                 const Tensor b = e.input({7}).unsqueeze(1).expand({5, 7, 9});
                 const Tensor y = e.output({5, 7, 9});
                 return [&e, a, b, y] { ops::mul(e.ctx, a, b, y); };
               }});
  v.push_back({"scale", "scale 1000 in place", 0, [](CaseEnv& e) -> Runner {
                 const Tensor y = e.output({1000});
                 const Tensor x = e.input({1000});
                 return [&e, x, y] {
                   ops::copy(e.ctx, x, y);
                   ops::scale(e.ctx, y, -3.f, y);
                 };
               }});
  v.push_back({"concat", "concat (2,3,5)+(2,4,5) along 1", 0, [](CaseEnv& e) -> Runner {
                 const Tensor a = e.input({2, 3, 5}), b = e.input({2, 4, 5});
                 const Tensor y = e.output({2, 7, 5});
                 return [&e, a, b, y] {
                   const Tensor parts[] = {a, b};
                   ops::concat(e.ctx, parts, 1, y);
                 };
               }});
}

// --- activations -------------------------------------------------------------------------------

void add_activations(std::vector<OpCase>& v) {
  for (Activation act : {Activation::silu, Activation::gelu, Activation::quick_gelu, Activation::gelu_tanh}) {
    v.push_back(
        {ops::activation_name(act), std::string(ops::activation_name(act)) + " 3x1001", 0, [act](CaseEnv& e) -> Runner {
           const Tensor x = e.input({3, 1001}, 3.f);
           const Tensor y = e.output({3, 1001});
           return [&e, act, x, y] { ops::activation(e.ctx, act, x, y); };
         }});
  }
  v.push_back({"silu", "silu on a transposed view 13x11", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({11, 13}, 3.f).transpose(0, 1);
                 const Tensor y = e.output({13, 11});
                 return [&e, x, y] { ops::activation(e.ctx, Activation::silu, x, y); };
               }});
  v.push_back({"geglu", "geglu 7x(2*37)", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({7, 74}, 2.f);
                 const Tensor y = e.output({7, 37});
                 return [&e, x, y] { ops::geglu(e.ctx, x, y); };
               }});
}

// --- norms ---------------------------------------------------------------------------------------

// What the distributed GroupNorm does: partial sums per part (frames [0, 3) and [3, 5) of 8 x 5
// pixels), added on the host as the all-reduce would, then applied; the usual layout or
// channels-last.
OpCase halves_summed_case(std::string name, std::int64_t C, int groups, bool channels_last, Activation act) {
  return {"group_norm", std::move(name), 0, [=](CaseEnv& e) -> Runner {
            const Tensor x =
                channels_last ? e.input({3, 8, 5, C}, 1.f, 2.f).permute({0, 3, 1, 2}) : e.input({3, C, 8, 5}, 1.f, 2.f);
            const Tensor g = e.input({C}, 0.5f, 1.f), b = e.input({C}, 0.5f);
            const Tensor s0 = e.scratch(DType::f64, {3, groups, 2}), s1 = e.scratch(DType::f64, {3, groups, 2});
            const Tensor total = e.output(DType::f64, {3, groups, 2});
            const Tensor y = channels_last ? e.output({3, 8, 5, C}).permute({0, 3, 1, 2}) : e.output({3, C, 8, 5});
            return [&e, x, g, b, s0, s1, total, y, groups, act, C] {
              ops::group_norm_sums(e.ctx, x.slice(2, 0, 3), groups, s0);
              ops::group_norm_sums(e.ctx, x.slice(2, 3, 5), groups, s1);
              std::vector<double> a(static_cast<std::size_t>(total.numel())), c(a.size());
              const Tensor ha = Tensor::wrap(a.data(), DType::f64, Device::cpu(), total.shape);
              const Tensor hc = Tensor::wrap(c.data(), DType::f64, Device::cpu(), total.shape);
              ops::copy(e.ctx, s0, ha);
              ops::copy(e.ctx, s1, hc);
              for (std::size_t i = 0; i < a.size(); ++i) a[i] += c[i];
              ops::copy(e.ctx, ha, total);
              ops::group_norm_apply(e.ctx, x, total, static_cast<double>(C / groups * 8 * 5), g, b, y,
                                    {groups, 1e-5f, act});
            };
          }};
}

void add_norms(std::vector<OpCase>& v) {
  v.push_back({"group_norm", "group_norm per frame 6x32x5x7 g8 +silu", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({6, 32, 5, 7}, 2.f, 0.5f);
                 const Tensor g = e.input({32}, 0.5f, 1.f), b = e.input({32}, 0.5f);
                 const Tensor y = e.output({6, 32, 5, 7});
                 return [&e, x, g, b, y] { ops::group_norm(e.ctx, x, g, b, y, {8, 1e-5f, Activation::silu}); };
               }});
  // Groups of 2 channels x 64 pixels, runs of 128 elements: the 16-byte accesses of
  // VINF_GPU_KERNELS=group-norm on CUDA (the case above takes its element-wise form).
  v.push_back({"group_norm", "group_norm per frame 4x64x1x64 g32 +silu", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({4, 64, 1, 64}, 2.f, 0.5f);
                 const Tensor g = e.input({64}, 0.5f, 1.f), b = e.input({64}, 0.5f);
                 const Tensor y = e.output({4, 64, 1, 64});
                 return [&e, x, g, b, y] { ops::group_norm(e.ctx, x, g, b, y, {32, 1e-5f, Activation::silu}); };
               }});
  v.push_back({"group_norm", "group_norm temporal frame-major B2 F5 C16 3x7 g4", 0, [](CaseEnv& e) -> Runner {
                 // Storage (B*F, C, H, W); statistics per (b, group) across frames.
                 const Tensor x = e.input({10, 16, 3, 7}, 1.5f, -0.3f);
                 const Tensor g = e.input({16}, 0.5f, 1.f), b = e.input({16}, 0.5f);
                 const Tensor y = e.output({10, 16, 3, 7});
                 auto clip = [](const Tensor& t) { return t.reshape({2, 5, 16, 21}).permute({0, 2, 1, 3}); };
                 return [&e, x, g, b, y, clip] { ops::group_norm(e.ctx, clip(x), g, b, clip(y), {4, 1e-6f}); };
               }});
  // Channels-last storage (N, H, W, C), the CPU's convolution inputs and outputs: written from
  // the usual layout, read and written in it, and a channel count that is no whole vector.
  v.push_back({"group_norm", "group_norm per frame 6x32x5x7 g8 +silu, into channels-last", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({6, 32, 5, 7}, 2.f, 0.5f);
                 const Tensor g = e.input({32}, 0.5f, 1.f), b = e.input({32}, 0.5f);
                 const Tensor y = e.output({6, 5, 7, 32}).permute({0, 3, 1, 2});
                 return [&e, x, g, b, y] { ops::group_norm(e.ctx, x, g, b, y, {8, 1e-5f, Activation::silu}); };
               }});
  v.push_back({"group_norm", "group_norm temporal channels-last B2 F5 C32 3x7 g8 +silu", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({10, 3, 7, 32}, 1.5f, -0.3f).permute({0, 3, 1, 2});
                 const Tensor g = e.input({32}, 0.5f, 1.f), b = e.input({32}, 0.5f);
                 const Tensor y = e.output({10, 3, 7, 32}).permute({0, 3, 1, 2});
                 auto clip = [](const Tensor& t) { return t.reshape({2, 5, 32, 21}).permute({0, 2, 1, 3}); };
                 return [&e, x, g, b, y, clip] {
                   ops::group_norm(e.ctx, clip(x), g, b, clip(y), {8, 1e-6f, Activation::silu});
                 };
               }});
  v.push_back({"group_norm", "group_norm channels-last C24 4x6 g6 (no whole vectors)", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({3, 4, 6, 24}, 1.f, 0.2f).permute({0, 3, 1, 2});
                 const Tensor g = e.input({24}, 0.5f, 1.f), b = e.input({24}, 0.5f);
                 const Tensor y = e.output({3, 4, 6, 24}).permute({0, 3, 1, 2});
                 return [&e, x, g, b, y] { ops::group_norm(e.ctx, x, g, b, y, {6, 1e-5f, Activation::silu}); };
               }});
  v.push_back(halves_summed_case("group_norm_sums + apply, two halves summed", 12, 3, false, Activation::none));
  v.push_back(
      halves_summed_case("group_norm_sums + apply channels-last, two halves summed", 16, 4, true, Activation::silu));
  v.push_back({"layer_norm", "layer_norm 37x129", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({37, 129}, 2.f, 1.f);
                 const Tensor g = e.input({129}, 0.5f, 1.f), b = e.input({129}, 0.5f);
                 const Tensor y = e.output({37, 129});
                 return [&e, x, g, b, y] { ops::layer_norm(e.ctx, x, g, b, y, 1e-5f); };
               }});
  v.push_back({"layer_norm", "layer_norm 3x5x64 on a row-strided view", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({3, 5, 80}).slice(2, 8, 64);
                 const Tensor g = e.input({64}, 0.5f, 1.f), b = e.input({64}, 0.5f);
                 const Tensor y = e.output({3, 5, 64});
                 return [&e, x, g, b, y] { ops::layer_norm(e.ctx, x, g, b, y, 1e-5f); };
               }});
  v.push_back({"rms_norm", "rms_norm 37x130 (q/k norm across heads)", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({37, 130}, 2.f, 0.3f);
                 const Tensor g = e.input({130}, 0.5f, 1.f);
                 const Tensor y = e.output({37, 130});
                 return [&e, x, g, y] { ops::rms_norm(e.ctx, x, g, y, 1e-6f); };
               }});
  v.push_back({"rotary", "rotary 2x7x3x10 on a permuted view", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({2, 3, 7, 10}).permute({0, 2, 1, 3});
                 std::vector<double> cv, sv;
                 for (int l = 0; l < 7; ++l)
                   for (int i = 0; i < 5; ++i) {
                     const double a = l * std::pow(10000.0, -i / 5.0);
                     cv.push_back(std::cos(a));
                     sv.push_back(std::sin(a));
                   }
                 const Tensor c = e.values(DType::f32, {7, 5}, cv), s = e.values(DType::f32, {7, 5}, sv);
                 const Tensor y = e.output({2, 7, 3, 10});
                 return [&e, x, c, s, y] { ops::rotary(e.ctx, x, c, s, y); };
               }});
  v.push_back({"softmax", "softmax 13x77", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({13, 77}, 4.f);
                 const Tensor y = e.output({13, 77});
                 return [&e, x, y] { ops::softmax(e.ctx, x, y); };
               }});
}

// --- GEMMs ---------------------------------------------------------------------------------------

// Products over contiguous, transposed and strided operands, and linear_add onto a residual.
void add_plain_linear_cases(std::vector<OpCase>& v) {
  v.push_back({"linear", "linear 3x7x33 -> 19 +bias", 2.0 * 21 * 33 * 19, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({3, 7, 33});
                 const Tensor w = e.weight({19, 33}, 0.2f), b = e.input({19});
                 const Tensor y = e.output({3, 7, 19});
                 return [&e, x, w, b, y] { ops::linear(e.ctx, x, w, &b, y); };
               }});
  v.push_back({"linear", "linear one row 1x65 -> 31", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({1, 65});
                 const Tensor w = e.weight({31, 65}, 0.15f);
                 const Tensor y = e.output({1, 31});
                 return [&e, x, w, y] { ops::linear(e.ctx, x, w, nullptr, y); };
               }});
  v.push_back({"linear", "linear on a transposed input 9x40 -> 12", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({40, 9}).transpose(0, 1);
                 const Tensor w = e.weight({12, 40}, 0.15f), b = e.input({12});
                 const Tensor y = e.output({9, 12});
                 return [&e, x, w, b, y] { ops::linear(e.ctx, x, w, &b, y); };
               }});
  v.push_back({"linear", "linear_add 3x7x33 -> 19 +bias onto y", 2.0 * 21 * 33 * 19, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({3, 7, 33});
                 const Tensor w = e.weight({19, 33}, 0.2f), b = e.input({19}), y0 = e.input({3, 7, 19});
                 const Tensor y = e.output({3, 7, 19});
                 return [&e, x, w, b, y0, y] {
                   ops::copy(e.ctx, y0, y);
                   ops::linear_add(e.ctx, x, w, &b, y);
                 };
               }});
  v.push_back({"linear", "linear_add into a strided y 9x40 -> 12", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({9, 40});
                 const Tensor w = e.weight({12, 40}, 0.15f), y0 = e.input({12, 9});
                 const Tensor y = e.output({12, 9}).transpose(0, 1);
                 return [&e, x, w, y0, y] {
                   ops::copy(e.ctx, y0.transpose(0, 1), y);
                   ops::linear_add(e.ctx, x, w, nullptr, y);
                 };
               }});
}

// The temporal layers' layouts, and the products fused with a gate or fed by a norm.
void add_layout_linear_cases(std::vector<OpCase>& v) {
  // The temporal layers' layouts: a permuted activation read in place (one sequence of frames per
  // pixel), a product written back transposed onto a residual, and a view no product can read.
  v.push_back(
      {"linear", "linear on frames' pixels as rows 2x5x3x6 -> 7 +bias", 2.0 * 30 * 6 * 7, [](CaseEnv& e) -> Runner {
         const Tensor x = e.input({2, 3, 6, 5}).permute({0, 3, 1, 2});
         const Tensor w = e.weight({7, 6}, 0.3f), b = e.input({7});
         const Tensor y = e.output({2, 5, 3, 7});
         return [&e, x, w, b, y] { ops::linear(e.ctx, x, w, &b, y); };
       }});
  v.push_back({"linear", "linear_add written transposed into frames 2x5x3x6 -> 7 +bias", 2.0 * 30 * 6 * 7,
               [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({2, 5, 3, 6});
                 const Tensor w = e.weight({7, 6}, 0.3f), b = e.input({7}), y0 = e.input({2, 3, 7, 5});
                 const Tensor y = e.output({2, 3, 7, 5});
                 return [&e, x, w, b, y0, y] {
                   ops::copy(e.ctx, y0, y);
                   ops::linear_add(e.ctx, x, w, &b, y.permute({0, 3, 1, 2}));
                 };
               }});
  v.push_back({"linear", "linear written transposed 4x9x20 -> 11 +bias", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({4, 9, 20});
                 const Tensor w = e.weight({11, 20}, 0.2f), b = e.input({11});
                 const Tensor y = e.output({4, 11, 9});
                 return [&e, x, w, b, y] { ops::linear(e.ctx, x, w, &b, y.permute({0, 2, 1})); };
               }});
  v.push_back({"linear", "linear on a view no product reads 3x4x7 -> 5", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({3, 7, 4, 2}).select(3, 0).permute({0, 2, 1});
                 const Tensor w = e.weight({5, 7}, 0.3f);
                 const Tensor y = e.output({3, 4, 5});
                 return [&e, x, w, y] { ops::linear(e.ctx, x, w, nullptr, y); };
               }});
  // The feed-forward's first product with its gate; its result in the weights' dtype (bf16 on the
  // CPU under --dtype bf16), read as such by the next product.
  v.push_back({"linear", "linear_geglu 3x7x40 -> 2x37 +bias", 2.0 * 21 * 40 * 74, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({3, 7, 40});
                 const Tensor w = e.weight({74, 40}, 0.2f), b = e.input({74});
                 const Tensor y = e.output({3, 7, 37});
                 return [&e, x, w, b, y] { ops::linear_geglu(e.ctx, x, w, &b, y); };
               }});
  v.push_back({"linear",
               "linear_geglu into the weights' dtype, then linear_add 9x24 -> 2x33 -> 24",
               2.0 * 9 * 24 * 66 + 2.0 * 9 * 33 * 24,
               [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({9, 24}), y0 = e.input({9, 24});
                 const Tensor w1 = e.weight({66, 24}, 0.25f), b1 = e.input({66});
                 const Tensor w2 = e.weight({24, 33}, 0.2f), b2 = e.input({24});
                 const Tensor g = e.scratch(e.weight_dtype, {9, 33});
                 const Tensor y = e.output({9, 24});
                 return [&e, x, y0, w1, b1, w2, b2, g, y] {
                   ops::linear_geglu(e.ctx, x, w1, &b1, g);
                   ops::copy(e.ctx, y0, y);
                   ops::linear_add(e.ctx, g, w2, &b2, y);
                 };
               },
               {{DType::bf16, {4e-2, 2e-2}}},
               "with bf16 weights on the CPU the gated activations are stored in bf16 between the two products "
               "(2^-9 relative, about 0.007 after the second product here), which the f32 reference does not do; "
               "on CUDA the dtype's own bound"});
  v.push_back({"linear",
               "layer_norm into the weights' dtype, then linear 11x40 -> 19",
               2.0 * 11 * 40 * 19,
               [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({11, 40}, 1.5f, 0.3f), g = e.input({40}), b = e.input({40});
                 const Tensor w = e.weight({19, 40}, 0.2f), bias = e.input({19});
                 const Tensor n = e.scratch(e.weight_dtype, {11, 40});
                 const Tensor y = e.output({11, 19});
                 return [&e, x, g, b, w, bias, n, y] {
                   ops::layer_norm(e.ctx, x, g, b, n, 1e-5f);
                   ops::linear(e.ctx, n, w, &bias, y);
                 };
               },
               {{DType::bf16, {4e-2, 2e-2}}},
               "with bf16 weights on the CPU the normalised rows are stored in bf16 for the product (2^-9 "
               "relative), which the f32 reference does not do; on CUDA the dtype's own bound"});
}

// Batched products, and wide ones past the small kernels' blocking.
void add_bmm_and_wide_cases(std::vector<OpCase>& v) {
  v.push_back({"bmm", "bmm 5x17x33 @ 5x33x9", 2.0 * 5 * 17 * 33 * 9, [](CaseEnv& e) -> Runner {
                 const Tensor a = e.input({5, 17, 33}), b = e.input({5, 33, 9}, 0.2f);
                 const Tensor y = e.output({5, 17, 9});
                 return [&e, a, b, y] { ops::bmm(e.ctx, a, b, y); };
               }});
  // Wide products (N, K >= 256), as the model's: past the blocking of small kernels in both CPU
  // libraries (cpu/blas.hpp; ops.gemm_openblas runs these on OpenBLAS).
  v.push_back({"linear", "linear wide 13x260 -> 258 +bias", 2.0 * 13 * 260 * 258, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({13, 260});
                 const Tensor w = e.weight({258, 260}, 0.06f), b = e.input({258});
                 const Tensor y = e.output({13, 258});
                 return [&e, x, w, b, y] { ops::linear(e.ctx, x, w, &b, y); };
               }});
  v.push_back({"linear", "linear with a strided bias 6x20 -> 7", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({6, 20});
                 const Tensor w = e.weight({7, 20}, 0.2f), b = e.input({7, 3}).select(1, 1);
                 const Tensor y = e.output({6, 7});
                 return [&e, x, w, b, y] { ops::linear(e.ctx, x, w, &b, y); };
               }});
  v.push_back({"bmm", "bmm wide 3x9x300 @ 3x300x270, alpha/beta", 0, [](CaseEnv& e) -> Runner {
                 const Tensor a = e.input({3, 9, 300}), b = e.input({3, 300, 270}, 0.06f);
                 const Tensor c0 = e.input({3, 9, 270});
                 const Tensor y = e.output({3, 9, 270});
                 return [&e, a, b, c0, y] {
                   ops::copy(e.ctx, c0, y);
                   ops::bmm(e.ctx, a, b, y, 0.5f, 2.f);
                 };
               }});
  v.push_back({"bmm", "bmm transposed b, broadcast a, alpha/beta", 0, [](CaseEnv& e) -> Runner {
                 const Tensor a = e.input({1, 6, 21}).expand({4, 6, 21});
                 const Tensor b = e.input({4, 11, 21}, 0.2f).transpose(1, 2);
                 const Tensor c0 = e.input({4, 6, 11});
                 const Tensor y = e.output({4, 6, 11});
                 return [&e, a, b, c0, y] {
                   ops::copy(e.ctx, c0, y);
                   ops::bmm(e.ctx, a, b, y, 0.5f, 2.f);
                 };
               }});
}

void add_gemms(std::vector<OpCase>& v) {
  add_plain_linear_cases(v);
  add_layout_linear_cases(v);
  add_bmm_and_wide_cases(v);
}

// --- convolutions --------------------------------------------------------------------------------

OpCase conv_case(std::string name, Shape xs, std::int64_t cout, int k, int stride, int pad, bool bias) {
  const std::int64_t ho = (xs[2] + 2 * pad - k) / stride + 1, wo = (xs[3] + 2 * pad - k) / stride + 1;
  const Shape ys{xs[0], cout, ho, wo};
  return {"conv2d", std::move(name), conv_flops(ys, xs[1], k, k), [=](CaseEnv& e) -> Runner {
            const Tensor x = e.input(xs);
            const Tensor w = e.weight({cout, xs[1], k, k}, 1.f / std::sqrt(static_cast<float>(xs[1] * k * k)));
            const Tensor b = e.input({cout});
            const Tensor y = e.output(ys);
            return [&e, x, w, b, y, stride, pad, bias] {
              ops::conv2d(e.ctx, x, w, bias ? &b : nullptr, y, {stride, pad});
            };
          }};
}

// Temporal conv on frame-major storage (B*F, C, S) viewed as (B, C, F, S), as the model holds it.
OpCase temporal_case(std::string name, std::int64_t B, std::int64_t F, std::int64_t C, std::int64_t S, int pad,
                     bool frame_major, bool bias) {
  const std::int64_t to = F + 2 * pad - 2;
  return {"temporal_conv", std::move(name), 2.0 * B * to * C * S * C * 3, [=](CaseEnv& e) -> Runner {
            auto view = [&](const Tensor& t, std::int64_t frames) {
              return frame_major ? t.reshape({B, frames, C, S}).permute({0, 2, 1, 3}) : t.reshape({B, C, frames, S});
            };
            const Tensor x = view(e.input({B * F, C, S}), F);
            const Tensor w = e.weight({C, C, 3, 1, 1}, 1.f / std::sqrt(3.f * static_cast<float>(C))).reshape({C, C, 3});
            const Tensor b = e.input({C});
            const Tensor y = view(e.output({B * to, C, S}), to);
            return [&e, x, w, b, y, pad, bias] { ops::temporal_conv(e.ctx, x, w, bias ? &b : nullptr, y, pad); };
          }};
}

void add_convs(std::vector<OpCase>& v) {
  v.push_back(conv_case("conv2d 3x3 s1 p1 5->7 9x11 +bias", {2, 5, 9, 11}, 7, 3, 1, 1, true));
  v.push_back(conv_case("conv2d 3x3 s2 p1 6->4 9x12 +bias", {2, 6, 9, 12}, 4, 3, 2, 1, true));
  v.push_back(conv_case("conv2d 1x1 10->4 5x7", {3, 10, 5, 7}, 4, 1, 1, 0, false));
  v.push_back(conv_case("conv2d 3x3 s1 p1 32->16 8x8 +bias", {4, 32, 8, 8}, 16, 3, 1, 1, true));
  v.push_back(temporal_case("temporal_conv k3 p1 frame-major B2 F6 C8 S15 +bias", 2, 6, 8, 15, 1, true, true));
  v.push_back(temporal_case("temporal_conv k3 p1 channel-major B2 F7 C5 S9", 2, 7, 5, 9, 1, false, false));
  v.push_back(temporal_case("temporal_conv k3 p0 (halo frames) B1 F10 C6 S4 +bias", 1, 10, 6, 4, 0, true, true));
}

// --- resampling, embeddings, noise -----------------------------------------------------------

void add_misc(std::vector<OpCase>& v) {
  v.push_back({"upsample_nearest", "upsample 2x 2x3x5x7", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({2, 3, 5, 7});
                 const Tensor y = e.output({2, 3, 10, 14});
                 return [&e, x, y] { ops::upsample_nearest(e.ctx, x, y); };
               }});
  v.push_back({"upsample_nearest", "upsample to a skip size 5x7 -> 9x13", 0, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({1, 2, 5, 7});
                 const Tensor y = e.output({1, 2, 9, 13});
                 return [&e, x, y] { ops::upsample_nearest(e.ctx, x, y); };
               }});
  v.push_back({"timestep_embedding", "timestep embedding dim 32 flip, t in {0,1,500,999}", 0, [](CaseEnv& e) -> Runner {
                 const Tensor t = e.values(DType::i64, {4}, {0, 1, 500, 999});
                 const Tensor y = e.output({4, 32});
                 return [&e, t, y] { ops::timestep_embedding(e.ctx, t, y, {true, 0.f, 10000.f}); };
               }});
  v.push_back({"timestep_embedding", "timestep embedding dim 33 sin-first shift 1, f32 t", 0, [](CaseEnv& e) -> Runner {
                 const Tensor t = e.values(DType::f32, {3}, {24, 3.5, 800});
                 const Tensor y = e.output({3, 33});
                 return [&e, t, y] { ops::timestep_embedding(e.ctx, t, y, {false, 1.f, 10000.f}); };
               }});
  v.push_back({"normal", "philox normal 3x1001 offset 5 stream 7", 0, [](CaseEnv& e) -> Runner {
                 const Tensor y = e.output({3, 1001});
                 return [&e, y] { ops::normal(e.ctx, y, 1234, 7, 5); };
               }});
}

// --- attention -----------------------------------------------------------------------------------

struct AttnShape {
  std::int64_t B, H, Lq, Lk, G, D, Dv;
};

OpCase attention_case(std::string name, AttnShape s, ops::AttentionParams p, bool split_heads = false) {
  double visible = 0;
  for (std::int64_t i = 0; i < s.Lq; ++i) {
    std::int64_t lo, hi;
    ops::attention_band(p, i, s.Lk, lo, hi);
    visible += static_cast<double>(std::max<std::int64_t>(0, hi - lo + 1) + s.G);
  }
  const double flops = 2.0 * static_cast<double>(s.B * s.H) * visible * static_cast<double>(s.D + s.Dv);
  OpCase c{"attention", std::move(name), flops, [=](CaseEnv& e) -> Runner {
             Tensor q, k, v;
             if (split_heads) {  // heads split out of (B, L, H*d) projections: strided views
               q = e.input({s.B, s.Lq, s.H * s.D}).reshape({s.B, s.Lq, s.H, s.D}).permute({0, 2, 1, 3});
               k = e.input({s.B, s.Lk, s.H * s.D}).reshape({s.B, s.Lk, s.H, s.D}).permute({0, 2, 1, 3});
               v = e.input({s.B, s.Lk, s.H * s.Dv}).reshape({s.B, s.Lk, s.H, s.Dv}).permute({0, 2, 1, 3});
             } else {
               q = e.input({s.B, s.H, s.Lq, s.D});
               k = e.input({s.B, s.H, s.Lk, s.D});
               v = e.input({s.B, s.H, s.Lk, s.Dv});
             }
             Tensor kg, vg;
             if (s.G > 0) {
               kg = e.input({s.B, s.H, s.G, s.D});
               vg = e.input({s.B, s.H, s.G, s.Dv});
             }
             const Tensor y = e.output({s.B, s.H, s.Lq, s.Dv});
             const bool global = s.G > 0;
             ops::AttentionParams pe = p;
             pe.bf16_products = e.weight_dtype == DType::bf16;  // as the model asks for it in bf16
             return [&e, q, k, v, kg, vg, y, pe, global] {
               ops::attention(e.ctx, q, k, v, global ? &kg : nullptr, global ? &vg : nullptr, y, pe);
             };
           }};
  c.head_dim = s.D;
  c.value_dim = s.Dv;
  c.traffic =
      static_cast<double>(s.B * s.H) * static_cast<double>(s.Lq * s.D + (s.Lk + s.G) * (s.D + s.Dv) + s.Lq * s.Dv);
  return c;
}

ops::AttentionParams full(float scale) {
  ops::AttentionParams p;
  p.scale = scale;
  return p;
}

ops::AttentionParams banded(float scale, std::int64_t lo, std::int64_t hi, float local_bias, float global_bias) {
  ops::AttentionParams p;
  p.scale = scale;
  p.band_lo = lo;
  p.band_hi = hi;
  p.local_bias = local_bias;
  p.global_bias = global_bias;
  return p;
}

void add_attention(std::vector<OpCase>& v) {
  v.push_back(attention_case("attention full 2x3 17x23 d16 (cross-attention)", {2, 3, 17, 23, 0, 16, 16}, full(0.25f)));
  // Video-Infinity compat: keys [left p | own F | right p], row i sees i..i+2p, plus G global keys.
  v.push_back(attention_case("attention banded F13 p3 G4 global bias 10", {5, 2, 13, 19, 4, 16, 16},
                             banded(0.25f, 0, 6, 0.f, 10.f)));
  // Invariant mode at the first clip: no left halo, row i sees i-p..i+p of [own F | right p].
  v.push_back(attention_case("attention banded clipped ends F13 p3 local bias 10", {3, 2, 13, 16, 4, 8, 8},
                             banded(0.35f, -3, 3, 10.f, 0.f)));
  ops::AttentionParams tn = banded(0.25f, 0, 6, 0.f, 0.f);
  tn.token_count_log_base = 16.f;
  v.push_back(attention_case("attention banded token-count scale base 16", {2, 2, 13, 19, 4, 16, 16}, tn));
  v.push_back(attention_case("attention long rows Lq150 Lk300 d40 dv24 band [-20,50] G5", {1, 2, 150, 300, 5, 40, 24},
                             banded(0.15f, -20, 50, 1.f, -1.f)));
  // Full attention over several query and key tiles with partial ones (flash-attention's 64-row
  // tiles), head dims 64 and 128.
  v.push_back(attention_case("attention full 2x2 100x77 d64", {2, 2, 100, 77, 0, 64, 64}, full(0.125f)));
  v.push_back(
      attention_case("attention full split-head 1x2 70x130 d128", {1, 2, 70, 130, 0, 128, 128}, full(0.088f), true));
  // The temporal layers' shape: 24 own frames, p = 4 on both sides, 8 global keys, head dim 64
  // (one block per (row, head) with VINF_GPU_KERNELS=temporal-attention).
  v.push_back(
      attention_case("attention temporal F24 p4 G8 d64", {16, 4, 24, 32, 8, 64, 64}, banded(0.125f, 0, 8, 0.f, 10.f)));
  v.push_back(attention_case("attention empty band rows (global keys only)", {1, 1, 9, 4, 3, 8, 8},
                             banded(0.3f, 2, 3, 0.f, 0.f)));
  v.push_back(attention_case("attention one head d512 37x37 (VAE mid-block)", {1, 1, 37, 37, 0, 512, 512},
                             full(1.f / std::sqrt(512.f))));
  v.push_back(attention_case("attention split-head views 2x(4x8) 11x11", {2, 4, 11, 11, 0, 8, 8}, full(0.35f), true));
  // Odd head dims and value widths between the kernels' vector counts (48: two vectors of 16).
  v.push_back(attention_case("attention odd dims d33 dv48 20x37 G3", {1, 2, 20, 37, 3, 33, 48},
                             banded(0.2f, -9, 9, 0.5f, 0.f)));
  v.push_back(attention_case("attention odd dims d7 dv33 9x140", {2, 1, 9, 140, 0, 7, 33}, full(0.4f)));
  // Head dims of 8 and less (the CPU's rows-in-lanes kernel): groups of 16 rows with a partial one,
  // several blocks of keys, bands, global keys and biases, the token-count scale.
  v.push_back(attention_case("attention small heads d5 dv3 Lq150 Lk700 band [-200,300] G7", {1, 2, 150, 700, 7, 5, 3},
                             banded(0.3f, -200, 300, 0.5f, -1.f)));
  v.push_back(attention_case("attention small heads d8 full 2x2 70x600", {2, 2, 70, 600, 0, 8, 8}, full(0.35f)));
  ops::AttentionParams tn8 = banded(0.25f, -40, 40, 0.f, 0.f);
  tn8.token_count_log_base = 16.f;
  v.push_back(attention_case("attention small heads d4 dv8 token-count scale 33x90 G2", {2, 1, 33, 90, 2, 4, 8}, tn8));
  // Tiles of 8 rows or fewer (a temporal layer's frames): 8 lanes, with bands, global keys, the
  // model's split-head views, and head dims below 8.
  v.push_back(attention_case("attention small heads d8 frames 8 band [0,6] G4 biases", {3, 2, 8, 14, 4, 8, 8},
                             banded(0.3f, 0, 6, 0.5f, 1.f)));
  v.push_back(
      attention_case("attention small heads split-head views 3x(4x8) 8x8", {3, 4, 8, 8, 0, 8, 8}, full(0.35f), true));
  v.push_back(attention_case("attention small heads d5 dv3 frames 5", {4, 3, 5, 5, 0, 5, 3}, full(0.4f)));
}

}  // namespace

std::vector<OpCase> unit_cases() {
  std::vector<OpCase> v;
  add_elementwise(v);
  add_activations(v);
  add_norms(v);
  add_gemms(v);
  add_convs(v);
  add_misc(v);
  add_attention(v);
  return v;
}

std::vector<OpCase> bench_cases() {
  std::vector<OpCase> v;
  // VideoCrafter2 at 320x512, CFG batch 2 x 24 frames = 48 frame-images.
  v.push_back(conv_case("conv3x3 C320 40x64 N48", {48, 320, 40, 64}, 320, 3, 1, 1, true));
  v.push_back(conv_case("conv3x3 C640 20x32 N48", {48, 640, 20, 32}, 640, 3, 1, 1, true));
  v.push_back({"linear", "linear 320->320 M122880", 2.0 * 122880 * 320 * 320, [](CaseEnv& e) -> Runner {
                 const Tensor x = e.input({122880, 320});
                 const Tensor w = e.weight({320, 320}, 0.05f), b = e.input({320});
                 const Tensor y = e.output({122880, 320});
                 return [&e, x, w, b, y] { ops::linear(e.ctx, x, w, &b, y); };
               }});
  v.push_back(temporal_case("temporal_conv C320 40x64 B2 F24", 2, 24, 320, 40 * 64, 1, true, true));
  // Temporal attention at level 0: B*H*W = 2*40*64 sequences, 5 heads of 64, F = 24, p = 8, G = 16.
  v.push_back(attention_case("temporal attention F24 p8 G16 5120x5h d64", {5120, 5, 24, 40, 16, 64, 64},
                             banded(0.125f, 0, 16, 0.f, 10.f)));
  // Spatial self-attention at level 0: 40x64 = 2560 tokens, 5 heads of 64 (4 of the 48 images).
  v.push_back(attention_case("spatial attention 2560 tokens 4x5h d64", {4, 5, 2560, 2560, 0, 64, 64}, full(0.125f)));
  // The CPU benchmarks' narrow UNet (widths 32..128, head dim 8) at a 32x32 latent, 16 images.
  v.push_back(attention_case("spatial attention 1024 tokens 16x4h d8", {16, 4, 1024, 1024, 0, 8, 8}, full(0.35f)));
  // ... its cross-attention there (16 text tokens), and its temporal attention: B*H*W = 2*32*32
  // sequences of F = 8 frames. Few keys per row: the per-row work, not the products, sets the time.
  v.push_back(attention_case("cross attention 1024x16 tokens 16x4h d8", {16, 4, 1024, 16, 0, 8, 8}, full(0.35f)));
  v.push_back(attention_case("temporal attention F8 2048x4h d8", {2048, 4, 8, 8, 0, 8, 8}, full(0.35f)));
  // The small preset at the same latent, level 0 (64 channels: 2 heads of 32), 16 of its 32 images.
  v.push_back(attention_case("spatial attention 1024 tokens 16x2h d32", {16, 2, 1024, 1024, 0, 32, 32},
                             full(1.f / std::sqrt(32.f))));
  // ... and its temporal attention there: B*H*W = 2*32*32 sequences of F = 16 frames.
  v.push_back(
      attention_case("temporal attention F16 2048x2h d32", {2048, 2, 16, 16, 0, 32, 32}, full(1.f / std::sqrt(32.f))));
  return v;
}

}  // namespace vinf::opcheck
