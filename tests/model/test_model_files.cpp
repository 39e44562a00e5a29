// The parameter grammar (counts and shapes from model-spec §3), config parsing and its
// rejections, the weight loader (single file, shards, dtype conversion) and make-model.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../support.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "io/safetensors.hpp"
#include "model/clip_text.hpp"
#include "model/vae.hpp"
#include "sampling/scheduler.hpp"
#include "model/flops.hpp"
#include "model/params.hpp"
#include "model/presets.hpp"
#include "model/temporal.hpp"
#include "model/weights.hpp"
#include "ops/random.hpp"

using namespace vinf;
namespace fs = std::filesystem;

namespace {

std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

const model::ParamSpec* find_param(const std::vector<model::ParamSpec>& ps, const std::string& name) {
  for (const auto& p : ps)
    if (p.name == name) return &p;
  return nullptr;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct ScratchDir {
  fs::path path;
  ScratchDir() {
    path = fs::temp_directory_path() / ("vinf-model-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

}  // namespace

TEST_CASE("the vc2 preset has VideoCrafter2's 1,484 tensors and 1,413,284,420 parameters") {
  model::UNetConfig c = model::preset_config("vc2");
  const auto ps = model::unet_parameters(c);
  CHECK(ps.size() == 1484);
  CHECK(model::parameter_count(ps) == 1413284420);
  // The shapes model-spec §3.8 names.
  REQUIRE(find_param(ps, "up_blocks.0.resnets.0.conv1.weight"));
  CHECK(find_param(ps, "up_blocks.0.resnets.0.conv1.weight")->shape == Shape{1280, 2560, 3, 3});
  CHECK(find_param(ps, "up_blocks.1.resnets.2.conv1.weight")->shape == Shape{1280, 1920, 3, 3});
  CHECK(find_param(ps, "up_blocks.3.resnets.0.conv_shortcut.weight")->shape == Shape{320, 960, 1, 1});
  CHECK(find_param(ps, "down_blocks.1.resnets.0.conv_shortcut.weight")->shape == Shape{640, 320, 1, 1});
  CHECK(find_param(ps, "transformer_in.proj_in.weight")->shape == Shape{512, 320});
  CHECK(find_param(ps, "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight")->shape == Shape{320, 1024});
  CHECK(find_param(ps, "mid_block.temp_convs.1.conv4.3.weight")->shape == Shape{1280, 1280, 3, 1, 1});
  CHECK(find_param(ps, "down_blocks.3.attentions.0.norm.weight") == nullptr);  // DownBlock3D has no transformers
  CHECK(find_param(ps, "up_blocks.3.upsamplers.0.conv.weight") == nullptr);    // nor does the last up block upsample
  c.fps_cond = false;
  CHECK(model::parameter_count(model::unet_parameters(c)) == 1411233860);
}

TEST_CASE("the tiny preset is the fixture's model: same config, same tensor names and shapes") {
  const auto files = model::find_model_files(test::fixture("tiny-unet3d"));
  const model::UNetConfig fixture = model::load_unet_config(files.config, nullptr);
  const model::UNetConfig tiny = model::preset_config("tiny");
  CHECK(fixture.block_out_channels == tiny.block_out_channels);
  CHECK(fixture.down_cross == tiny.down_cross);
  CHECK(fixture.up_cross == tiny.up_cross);
  CHECK(fixture.attention_head_dim == tiny.attention_head_dim);
  CHECK(fixture.cross_attention_dim == tiny.cross_attention_dim);
  CHECK(fixture.norm_num_groups == tiny.norm_num_groups);
  CHECK(fixture.fps_cond);
  const model::WeightFiles wf(files);
  CHECK(wf.all().size() == model::unet_parameters(tiny).size());
  CHECK_NOTHROW(model::check_weights(wf, model::unet_parameters(tiny), false, nullptr));
  // A config written by make-model reads back the same.
  std::vector<std::string> warnings;
  const model::UNetConfig again = model::parse_unet_config(model::unet_config_json(tiny), "x", &warnings);
  CHECK(warnings.empty());
  CHECK(model::unet_parameters(again).size() == model::unet_parameters(tiny).size());
}

TEST_CASE("config values the runtime does not support are rejected by name") {
  const std::string good = read_text(test::fixture("tiny-unet3d/config.json"));
  auto with = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json j = nlohmann::json::parse(good);
    if (value.is_discarded()) j.erase(key);
    else j[key] = value;
    return input_error_of([&] { model::parse_unet_config(j.dump(), "cfg.json", nullptr); });
  };
  CHECK(with("num_attention_heads", 8).find("cfg.json: config key 'num_attention_heads' is 8") != std::string::npos);
  CHECK(with("attention_head_dim", nlohmann::json::array({8, 8})).find("a per-block list is not supported") !=
        std::string::npos);
  CHECK(with("layers_per_block", nlohmann::json::array({1, 1})).find("'layers_per_block' must be a positive integer") !=
        std::string::npos);
  CHECK(with("act_fn", "gelu").find("'act_fn' is \"gelu\"; vinf supports only \"silu\"") != std::string::npos);
  CHECK(with("time_cond_proj_dim", 256).find("'time_cond_proj_dim' is 256") != std::string::npos);
  CHECK(with("downsample_padding", 2).find("'downsample_padding' is 2; vinf supports only 1") != std::string::npos);
  CHECK(with("up_block_types", nlohmann::json::array({"UpBlock3D", "UpBlock2D"}))
            .find("unknown block type 'UpBlock2D' in up_block_types[1]") != std::string::npos);
  CHECK(with("down_block_types", nlohmann::json::array({"DownBlock3D"})).find("has 1 entries but block_out_channels has 2") !=
        std::string::npos);
  CHECK(with("block_out_channels", nlohmann::json::array({32, 60})).find("block_out_channels[1] = 60 is not divisible") !=
        std::string::npos);
  CHECK(with("block_out_channels", nlohmann::json(nlohmann::json::value_t::discarded))
            .find("'block_out_channels' must be a non-empty list") != std::string::npos);
  CHECK(with("fps_cond", "yes").find("'fps_cond' must be true or false") != std::string::npos);
  // A number that does not fit the float it fills (it would become infinity).
  CHECK(with("norm_eps", 1e300).find("cfg.json: config key 'norm_eps' must be a number within float range, got 1e+300") !=
        std::string::npos);
  CHECK(input_error_of([] { model::parse_unet_config("{\"block_out_channels\": [32,", "cfg.json", nullptr); })
            .find("cfg.json is not valid JSON") != std::string::npos);
  // Unknown keys are warnings, not errors.
  nlohmann::json j = nlohmann::json::parse(good);
  j["some_future_key"] = 1;
  std::vector<std::string> warnings;
  CHECK_NOTHROW(model::parse_unet_config(j.dump(), "cfg.json", &warnings));
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("'some_future_key' is not used by vinf") != std::string::npos);
}

TEST_CASE("a key of the wrong type in any config file names the file, the key and the type it must have") {
  ScratchDir dir;
  // Writes `base` with `key` set to `value` (a JSON text) and returns the reader's message.
  auto refused = [&](const std::function<void(const std::string&)>& read, const std::string& base,
                     const std::string& key, const std::string& value) {
    nlohmann::json j = nlohmann::json::parse(base);
    nlohmann::json* target = &j;
    std::string rest = key;
    for (std::size_t dot; (dot = rest.find('.')) != std::string::npos; rest = rest.substr(dot + 1))
      target = &(*target)[rest.substr(0, dot)];
    (*target)[rest] = nlohmann::json::parse(value);
    const std::string path = (dir.path / "config.json").string();
    std::ofstream(path) << j.dump();
    const std::string m = input_error_of([&] { read(path); });
    CHECK_MESSAGE(m.find(path + ": config key '" + key + "' must be ") != std::string::npos, m);
    return m;
  };
  auto has = [](const std::string& text, const std::string& part) {
    CHECK_MESSAGE(text.find(part) != std::string::npos, "'", text, "' lacks '", part, "'");
  };
  // Text encoder (transformers' CLIPTextModel, also nested in a CLIPModel's text_config).
  const std::string clip = read_text(test::fixture("clip-text-tiny/config.json"));
  auto clip_config = [](const std::string& p) { model::load_clip_text_config(p); };
  has(refused(clip_config, clip, "hidden_size", R"("512")"), "'hidden_size' must be an integer, got \"512\"");
  has(refused(clip_config, clip, "num_hidden_layers", "[2, 2]"), "'num_hidden_layers' must be an integer, got [2,2]");
  has(refused(clip_config, clip, "intermediate_size", "64.5"), "'intermediate_size' must be an integer, got 64.5");
  has(refused(clip_config, clip, "vocab_size", "4294967296"), "'vocab_size' must be an integer in [-2147483648, 2147483647], got 4294967296");
  has(refused(clip_config, clip, "layer_norm_eps", "true"), "'layer_norm_eps' must be a number, got true");
  has(refused(clip_config, clip, "hidden_act", "1"), "'hidden_act' must be a string, got 1");
  has(refused(clip_config, R"({"text_config": {}})", "text_config.hidden_size", R"({"a": 1})"),
      "'text_config.hidden_size' must be an integer");
  // VAE.
  const std::string vae = read_text(test::fixture("tiny-unet3d/vae/config.json"));
  auto vae_config = [](const std::string& p) { model::load_vae_config(p); };
  has(refused(vae_config, vae, "latent_channels", R"("4")"), "'latent_channels' must be an integer, got \"4\"");
  has(refused(vae_config, vae, "block_out_channels", R"([32, "64"])"), "must be a list of integers, got [32,\"64\"]");
  has(refused(vae_config, vae, "scaling_factor", R"("0.18")"), "'scaling_factor' must be a number");
  has(refused(vae_config, vae, "use_post_quant_conv", "1"), "'use_post_quant_conv' must be true or false, got 1");
  has(refused(vae_config, vae, "up_block_types", R"("UpDecoderBlock2D")"), "'up_block_types' must be a list of strings");
  // Scheduler.
  auto scheduler_config = [](const std::string& p) { sampling::read_scheduler_config(p); };
  has(refused(scheduler_config, "{}", "beta_start", R"("0.1")"), "'beta_start' must be a number, got \"0.1\"");
  has(refused(scheduler_config, "{}", "num_train_timesteps", "999.5"), "'num_train_timesteps' must be an integer");
  has(refused(scheduler_config, "{}", "set_alpha_to_one", R"("yes")"), "'set_alpha_to_one' must be true or false");
  has(refused(scheduler_config, "{}", "timestep_spacing", "[]"), "'timestep_spacing' must be a string, got []");
  // UNet.
  const std::string unet = read_text(test::fixture("tiny-unet3d/config.json"));
  auto unet_config = [](const std::string& p) { model::load_unet_config(p, nullptr); };
  has(refused(unet_config, unet, "cross_attention_dim", R"("32")"), "must be a positive integer, got \"32\"");
  has(refused(unet_config, unet, "norm_eps", R"("1e-5")"), "'norm_eps' must be a number");
  has(refused(unet_config, unet, "sample_size", R"("64")"), "'sample_size' must be an integer");
  has(refused(unet_config, unet, "act_fn", "[]"), "'act_fn' must be a string");
  // The same readers still take what they took before.
  std::ofstream((dir.path / "config.json").string()) << R"({"beta_start": 0.001, "num_train_timesteps": 500})";
  CHECK(sampling::read_scheduler_config((dir.path / "config.json").string()).num_train_timesteps == 500);
  CHECK(model::load_clip_text_config(test::fixture("clip-text-tiny/config.json")).hidden_size == 32);
  CHECK(model::load_vae_config(test::fixture("tiny-unet3d/vae/config.json")).latent_channels == 4);
}

TEST_CASE("sharded weights with an index load the same as one file, f16 weights convert to f32") {
  ScratchDir dir;
  const auto src = model::find_model_files(test::fixture("tiny-unet3d"));
  const io::SafetensorsFile whole(src.weights.front());
  // Two shards, alternating tensors, plus the index diffusers writes.
  std::vector<io::TensorToWrite> a, b;
  nlohmann::json index;
  for (std::size_t i = 0; i < whole.entries().size(); ++i) {
    const auto& e = whole.entries()[i];
    const std::string shard = i % 2 ? "diffusion_pytorch_model-00002-of-00002.safetensors"
                                    : "diffusion_pytorch_model-00001-of-00002.safetensors";
    (i % 2 ? b : a).push_back({e.name, e.dtype, e.shape, whole.tensor(e.name).data, {}});
    index["weight_map"][e.name] = shard;
  }
  io::write_safetensors((dir.path / "diffusion_pytorch_model-00001-of-00002.safetensors").string(), a);
  io::write_safetensors((dir.path / "diffusion_pytorch_model-00002-of-00002.safetensors").string(), b);
  std::ofstream(dir.path / "diffusion_pytorch_model.safetensors.index.json") << index.dump();
  fs::copy_file(src.config, dir.path / "config.json");

  const auto files = model::find_model_files(dir.path.string());
  CHECK(files.weights.size() == 2);
  const model::UNetConfig c = model::load_unet_config(files.config, nullptr);
  Runtime rt(Device::cpu());
  const model::Weights sharded(model::WeightFiles(files), model::unet_parameters(c), rt, DType::f32, false, nullptr);
  const model::Weights single(model::WeightFiles(src), model::unet_parameters(c), rt, DType::f32, false, nullptr);
  CHECK(sharded.count() == 1349636);
  for (const char* name : {"conv_in.weight", "mid_block.attentions.0.proj_out.bias", "up_blocks.1.temp_convs.0.conv4.3.weight"}) {
    const Tensor x = sharded.get(name), y = single.get(name);
    CHECK(std::memcmp(x.data, y.data, x.nbytes()) == 0);
  }

  // A shard the index names but the directory lacks.
  fs::remove(dir.path / "diffusion_pytorch_model-00002-of-00002.safetensors");
  CHECK(input_error_of([&] { model::find_model_files(dir.path.string()); })
            .find("names shard diffusion_pytorch_model-00002-of-00002.safetensors, which is not in") != std::string::npos);

  // make-model as f16: the loader widens to f32 exactly.
  ScratchDir f16dir;
  model::write_random_model(model::preset_config("tiny"), 3, DType::f16, f16dir.path.string());
  const auto f16files = model::find_model_files(f16dir.path.string());
  const model::WeightFiles f16w(f16files);
  const model::Weights widened(f16w, model::unet_parameters(c), rt, DType::f32, false, nullptr);
  const Tensor raw = f16w.find("conv_in.weight")->file->tensor("conv_in.weight");
  CHECK(raw.dtype == DType::f16);
  const Tensor wide = widened.get("conv_in.weight");
  for (std::int64_t i = 0; i < raw.numel(); ++i)
    CHECK(wide.ptr<float>()[i] == f16_bits_to_f32(raw.ptr<std::uint16_t>()[i]));
  // Weights ~ N(0, 1/fan_in): conv_in has fan_in 4*3*3 = 36, so the spread is about 1/6.
  double sq = 0;
  for (std::int64_t i = 0; i < wide.numel(); ++i) sq += wide.ptr<float>()[i] * wide.ptr<float>()[i];
  CHECK(std::sqrt(sq / wide.numel()) == doctest::Approx(1.0 / 6).epsilon(0.1));
}

TEST_CASE("a model directory may be a pipeline root with unet/") {
  ScratchDir dir;
  fs::create_directories(dir.path / "unet");
  fs::copy_file(test::fixture("tiny-unet3d/config.json"), dir.path / "unet/config.json");
  fs::copy_file(test::fixture("tiny-unet3d/diffusion_pytorch_model.safetensors"),
                dir.path / "unet/diffusion_pytorch_model.safetensors");
  CHECK(model::find_model_files(dir.path.string()).dir == (dir.path / "unet").string());
  CHECK(input_error_of([&] { model::find_model_files((dir.path / "nothing").string()); }).find("does not exist") !=
        std::string::npos);
}

TEST_CASE("one VideoCrafter2 UNet call at 320x512, 24 frames, CFG batch 2 is about 37.8 TFLOP (model-spec §8)") {
  const model::FlopCount f = model::unet_flops(model::preset_config("vc2"), 2, 24, 40, 64, 77);
  MESSAGE("conv " << f.conv / 1e12 << " T, temporal conv " << f.temporal_conv / 1e12 << " T, linear "
                  << f.linear / 1e12 << " T, attention " << f.attention / 1e12 << " T");
  CHECK(f.total() / 1e12 == doctest::Approx(37.8).epsilon(0.01));
  CHECK(f.temporal_conv / 1e12 == doctest::Approx(5.06).epsilon(0.01));
  // §8's 17.7 T projects the text keys/values for all 48 frame-images (0.19 T); vinf projects
  // them once per batch element (0.008 T).
  CHECK(f.linear / 1e12 == doctest::Approx(17.7 - 0.19 + 0.008).epsilon(0.005));
  CHECK(f.attention / 1e12 == doctest::Approx(2.30 + 0.11 + 0.08).epsilon(0.01));
}

TEST_CASE("in-memory random weights are the weights make-model writes for the same seed") {
  ScratchDir dir;
  const model::UNetConfig c = model::preset_config("tiny");
  const auto params = model::unet_parameters(c);
  model::write_random_model(c, 42, DType::f32, dir.path.string());
  Runtime rt(Device::cpu());
  const model::Weights from_disk(model::WeightFiles(model::find_model_files(dir.path.string())), params, rt, DType::f32,
                                 false, nullptr);
  const model::Weights in_memory = model::Weights::random(params, rt, DType::f32, 42);
  CHECK(in_memory.count() == from_disk.count());
  double worst = 0;
  for (const auto& p : params) {
    const Tensor a = from_disk.get(p.name), b = in_memory.get(p.name);
    for (std::int64_t i = 0; i < a.numel(); ++i)
      worst = std::max(worst, static_cast<double>(std::fabs(a.ptr<float>()[i] - b.ptr<float>()[i])));
  }
  CHECK(worst < 1e-6);
  CHECK(from_disk.get("mid_block.resnets.0.norm1.weight").ptr<float>()[0] != 0.f);
}

TEST_CASE("attention through GEMMs + softmax equals the streaming kernel (the CUDA choice for long sequences)") {
  Runtime rt(Device::cpu());
  const std::int64_t r = 3, h = 2, lq = 70, lk = 90, d = 16;
  OwnedTensor q = rt.arena().empty(DType::f32, {r, lq, h * d}), k = rt.arena().empty(DType::f32, {r, lk, h * d}),
              v = rt.arena().empty(DType::f32, {r, lk, h * d});
  ops::normal(rt.ctx(), q, 9, 0, 0);
  ops::normal(rt.ctx(), k, 9, 1, 0);
  ops::normal(rt.ctx(), v, 9, 2, 0);
  OwnedTensor a = rt.arena().empty(DType::f32, {r, lq, h * d}), b = rt.arena().empty(DType::f32, {r, lq, h * d});
  ops::AttentionParams p;
  p.scale = 0.25f;
  model::attend(rt.ctx(), model::split_heads(q, h), model::split_heads(k, h), model::split_heads(v, h),
                model::split_heads(a, h), p, model::AttentionPath::kernel);
  model::attend(rt.ctx(), model::split_heads(q, h), model::split_heads(k, h), model::split_heads(v, h),
                model::split_heads(b, h), p, model::AttentionPath::gemm);
  double worst = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(a.ptr<float>()[i] - b.ptr<float>()[i])));
  CHECK(worst < 1e-5);
  p.band_lo = -2;
  p.band_hi = 2;
  CHECK_THROWS_AS(model::attend(rt.ctx(), model::split_heads(q, h), model::split_heads(k, h), model::split_heads(v, h),
                                model::split_heads(b, h), p, model::AttentionPath::gemm),
                  Error);
}
