// Mixed precision in training: the linear layers' bf16 products (Graph::set_products), the whole
// tiny UNet's step in bf16 against PyTorch's f32 one, and the optimizer's element-wise ops.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "../support.hpp"
#include "core/half.hpp"
#include "io/safetensors.hpp"
#include "model/params.hpp"
#include "model/unet3d.hpp"
#include "ops/elementwise.hpp"
#include "ops/optim.hpp"
#include "ops/random.hpp"
#include "sampling/scheduler.hpp"
#include "train/graph.hpp"
#include "train/unet_loss.hpp"

using namespace vinf;

namespace {

float bf16(float x) { return bf16_bits_to_f32(f32_to_bf16_bits(x)); }

// The CPU, and the GPU where there is one (the same checks: cuBLAS's bf16 products, the CUDA
// optimizer kernels).
std::vector<Device> devices(const char* what) {
  std::vector<Device> d{Device::cpu()};
  if (test::gpu_or_skip(what)) d.push_back(Device::cuda(0));
  return d;
}

std::vector<float> host(ExecContext& ctx, const Tensor& t) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  ops::copy(ctx, t, Tensor::wrap(v.data(), DType::f32, Device::cpu(), t.shape));
  return v;
}

// max |a - b| / max |b|.
double relative(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, largest = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    largest = std::max(largest, std::fabs(static_cast<double>(b[i])));
  }
  return largest > 0 ? worst / largest : worst;
}

}  // namespace

TEST_CASE("mixed precision: a linear layer multiplies bf16 operands and sums in f32") {
  for (const Device& device : devices("bf16 products on CUDA")) {
  CAPTURE(device.name());
  Runtime rt{device};
  ExecContext& ctx = rt.ctx();
  const std::int64_t m = 37, k = 29, n = 11;  // rows of x, in, out
  OwnedTensor w = rt.arena().empty(DType::f32, {n, k}), b = rt.arena().empty(DType::f32, {n});
  OwnedTensor x = rt.arena().empty(DType::f32, {m, k}), seed = rt.arena().empty(DType::f32, {m, n});
  ops::normal(ctx, w, 1, 0, 0);
  ops::normal(ctx, b, 1, 1, 0);
  ops::normal(ctx, x, 1, 2, 0);
  ops::normal(ctx, seed, 1, 3, 0);
  const std::vector<float> hw = host(ctx, w), hb = host(ctx, b), hx = host(ctx, x), hs = host(ctx, seed);

  auto run = [&](DType products, std::vector<float>& y, std::vector<float>& dx, std::vector<float>& dw,
                 std::vector<float>& db) {
    train::ParamGrads grads(rt.arena(), {{"l.weight", Shape{n, k}}, {"l.bias", Shape{n}}});
    grads.zero(ctx);
    train::Graph g(
        ctx, [&](const std::string& name) -> const Tensor* { return name == "l.weight" ? &w : name == "l.bias" ? &b : nullptr; },
        &grads);
    g.set_products(products);
    const train::Var in = g.input(x, true);
    const train::Var out = g.linear(in, "l");
    y = host(ctx, out->value);
    g.backward(out, seed);
    dx = host(ctx, g.grad(in));
    dw = host(ctx, *grads.find("l.weight"));
    db = host(ctx, *grads.find("l.bias"));
  };
  std::vector<float> y, dx, dw, db, y32, dx32, dw32, db32;
  run(DType::bf16, y, dx, dw, db);
  run(DType::f32, y32, dx32, dw32, db32);

  // The reference: the operands rounded to bf16 (x, w, and the output's gradient), products and
  // sums in double; the bias and its gradient in full precision.
  std::vector<double> ry(static_cast<std::size_t>(m * n)), rdx(static_cast<std::size_t>(m * k)),
      rdw(static_cast<std::size_t>(n * k)), rdb(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t o = 0; o < n; ++o) {
      double acc = hb[static_cast<std::size_t>(o)];
      for (std::int64_t j = 0; j < k; ++j)
        acc += static_cast<double>(bf16(hx[static_cast<std::size_t>(i * k + j)])) * bf16(hw[static_cast<std::size_t>(o * k + j)]);
      ry[static_cast<std::size_t>(i * n + o)] = acc;
      const double s = bf16(hs[static_cast<std::size_t>(i * n + o)]);
      rdb[static_cast<std::size_t>(o)] += hs[static_cast<std::size_t>(i * n + o)];
      for (std::int64_t j = 0; j < k; ++j) {
        rdx[static_cast<std::size_t>(i * k + j)] += s * bf16(hw[static_cast<std::size_t>(o * k + j)]);
        rdw[static_cast<std::size_t>(o * k + j)] += s * bf16(hx[static_cast<std::size_t>(i * k + j)]);
      }
    }
  // f32 sums of exact products: about k ulps of f32 at worst, far below bf16's 2^-8.
  auto near = [](const std::vector<float>& got, const std::vector<double>& want) {
    double worst = 0, largest = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::fabs(got[i] - want[i]));
      largest = std::max(largest, std::fabs(want[i]));
    }
    return worst / largest;
  };
  CHECK(near(y, ry) <= 1e-6);
  CHECK(near(dx, rdx) <= 1e-6);
  CHECK(near(dw, rdw) <= 1e-6);
  CHECK(near(db, rdb) <= 1e-6);
  // And the rounding is there: f32 products differ by about bf16's precision.
  const double dy = relative(y, y32), ddw = relative(dw, dw32);
  MESSAGE("bf16 against f32 products: y " << dy << ", dw " << ddw << " (relative to the largest)");
  CHECK(dy > 1e-4);
  CHECK(dy < 2e-2);
  CHECK(ddw > 1e-4);
  CHECK(ddw < 2e-2);
  }
}

TEST_CASE("mixed precision: the tiny UNet's step in bf16 stays within bf16's error of PyTorch's f32 one") {
  for (const Device& device : devices("the tiny UNet's bf16 step on CUDA")) {
  CAPTURE(device.name());
  Runtime rt{device};
  ExecContext& ctx = rt.ctx();
  io::SafetensorsFile ref{test::fixture("tiny-unet3d/train/ref_train_step.safetensors")};
  const model::ModelFiles files = model::find_model_files(test::fixture("tiny-unet3d"));
  const model::UNetConfig config = model::load_unet_config(files.config, nullptr);
  const std::vector<model::ParamSpec> specs = model::unet_parameters(config);
  const model::WeightFiles wf{files};
  model::Weights weights{wf, specs, rt, DType::f32, false, nullptr};
  std::vector<std::pair<std::string, Shape>> all;
  for (const auto& p : specs) all.emplace_back(p.name, p.shape);
  // The batch on the runtime's device.
  std::vector<OwnedTensor> on_device;
  for (const char* key : {"x0", "eps", "encoder_hidden_states"}) {
    const Tensor h = ref.tensor(key);
    on_device.push_back(rt.arena().empty(DType::f32, h.shape));
    ops::copy(ctx, h, on_device.back());
  }
  train::LossBatch batch{on_device[0], on_device[1], on_device[2], {}, 24};
  const Tensor t = ref.tensor("timesteps");
  for (std::int64_t i = 0; i < t.numel(); ++i) batch.timesteps.push_back(t.ptr<std::int64_t>()[i]);
  batch.fps = static_cast<double>(ref.tensor("fps").ptr<std::int64_t>()[0]);
  const auto abar = sampling::make_alphas_cumprod(sampling::NoiseScheduleConfig{});

  // The model computes with bf16 copies of its parameters, as vinf train's mixed precision does.
  OwnedTensor copies = rt.arena().empty(DType::bf16, {weights.count()});
  std::map<std::string, Tensor> by_name;
  std::int64_t at = 0;
  for (const auto& p : specs) {
    const Tensor view = copies.slice(0, at, p.shape.numel()).reshape(p.shape);
    ops::copy(ctx, *weights.find(p.name), view);
    by_name.emplace(p.name, view);
    at += p.shape.numel();
  }
  const auto lookup = [&by_name](const std::string& n) -> const Tensor* {
    const auto it = by_name.find(n);
    return it == by_name.end() ? nullptr : &it->second;
  };
  train::ParamGrads grads(rt.arena(), all);
  grads.zero(ctx);
  const train::LossResult r = train::unet_loss_backward(ctx, config, lookup, grads, abar, batch, batch.x0.numel(),
                                                        nullptr, false, 1.f, nullptr, DType::bf16);
  const double loss = r.sum_squares / static_cast<double>(batch.x0.numel());
  const double ref_loss = ref.tensor("loss").ptr<float>()[0];
  MESSAGE("loss " << loss << " in bf16, " << ref_loss << " in PyTorch's f32");
  CHECK(loss == doctest::Approx(ref_loss).epsilon(1e-2));
  // Every gradient relative to its largest element: bf16's 2^-8 relative rounding of the
  // operands, through a dozen layers, against f32 (measured: see the message).
  double worst = 0, total = 0;
  std::string worst_name;
  for (const auto& [name, g] : grads.list()) {
    const double e = relative(host(ctx, g), host(ctx, ref.tensor("grad." + name)));
    total += e;
    if (e > worst) worst = e, worst_name = name;
  }
  const double mean = total / static_cast<double>(grads.list().size());
  MESSAGE("gradients against f32: worst " << worst << " (" << worst_name << "), mean " << mean);
  CHECK(mean <= 2e-2);
  CHECK(worst <= 1e-1);
  }
}

TEST_CASE("optimizer ops: the AdamW update's formula, its bf16 copy and the sum of squares") {
  for (const Device& device : devices("the optimizer's CUDA kernels")) {
  CAPTURE(device.name());
  Runtime rt{device};
  ExecContext& ctx = rt.ctx();
  const std::int64_t n = 5000;
  OwnedTensor p = rt.arena().empty(DType::f32, {n}), g = rt.arena().empty(DType::f32, {n});
  OwnedTensor m = rt.arena().empty(DType::f32, {n}), v = rt.arena().empty(DType::f32, {n});
  OwnedTensor copy = rt.arena().empty(DType::bf16, {n});
  ops::normal(ctx, p, 3, 0, 0);
  ops::normal(ctx, g, 3, 1, 0);
  ops::normal(ctx, m, 3, 2, 0);
  ops::normal(ctx, v, 3, 3, 0);
  ops::mul(ctx, v, v, v);  // second moments are >= 0
  const std::vector<float> p0 = host(ctx, p), g0 = host(ctx, g), m0 = host(ctx, m), v0 = host(ctx, v);
  double squares = 0;
  for (float x : g0) squares += static_cast<double>(x) * x;
  CHECK(ops::sum_squares(ctx, g) == doctest::Approx(squares).epsilon(1e-12));

  ops::AdamWUpdate u;
  u.lr = 1e-3;
  u.decay = 1 - 1e-3 * 1e-2;
  u.c1 = 1 - std::pow(0.9, 3);
  u.c2 = std::sqrt(1 - std::pow(0.999, 3));
  u.grad_scale = 0.7;
  ops::adamw_update(ctx, u, p, g, m, v, &copy);
  const std::vector<float> p1 = host(ctx, p), m1 = host(ctx, m), v1 = host(ctx, v), c1 = host(ctx, copy);
  int wrong = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto j = static_cast<std::size_t>(i);
    const double gi = g0[j] * 0.7;
    const double mi = 0.9 * m0[j] + 0.1 * gi, vi = 0.999 * v0[j] + 0.001 * gi * gi;
    const double pi = p0[j] * u.decay - u.lr / u.c1 * mi / (std::sqrt(vi) / u.c2 + u.eps);
    if (std::fabs(m1[j] - mi) > 1e-7 * std::fabs(mi) + 1e-30 || std::fabs(v1[j] - vi) > 1e-7 * vi + 1e-30 ||
        std::fabs(p1[j] - pi) > 1e-7 * std::fabs(pi) + 1e-30 || c1[j] != bf16(p1[j]))
      ++wrong;
  }
  CHECK(wrong == 0);
  }
}
