// Wan2.1's transformer against diffusers' own numbers (tests/fixtures/wan-tiny: a tiny random
// WanTransformer3DModel): every module the reference records at the first timestep, the rotary
// table, and the prediction at both timesteps, on the CPU and, where one is visible, on a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <string>

#include "../support.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/wan_transformer.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

using namespace vinf;

namespace {

// The largest |a - b| over a tensor of the reference (f32, on the host) and a host copy.
double max_diff(const Tensor& want, const std::vector<float>& got) {
  REQUIRE(static_cast<std::size_t>(want.numel()) == got.size());
  double worst = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(got[static_cast<std::size_t>(i)]) - want.ptr<float>()[i]));
  return worst;
}

// Runs the fixture's transformer at timesteps[index] and checks the prediction (and, at index 0,
// every recorded intermediate) to `tol`.
void check_fixture(Device device, std::int64_t index, double tol) {
  Runtime rt(device);
  std::vector<std::string> warnings;
  const model::WanTransformer wan =
      model::WanTransformer::load(test::fixture("wan-tiny/transformer"), rt, DType::f32, false, &warnings);
  CHECK(warnings.empty());
  CHECK(wan.weights().count() == 40864);
  const io::SafetensorsFile in(test::fixture("wan-tiny/inputs.safetensors"));
  const io::SafetensorsFile ref(test::fixture("wan-tiny/ref.safetensors"));
  const Tensor x = in.tensor("hidden_states"), text = in.tensor("encoder_hidden_states");
  const float tv = in.tensor("timesteps").ptr<float>()[index];
  const std::int64_t B = x.size(0);
  OwnedTensor xd = rt.arena().empty(DType::f32, x.shape), td = rt.arena().empty(DType::f32, {B}),
              ed = rt.arena().empty(DType::f32, text.shape), out = rt.arena().empty(DType::f32, x.shape);
  ops::copy(rt.ctx(), x, xd);
  ops::copy(rt.ctx(), text, ed);
  std::vector<float> ts(static_cast<std::size_t>(B), tv);
  ops::copy(rt.ctx(), Tensor::wrap(ts.data(), DType::f32, Device::cpu(), {B}), td);
  std::map<std::string, std::vector<float>> seen;
  model::WanProbe probe = [&](const std::string& name, const Tensor& v) { seen[name] = test::download(rt, v); };
  wan.forward(rt.ctx(), xd, td, ed, out, index == 0 ? probe : model::WanProbe{});
  const std::string key = "noise_pred.t" + std::to_string(index);
  const double pred = max_diff(ref.tensor(key), test::download(rt, out));
  INFO(device.name() << " " << key << ": max |diff| " << pred);
  CHECK(pred < tol);
  if (index != 0) return;
  int compared = 0;
  for (const io::SafetensorsFile::Entry& entry : ref.entries()) {
    const std::string& name = entry.name;
    const std::string prefix = "intermediates.t0.";
    if (name.rfind(prefix, 0) != 0 || name.rfind(prefix + "rope.", 0) == 0) continue;
    const std::string module = name.substr(prefix.size());
    INFO("intermediate " << module);
    REQUIRE(seen.count(module) == 1);
    const double d = max_diff(ref.tensor(name), seen[module]);
    INFO("max |diff| " << d);
    CHECK(d < tol);
    ++compared;
  }
  CHECK(compared == 8);  // patch embedding, temb, timestep_proj, text, 2 blocks, norm_out, proj_out
}

}  // namespace

TEST_CASE("golden: Wan transformer equals diffusers on the CPU, with every intermediate") {
  check_fixture(Device::cpu(), 0, 1e-4);
  check_fixture(Device::cpu(), 1, 1e-4);
}

TEST_CASE("golden: Wan transformer equals diffusers on CUDA") {
  if (!test::gpu_or_skip("Wan transformer on CUDA")) return;
  // cuBLAS may compute f32 products in another order (no TF32 here: f32 stays f32).
  check_fixture(Device::cuda(0), 0, 2e-4);
  check_fixture(Device::cuda(0), 1, 2e-4);
}

// The 3-D rotary table against the reference's complex table [1, 1, F H W, head_dim / 2].
TEST_CASE("golden: Wan rotary table equals diffusers") {
  const model::WanTransformerConfig c =
      model::load_wan_transformer_config(test::fixture("wan-tiny/transformer/config.json"));
  const model::RotaryTable t = model::wan_rotary_table(c, 5, 4, 4);
  const io::SafetensorsFile ref(test::fixture("wan-tiny/ref.safetensors"));
  CHECK(max_diff(ref.tensor("intermediates.t0.rope.freqs_real"), t.cos) < 1e-6);
  CHECK(max_diff(ref.tensor("intermediates.t0.rope.freqs_imag"), t.sin) < 1e-6);
  // Frame, height and width parts of Wan's real head size 128: 22, 21 and 21 pairs.
  model::WanTransformerConfig big = model::wan_transformer_preset("wan-1.3b");
  const model::RotaryTable r = model::wan_rotary_table(big, 2, 1, 1);
  REQUIRE(r.half == 64);
  CHECK(r.sin[0] == 0.f);
  CHECK(r.sin[64] == doctest::Approx(std::sin(1.0)));  // frame 1, pair 0: angle 1
  CHECK(r.sin[64 + 21] == doctest::Approx(std::sin(std::pow(10000.0, -42.0 / 44))));  // last frame pair
  CHECK(r.sin[64 + 22] == 0.f);  // first height pair: row 0
}

TEST_CASE("Wan transformer: configs refused with the file and key named") {
  const test::TempDir dir("wan-config");
  auto write = [&](const std::string& body) {
    const std::string path = dir.str() + "/config.json";
    std::ofstream(path) << body;
    return path;
  };
  CHECK_THROWS_WITH_AS(model::load_wan_transformer_config(write(R"({"image_dim": 1280})")),
                       doctest::Contains("image-to-video"), InputError);
  CHECK_THROWS_WITH_AS(model::load_wan_transformer_config(write(R"({"qk_norm": "rms_norm"})")),
                       doctest::Contains("qk_norm"), InputError);
  CHECK_THROWS_WITH_AS(model::load_wan_transformer_config(write(R"({"patch_size": [1, 2]})")),
                       doctest::Contains("patch_size"), InputError);
  CHECK_THROWS_WITH_AS(model::load_wan_transformer_config(write(R"({"num_layers": "2"})")),
                       doctest::Contains("num_layers"), InputError);
  CHECK_THROWS_WITH_AS(model::load_wan_transformer_config(write(R"({"_class_name": "UNet3DConditionModel"})")),
                       doctest::Contains("WanTransformer3DModel"), InputError);
}

// The presets' sizes, counted by hand from the architecture (patch embedding, time and text
// embedders, 6 x dim modulation, per block two attentions of four dim x dim products with q/k
// norms, the cross-attention norm, the feed-forward and its table; the output table and projection):
// Wan2.1's published 1.3B and 14B transformers.
TEST_CASE("Wan transformer: preset parameter counts are Wan2.1's") {
  CHECK(model::parameter_count(model::wan_transformer_parameters(model::wan_transformer_preset("wan-tiny"))) == 40864);
  CHECK(model::parameter_count(model::wan_transformer_parameters(model::wan_transformer_preset("wan-1.3b"))) ==
        1418996800);
  CHECK(model::parameter_count(model::wan_transformer_parameters(model::wan_transformer_preset("wan-14b"))) ==
        14288491584);
  CHECK_THROWS_WITH_AS(model::wan_transformer_preset("wan-7b"),
                       doctest::Contains("wan-tiny, wan-1.3b, wan-14b, wan-i2v-tiny"), InputError);
}

// The FLOP count of the benchmarks, by hand for wan-tiny on B 2, 5 x 8 x 8 latents (80 tokens of
// width 32), 12 text tokens: per block 80 (6 x 32^2 + 2 x 32 x 64) + 12 x 2 x 32^2 = 843,776
// multiply-adds, two blocks; the patch embedding and output projection 80 x 32 x 64 each; the text
// projection 12 x 2 x 32^2; the timestep's 32 x 32 + 32^2 + 6 x 32^2 = 8,192; all x 2 samples x 2.
// Attention: 2 samples x 2 blocks x (2 x 80^2 x 32 + 2 x 80 x 12 x 32) x 2.
TEST_CASE("Wan transformer: FLOPs of a call counted by hand") {
  const model::WanFlops f = model::wan_transformer_flops(model::wan_transformer_preset("wan-tiny"), 2, 5, 8, 8, 12);
  CHECK(f.linear == 4.0 * (2 * 843776 + 2 * 80 * 32 * 64 + 12 * 2 * 32 * 32 + 8192));
  CHECK(f.attention == 8.0 * (2 * 80 * 80 * 32 + 2 * 80 * 12 * 32));
}
