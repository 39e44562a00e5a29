// `vinf encode-text` (design.md §5): prompts through a text encoder and its tokenizer, as a
// pipeline conditions its denoiser. Two families, told apart by the text encoder's config.json and
// the tokenizer's files: CLIP (vocab.json + merges.txt, CLIPTextModel; the UNet's) and T5
// (spiece.model, UMT5EncoderModel; Wan's). Writes `input_ids` I64 [N, L] and `last_hidden_state`
// F32 [N, L, D], for T5 also `attention_mask` I64 [N, L]; with --negative also `prompt_embeds` and
// `negative_prompt_embeds`, the file `vinf generate --prompt.embeddings` reads.
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/option_values.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "core/utf8.hpp"
#include "io/safetensors.hpp"
#include "io/path_query.hpp"
#include "model/clip_text.hpp"
#include "model/t5_tokenizer.hpp"
#include "model/tokenizer.hpp"
#include "model/umt5.hpp"
#include "job/job.hpp"
#include "ops/runtime.hpp"

namespace po = boost::program_options;

namespace vinf::app {

namespace {

const Reporter kEncodeTextVoice("vinf encode-text:", true);

// The prompts of --prompt-file, one per line (UTF-8), after the --prompt ones.
void add_prompt_file(const std::string& prompt_file, std::vector<std::string>& prompts) {
  if (prompt_file.empty()) return;
  std::ifstream in(prompt_file);
  VINF_INPUT_CHECK(in.good(), "--prompt-file ", prompt_file, ": cannot read the file");
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::size_t bad = first_invalid_utf8(line);
    VINF_INPUT_CHECK(bad == std::string::npos, "--prompt-file ", prompt_file, " line ", number,
                     " is not valid UTF-8 (byte ", bad, " of the line); save the file as UTF-8");
    prompts.push_back(line);
  }
}

// Every prompt and the negative one is text the tokenizer can read.
void check_utf8(const std::vector<std::string>& prompts, const std::vector<std::string>& negative) {
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const std::size_t bad = first_invalid_utf8(prompts[i]);
    VINF_INPUT_CHECK(bad == std::string::npos, "--prompt number ", i + 1, " is not valid UTF-8 (byte ", bad, ")");
  }
  for (const std::string& n : negative)
    VINF_INPUT_CHECK(first_invalid_utf8(n) == std::string::npos, "--negative is not valid UTF-8 (byte ",
                     first_invalid_utf8(n), ")");
}

enum class TextFamily { clip, t5 };

// T5's --max-length: the Wan pipelines' default, and a bound far above any of them that keeps the
// attention's scores ([N, heads, L, L]) allocatable.
constexpr int kDefaultT5Length = 512, kMaxT5Length = 16384;

// The family of the text encoder (its config.json, in DIR or DIR/text_encoder) and the tokenizer
// (spiece.model or vocab.json, in DIR or DIR/tokenizer); a directory without either is left to
// the loader to refuse. Throws vinf::InputError when the two are of different families.
TextFamily text_family(const std::string& encoder_dir, const std::string& tokenizer_dir) {
  auto in = [](const std::string& dir, const std::string& sub, const std::string& file) {
    return io::path_exists(dir + "/" + file) || io::path_exists(dir + "/" + sub + "/" + file);
  };
  std::string config = encoder_dir + "/config.json";
  if (!io::path_exists(config)) config = encoder_dir + "/text_encoder/config.json";
  const bool t5_encoder = io::path_exists(config) && model::is_t5_family_config_file(config);
  const bool spiece = in(tokenizer_dir, "tokenizer", "spiece.model"),
             vocab = in(tokenizer_dir, "tokenizer", "vocab.json");
  if (t5_encoder)
    VINF_INPUT_CHECK(
        spiece || !vocab, "vinf encode-text: the text encoder ", encoder_dir,
        " is a T5 encoder (UMT5), which takes a SentencePiece tokenizer (spiece.model), but the tokenizer ",
        tokenizer_dir, " is a CLIP one (vocab.json, no spiece.model): they are not from the same model");
  else
    VINF_INPUT_CHECK(!spiece || vocab, "vinf encode-text: the text encoder ", encoder_dir,
                     " is a CLIP encoder, which takes a CLIP tokenizer (vocab.json, merges.txt), but the tokenizer ",
                     tokenizer_dir, " is a SentencePiece one (spiece.model): they are not from the same model");
  return t5_encoder ? TextFamily::t5 : TextFamily::clip;
}

// What the text encoder made of the prompts (and the negative one, last): the token ids and mask
// of the prompts, the encoder's output, and (T5 with a negative prompt) the pipeline's embeddings.
struct Encoded {
  std::int64_t length = 0, width = 0;
  std::vector<std::int64_t> ids, mask;
  std::vector<float> hidden, embeds;  // embeds: what the pipeline hands the denoiser, when it differs from hidden
  std::string tokenizer_source;
};

Encoded encode_clip_texts(Runtime& rt, const std::string& encoder_dir, const std::string& tokenizer_dir,
                          const std::vector<std::string>& all, std::size_t prompts, bool max_length_given,
                          int max_length_opt) {
  Encoded e;
  const model::ClipTokenizer tokenizer = model::ClipTokenizer::load(tokenizer_dir);
  for (const std::string& w : tokenizer.warnings()) kEncodeTextVoice.warn(w);
  VINF_INPUT_CHECK(!max_length_given || max_length_opt == tokenizer.max_length(), "vinf encode-text: --max-length ",
                   max_length_opt, " differs from the CLIP tokenizer's ", tokenizer.max_length(), " tokens (",
                   tokenizer.source(), "): CLIP's length is fixed by its position embeddings");
  const model::ClipTextModel encoder = model::ClipTextModel::load(encoder_dir, rt, DType::f32);
  std::vector<model::TokenizedText> tokens;
  e.hidden = model::encode_prompts(rt, tokenizer, encoder, all, &tokens);
  e.length = tokenizer.max_length();
  e.width = encoder.config().hidden_size;
  e.tokenizer_source = tokenizer.source();
  for (std::size_t i = 0; i < all.size(); ++i) {
    const model::TokenizedText& t = tokens[i];
    const std::string name = i < prompts ? "prompt " + std::to_string(i) : "the negative prompt";
    if (t.truncated())
      kEncodeTextVoice.warn(name, " has ", t.length, " tokens; the text encoder takes ", e.length,
                            ", so these are dropped: '", excerpt(t.dropped), "'");
    if (i < prompts) e.ids.insert(e.ids.end(), t.ids.begin(), t.ids.end());
  }
  return e;
}

Encoded encode_t5_texts(Runtime& rt, const std::string& encoder_dir, const std::string& tokenizer_dir,
                        const std::vector<std::string>& all, std::size_t prompts, bool negative, std::int64_t length) {
  Encoded e;
  e.length = length;
  const model::T5Tokenizer tokenizer = model::T5Tokenizer::load(tokenizer_dir);
  const model::Umt5Encoder encoder = model::Umt5Encoder::load(encoder_dir, rt, DType::f32);
  e.width = encoder.config().d_model;
  e.tokenizer_source = tokenizer.source();
  std::vector<model::T5TokenizedText> tokens;
  e.hidden = model::encode_prompts(rt, tokenizer, encoder, all, static_cast<int>(length), &tokens);
  std::vector<std::int64_t> lengths;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const model::T5TokenizedText& t = tokens[i];
    const std::string name = i < prompts ? "prompt " + std::to_string(i) : "the negative prompt";
    if (t.truncated())
      kEncodeTextVoice.warn(name, " has ", t.length, " tokens with eos; --max-length is ", length, ", so its last ",
                            t.length - length, " tokens are dropped");
    if (i < prompts) {
      e.ids.insert(e.ids.end(), t.ids.begin(), t.ids.end());
      e.mask.insert(e.mask.end(), t.mask.begin(), t.mask.end());
    }
    lengths.push_back(std::count(t.mask.begin(), t.mask.end(), std::int64_t{1}));
  }
  if (negative) {
    e.embeds = e.hidden;
    model::zero_past_length(e.embeds, static_cast<std::int64_t>(all.size()), length, e.width, lengths);
  }
  return e;
}

}  // namespace

int encode_text(const std::vector<std::string>& args) {
  std::string config_file, encoder_dir, tokenizer_dir, model_dir, prompt_file, out_path, device_opt = "auto";
  std::vector<std::string> prompts, negative;
  bool quiet = false, clean = false;
  int max_length_opt = 0;  // 0: the family's default
  po::options_description opts(
      "vinf encode-text: prompts to a denoiser's text conditioning (CLIP, or Wan's T5 tokenizer + UMT5 encoder)\n\n"
      "usage: vinf encode-text --text-encoder DIR --tokenizer DIR --prompt TEXT [--prompt TEXT ...] --out "
      "OUT.safetensors\n"
      "       vinf encode-text --model PIPELINE --prompt-file PROMPTS.txt --negative '' --out OUT.safetensors\n\n"
      "The family comes from the text encoder's config.json (model_type \"umt5\" or a T5 architecture: T5;\n"
      "otherwise CLIP) and must match the tokenizer's files (spiece.model: T5; vocab.json + merges.txt: CLIP).\n\n"
      "CLIP: OUT gets input_ids I64 [N, 77] and last_hidden_state F32 [N, 77, D], one row per prompt in order.\n"
      "With --negative it also gets prompt_embeds (the same as last_hidden_state) and negative_prompt_embeds\n"
      "[1, 77, D]: the file vinf generate --prompt.embeddings takes. A prompt longer than the tokenizer's\n"
      "77 tokens is truncated (bos, the first 75 tokens, eos) with a warning naming what was dropped.\n"
      "--max-length may only repeat the tokenizer's own length (77).\n\n"
      "T5 (Wan): OUT gets input_ids and attention_mask I64 [N, L] and last_hidden_state F32 [N, L, D], L =\n"
      "--max-length (default 512): at most L - 1 tokens, eos, padding; the encoder's raw output. With --negative\n"
      "also prompt_embeds [N, L, D] and negative_prompt_embeds [1, L, D] as the Wan pipeline makes them: zero\n"
      "past each prompt's tokens and eos. Runs where --device says (auto: CUDA when there is a GPU).\n\n"
      "--clean applies the Wan pipeline's prompt_clean to every prompt first (HTML references undone twice,\n"
      "whitespace runs made one space, ends stripped; ftfy's repairs are not made).\n\n"
      "Options come from the command line and from --config FILE (INI: `model = DIR`, one `prompt = TEXT`\n"
      "line per prompt); the command line wins.\n\nOptions");
  opts.add_options()("help,h", "show this help")("config", path_value(&config_file, PathKind::file), kConfigOptionHelp)(
      "text-encoder", path_value(&encoder_dir, PathKind::directory),
      "text encoder directory (config.json + model.safetensors, transformers' CLIPTextModel or UMT5EncoderModel)")(
      "tokenizer", path_value(&tokenizer_dir, PathKind::directory),
      "tokenizer directory (CLIP: vocab.json, merges.txt, tokenizer_config.json; T5: spiece.model)")(
      "model", path_value(&model_dir, PathKind::directory),
      "a pipeline directory: the defaults for the two above (MODEL/text_encoder, "
      "MODEL/tokenizer)")("prompt", po::value(&prompts), "a prompt (repeatable; may be empty)")(
      "prompt-file", path_value(&prompt_file, PathKind::file),
      "more prompts, one per line (UTF-8), after the --prompt ones")(
      "negative", po::value(&negative), "the negative prompt (may be empty: --negative '')")(
      "max-length", ranged(&max_length_opt, 1, kMaxT5Length),
      "tokens per prompt: T5 default 512; CLIP only its tokenizer's 77")(
      "clean", po::bool_switch(&clean), "apply the Wan pipeline's prompt_clean to the prompts and the negative")(
      "out", path_value(&out_path, PathKind::new_file),
      "output file (safetensors); written under a temporary name, then renamed")(
      "device", po::value(&device_opt)->default_value(device_opt), "auto | cpu | cuda (computes in f32)")(
      "quiet,q", po::bool_switch(&quiet), "print only errors");
  po::variables_map vm;
  parse_options(args, opts, vm, "encode-text");
  if (vm.count("help")) {
    std::cout << opts
              << "\nExit status: 0 on success, 2 for bad input (the message names the file and key), 1 otherwise.\n";
    return 0;
  }
  VINF_INPUT_CHECK(vm.count("out"), "vinf encode-text: --out is required (see vinf encode-text --help)");
  VINF_INPUT_CHECK(!out_path.empty(), "vinf encode-text: --out is empty: give the output file");
  if (encoder_dir.empty() && !model_dir.empty()) encoder_dir = model_dir + "/text_encoder";
  if (tokenizer_dir.empty() && !model_dir.empty()) tokenizer_dir = model_dir + "/tokenizer";
  VINF_INPUT_CHECK(!encoder_dir.empty() && !tokenizer_dir.empty(),
                   "vinf encode-text: give --text-encoder DIR and --tokenizer DIR, or --model PIPELINE");
  VINF_INPUT_CHECK(negative.size() <= 1, "vinf encode-text: --negative is given ", negative.size(), " times");
  const bool max_length_given = vm.count("max-length") > 0;
  add_prompt_file(prompt_file, prompts);
  check_utf8(prompts, negative);
  VINF_INPUT_CHECK(!prompts.empty(),
                   "vinf encode-text: no prompt: give --prompt TEXT (repeatable) or --prompt-file FILE");
  const TextFamily family = text_family(encoder_dir, tokenizer_dir);
  std::vector<std::string> all = prompts;
  if (!negative.empty()) all.push_back(negative[0]);
  if (clean)
    for (std::string& p : all) p = model::wan_prompt_clean(p);

  job::JobPlan plan;  // one job of its own on each rank, in f32: no group communicators
  plan.device = job::parse_device_choice(device_opt);
  plan.dtype = DType::f32;
  plan.clip_group = false;
  const std::unique_ptr<job::Job> job = job::start_job(plan);
  const Device device = job->device();
  Runtime& rt = job->runtime();
  const auto t0 = std::chrono::steady_clock::now();
  const auto n = static_cast<std::int64_t>(prompts.size());
  const Encoded e =
      family == TextFamily::clip
          ? encode_clip_texts(rt, encoder_dir, tokenizer_dir, all, prompts.size(), max_length_given, max_length_opt)
          : encode_t5_texts(rt, encoder_dir, tokenizer_dir, all, prompts.size(), !negative.empty(),
                            max_length_given ? max_length_opt : kDefaultT5Length);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const std::size_t row = static_cast<std::size_t>(e.length * e.width);
  std::vector<io::TensorToWrite> tensors = {{"input_ids", DType::i64, {n, e.length}, e.ids.data(), {}}};
  if (!e.mask.empty()) tensors.push_back({"attention_mask", DType::i64, {n, e.length}, e.mask.data(), {}});
  tensors.push_back({"last_hidden_state", DType::f32, {n, e.length, e.width}, e.hidden.data(), {}});
  if (!negative.empty()) {
    const float* embeds = e.embeds.empty() ? e.hidden.data() : e.embeds.data();
    tensors.push_back({"prompt_embeds", DType::f32, {n, e.length, e.width}, embeds, {}});
    tensors.push_back({"negative_prompt_embeds", DType::f32, {1, e.length, e.width}, embeds + n * row, {}});
  }
  nlohmann::json meta_prompts = prompts;
  std::map<std::string, std::string> meta = {{"generator", std::string("vinf ") + VINF_VERSION + " encode-text"},
                                             {"text_encoder", encoder_dir},
                                             {"tokenizer", e.tokenizer_source},
                                             {"prompts", meta_prompts.dump()}};
  if (family == TextFamily::t5) meta["family"] = "t5";
  if (clean) meta["prompt_clean"] = "wan";
  if (!negative.empty()) meta["negative_prompt"] = negative[0];
  io::write_safetensors(out_path, tensors, meta);
  Reporter("vinf encode-text:", true, quiet)
      .say(n, " prompt(s)", negative.empty() ? "" : " and the negative", ", ", e.length, " tokens x ", e.width, " on ",
           device.name(), " in ", seconds, " s; wrote ", out_path);
  return 0;
}

}  // namespace vinf::app
