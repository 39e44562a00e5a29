// `vinf make-model`: a random-weight UNet or Wan transformer, or a whole pipeline of either family,
// in the diffusers directory layout, for tests, demos and benchmarks without real weights.
#include <algorithm>
#include <boost/program_options.hpp>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/option_values.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "model/params.hpp"
#include "model/presets.hpp"
#include "model/wan_config.hpp"
#include "model/wan_presets.hpp"
#include "model/weights.hpp"

namespace po = boost::program_options;

namespace vinf::app {

namespace {

// Progress in tenths for a part of more than 64 M parameters.
std::function<void(std::size_t, std::size_t)> progress_for(std::int64_t count, std::string label) {
  return [count, label = std::move(label), last_pct = -1](std::size_t done, std::size_t total) mutable {
    const int pct = static_cast<int>(100 * done / total);
    if (count > (std::int64_t{1} << 26) && pct / 10 != last_pct / 10)
      std::cerr << "  " << label << pct << "%\n" << std::flush;
    last_pct = pct;
  };
}

std::string describe(std::int64_t tensors, std::int64_t count, DType dt) {
  std::ostringstream o;
  o << tensors << " tensors, " << count << " parameters as " << dtype_name(dt) << " ("
    << format_mib(static_cast<double>(count) * static_cast<double>(dtype_size(dt))) << ")";
  return o.str();
}

// --layout pipeline for a Wan preset: every part with its seed, the progress of each, the summary.
void write_wan_pipeline(const std::string& preset, std::uint64_t seed, DType dtype, const std::string& out,
                        const Reporter& voice) {
  const model::WanPipelinePreset p = model::wan_pipeline_preset(preset);
  const auto parts = model::wan_pipeline_weights(p, seed, dtype);
  voice.note(preset, " pipeline, seed ", seed, " -> ", out);
  std::map<std::string, std::function<void(std::size_t, std::size_t)>> progress;
  for (const model::WanPipelineWeights& w : parts) {
    const std::int64_t count = model::parameter_count(w.params);
    std::cerr << "  " << w.part << ": " << describe(static_cast<std::int64_t>(w.params.size()), count, w.dtype)
              << ", seed " << w.seed << "\n";
    progress[w.part] = progress_for(count, w.part + " ");
  }
  std::cerr << "  tokenizer: SentencePiece unigram, " << p.tokenizer_pieces << " pieces trained on the built-in text\n"
            << "  scheduler: UniPC with flow sigmas, flow_shift " << std::fixed << std::setprecision(1) << p.flow_shift
            << std::defaultfloat << "\n";
  model::write_random_wan_pipeline(
      p, seed, dtype, out,
      [&](const model::WanPipelineWeights& w, std::size_t done, std::size_t total) { progress[w.part](done, total); });
  if (p.image)
    std::cerr << "  image_processor: CLIPImageProcessor, " << p.image_processor.shortest_edge << " x "
              << p.image_processor.crop_height << " crops\n";
  voice.note("wrote the Wan pipeline ", out, " (transformer/, vae/, text_encoder/, tokenizer/, scheduler/, ",
             p.image ? "image_encoder/, image_processor/, " : "", "model_index.json)");
}

}  // namespace

int make_model(const std::vector<std::string>& args) {
  std::string config_file, preset, out, dtype_opt, layout = "unet";
  std::uint64_t seed = 0;
  bool overwrite = false;
  po::options_description opts(
      "vinf make-model: write a random-weight model in diffusers layout\n\n"
      "usage: vinf make-model --preset tiny|small|vc2|wan-tiny|wan-1.3b|wan-14b|wan-i2v-tiny|... --seed S\n"
      "                       --out DIR\n"
      "                       [--layout pipeline]\n\n"
      "Presets: tiny (the golden-fixture shape, 32/64 channels), small (VideoCrafter2's structure at a\n"
      "fifth of its width), vc2 (the full VideoCrafter2 UNet, 1,413,284,420 parameters, ~2.8 GB as f16).\n"
      "The Wan2.1 family's diffusion transformer (WanTransformer3DModel, DIR is its directory): wan-tiny\n"
      "(the golden fixture's shape, 40,864 parameters), wan-1.3b (1,418,996,800 parameters, ~2.8 GB as\n"
      "bf16) and wan-14b (14,288,491,584 parameters, ~28.6 GB as bf16).\n"
      "--layout pipeline writes a whole pipeline that generate, encode-text and inspect read as a released\n"
      "one. For tiny, small and vc2: DIR/unet, DIR/vae, DIR/text_encoder, DIR/tokenizer and\n"
      "model_index.json, the model that `vinf generate --model builtin:PRESET --model.seed S` makes in\n"
      "memory (a small random text encoder over a byte-level tokenizer; for vc2 the full-size VAE and\n"
      "OpenCLIP-H text encoder). For the Wan presets, diffusers' WanPipeline: DIR/transformer (drawn with\n"
      "seed S), DIR/vae (AutoencoderKLWan, seed S+1, always f32 as Wan2.1 ships it: the fixture's shape\n"
      "for wan-tiny, the released Wan2.1 VAE's, 126,892,531 parameters, otherwise), DIR/text_encoder\n"
      "(UMT5EncoderModel, seed S+2: the fixture's shape for wan-tiny, umt5-xxl's encoder with\n"
      "5,680,910,336 parameters, ~11.4 GB as bf16, otherwise), DIR/tokenizer (a T5 SentencePiece unigram\n"
      "model trained on a short English text built into vinf: 512 pieces for wan-tiny, 760 otherwise;\n"
      "pad 0, eos 1, unk 2; the same for every seed), DIR/scheduler (UniPC with flow sigmas,\n"
      "flow_shift 3.0 as Wan2.1 uses for 480p; its 720p videos use 5.0) and model_index.json.\n"
      "Image-to-video (diffusers' WanImageToVideoPipeline, for vinf generate --image): wan-i2v-tiny and\n"
      "wan-flf2v-tiny (first and last frame: the embedder's 514-token position table) in the image-to-video\n"
      "fixtures' shapes, wan-i2v-14b and wan-flf2v-14b in Wan2.1-I2V-14B's; a transformer of 36 input\n"
      "channels with the image embedder and each block's image keys and values, plus DIR/image_encoder\n"
      "(CLIPVisionModel, seed S+3: 2 layers on 16 x 16 images for the tiny ones, open-clip's ViT-H/14\n"
      "otherwise) and DIR/image_processor (CLIPImageProcessor).\n"
      "Diffusion forcing (SkyReels-V2, for vinf generate's [df] options): skyreels-df-tiny (the fixture's\n"
      "shape) and skyreels-df-1.3b: Wan2.1's transformers as SkyReelsV2Transformer3DModel with the fps\n"
      "embedding, UniPC with flow_shift 8.0.\n\n"
      "Options come from the command line and from --config FILE (INI: `preset = tiny`, `seed = 5`); the\n"
      "command line wins.\n\nOptions");
  opts.add_options()("help,h", "show this help")("config", path_value(&config_file, PathKind::file), kConfigOptionHelp)(
      "preset", po::value(&preset),
      "tiny | small | vc2 | wan-tiny | wan-1.3b | wan-14b | wan-i2v-tiny | wan-flf2v-tiny | wan-i2v-14b | "
      "wan-flf2v-14b | skyreels-df-tiny | skyreels-df-1.3b")("seed", ranged(&seed, 0, 9007199254740991.0)->default_value(0),
                       "random seed (the same seed gives the same weights)")("out", path_value(&out, PathKind::out_dir),
                                                                             "model directory to create")(
      "layout", po::value(&layout)->default_value(layout), "unet (DIR is a UNet directory) | pipeline")(
      "dtype", po::value(&dtype_opt),
      "weight dtype f32 | f16 | bf16 (default: f16 for vc2, bf16 for the Wan presets but the tiny ones, f32\n"
      "otherwise;\n"
      "a Wan pipeline's VAE is f32)")("overwrite", po::bool_switch(&overwrite), "replace a model already in DIR");
  po::variables_map vm;
  parse_options(args, opts, vm, "make-model");
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  for (const char* required : {"preset", "out"})
    VINF_INPUT_CHECK(vm.count(required), "vinf make-model: --", required, " is required (see vinf make-model --help)");
  const std::vector<std::string> presets{"tiny",        "small",        "vc2",          "wan-tiny",
                                         "wan-1.3b",    "wan-14b",      "wan-i2v-tiny", "wan-flf2v-tiny",
                                         "wan-i2v-14b", "wan-flf2v-14b", "skyreels-df-tiny", "skyreels-df-1.3b"};
  VINF_INPUT_CHECK(std::find(presets.begin(), presets.end(), preset) != presets.end(), "--preset '", preset,
                   "' is not a preset; the presets are tiny, small, vc2, wan-tiny, wan-1.3b and wan-14b, and the "
                   "image-to-video wan-i2v-tiny, wan-flf2v-tiny, wan-i2v-14b and wan-flf2v-14b, and the "
                   "diffusion-forcing skyreels-df-tiny and skyreels-df-1.3b");
  const bool wan = preset.rfind("wan-", 0) == 0 || preset.rfind("skyreels-", 0) == 0;
  const bool tiny_wan = wan && preset.size() > 5 && preset.compare(preset.size() - 5, 5, "-tiny") == 0;
  const model::WanTransformerConfig wan_config =
      wan ? model::wan_transformer_preset(preset) : model::WanTransformerConfig{};
  const model::UNetConfig config = wan ? model::UNetConfig{} : model::preset_config(preset);
  DType dtype = wan ? (tiny_wan ? DType::f32 : DType::bf16) : model::preset_default_dtype(preset);
  if (vm.count("dtype"))
    VINF_INPUT_CHECK(
        parse_dtype(dtype_opt, dtype) && (dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16),
        "--dtype must be f32, f16 or bf16, got '", dtype_opt, "'");
  VINF_INPUT_CHECK(layout == "unet" || layout == "pipeline", "--layout must be unet or pipeline, got '", layout, "'");
  const bool pipeline = layout == "pipeline";
  std::error_code ec;
  std::vector<std::string> taken{"config.json", "diffusion_pytorch_model.safetensors", "model_index.json", "unet"};
  if (wan && pipeline)
    for (const char* part :
         {"transformer", "vae", "text_encoder", "tokenizer", "scheduler", "image_encoder", "image_processor"})
      taken.push_back(part);
  for (const std::string& name : taken) {
    const auto p = std::filesystem::path(out) / name;
    VINF_INPUT_CHECK(overwrite || !std::filesystem::exists(p, ec), p.string(),
                     " already exists; pass --overwrite to replace the model in ", out, " or choose another --out");
  }
  const Reporter voice("vinf make-model:", true);
  if (wan && pipeline) {
    write_wan_pipeline(preset, seed, dtype, out, voice);
    return 0;
  }
  const auto params = wan ? model::wan_transformer_parameters(wan_config) : model::unet_parameters(config);
  const std::int64_t count = model::parameter_count(params);
  voice.note(preset, ": ", describe(static_cast<std::int64_t>(params.size()), count, dtype), " -> ", out);
  auto progress = progress_for(count, "");
  if (wan) {
    model::write_random_wan_transformer(wan_config, seed, dtype, out, progress);
    voice.note("wrote the Wan transformer ", out, " (config.json, diffusion_pytorch_model.safetensors)");
  } else if (pipeline) {
    model::write_random_pipeline(preset, seed, dtype, out, progress);
    voice.note("wrote the pipeline ", out, " (unet/, vae/, text_encoder/, tokenizer/)");
  } else {
    model::write_random_model(config, seed, dtype, out, progress);
    voice.note("wrote ", out, "/config.json and ", out, "/diffusion_pytorch_model.safetensors");
  }
  return 0;
}

}  // namespace vinf::app
