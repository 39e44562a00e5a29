// The UMT5 text encoder against transformers' UMT5EncoderModel on tests/fixtures/wan-tiny; the
// relative position buckets, the zeroing past a prompt's length and the
// config's refusals on their own.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/t5_tokenizer.hpp"
#include "model/umt5.hpp"
#include "wan_fixture.hpp"

using namespace vinf;

TEST_CASE("UMT5: relative position buckets as transformers' _relative_position_bucket (32 buckets, distance 128)") {
  // 16 buckets per sign, 8 of them exact (|d| < 8), then 8 + floor(log(|d| / 8) / log(16) * 8), at most 15;
  // positive distances (keys after the query) in the upper half.
  const std::vector<std::pair<std::int64_t, int>> cases = {
      {0, 0},   {-1, 1},   {1, 17},   {-7, 7},   {7, 23},    {-8, 8},     {8, 24},     {-11, 8},
      {-12, 9}, {12, 25},  {-16, 10}, {16, 26},  {-23, 11},  {-32, 12},   {32, 28},    {-64, 14},
      {-90, 14}, {-91, 15}, {-127, 15}, {127, 31}, {-128, 15}, {1000, 31}, {-100000, 15}};
  for (const auto& [d, want] : cases) {
    INFO("relative position " << d);
    CHECK(model::t5_relative_position_bucket(d, 32, 128) == want);
  }
}

TEST_CASE("golden: UMT5 encoder last_hidden_state equals transformers' UMT5EncoderModel (wan-tiny)") {
  Runtime rt(Device::cpu());
  const model::Umt5Encoder enc = model::Umt5Encoder::load(test::wan_tiny() + "/text_encoder", rt, DType::f32);
  CHECK(enc.config().layers == 2);
  CHECK(enc.config().heads == 4);
  const model::T5Tokenizer tok = model::T5Tokenizer::load(test::wan_tiny() + "/tokenizer");
  const io::SafetensorsFile ref(test::wan_tiny() + "/ref_text.safetensors");
  std::vector<model::T5TokenizedText> tokens;
  const std::vector<float> got = model::encode_prompts(rt, tok, enc, test::wan_tiny_prompts(), 24, &tokens);
  const Tensor want = ref.tensor("last_hidden_state");
  REQUIRE(static_cast<std::int64_t>(got.size()) == want.numel());
  double worst = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(got[static_cast<std::size_t>(i)]) - want.ptr<float>()[i]));
  // Measured: 2.7e-6 (oneDNN f32 on x86-64, 2 threads).
  INFO("last_hidden_state: max |diff| " << worst);
  CHECK(worst <= 1e-4);
  MESSAGE("UMT5 last_hidden_state max |diff| " << worst);
}

TEST_CASE("UMT5: zero_past_length keeps each prompt's rows and zeroes the rest") {
  std::vector<float> h(2 * 3 * 2, 1.f);
  model::zero_past_length(h, 2, 3, 2, {1, 3});
  CHECK(h == std::vector<float>{1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1});
  CHECK_THROWS(model::zero_past_length(h, 2, 3, 2, {4, 0}));
}

TEST_CASE("UMT5: config refusals name the file and key") {
  const test::TempDir dir("umt5-config");
  const auto write = [&](const std::string& text) {
    std::ofstream(dir.path / "config.json") << text;
    return (dir.path / "config.json").string();
  };
  CHECK(model::is_t5_family_config_file(write(R"({"model_type": "umt5"})")));
  CHECK(model::is_t5_family_config_file(write(R"({"architectures": ["UMT5EncoderModel"]})")));
  CHECK_FALSE(model::is_t5_family_config_file(write(R"({"model_type": "clip_text_model"})")));
  CHECK_THROWS_WITH_AS(model::load_umt5_config(write(R"({"model_type": "t5"})")), doctest::Contains("model_type 't5'"),
                       InputError);
  CHECK_THROWS_WITH_AS(model::load_umt5_config(write(R"({"model_type": "umt5", "feed_forward_proj": "relu"})")),
                       doctest::Contains("feed_forward_proj 'relu'"), InputError);
  CHECK_THROWS_WITH_AS(model::load_umt5_config(write(R"({"model_type": "umt5", "d_model": "32"})")),
                       doctest::Contains("config key 'd_model' must be an integer"), InputError);
}
