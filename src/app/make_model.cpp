// `vinf make-model`: a random-weight UNet, or a whole pipeline, in the diffusers directory layout,
// for tests, demos and benchmarks without real weights.
#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>
#include <string>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "model/params.hpp"
#include "model/presets.hpp"
#include "model/wan_config.hpp"
#include "model/weights.hpp"

namespace po = boost::program_options;

namespace vinf::app {

int make_model(const std::vector<std::string>& args) {
  std::string config_file, preset, out, dtype_opt, layout = "unet";
  std::uint64_t seed = 0;
  bool overwrite = false;
  po::options_description opts(
      "vinf make-model: write a random-weight UNet in diffusers layout\n\n"
      "usage: vinf make-model --preset tiny|small|vc2|wan-tiny|wan-1.3b|wan-14b --seed S --out DIR\n"
      "                       [--layout pipeline]\n\n"
      "Presets: tiny (the golden-fixture shape, 32/64 channels), small (VideoCrafter2's structure at a\n"
      "fifth of its width), vc2 (the full VideoCrafter2 UNet, 1,413,284,420 parameters, ~2.8 GB as f16).\n"
      "The Wan2.1 family's diffusion transformer (WanTransformer3DModel, DIR is its directory): wan-tiny\n"
      "(the golden fixture's shape, 40,864 parameters), wan-1.3b (1,418,996,800 parameters, ~2.8 GB as\n"
      "bf16) and wan-14b (14,288,491,584 parameters, ~28.6 GB as bf16).\n"
      "--layout pipeline writes DIR/unet, DIR/vae, DIR/text_encoder, DIR/tokenizer and model_index.json:\n"
      "the model that `vinf generate --model builtin:PRESET --model.seed S` makes in memory (a small random\n"
      "text encoder over a byte-level tokenizer; for vc2 the full-size VAE and OpenCLIP-H text encoder).\n\n"
      "Options come from the command line and from --config FILE (INI: `preset = tiny`, `seed = 5`); the\n"
      "command line wins.\n\nOptions");
  opts.add_options()("help,h", "show this help")("config", po::value(&config_file), kConfigOptionHelp)("preset", po::value(&preset), "tiny | small | vc2 | wan-tiny | wan-1.3b | wan-14b")(
      "seed", po::value(&seed)->default_value(0), "random seed (the same seed gives the same weights)")(
      "out", po::value(&out), "model directory to create")(
      "layout", po::value(&layout)->default_value(layout), "unet (DIR is a UNet directory) | pipeline")(
      "dtype", po::value(&dtype_opt), "weight dtype f32 | f16 | bf16 (default: f16 for vc2, bf16 for wan-1.3b and wan-14b, f32 otherwise)")(
      "overwrite", po::bool_switch(&overwrite), "replace a model already in DIR");
  po::variables_map vm;
  parse_options(args, opts, vm, "make-model");
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  for (const char* required : {"preset", "out"})
    VINF_INPUT_CHECK(vm.count(required), "vinf make-model: --", required, " is required (see vinf make-model --help)");
  const bool wan = preset.rfind("wan-", 0) == 0;
  const model::WanTransformerConfig wan_config = wan ? model::wan_transformer_preset(preset) : model::WanTransformerConfig{};
  const model::UNetConfig config = wan ? model::UNetConfig{} : model::preset_config(preset);
  DType dtype = wan ? (preset == "wan-tiny" ? DType::f32 : DType::bf16) : model::preset_default_dtype(preset);
  if (vm.count("dtype"))
    VINF_INPUT_CHECK(parse_dtype(dtype_opt, dtype) && (dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16),
                     "--dtype must be f32, f16 or bf16, got '", dtype_opt, "'");
  VINF_INPUT_CHECK(layout == "unet" || layout == "pipeline", "--layout must be unet or pipeline, got '", layout, "'");
  const bool pipeline = layout == "pipeline";
  VINF_INPUT_CHECK(!(wan && pipeline), "vinf make-model: --layout pipeline is not available for the Wan presets yet; ",
                   "--preset ", preset, " writes the transformer directory (drop --layout)");
  std::error_code ec;
  for (const char* name : {"config.json", "diffusion_pytorch_model.safetensors", "model_index.json", "unet"}) {
    const auto p = std::filesystem::path(out) / name;
    VINF_INPUT_CHECK(overwrite || !std::filesystem::exists(p, ec), p.string(),
                     " already exists; pass --overwrite to replace the model in ", out, " or choose another --out");
  }
  const auto params = wan ? model::wan_transformer_parameters(wan_config) : model::unet_parameters(config);
  const std::int64_t count = model::parameter_count(params);
  std::cerr << "vinf make-model: " << preset << ": " << params.size() << " tensors, " << count << " parameters as "
            << dtype_name(dtype) << " (" << (count * static_cast<std::int64_t>(dtype_size(dtype)) >> 20) << " MiB) -> "
            << out << "\n";
  int last_pct = -1;
  auto progress = [&](std::size_t done, std::size_t total) {
    const int pct = static_cast<int>(100 * done / total);
    if (count > (std::int64_t{1} << 26) && pct / 10 != last_pct / 10) std::cerr << "  " << pct << "%\n" << std::flush;
    last_pct = pct;
  };
  if (wan) {
    std::filesystem::create_directories(out, ec);
    VINF_INPUT_CHECK(!ec, "cannot create the model directory ", out, ": ", ec.message());
    model::write_random_weights(params, seed, dtype, out + "/diffusion_pytorch_model.safetensors", progress);
    io::write_file_atomically(out + "/config.json", model::wan_transformer_config_json(wan_config));
    std::cerr << "vinf make-model: wrote the Wan transformer " << out << " (config.json, "
              << "diffusion_pytorch_model.safetensors)\n";
  } else if (pipeline) {
    model::write_random_pipeline(preset, seed, dtype, out, progress);
    std::cerr << "vinf make-model: wrote the pipeline " << out << " (unet/, vae/, text_encoder/, tokenizer/)\n";
  } else {
    model::write_random_model(config, seed, dtype, out, progress);
    std::cerr << "vinf make-model: wrote " << out << "/config.json and " << out
              << "/diffusion_pytorch_model.safetensors\n";
  }
  return 0;
}

}  // namespace vinf::app
