// The random Wan pipelines make-model writes: each part's size counted by hand, the configs read
// back by vinf's own readers, the files that must equal the fixture's, and the tokenizer trained on
// the built-in text (the same bytes every time, T5's special ids).
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "../support.hpp"
#include "core/error.hpp"
#include "model/t5_tokenizer.hpp"
#include "model/t5_tokenizer_train.hpp"
#include "model/umt5.hpp"
#include "model/wan_presets.hpp"
#include "wan_fixture.hpp"

using namespace vinf;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::int64_t part_count(const std::vector<model::WanPipelineWeights>& parts, const std::string& name) {
  for (const auto& w : parts)
    if (w.part == name) return model::parameter_count(w.params);
  FAIL("no part " << name);
  return 0;
}

}  // namespace

// umt5-xxl's encoder by hand: the shared embedding 256,384 x 4,096 = 1,050,148,864; per layer the
// q, k, v, o projections 4 x 4,096 x 4,096 = 67,108,864, its own position bias 32 buckets x 64 heads
// = 2,048, two RMS norms 2 x 4,096 = 8,192 and the gated feed-forward wi_0, wi_1, wo 3 x 10,240 x
// 4,096 = 125,829,120: 192,948,224, times 24 layers = 4,630,757,376; the final norm 4,096. In all
// 1,050,148,864 + 4,630,757,376 + 4,096 = 5,680,910,336.
// The tiny encoder likewise: 800 x 32 = 25,600; per layer 4 x 32 x 32 + 32 x 4 + 2 x 32 + 3 x 64 x 32
// = 4,096 + 128 + 64 + 6,144 = 10,432, times 2 = 20,864; the final norm 32: 46,496.
TEST_CASE("Wan pipeline presets: every part's parameter count") {
  const auto big = model::wan_pipeline_weights(model::wan_pipeline_preset("wan-1.3b"), 5, DType::bf16);
  CHECK(part_count(big, "transformer") == 1418996800);
  CHECK(part_count(big, "vae") == 126892531);
  CHECK(part_count(big, "text_encoder") == 5680910336);
  const auto huge = model::wan_pipeline_weights(model::wan_pipeline_preset("wan-14b"), 5, DType::bf16);
  CHECK(part_count(huge, "transformer") == 14288491584);
  CHECK(part_count(huge, "text_encoder") == 5680910336);
  const auto tiny = model::wan_pipeline_weights(model::wan_pipeline_preset("wan-tiny"), 5, DType::f32);
  CHECK(part_count(tiny, "transformer") == 40864);
  CHECK(part_count(tiny, "vae") == 220107);
  CHECK(part_count(tiny, "text_encoder") == 46496);
  // Seeds S, S + 1, S + 2; the VAE in f32 whatever the rest is.
  for (const auto& w : big) {
    INFO(w.part);
    CHECK(w.seed == (w.part == "transformer" ? 5u : w.part == "vae" ? 6u : 7u));
    CHECK(w.dtype == (w.part == "vae" ? DType::f32 : DType::bf16));
  }
  CHECK_THROWS_AS(model::wan_pipeline_preset("wan-7b"), InputError);
}

TEST_CASE("Wan pipeline presets: configs read back as written, the fixture's files where they must match") {
  const test::TempDir dir("wan-presets");
  auto write = [&](const std::string& name, const std::string& body) {
    const std::string path = dir.str() + "/" + name;
    std::ofstream(path) << body;
    return path;
  };
  for (const char* name : {"wan-tiny", "umt5-xxl"}) {
    INFO(name);
    const model::Umt5Config c = model::umt5_preset(name);
    const model::Umt5Config r = model::load_umt5_config(write("umt5.json", model::umt5_config_json(c)));
    CHECK(r.vocab_size == c.vocab_size);
    CHECK(r.d_model == c.d_model);
    CHECK(r.d_kv == c.d_kv);
    CHECK(r.d_ff == c.d_ff);
    CHECK(r.layers == c.layers);
    CHECK(r.heads == c.heads);
    CHECK(r.num_buckets == c.num_buckets);
    CHECK(r.max_distance == c.max_distance);
    CHECK(r.layer_norm_eps == c.layer_norm_eps);
    CHECK(model::is_t5_family_config_file(dir.str() + "/umt5.json"));
  }
  // The tiny encoder's config holds every key of the fixture's, with its values.
  const nlohmann::json mine = nlohmann::json::parse(model::umt5_config_json(model::umt5_preset("wan-tiny")));
  std::ifstream fin(test::wan_tiny() + "/text_encoder/config.json");
  const nlohmann::json theirs = nlohmann::json::parse(fin);
  for (const auto& [key, value] : theirs.items()) {
    if (key == "transformers_version") continue;
    INFO(key);
    REQUIRE(mine.contains(key));
    CHECK(mine[key] == value);
  }
  CHECK_THROWS_AS(model::umt5_preset("umt5-base"), InputError);

  for (const char* name : {"wan-tiny", "wan2.1"}) {
    INFO(name);
    const model::WanVaeConfig c = model::wan_vae_preset(name);
    const model::WanVaeConfig r = model::load_wan_vae_config(write("vae.json", model::wan_vae_config_json(c)));
    CHECK(r.base_dim == c.base_dim);
    CHECK(r.decoder_base_dim == c.decoder_base_dim);
    CHECK(r.z_dim == c.z_dim);
    CHECK(r.dim_mult == c.dim_mult);
    CHECK(r.num_res_blocks == c.num_res_blocks);
    CHECK(r.temperal_downsample == c.temperal_downsample);
    CHECK(r.latents_mean == c.latents_mean);
    CHECK(r.latents_std == c.latents_std);
  }
  // Short decimals, as diffusers writes them.
  CHECK(model::wan_vae_config_json(model::wan_vae_preset("wan-tiny")).find("0.0841,") != std::string::npos);

  CHECK(model::wan_unipc_scheduler_config_json(3.0) ==
        read_bytes(test::wan_tiny() + "/scheduler/scheduler_config.json"));
  CHECK(model::wan_unipc_scheduler_config_json(5.0).find("\"flow_shift\": 5.0,") != std::string::npos);
}

TEST_CASE("Wan pipeline presets: the tokenizer trained on the built-in text") {
  const std::string a = model::train_builtin_spiece_model(512);
  CHECK(model::train_builtin_spiece_model(512) == a);  // the same bytes on every run
  CHECK(model::train_builtin_spiece_model(model::kBuiltinSpieceMaxVocab).size() > a.size());
  CHECK_THROWS_AS(model::train_builtin_spiece_model(model::kBuiltinSpieceMaxVocab + 1), Error);

  const test::TempDir dir("wan-tokenizer");
  model::write_builtin_t5_tokenizer(dir.str(), 512);
  CHECK(read_bytes(dir.str() + "/spiece.model") == a);
  for (const char* f : {"tokenizer_config.json", "special_tokens_map.json"}) {
    INFO(f);
    CHECK(read_bytes(dir.str() + "/" + f) == read_bytes(test::wan_tiny() + "/tokenizer/" + f));
  }
  const model::T5Tokenizer t = model::T5Tokenizer::load(dir.str());
  CHECK(t.vocab_size() == 512);
  CHECK(t.pad_id() == 0);
  CHECK(t.eos_id() == 1);
  CHECK(t.unk_id() == 2);
  const std::vector<std::int64_t> ids = t.tokenize("A beagle swims in the ocean with coral reefs.");
  CHECK(ids.size() > 5);
  for (std::int64_t id : ids) CHECK((id > 2 && id < 512));  // no unknown piece in plain English
  const model::T5TokenizedText e = t.encode("a kite", 8);
  CHECK(e.ids.back() == 0);
  CHECK(e.length == static_cast<int>(t.tokenize("a kite").size()) + 1);
}
