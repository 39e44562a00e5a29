// The whole UNet against diffusers' own outputs for the tiny fixture model
// (tests/fixtures/tiny-unet3d): every recorded module output at t = 900, the final noise
// prediction at t = 900 and 500, and the fps path (a model without it gives diffusers' no-fps
// numbers, and those differ from the real ones).
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <span>
#include <vector>

#include "../support.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/presets.hpp"
#include "model/unet3d.hpp"
#include "ops/elementwise.hpp"

using namespace vinf;
using test::max_abs_diff;

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

// Runs the model on the fixture inputs at timestep t (one, or one per frame); returns the noise
// prediction on the host.
std::vector<float> run(Runtime& rt, const model::UNet3D& unet, Golden& g, std::span<const std::int64_t> t,
                       const model::UNet3D::Observer& observe = {}) {
  const Tensor sample_h = g.inputs.tensor("sample"), text_h = g.inputs.tensor("encoder_hidden_states");
  OwnedTensor sample = rt.arena().empty(DType::f32, sample_h.shape), text = rt.arena().empty(DType::f32, text_h.shape);
  ops::copy(rt.ctx(), sample_h, sample);
  ops::copy(rt.ctx(), text_h, text);
  OwnedTensor out = rt.arena().empty(DType::f32, sample_h.shape);
  model::PlainTemporalContext plain;
  const double fps = static_cast<double>(g.inputs.tensor("fps").ptr<std::int64_t>()[0]);
  unet.forward(rt.ctx(), sample, t, fps, text, out, plain, observe);
  return test::download(rt, out);
}

std::vector<float> run(Runtime& rt, const model::UNet3D& unet, Golden& g, std::int64_t t,
                       const model::UNet3D::Observer& observe = {}) {
  return run(rt, unet, g, std::span<const std::int64_t>(&t, 1), observe);
}

void check_stages_and_outputs(Runtime& rt, DType dtype, double tol) {
  Golden g;
  const model::UNet3D unet = load_tiny(rt, dtype);
  std::map<std::string, double> errors;
  const auto observe = [&](const std::string& name, const Tensor& t) {
    if (g.stages.contains(name + ".out")) errors[name + ".out"] = max_abs_diff(test::download(rt, t), g.stages.tensor(name + ".out"));
    else if (g.stages.contains(name)) errors[name] = max_abs_diff(test::download(rt, t), g.stages.tensor(name));
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

TEST_CASE("one timestep per frame: all equal is the one-timestep call, each frame's time embedding is its timestep's") {
  Runtime rt(Device::cpu());
  Golden g;
  const model::UNet3D unet = load_tiny(rt, DType::f32);
  const std::int64_t b = g.inputs.tensor("sample").size(0), f = g.inputs.tensor("sample").size(2);
  REQUIRE(f >= 2);
  // The same timestep for every frame: bit for bit the call with one timestep (and diffusers').
  const std::vector<std::int64_t> same(static_cast<std::size_t>(f), 900);
  const std::vector<float> one = run(rt, unet, g, 900);
  CHECK(run(rt, unet, g, same) == one);
  CHECK(max_abs_diff(one, g.ref.tensor("noise_pred.t900")) < 1e-4);

  // Frames at 900 and 500 alternately: row b*F + f of the time embedding is the one-timestep
  // embedding of frame f's timestep (computed as a batch of B rows there, of B*F rows here).
  std::vector<std::int64_t> mixed(static_cast<std::size_t>(f));
  for (std::int64_t k = 0; k < f; ++k) mixed[static_cast<std::size_t>(k)] = k % 2 ? 500 : 900;
  std::map<std::int64_t, std::vector<float>> single;
  for (std::int64_t t : {900, 500})
    run(rt, unet, g, t, [&](const std::string& name, const Tensor& x) {
      if (name == "time_embedding") single[t] = test::download(rt, x);
    });
  std::vector<float> rows;
  const std::vector<float> out = run(rt, unet, g, mixed, [&](const std::string& name, const Tensor& x) {
    if (name == "time_embedding") rows = test::download(rt, x);
  });
  const std::size_t e = single[900].size() / static_cast<std::size_t>(b);
  REQUIRE(rows.size() == static_cast<std::size_t>(b * f) * e);
  double worst = 0;
  for (std::int64_t r = 0; r < b * f; ++r)
    for (std::size_t j = 0; j < e; ++j) {
      const float want = single[mixed[static_cast<std::size_t>(r % f)]][static_cast<std::size_t>(r / f) * e + j];
      worst = std::max(worst, std::fabs(static_cast<double>(rows[static_cast<std::size_t>(r) * e + j] - want)));
    }
  CHECK(worst < 1e-5);
  // The prediction is a mix: neither all-900 nor all-500 (diffusers' two differ by far more).
  const std::vector<float> five = run(rt, unet, g, 500);
  double d900 = 0, d500 = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    d900 = std::max(d900, std::fabs(static_cast<double>(out[i] - one[i])));
    d500 = std::max(d500, std::fabs(static_cast<double>(out[i] - five[i])));
  }
  CHECK(d900 > 1e-3);
  CHECK(d500 > 1e-3);
  // A count that is neither one nor the frames' is refused.
  const std::vector<std::int64_t> wrong(static_cast<std::size_t>(f + 1), 900);
  CHECK_THROWS_WITH_AS(run(rt, unet, g, wrong), doctest::Contains("one timestep, or one per frame"), InputError);
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
