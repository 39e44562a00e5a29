// The CLIP text encoder against transformers' own output (tests/fixtures/clip-text-tiny: a tiny
// random CLIPTextModel, erf GELU, causal mask, no padding mask), for pad id 49407 and pad id 0.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>

#include "../support.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/clip_text.hpp"
#include "model/tokenizer.hpp"
#include "ops/elementwise.hpp"

using namespace vinf;
namespace fs = std::filesystem;

namespace {

void check_hidden_state(const char* ids_key, const char* ref_key) {
  Runtime rt(Device::cpu());
  const model::ClipTextModel clip = model::ClipTextModel::load(test::fixture("clip-text-tiny"), rt, DType::f32);
  const io::SafetensorsFile inputs(test::fixture("clip-text-tiny/inputs.safetensors"));
  const io::SafetensorsFile ref(test::fixture("clip-text-tiny/ref.safetensors"));
  const Tensor ids = inputs.tensor(ids_key);
  const std::vector<std::int64_t> id_list(ids.ptr<std::int64_t>(), ids.ptr<std::int64_t>() + ids.numel());
  const std::int64_t batch = ids.size(0), tokens = ids.size(1), width = clip.config().hidden_size;
  test::HostTensor got({batch, tokens, width});
  OwnedTensor out = rt.arena().empty(DType::f32, {batch, tokens, width});
  clip.encode(rt.ctx(), id_list, batch, tokens, out);
  ops::copy(rt.ctx(), out, got);
  const Tensor want = ref.tensor(ref_key);
  REQUIRE(want.shape == got.t.shape);
  double worst = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(got.data[static_cast<std::size_t>(i)]) - want.ptr<float>()[i]));
  INFO(std::string(ref_key) << ": max |diff| " << worst);
  CHECK(worst < 1e-4);
}

}  // namespace

TEST_CASE("golden: CLIP text encoder equals transformers (pad 49407)") {
  check_hidden_state("input_ids", "last_hidden_state");
}

TEST_CASE("golden: CLIP text encoder equals transformers (pad 0)") {
  check_hidden_state("input_ids_pad0", "last_hidden_state_pad0");
}

// Text to conditioning in one go: the tokenizer of ../shared (skipped when absent) and the fixture
// encoder on the fixture's two prompts, for both pad ids.
TEST_CASE("golden: prompts through tokenizer and text encoder equal transformers") {
  if (!test::shared_tokenizer_or_skip()) return;
  Runtime rt(Device::cpu());
  const model::ClipTextModel clip = model::ClipTextModel::load(test::fixture("clip-text-tiny"), rt, DType::f32);
  const io::SafetensorsFile inputs(test::fixture("clip-text-tiny/inputs.safetensors"));
  const io::SafetensorsFile ref(test::fixture("clip-text-tiny/ref.safetensors"));
  const std::vector<std::string> prompts = {"", "A beagle wearing diving goggles swimming in the ocean while the camera "
                                                "is moving, coral reefs in the background."};
  const test::PadBangTokenizer bang;
  for (const auto& [dir, ids_key, ref_key] :
       {std::tuple{test::kSharedTokenizer, "input_ids", "last_hidden_state"}, std::tuple{bang.str(), "input_ids_pad0", "last_hidden_state_pad0"}}) {
    const model::ClipTokenizer tok = model::ClipTokenizer::load(dir);
    std::vector<model::TokenizedText> tokens;
    const std::vector<float> got = model::encode_prompts(rt, tok, clip, prompts, &tokens);
    const Tensor ids = inputs.tensor(ids_key);
    for (std::size_t p = 0; p < prompts.size(); ++p)
      CHECK(tokens[p].ids == std::vector<std::int64_t>(ids.ptr<std::int64_t>() + p * 77, ids.ptr<std::int64_t>() + (p + 1) * 77));
    const Tensor want = ref.tensor(ref_key);
    REQUIRE(static_cast<std::int64_t>(got.size()) == want.numel());
    double worst = 0;
    for (std::int64_t i = 0; i < want.numel(); ++i)
      worst = std::max(worst, std::fabs(static_cast<double>(got[static_cast<std::size_t>(i)]) - want.ptr<float>()[i]));
    INFO(ref_key << ": max |diff| " << worst);
    CHECK(worst < 1e-4);
  }
}

TEST_CASE("CLIP text encoder: config and inputs it refuses") {
  Runtime rt(Device::cpu());
  const model::ClipTextModel clip = model::ClipTextModel::load(test::fixture("clip-text-tiny"), rt, DType::f32);
  OwnedTensor out = rt.arena().empty(DType::f32, {1, 2, 32});
  CHECK_THROWS_WITH_AS(clip.encode(rt.ctx(), {49406, 49408}, 1, 2, out), doctest::Contains("outside the vocabulary"),
                       InputError);
  OwnedTensor long_out = rt.arena().empty(DType::f32, {1, 78, 32});
  CHECK_THROWS_WITH_AS(clip.encode(rt.ctx(), std::vector<std::int64_t>(78, 1), 1, 78, long_out),
                       doctest::Contains("at most 77 tokens"), InputError);
  CHECK_THROWS_AS(model::ClipTextModel::load(test::fixture("no-such-dir"), rt, DType::f32), InputError);
  CHECK(model::clip_text_parameters(model::ClipTextConfig{}).size() == 372);  // model-spec 5.3
}

TEST_CASE("CLIP text encoder: config numbers beyond any text encoder are refused by key") {
  const fs::path path = fs::temp_directory_path() / ("vinf-clip-config-" + std::to_string(::getpid()) + ".json");
  auto refusal = [&](const std::string& text) -> std::string {
    std::ofstream(path) << text;
    try {
      model::load_clip_text_config(path.string());
    } catch (const InputError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  CHECK(refusal(R"({"layer_norm_eps": -1e300})").find("config key 'layer_norm_eps' must be a number within float range") !=
        std::string::npos);
  // 2e9 x 2e9 embedding entries alone overflow the parameter count.
  CHECK(refusal(R"({"vocab_size": 2000000000, "hidden_size": 2000000000, "num_attention_heads": 1})")
            .find("vocab_size 2000000000 is more than 1048575") != std::string::npos);
  CHECK(refusal(R"({"num_hidden_layers": 100000})").find("num_hidden_layers 100000 is more than 256") !=
        std::string::npos);
  CHECK(refusal(R"({"layer_norm_eps": 0})").find("config key 'layer_norm_eps' must be positive, got 0") !=
        std::string::npos);
  CHECK(refusal(R"({"layer_norm_eps": 1e-300})").find("must be positive") != std::string::npos);  // 0 in f32
  CHECK(refusal(R"({"hidden_size": 64, "num_attention_heads": 4})") == "(accepted)");
  fs::remove(path);
}
