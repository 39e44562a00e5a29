// One training step of the tiny UNet against PyTorch's (tests/fixtures/tiny-unet3d/train): the
// prediction, the loss, the gradient of every parameter and of the clean latents.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "../support.hpp"
#include "io/safetensors.hpp"
#include "model/params.hpp"
#include "model/unet3d.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"
#include "sampling/scheduler.hpp"
#include "train/adamw.hpp"
#include "model/lora.hpp"
#include "train/unet_loss.hpp"

using namespace vinf;

namespace {

struct TinyTraining {
  Runtime rt{Device::cpu()};
  io::SafetensorsFile ref{test::fixture("tiny-unet3d/train/ref_train_step.safetensors")};
  model::ModelFiles files = model::find_model_files(test::fixture("tiny-unet3d"));
  model::UNetConfig config = model::load_unet_config(files.config, nullptr);
  std::vector<model::ParamSpec> specs = model::unet_parameters(config);
  model::WeightFiles wf{files};
  model::Weights weights{wf, specs, rt, DType::f32, false, nullptr};

  std::vector<std::pair<std::string, Shape>> all_params() const {
    std::vector<std::pair<std::string, Shape>> v;
    for (const auto& p : specs) v.emplace_back(p.name, p.shape);
    return v;
  }
  train::ParamLookup lookup() const {
    return [this](const std::string& n) { return weights.find(n); };
  }
  train::LossBatch batch() const {
    train::LossBatch b{ref.tensor("x0"), ref.tensor("eps"), ref.tensor("encoder_hidden_states"), {}, 24};
    const Tensor t = ref.tensor("timesteps");
    for (std::int64_t i = 0; i < t.numel(); ++i) b.timesteps.push_back(t.ptr<std::int64_t>()[i]);
    b.fps = static_cast<double>(ref.tensor("fps").ptr<std::int64_t>()[0]);
    return b;
  }
};

// max |a - ref| / max |ref|.
double relative_to_largest(const Tensor& a, const Tensor& ref) {
  REQUIRE(a.numel() == ref.numel());
  double worst = 0, largest = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a.ptr<float>()[i]) - ref.ptr<float>()[i]));
    largest = std::max(largest, std::fabs(static_cast<double>(ref.ptr<float>()[i])));
  }
  return largest > 0 ? worst / largest : worst;
}

}  // namespace

TEST_CASE("training: the tiny UNet's loss and every gradient match PyTorch's") {
  TinyTraining tt;
  train::ParamGrads grads(tt.rt.arena(), tt.all_params());
  grads.zero(tt.rt.ctx());
  const train::LossBatch batch = tt.batch();
  OwnedTensor gx0 = tt.rt.arena().empty(DType::f32, batch.x0.shape);
  ops::fill(tt.rt.ctx(), gx0, 0.0);
  const auto abar = sampling::make_alphas_cumprod(sampling::NoiseScheduleConfig{});
  const train::LossResult r = train::unet_loss_backward(tt.rt.ctx(), tt.config, tt.lookup(), grads, abar, batch,
                                                        batch.x0.numel(), &gx0);
  const double loss = r.sum_squares / static_cast<double>(r.elements);
  const double ref_loss = tt.ref.tensor("loss").ptr<float>()[0];
  CHECK(r.elements == batch.x0.numel());
  CHECK(std::fabs(loss - ref_loss) <= 1e-5 * std::fabs(ref_loss));

  double worst = 0;
  std::string worst_name;
  for (const auto& [name, g] : grads.list()) {
    const std::string key = "grad." + name;
    REQUIRE_MESSAGE(tt.ref.contains(key), key);
    const double e = relative_to_largest(g, tt.ref.tensor(key));
    if (e > worst) worst = e, worst_name = name;
  }
  CAPTURE(worst_name);
  CHECK(worst <= 1e-4);
  CHECK(grads.list().size() == tt.specs.size());
  CHECK(relative_to_largest(gx0, tt.ref.tensor("grad.x0")) <= 1e-4);
  MESSAGE("worst gradient " << worst_name << ": " << worst << " of its largest magnitude");

  // The global norm, then clip_grad_norm_(1.0) and one AdamW step with the fixture's settings.
  const double norm = train::global_norm(tt.rt.ctx(), grads);
  const double ref_norm = tt.ref.tensor("grad_norm").ptr<float>()[0];
  CHECK(std::fabs(norm - ref_norm) <= 1e-5 * ref_norm);
  const auto meta = tt.ref.metadata();
  REQUIRE(meta.count("adamw"));
  const train::AdamWSettings s = train::parse_adamw_json(meta.at("adamw"), "the fixture's adamw", {});
  CHECK(s.lr == doctest::Approx(1e-3));
  CHECK(s.weight_decay == doctest::Approx(1e-2));
  train::AdamW opt(tt.rt.arena(), tt.rt.ctx(), grads);
  opt.step(tt.rt.ctx(), grads, tt.lookup(), s, s.lr, train::clip_scale(norm, s.clip_grad_norm));
  // The first step moves each element by u(g) = lr g / (|g| + e) (plus the decay), e = eps / the
  // clipping scale. Gradients within dg of PyTorch's give steps within lr e dg / (|g| + e)^2 of
  // its; with dg = 1e-5 of the tensor's largest gradient (3x the worst difference above), plus
  // 1e-4 lr and the f32 rounding of the two updates (4e-7 |p|), that bounds every element.
  const double e = s.eps / train::clip_scale(norm, s.clip_grad_norm);
  std::int64_t compared = 0, worse = 0, sensitive = 0;
  for (const auto& spec : tt.specs) {
    const Tensor& p = *tt.weights.find(spec.name);
    const Tensor ref = tt.ref.tensor("adamw." + spec.name);
    const Tensor gref = tt.ref.tensor("grad." + spec.name);
    double largest = 0;
    for (std::int64_t i = 0; i < gref.numel(); ++i)
      largest = std::max(largest, std::fabs(static_cast<double>(gref.ptr<float>()[i])));
    for (std::int64_t i = 0; i < p.numel(); ++i) {
      const double r = ref.ptr<float>()[i], g = std::fabs(static_cast<double>(gref.ptr<float>()[i]));
      const double sensitivity = s.lr * e * 1e-5 * largest / ((g + e) * (g + e));
      if (sensitivity > 1e-4 * s.lr) ++sensitive;
      ++compared;
      if (std::fabs(static_cast<double>(p.ptr<float>()[i]) - r) > 1e-4 * s.lr + 4e-7 * std::fabs(r) + sensitivity) ++worse;
    }
  }
  CHECK(worse == 0);
  CHECK(sensitive < compared / 100);  // the bound is tight for nearly every element
  MESSAGE("AdamW step: " << compared << " elements, " << sensitive << " of them with small gradients");
}

TEST_CASE("training: activation checkpointing gives the same gradients in less memory") {
  TinyTraining tt;
  const train::LossBatch batch = tt.batch();
  const auto abar = sampling::make_alphas_cumprod(sampling::NoiseScheduleConfig{});
  auto run = [&](bool checkpointing, double& peak_mib) {
    auto grads = std::make_unique<train::ParamGrads>(tt.rt.arena(), tt.all_params());
    grads->zero(tt.rt.ctx());
    OwnedTensor gx0 = tt.rt.arena().empty(DType::f32, batch.x0.shape);
    ops::fill(tt.rt.ctx(), gx0, 0.0);
    const std::size_t before = tt.rt.arena().stats().in_use;
    tt.rt.arena().reset_peak();
    train::unet_loss_backward(tt.rt.ctx(), tt.config, tt.lookup(), *grads, abar, batch, batch.x0.numel(), &gx0,
                              checkpointing);
    peak_mib = static_cast<double>(tt.rt.arena().stats().peak_in_use - before) / (1 << 20);
    std::vector<float> gx(static_cast<std::size_t>(gx0.numel()));
    std::copy(gx0.ptr<float>(), gx0.ptr<float>() + gx0.numel(), gx.begin());
    return std::make_pair(std::move(grads), gx);
  };
  double plain_mib = 0, checkpointed_mib = 0;
  const auto plain = run(false, plain_mib);
  const auto checkpointed = run(true, checkpointed_mib);
  // The same ops on the same values; only the order in which a block's input collects its
  // gradients differs (inside the block first, then onto what came from outside).
  double worst = 0;
  for (std::size_t i = 0; i < plain.first->list().size(); ++i) {
    const Tensor& a = plain.first->list()[i].second;
    const Tensor& b = checkpointed.first->list()[i].second;
    worst = std::max(worst, relative_to_largest(b, a));
    CHECK(relative_to_largest(b, tt.ref.tensor("grad." + plain.first->list()[i].first)) <= 1e-4);
  }
  CHECK(worst <= 1e-5);
  double dx = 0, largest = 0;
  for (std::size_t i = 0; i < plain.second.size(); ++i) {
    dx = std::max(dx, std::fabs(static_cast<double>(plain.second[i]) - checkpointed.second[i]));
    largest = std::max(largest, std::fabs(static_cast<double>(plain.second[i])));
  }
  CHECK(dx <= 1e-5 * largest);
  MESSAGE("peak activation memory " << plain_mib << " MiB without checkpointing, " << checkpointed_mib << " MiB with");
  CHECK(checkpointed_mib < 0.8 * plain_mib);
}

TEST_CASE("training: LoRA adapters train through the graph as the merged weights would") {
  TinyTraining tt;
  const train::LossBatch batch = tt.batch();
  const auto abar = sampling::make_alphas_cumprod(sampling::NoiseScheduleConfig{});
  model::LoraAdapters lora(tt.rt.arena(), tt.rt.ctx(), tt.specs, 4, 8.f, 5);  // scale alpha / rank = 2
  CHECK(lora.parameters().size() == 2 * model::lora_targets(tt.specs).size());
  CHECK(model::lora_targets(tt.specs).size() == 72);  // 18 attention modules x to_q, to_k, to_v, to_out.0
  const auto lookup = [&](const std::string& n) {
    const Tensor* t = lora.find(n);
    return t ? t : tt.weights.find(n);
  };
  // B = 0 at the start: the base model's loss, dL/dA = 0 and dL/dB = scale dL/dW A^T.
  train::ParamGrads full(tt.rt.arena(), tt.all_params());
  full.zero(tt.rt.ctx());
  const double base = train::unet_loss_backward(tt.rt.ctx(), tt.config, tt.lookup(), full, abar, batch,
                                                batch.x0.numel(), nullptr).sum_squares;
  train::ParamGrads g(tt.rt.arena(), lora.parameters());
  g.zero(tt.rt.ctx());
  const double with = train::unet_loss_backward(tt.rt.ctx(), tt.config, lookup, g, abar, batch, batch.x0.numel(),
                                                nullptr, false, lora.scale()).sum_squares;
  CHECK(with == doctest::Approx(base).epsilon(1e-6));
  double worst = 0;
  for (const auto& t : model::lora_targets(tt.specs)) {
    const std::string m = t.name.substr(0, t.name.size() - 7);
    const Tensor& a = *lora.find(m + ".lora_A.weight");
    const Tensor& ga = *g.find(m + ".lora_A.weight");
    const Tensor& gb = *g.find(m + ".lora_B.weight");
    const Tensor& gw = *full.find(t.name);
    const std::int64_t out = gw.size(0), in = gw.size(1), r = a.size(0);
    double largest = 0, diff = 0;
    for (std::int64_t i = 0; i < out; ++i)
      for (std::int64_t k = 0; k < r; ++k) {
        double want = 0;
        for (std::int64_t j = 0; j < in; ++j) want += static_cast<double>(gw.ptr<float>()[i * in + j]) * a.ptr<float>()[k * in + j];
        want *= lora.scale();
        largest = std::max(largest, std::fabs(want));
        diff = std::max(diff, std::fabs(want - gb.ptr<float>()[i * r + k]));
      }
    worst = std::max(worst, diff / largest);
    for (std::int64_t i = 0; i < ga.numel(); ++i) REQUIRE(ga.ptr<float>()[i] == 0.f);
  }
  CHECK(worst <= 1e-5);
  // With B != 0 (small, as after some training: adapters large enough to saturate the attention
  // would make the comparison one of rounding amplified) the adapters' loss is the loss of the
  // weights with B A merged in.
  for (const auto& [name, shape] : lora.parameters())
    if (name.find("lora_B") != std::string::npos) {
      ops::normal(tt.rt.ctx(), *lora.find(name), 9, shape[0], 0);
      ops::scale(tt.rt.ctx(), *lora.find(name), 0.05f, *lora.find(name));
    }
  g.zero(tt.rt.ctx());
  const double adapted = train::unet_loss_backward(tt.rt.ctx(), tt.config, lookup, g, abar, batch, batch.x0.numel(),
                                                   nullptr, false, lora.scale()).sum_squares;
  lora.merge_into(tt.rt.ctx(), tt.weights, lora.scale());
  full.zero(tt.rt.ctx());
  const double merged = train::unet_loss_backward(tt.rt.ctx(), tt.config, tt.lookup(), full, abar, batch,
                                                  batch.x0.numel(), nullptr).sum_squares;
  CHECK(std::fabs(adapted - base) > 1e-3 * base);  // the adapters do change the model
  CHECK(adapted == doctest::Approx(merged).epsilon(1e-5));
}
