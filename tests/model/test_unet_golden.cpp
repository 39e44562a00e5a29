// The whole UNet against diffusers' own outputs for the tiny fixture model
// (tests/fixtures/tiny-unet3d): every recorded module output at t = 900, the final noise
// prediction at t = 900 and 500, and the fps path (a model without it gives diffusers' no-fps
// numbers, and those differ from the real ones).
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <vector>

#include "../support.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/presets.hpp"
#include "model/unet3d.hpp"
#include "ops/elementwise.hpp"

using namespace vinf;

namespace {

struct Golden {
  io::SafetensorsFile inputs{test::fixture("tiny-unet3d/inputs.safetensors")};
  io::SafetensorsFile ref{test::fixture("tiny-unet3d/ref_plain.safetensors")};
  io::SafetensorsFile stages{test::fixture("tiny-unet3d/ref_plain_intermediates.t900.safetensors")};
};

model::UNet3D load_tiny(Runtime& rt, DType dtype, bool fps = true) {
  const model::ModelFiles files = model::find_model_files(test::fixture("tiny-unet3d"));
  model::UNetConfig c = model::load_unet_config(files.config, nullptr);
  c.fps_cond = fps;
  const model::WeightFiles wf(files);
  return model::UNet3D(c, model::Weights(wf, model::unet_parameters(c), rt, dtype, !fps, nullptr));
}

std::vector<float> to_host(Runtime& rt, const Tensor& t) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  ops::copy(rt.ctx(), t, Tensor::wrap(v.data(), DType::f32, Device::cpu(), t.shape));
  return v;
}

double max_abs_diff(const std::vector<float>& a, const Tensor& ref) {
  REQUIRE(static_cast<std::int64_t>(a.size()) == ref.numel());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - ref.ptr<float>()[i]));
  return worst;
}

// Runs the model on the fixture inputs at timestep t; returns the noise prediction on the host.
std::vector<float> run(Runtime& rt, const model::UNet3D& unet, Golden& g, std::int64_t t,
                       const model::UNet3D::Observer& observe = {}) {
  const Tensor sample_h = g.inputs.tensor("sample"), text_h = g.inputs.tensor("encoder_hidden_states");
  OwnedTensor sample = rt.arena().empty(DType::f32, sample_h.shape), text = rt.arena().empty(DType::f32, text_h.shape);
  ops::copy(rt.ctx(), sample_h, sample);
  ops::copy(rt.ctx(), text_h, text);
  OwnedTensor out = rt.arena().empty(DType::f32, sample_h.shape);
  model::PlainTemporalContext plain;
  const double fps = static_cast<double>(g.inputs.tensor("fps").ptr<std::int64_t>()[0]);
  unet.forward(rt.ctx(), sample, t, fps, text, out, plain, observe);
  return to_host(rt, out);
}

void check_stages_and_outputs(Runtime& rt, DType dtype, double tol) {
  Golden g;
  const model::UNet3D unet = load_tiny(rt, dtype);
  std::map<std::string, double> errors;
  const auto observe = [&](const std::string& name, const Tensor& t) {
    if (g.stages.contains(name + ".out")) errors[name + ".out"] = max_abs_diff(to_host(rt, t), g.stages.tensor(name + ".out"));
    else if (g.stages.contains(name)) errors[name] = max_abs_diff(to_host(rt, t), g.stages.tensor(name));
  };
  const std::vector<float> t900 = run(rt, unet, g, 900, observe);
  CHECK(errors.size() == g.stages.entries().size());  // every recorded module input and output was seen
  for (const auto& [name, err] : errors) {
    CAPTURE(name);
    CHECK(err < tol);
  }
  CHECK(max_abs_diff(t900, g.ref.tensor("noise_pred.t900")) < tol);
  CHECK(max_abs_diff(run(rt, unet, g, 500), g.ref.tensor("noise_pred.t500")) < tol);
}

}  // namespace

TEST_CASE("golden: UNet3D forward equals diffusers stage by stage (CPU fast, f32)") {
  Runtime rt(Device::cpu());
  check_stages_and_outputs(rt, DType::f32, 1e-4);
}

TEST_CASE("golden: UNet3D forward equals diffusers on the CPU reference ops") {
  Runtime rt(Device::cpu(), CpuImpl::reference);
  check_stages_and_outputs(rt, DType::f32, 1e-4);
}

TEST_CASE("golden: the fps embedding is live and matches diffusers without it") {
  Runtime rt(Device::cpu());
  Golden g;
  const std::vector<float> with = run(rt, load_tiny(rt, DType::f32, true), g, 900);
  const std::vector<float> without = run(rt, load_tiny(rt, DType::f32, false), g, 900);
  const Tensor nofps = g.ref.tensor("noise_pred_nofps.t900");
  CHECK(max_abs_diff(without, nofps) < 1e-4);
  CHECK(max_abs_diff(with, nofps) > 0.1);  // diffusers' two outputs differ by up to 0.46
}

TEST_CASE("latent sizes that are not multiples of the downsampling factor run: upsampling goes to the skip's size") {
  Runtime rt(Device::cpu());
  const model::UNet3D unet = load_tiny(rt, DType::f32);
  for (const Shape& shape : {Shape{1, 4, 3, 7, 5}, Shape{2, 4, 1, 9, 9}}) {
    OwnedTensor sample = rt.arena().empty(DType::f32, shape), text = rt.arena().empty(DType::f32, {shape[0], 8, 32});
    OwnedTensor out = rt.arena().empty(DType::f32, shape);
    ops::fill(rt.ctx(), sample, 0.5);
    ops::fill(rt.ctx(), text, -0.25);
    ops::fill(rt.ctx(), out, NAN);
    model::PlainTemporalContext plain;
    std::vector<std::string> seen;
    unet.forward(rt.ctx(), sample, 400, 24, text, out, plain, [&](const std::string& name, const Tensor& t) {
      if (name == "down_blocks.0") CHECK(t.shape == Shape{shape[0] * shape[2], 32, (shape[3] + 1) / 2, (shape[4] + 1) / 2});
      if (name == "up_blocks.0") CHECK(t.shape == Shape{shape[0] * shape[2], 64, shape[3], shape[4]});
      seen.push_back(name);
    });
    CHECK(seen.size() > 10);
    bool finite = true;
    for (std::int64_t i = 0; i < out.numel(); ++i) finite = finite && std::isfinite(out.ptr<float>()[i]);
    CHECK(finite);
  }
  // Inputs that do not fit the model are refused with what was expected.
  OwnedTensor bad = rt.arena().empty(DType::f32, {1, 3, 2, 8, 8}), text = rt.arena().empty(DType::f32, {1, 8, 32});
  OwnedTensor out = rt.arena().empty(DType::f32, {1, 4, 2, 8, 8});
  model::PlainTemporalContext plain;
  CHECK_THROWS_WITH_AS(unet.forward(rt.ctx(), bad, 1, 24, text, out, plain), doctest::Contains("the UNet takes a sample (B, 4, F, H, W)"),
                       InputError);
  OwnedTensor good = rt.arena().empty(DType::f32, {1, 4, 2, 8, 8}), wide = rt.arena().empty(DType::f32, {1, 8, 16});
  CHECK_THROWS_WITH_AS(unet.forward(rt.ctx(), good, 1, 24, wide, out, plain), doctest::Contains("(B = 1, L, 32)"), InputError);
}

TEST_CASE("observed_module_names lists what the forward pass reports, in its order") {
  Runtime rt(Device::cpu());
  model::UNetConfig c = model::preset_config("tiny");
  for (int layers : {1, 2}) {
    CAPTURE(layers);
    c.layers_per_block = layers;
    const model::UNet3D unet(c, model::Weights::random(model::unet_parameters(c), rt, DType::f32, 3));
    OwnedTensor sample = rt.arena().empty(DType::f32, {1, 4, 2, 8, 8});
    OwnedTensor text = rt.arena().empty(DType::f32, {1, 4, c.cross_attention_dim});
    OwnedTensor out = rt.arena().empty(DType::f32, {1, 4, 2, 8, 8});
    ops::fill(rt.ctx(), sample, 0.5);
    ops::fill(rt.ctx(), text, -0.25);
    model::PlainTemporalContext plain;
    std::vector<std::string> seen;
    unet.forward(rt.ctx(), sample, 400, 24, text, out, plain,
                 [&](const std::string& name, const Tensor&) { seen.push_back(name); });
    const std::vector<std::string> listed = model::observed_module_names(c);
    CHECK(seen == listed);
    CHECK(listed.size() > 30);
  }
}
