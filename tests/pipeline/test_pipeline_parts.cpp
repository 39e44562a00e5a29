// The parts of the pipeline layer every family shares: the family of a model directory, the
// guidance's layouts and their combination, a command's one voice for its messages, and the
// required-input checks of io/safetensors.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/progress.hpp"
#include "io/safetensors.hpp"
#include "ops/runtime.hpp"
#include "pipeline/family.hpp"
#include "pipeline/guidance.hpp"
#include "../support.hpp"

using namespace vinf;
using pipeline::Guidance;
using pipeline::ModelFamily;

TEST_CASE("model_family: a Wan transformer in DIR or DIR/transformer is the Wan family, anything else the UNet's") {
  CHECK(pipeline::model_family(test::fixture("wan-tiny")) == ModelFamily::wan);
  CHECK(pipeline::model_family(test::fixture("wan-tiny/transformer")) == ModelFamily::wan);
  CHECK(pipeline::model_family(test::fixture("tiny-unet3d")) == ModelFamily::unet);
  CHECK(pipeline::model_family("builtin:tiny") == ModelFamily::unet);
  CHECK(pipeline::vae_family(test::fixture("wan-tiny")) == ModelFamily::wan);
  CHECK(pipeline::vae_family(test::fixture("wan-tiny/vae")) == ModelFamily::wan);
  CHECK(pipeline::vae_family(test::fixture("tiny-unet3d/vae")) == ModelFamily::unet);
}

TEST_CASE("Guidance: the layout from the guidance and the cfg group, and uncond + scale (cond - uncond)") {
  CHECK(Guidance::of(false, 5.f, nullptr).layout == Guidance::Layout::none);
  CHECK(Guidance::of(true, 5.f, nullptr).layout == Guidance::Layout::batched);
  CHECK(Guidance::of(true, 5.f, nullptr).batch() == 2);
  CHECK(Guidance::of(false, 5.f, nullptr).batch() == 1);
  Runtime rt(Device::cpu());
  std::vector<float> pred = {1.f, 2.f, -1.f, 3.f, 5.f, 0.5f}, out(3, 0.f);
  const Tensor p = Tensor::wrap(pred.data(), DType::f32, Device::cpu(), {2, 3});
  const Tensor o = Tensor::wrap(out.data(), DType::f32, Device::cpu(), {1, 3});
  Guidance::of(true, 2.5f, nullptr).combine(rt.ctx(), p, Tensor{}, o);
  rt.synchronize();
  for (int i = 0; i < 3; ++i) {
    const float u = pred[static_cast<std::size_t>(i)], c = pred[static_cast<std::size_t>(3 + i)];
    CHECK(out[static_cast<std::size_t>(i)] == doctest::Approx(u + 2.5f * (c - u)).epsilon(1e-6));
  }
  // Not guided: the prediction as it is.
  Guidance::of(false, 2.5f, nullptr).combine(rt.ctx(), p.slice(0, 1, 1), Tensor{}, o);
  rt.synchronize();
  CHECK(out == std::vector<float>{3.f, 5.f, 0.5f});
}

TEST_CASE("Reporter: say under the prefix unless quiet, detail only when verbose, warnings also when quiet") {
  std::ostringstream captured;
  std::streambuf* old = std::cerr.rdbuf(captured.rdbuf());
  const Reporter normal("vinf test:", true), quiet("vinf test:", true, true, true), silent("vinf test:", false);
  normal.say("one");
  normal.detail("hidden");
  quiet.say("hidden");
  quiet.detail("two");
  quiet.warn("three");
  silent.say("hidden");
  silent.warn("hidden");
  std::cerr.rdbuf(old);
  CHECK(captured.str() == "vinf test: one\nvinf test: two\nvinf test: warning: three\n");
}

TEST_CASE("require_tensor / require_values: a missing tensor, a wrong rank, dtype or an empty one, named") {
  const std::string path = (std::filesystem::temp_directory_path() / "vinf_require_inputs.safetensors").string();
  std::vector<float> x(6, 1.f);
  std::vector<std::int64_t> ids = {1, 2};
  io::write_safetensors(path, {{"x", DType::f32, {2, 3}, x.data(), {}},
                               {"ids", DType::i64, {2}, ids.data(), {}},
                               {"none", DType::f32, {0, 3}, x.data(), {}}});
  const io::SafetensorsFile f(path);
  CHECK(io::require_values(f, "x", 2, "[A,B]", "x and ids").shape == Shape{2, 3});
  CHECK_THROWS_WITH_AS(io::require_tensor(f, "y", 2, "[A,B]", "x and ids"),
                       doctest::Contains((path + " has no tensor 'y' (x and ids)").c_str()), InputError);
  CHECK_THROWS_WITH_AS(io::require_tensor(f, "x", 3, "[A,B,C]", "x"),
                       doctest::Contains((path + ": 'x' must be [A,B,C], got shape [2,3]").c_str()), InputError);
  CHECK_THROWS_WITH_AS(io::require_values(f, "ids", 1, "[N]", "ids"),
                       doctest::Contains((path + ": 'ids' must be F32 (or F16/BF16), got I64").c_str()), InputError);
  CHECK(io::require_values(f, "ids", 1, "[N]", "ids", true).dtype == DType::i64);
  CHECK_THROWS_WITH_AS(io::require_values(f, "none", 2, "[A,B]", "none"),
                       doctest::Contains((path + ": 'none' [0,3] is empty").c_str()), InputError);
  std::remove(path.c_str());
}
