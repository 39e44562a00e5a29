// Wan2.1's image-to-video transformer against diffusers' own numbers (tests/fixtures/wan-i2v-tiny:
// the transformer alone on given inputs, every recorded module), and the config's image settings.
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

void check_i2v_transformer(Device device, double tol) {
  Runtime rt(device);
  std::vector<std::string> warnings;
  const model::WanTransformer wan =
      model::WanTransformer::load(test::fixture("wan-i2v-tiny/transformer"), rt, DType::f32, false, &warnings);
  CHECK(warnings.empty());
  CHECK(wan.config().image_conditioned());
  CHECK(wan.config().condition_channels() == 20);
  const io::SafetensorsFile ref(test::fixture("wan-i2v-tiny/ref_transformer.safetensors"));
  const OwnedTensor x = test::upload_f32(rt, ref.tensor("hidden_states")),
                    t = test::upload_f32(rt, ref.tensor("timestep")),
                    text = test::upload_f32(rt, ref.tensor("encoder_hidden_states")),
                    image = test::upload_f32(rt, ref.tensor("encoder_hidden_states_image"));
  Shape out_shape = x.shape;
  out_shape[1] = 16;
  OwnedTensor out = rt.arena().empty(DType::f32, out_shape);
  std::map<std::string, std::vector<float>> seen;
  const model::WanProbe probe = [&](const std::string& name, const Tensor& v) { seen[name] = test::download(rt, v); };
  const Tensor image_view = image.view();
  wan.forward(rt.ctx(), x, t, text, out, probe, {}, nullptr, &image_view);
  const double pred = test::relative_diff(ref.tensor("noise_pred"), test::download(rt, out));
  INFO(device.name() << " noise_pred: relative " << pred);
  CHECK(pred < tol);
  int compared = 0;
  for (const io::SafetensorsFile::Entry& entry : ref.entries()) {
    const std::string prefix = "intermediates.";
    if (entry.name.rfind(prefix, 0) != 0) continue;
    const std::string module = entry.name.substr(prefix.size());
    INFO("intermediate " << module);
    REQUIRE(seen.count(module) == 1);
    const double d = test::relative_diff(ref.tensor(entry.name), seen[module]);
    INFO("relative " << d);
    CHECK(d < tol);
    ++compared;
  }
  CHECK(compared == 10);  // patch, temb, timestep_proj, text, image, attn2 of block 0, 2 blocks, norm_out, proj_out
}

}  // namespace

TEST_CASE("golden: Wan image-to-video transformer equals diffusers on the CPU, with every intermediate") {
  check_i2v_transformer(Device::cpu(), 1e-5);
}

TEST_CASE("golden: Wan image-to-video transformer equals diffusers on CUDA") {
  if (!test::gpu_or_skip("Wan image-to-video transformer on CUDA")) return;
  check_i2v_transformer(Device::cuda(0), 1e-4);
}

TEST_CASE("Wan transformer: image settings read and refused with the key named") {
  const test::TempDir dir("wan-i2v-config");
  auto write = [&](const std::string& body) {
    const std::string path = dir.str() + "/config.json";
    std::ofstream(path) << body;
    return path;
  };
  const model::WanTransformerConfig c = model::load_wan_transformer_config(
      write(R"({"image_dim": 1280, "added_kv_proj_dim": 5120, "in_channels": 36, "pos_embed_seq_len": 514})"));
  CHECK(c.image_dim == 1280);
  CHECK(c.added_kv_proj_dim == 5120);
  CHECK(c.pos_embed_seq_len == 514);
  CHECK_THROWS_WITH_AS(model::load_wan_transformer_config(write(R"({"image_dim": 1280, "in_channels": 36})")),
                       doctest::Contains("added_kv_proj_dim"), InputError);
  CHECK_THROWS_WITH_AS(model::load_wan_transformer_config(write(R"({"in_channels": 36})")),
                       doctest::Contains("in_channels 36"), InputError);
  CHECK_THROWS_WITH_AS(model::load_wan_transformer_config(write(R"({"pos_embed_seq_len": 514})")),
                       doctest::Contains("pos_embed_seq_len"), InputError);
  // The config written back reads the same.
  std::ofstream(dir.str() + "/config.json") << model::wan_transformer_config_json(c);
  const model::WanTransformerConfig back = model::load_wan_transformer_config(dir.str() + "/config.json");
  CHECK(back.image_dim == 1280);
  CHECK(back.pos_embed_seq_len == 514);
}

// The 14B image-to-video checkpoints' sizes: the text-to-video 14B's plus the patch embedding's 20
// extra input channels (5120 x 20 x 4), the image embedder (2 x 1280 norm1 + 1280 x 1280 + 1280 +
// 5120 x 1280 + 5120 + 2 x 5120 norm2) and per block add_k, add_v (5120 x 5120 + 5120 each) and
// norm_added_k (5120); first-and-last-frame adds the 514 x 1280 position table.
TEST_CASE("Wan transformer: image-to-video preset parameter counts") {
  const std::int64_t t2v = 14288491584;
  const std::int64_t patch = 5120LL * 20 * 4,
                     embedder = 2 * 1280 + 1280LL * 1280 + 1280 + 5120LL * 1280 + 5120 + 2 * 5120;
  const std::int64_t blocks = 40 * (2 * (5120LL * 5120 + 5120) + 5120);
  CHECK(model::parameter_count(model::wan_transformer_parameters(model::wan_transformer_preset("wan-i2v-14b"))) ==
        t2v + patch + embedder + blocks);
  CHECK(model::parameter_count(model::wan_transformer_parameters(model::wan_transformer_preset("wan-flf2v-14b"))) ==
        t2v + patch + embedder + blocks + 514 * 1280);
}
