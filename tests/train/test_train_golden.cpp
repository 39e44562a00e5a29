// One training step of the tiny UNet against PyTorch's (tests/fixtures/tiny-unet3d/train): the
// prediction, the loss, the gradient of every parameter and of the clean latents.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../support.hpp"
#include "io/safetensors.hpp"
#include "model/params.hpp"
#include "model/unet3d.hpp"
#include "ops/elementwise.hpp"
#include "sampling/scheduler.hpp"
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
}
