// `vinf inspect`: what a model directory, a safetensors file or an HDF5 file holds.
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>

#include "app/commands.hpp"
#include "app/option_values.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "io/h5file.hpp"
#include "io/path_query.hpp"
#include "io/safetensors.hpp"
#include "mpi/session.hpp"
#include "io/json_file.hpp"
#include "model/clip_text.hpp"
#include "model/clip_vision.hpp"
#include "model/t5_tokenizer.hpp"
#include "model/tokenizer.hpp"
#include "model/umt5.hpp"
#include "model/vae.hpp"
#include "model/wan_transformer.hpp"
#include "model/wan_vae_config.hpp"
#include "model/weights.hpp"
#include "pipeline/family.hpp"

namespace po = boost::program_options;

namespace vinf::app {

namespace {

std::string grouped(std::int64_t n) {  // 1413284420 -> "1,413,284,420"
  std::string s = std::to_string(n), out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

// A string-valued key that tells what a config describes, or "" (a wrong type is reported by the
// config's own reader, which names the key).
std::string string_key(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}

// Reads every stored tensor: one that holds a NaN or an infinity is refused by the reader, with the
// file, the tensor and the element (exit status 2); "describe and check" must not call it fine.
void check_values(const model::WeightFiles& wf, const char* indent = "  ") {
  try {
    for (const auto& [name, found] : wf.all()) found.file->tensor(name);
  } catch (const InputError&) {
    std::cout << indent << "values: FAILED\n";
    throw;
  }
  std::cout << indent << "values: every stored number is finite\n";
}

int inspect_model(const std::string& dir) {
  const model::ModelFiles files = model::find_model_files(dir);
  std::vector<std::string> warnings;
  const model::UNetConfig c = model::load_unet_config(files.config, &warnings);
  const model::WeightFiles wf(files);
  const auto params = model::unet_parameters(c);
  std::uintmax_t disk = 0;
  for (const std::string& f : files.weights) disk += std::filesystem::file_size(f);
  std::cout << "model " << files.dir << " (UNet3DConditionModel, " << files.weights.size() << " weight file"
            << (files.weights.size() == 1 ? "" : "s") << ", " << format_mib(static_cast<double>(disk))
            << " on disk)\n  channels";
  for (int ch : c.block_out_channels) std::cout << " " << ch;
  std::cout << "; " << c.layers_per_block << " layer(s) per block; heads of " << c.attention_head_dim
            << " channels; cross_attention_dim " << c.cross_attention_dim << "; " << c.norm_num_groups
            << " norm groups; fps conditioning " << (c.fps_cond ? "on" : "off") << "\n";
  for (const std::string& w : warnings) std::cout << "  warning: " << w << "\n";

  std::map<std::string, std::pair<int, std::int64_t>> groups;  // tensors, parameters
  std::vector<std::string> order;
  for (const auto& p : params) {
    const std::string g = model::parameter_group(p.name);
    if (!groups.count(g)) order.push_back(g);
    groups[g].first += 1;
    groups[g].second += p.shape.numel();
  }
  std::map<std::string, int> stored;
  for (const auto& [name, found] : wf.all()) stored[io::safetensors_dtype_name(found.entry->dtype)] += 1;
  std::printf("  %-22s %8s %16s\n", "module", "tensors", "parameters");
  for (const std::string& g : order)
    std::printf("  %-22s %8d %16s\n", g.c_str(), groups[g].first, grouped(groups[g].second).c_str());
  const std::int64_t total = model::parameter_count(params);
  std::printf("  %-22s %8zu %16s\n", "total", params.size(), grouped(total).c_str());
  std::cout << "  stored as";
  for (const auto& [dt, n] : stored) std::cout << " " << dt << " (" << n << " tensors)";
  std::cout << "\n  weights in memory: " << format_mib(4.0 * total) << " as f32, " << format_mib(2.0 * total)
            << " as f16/bf16\n";
  try {
    model::check_weights(wf, params, false, nullptr);
    std::cout << "  check: every parameter the config implies is present with its shape; nothing else\n";
  } catch (const InputError&) {
    std::cout << "  check: FAILED\n";
    throw;
  }
  check_values(wf);
  return 0;
}

// A pipeline part other than the UNet: the VAE (its decoder, and its encoder when the file has
// one) or the text encoder, checked against its config (every parameter present with its shape;
// other keys are not read), or the tokenizer, loaded as generate loads it.
void report_check(const model::WeightFiles& wf, const std::vector<model::ParamSpec>& params,
                  const char* indent = "  ") {
  std::vector<std::string> unused;
  try {
    model::check_weights(wf, params, true, &unused);
  } catch (const InputError&) {
    std::cout << indent << "check: FAILED\n";
    throw;
  }
  std::cout << indent << params.size() << " tensors, " << grouped(model::parameter_count(params))
            << " parameters; check: every parameter the config implies is present with its shape\n";
  check_values(wf, indent);
}

int inspect_part(const std::string& dir) {
  if (io::path_exists(dir + "/vocab.json")) {
    const model::ClipTokenizer t = model::ClipTokenizer::load(dir);
    std::cout << "tokenizer " << dir << " (CLIP BPE): " << grouped(t.vocab_size()) << " ids, "
              << grouped(static_cast<std::int64_t>(t.merges())) << " merges, " << t.max_length()
              << " tokens per prompt; bos " << t.bos_id() << ", eos " << t.eos_id() << ", pad " << t.pad_id() << "\n";
    for (const std::string& w : t.warnings()) std::cout << "  warning: " << w << "\n";
    return 0;
  }
  const nlohmann::json j = io::read_json_file(dir + "/config.json", "config");
  model::ModelFiles files;
  files.dir = dir;
  files.config = dir + "/config.json";
  if (pipeline::is_unet_vae(dir)) {
    const model::VaeConfig c = model::load_vae_config(files.config);
    files = model::find_model_files(dir);
    std::cout << "VAE " << dir << " (AutoencoderKL): channels";
    for (int ch : c.block_out_channels) std::cout << " " << ch;
    std::cout << ", " << c.upscale() << "x, scaling factor " << c.scaling_factor << "\n";
    const model::WeightFiles wf(files);
    std::cout << "  decoder (generate, decode):\n";
    report_check(wf, model::vae_decoder_parameters(c), "    ");
    // The encoder is needed only to prepare training data; a decoder-only file is reported, not refused.
    const auto encoder = model::vae_encoder_parameters(c);
    if (wf.find(encoder.front().name) == nullptr) {
      std::cout << "  encoder (prepare-data): absent (" << encoder.front().name << " is not in the weights)\n";
    } else {
      std::cout << "  encoder (prepare-data):\n";
      report_check(wf, encoder, "    ");
    }
    return 0;
  }
  const model::ClipTextConfig c = model::load_clip_text_config(files.config);
  VINF_INPUT_CHECK(io::path_exists(dir + "/model.safetensors"), "text encoder directory ", dir,
                   " has no model.safetensors");
  files.weights = {dir + "/model.safetensors"};
  std::cout << "text encoder " << dir << " (CLIPTextModel): " << c.layers << " layers of " << c.hidden_size << ", "
            << c.heads << " heads, vocabulary " << c.vocab_size << ", " << c.max_positions << " positions\n";
  report_check(model::WeightFiles(files), model::clip_text_parameters(c));
  return 0;
}

// An image-to-video pipeline's CLIP tower (image_encoder/, a CLIPVisionModel: its shape, the layer
// the pipeline reads, its weights) and image processor.
void inspect_image_encoder(const std::string& dir) {
  const std::string p = dir + "/image_encoder", processor = dir + "/image_processor/preprocessor_config.json";
  if (!io::path_exists(p + "/config.json")) {
    std::cout << "image_encoder: absent (an image-to-video pipeline needs it)\n";
  } else {
    const model::ClipVisionConfig c = model::load_clip_vision_config(p + "/config.json");
    std::cout << "image_encoder " << p << " (CLIPVisionModel): " << c.encoder.layers << " layers of "
              << c.encoder.hidden_size << ", " << c.encoder.heads << " heads, MLP " << c.encoder.intermediate_size
              << ", " << c.image_size << "x" << c.image_size << " images in " << c.patch_size << "x" << c.patch_size
              << " patches (" << c.tokens() << " tokens per image); the pipeline reads layer " << c.encoder.layers - 1
              << "'s states (the second-to-last)\n";
    model::ModelFiles f;
    f.dir = p;
    f.config = p + "/config.json";
    f.weights = {p + "/model.safetensors"};
    VINF_INPUT_CHECK(io::path_exists(f.weights[0]), "image encoder directory ", p, " has no model.safetensors");
    report_check(model::WeightFiles(f), model::clip_vision_parameters(c, false));
  }
  if (!io::path_exists(processor)) {
    std::cout << "image_processor: absent (an image-to-video pipeline needs it)\n";
    return;
  }
  const model::ClipImageProcessor ip = model::load_clip_image_processor(processor);
  std::cout << "image_processor " << dir << "/image_processor (CLIPImageProcessor): shorter side to "
            << ip.shortest_edge << " (bicubic), centre crop " << ip.crop_height << "x" << ip.crop_width
            << ", CLIP mean and std\n";
}

// A Wan transformer directory, or the Wan pipeline root that holds one: its shape and weights, and
// the root's other parts: the VAE and the UMT5 text encoder with their shapes and weight checks, the
// T5 tokenizer's ids, the scheduler by class.
int inspect_wan(const std::string& dir, const std::string& config_path) {
  std::vector<std::string> warnings;
  const model::WanTransformerConfig c = model::load_wan_transformer_config(config_path, &warnings);
  const model::ModelFiles files = model::find_model_files(std::filesystem::path(config_path).parent_path().string());
  const auto params = model::wan_transformer_parameters(c);
  std::cout << "Wan transformer " << files.dir << " ("
            << (c.skyreels ? "SkyReelsV2Transformer3DModel" : "WanTransformer3DModel") << "): " << c.layers
            << " blocks of " << c.dim() << " (" << c.heads << " heads of " << c.head_dim << "), feed-forward "
            << c.ffn_dim << ", text width " << c.text_dim << ", patch " << c.patch_size[0] << "x" << c.patch_size[1]
            << "x" << c.patch_size[2] << ", " << c.in_channels << " latent channels; "
            << grouped(model::parameter_count(params)) << " parameters\n";
  if (c.skyreels)
    std::cout << "  diffusion forcing (SkyReels-V2): per-frame timesteps"
              << (c.inject_sample_info ? ", the fps embedding" : "") << ", causal blocks of " << c.num_frame_per_block
              << " frame(s); vinf generate's [df] options run it\n";
  if (c.image_conditioned())
    std::cout << "  image-to-video: " << c.in_channels << " input channels (" << c.out_channels << " latent, "
              << c.condition_channels() << " mask and image latents), CLIP states of width " << c.image_dim
              << " through the image embedder, each block's image keys and values from " << c.added_kv_proj_dim
              << (c.pos_embed_seq_len > 0 ? "; first and last frame: a position table of " +
                                                std::to_string(c.pos_embed_seq_len) + " image tokens"
                                          : "")
              << "\n";
  for (const std::string& w : warnings) std::cout << "  warning: " << w << "\n";
  report_check(model::WeightFiles(files), params);
  if (files.dir == dir) return 0;
  if (c.image_conditioned()) inspect_image_encoder(dir);
  std::int64_t encoder_vocab = 0;
  for (const char* part : {"vae", "text_encoder", "tokenizer", "scheduler"}) {
    const std::string p = dir + "/" + part, name = part;
    if (!io::is_directory(p)) {
      std::cout << part << ": absent\n";
      continue;
    }
    const std::string config = p + "/config.json";
    if (name == "vae" && io::path_exists(config) && pipeline::vae_family(p) == pipeline::ModelFamily::wan) {
      const model::WanVaeConfig c = model::load_wan_vae_config(config);
      std::cout << "vae " << p << " (AutoencoderKLWan): base " << c.base_dim;
      if (c.decoder_base_dim != c.base_dim) std::cout << " (decoder " << c.decoder_base_dim << ")";
      std::cout << ", dim_mult";
      for (int m : c.dim_mult) std::cout << " " << m;
      std::cout << ", " << c.num_res_blocks << " residual block(s) per stage, " << c.z_dim << " latent channels, "
                << c.spatial_ratio() << "x spatial, " << c.temporal_ratio() << "x temporal\n";
      report_check(model::WeightFiles(model::find_model_files(p)), model::wan_vae_parameters(c));
      continue;
    }
    if (name == "text_encoder" && io::path_exists(config) && model::is_t5_family_config_file(config)) {
      const model::Umt5Config c = model::load_umt5_config(config);
      VINF_INPUT_CHECK(io::path_exists(p + "/model.safetensors"), "text encoder directory ", p,
                       " has no model.safetensors");
      model::ModelFiles te;
      te.dir = p;
      te.config = config;
      te.weights = {p + "/model.safetensors"};
      std::cout << "text_encoder " << p << " (UMT5EncoderModel): " << c.layers << " layers of " << c.d_model << ", "
                << c.heads << " heads of " << c.d_kv << ", feed-forward " << c.d_ff << ", vocabulary "
                << grouped(c.vocab_size) << "\n";
      report_check(model::WeightFiles(te), model::umt5_encoder_parameters(c));
      encoder_vocab = c.vocab_size;
      continue;
    }
    if (name == "tokenizer" && io::path_exists(p + "/spiece.model")) {
      const model::T5Tokenizer t = model::T5Tokenizer::load(p);
      std::cout << "tokenizer " << p << " (T5 SentencePiece): " << grouped(t.vocab_size()) << " ids; pad " << t.pad_id()
                << ", eos " << t.eos_id() << ", unk " << t.unk_id();
      if (encoder_vocab > 0)
        std::cout << (t.vocab_size() <= encoder_vocab ? "; every id is in the text encoder's vocabulary"
                                                      : "; ids beyond the text encoder's vocabulary!");
      std::cout << "\n";
      continue;
    }
    const std::string what = pipeline::part_class(p);
    std::cout << part << " " << p << ": " << (what.empty() ? "present" : what) << "\n";
  }
  return 0;
}

int inspect_safetensors(const std::string& path) {
  const io::SafetensorsFile f(path);
  std::int64_t total = 0;
  for (const auto& e : f.entries()) {
    std::printf("%-72s %-5s %s\n", e.name.c_str(),
                e.opaque.empty() ? io::safetensors_dtype_name(e.dtype) : e.opaque.c_str(), e.shape.str().c_str());
    total += e.shape.numel();
  }
  std::cout << f.entries().size() << " tensors, " << grouped(total) << " elements\n";
  for (const auto& [k, v] : f.metadata()) std::cout << "metadata " << k << ": " << v << "\n";
  for (const auto& e : f.entries())
    if (e.opaque.empty()) f.tensor(e.name);  // a NaN or infinity is refused there (exit status 2)
  std::cout << "check: every stored number is finite\n";
  return 0;
}

}  // namespace

// A vinf HDF5 file (latents.h5, a checkpoint, activations.h5) or any HDF5 file: what it is, the
// run it belongs to, its partition and its datasets. One process, serial HDF5 access.
int inspect_hdf5(const std::string& path) {
  mpi::Session mpi(nullptr, nullptr);
  const io::H5File f = io::H5File::open_serial(path);
  const std::string format = f.has_attribute("/", "format") ? f.text("/", "format") : "(no vinf format attribute)";
  std::printf("%s: HDF5, format %s", path.c_str(), format.c_str());
  if (f.has_attribute("/", "format_version"))
    std::printf(" version %lld", static_cast<long long>(f.integer("/", "format_version")));
  if (f.has_attribute("/", "vinf_version")) std::printf(", written by vinf %s", f.text("/", "vinf_version").c_str());
  std::printf("\n");
  if (f.has_attribute("/state", "step")) {
    const std::int64_t step = f.integer("/state", "step");
    const std::size_t total = f.exists("/state/timesteps") ? f.read_i64("/state/timesteps").size() : 0;
    std::printf("  step %lld of %zu completed\n", static_cast<long long>(step), total);
  }
  if (f.has_attribute("/", "frames_written") && f.exists("/latents")) {
    const std::int64_t written = f.integer("/", "frames_written"), total = f.extent("/latents")[0];
    if (written < total)
      std::printf(
          "  in the making: %lld of %lld latent frames final (a diffusion-forcing run writes its windows' "
          "frames as they end; the rest are not written yet)\n",
          static_cast<long long>(written), static_cast<long long>(total));
  }
  if (f.has_attribute("/", "world_size"))
    std::printf("  written by %lld rank(s): %lld clip(s) x %lld guidance branch(es)\n",
                static_cast<long long>(f.integer("/", "world_size")),
                static_cast<long long>(f.integer("/", "clip_size")),
                static_cast<long long>(f.integer("/", "cfg_size")));
  if (f.has_attribute("/", "noise_mode"))
    std::printf("  scheduler %s, noise %s, seed %lld\n", f.text("/", "scheduler").c_str(),
                f.text("/", "noise_mode").c_str(), static_cast<long long>(f.integer("/", "seed")));
  if (f.has_attribute("/", "model_fingerprint")) std::printf("  model %s\n", f.text("/", "model_fingerprint").c_str());
  // The settings a resume must share: a dataset since format version 2, an attribute before. A long
  // prompt list makes them long; the whole text is in the file (h5dump -d /run/numerics).
  std::string settings;
  if (f.exists("/run/numerics"))
    settings = f.read_text("/run/numerics");
  else if (f.has_attribute("/", "numerics"))
    settings = f.text("/", "numerics");
  else if (f.exists("/train/settings"))
    settings = f.read_text("/train/settings");  // a training checkpoint
  if (f.exists("/train/state")) std::printf("  training state %s\n", f.read_text("/train/state").c_str());
  constexpr std::size_t kShown = 2000;
  if (settings.size() > kShown) {
    std::size_t cut = kShown;
    while (cut > 0 && (static_cast<unsigned char>(settings[cut]) & 0xC0) == 0x80)
      --cut;  // not inside a UTF-8 character
    settings = settings.substr(0, cut) + "... (" + std::to_string(settings.size()) + " bytes in all)";
  }
  if (!settings.empty()) std::printf("  settings %s\n", settings.c_str());
  std::printf("  datasets:\n");
  for (const std::string& line : f.describe()) std::printf("    %s\n", line.c_str());
  const std::vector<std::string> problems = f.verify();
  if (problems.empty()) {
    std::printf("  check: every dataset reads back with its checksum, every number finite\n");
    return 0;
  }
  std::printf("  check: FAILED\n");
  std::fflush(stdout);
  std::string list;
  for (const std::string& p : problems) list += "\n  " + p;
  VINF_INPUT_FAIL(path, " is damaged (", problems.size(), " dataset(s)); do not resume from it or decode it:", list);
}

int inspect(const std::vector<std::string>& args) {
  std::string config_file, path;
  po::options_description opts(
      "vinf inspect: describe a model directory (a UNet, VAE, text encoder or tokenizer, or a pipeline with\n"
      "all of them), a safetensors file, or an HDF5 file (latents.h5, a checkpoint, activations.h5)\n\nusage: vinf "
      "inspect PATH\n\n"
      "Options come from the command line and from --config FILE (INI: `path = PATH`); the command line\n"
      "wins.\n\nOptions");
  opts.add_options()("help,h", "show this help")("config", path_value(&config_file, PathKind::file), kConfigOptionHelp)(
      "path", path_value(&path, PathKind::file_or_dir), "model directory, .safetensors or .h5 file");
  po::positional_options_description pos;
  pos.add("path", 1);
  po::variables_map vm;
  parse_options(args, opts, vm, "inspect", &pos);
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  VINF_INPUT_CHECK(!path.empty(), "vinf inspect: give a model directory, a .safetensors or an .h5 file (see --help)");
  std::error_code ec;
  VINF_INPUT_CHECK(std::filesystem::exists(path, ec), path, " does not exist");
  if (std::filesystem::is_directory(path, ec)) {
    if (pipeline::model_family(path) == pipeline::ModelFamily::wan)
      return inspect_wan(path, model::find_wan_transformer_config(path));
    if (pipeline::is_model_part(path)) return inspect_part(path);
    inspect_model(path);
    // A pipeline root: its other parts too.
    for (const char* part : {"vae", "text_encoder", "tokenizer"})
      if (io::is_directory(path + "/" + part)) inspect_part(path + "/" + part);
    return 0;
  }
  if (path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0) return inspect_safetensors(path);
  if (io::is_hdf5(path)) return inspect_hdf5(path);
  VINF_INPUT_FAIL(path, " is neither a model directory, a .safetensors file nor an HDF5 file");
}

}  // namespace vinf::app
