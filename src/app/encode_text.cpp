// `vinf encode-text` (design.md §5): prompts through the CLIP tokenizer and text encoder, as the
// pipeline conditions the UNet. Writes `input_ids` I64 [N, L] and `last_hidden_state` F32
// [N, L, D]; with --negative also `prompt_embeds` and `negative_prompt_embeds`, the file
// `vinf generate --prompt.embeddings` reads.
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
#include "core/error.hpp"
#include "core/utf8.hpp"
#include "io/safetensors.hpp"
#include "model/clip_text.hpp"
#include "model/tokenizer.hpp"
#include "job/job.hpp"
#include "ops/runtime.hpp"

namespace po = boost::program_options;

namespace vinf::app {

namespace {

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

}  // namespace

int encode_text(const std::vector<std::string>& args) {
  std::string config_file, encoder_dir, tokenizer_dir, model_dir, prompt_file, out_path, device_opt = "auto";
  std::vector<std::string> prompts, negative;
  bool quiet = false;
  po::options_description opts(
      "vinf encode-text: prompts to the UNet's text conditioning (CLIP tokenizer + text encoder)\n\n"
      "usage: vinf encode-text --text-encoder DIR --tokenizer DIR --prompt TEXT [--prompt TEXT ...] --out OUT.safetensors\n"
      "       vinf encode-text --model PIPELINE --prompt-file PROMPTS.txt --negative '' --out OUT.safetensors\n\n"
      "OUT gets input_ids I64 [N, 77] and last_hidden_state F32 [N, 77, D], one row per prompt in order.\n"
      "With --negative it also gets prompt_embeds (the same as last_hidden_state) and negative_prompt_embeds\n"
      "[1, 77, D]: the file vinf generate --prompt.embeddings takes. A prompt longer than the tokenizer's\n"
      "77 tokens is truncated (bos, the first 75 tokens, eos) with a warning naming what was dropped.\n\n"
      "Options come from the command line and from --config FILE (INI: `model = DIR`, one `prompt = TEXT`\n"
      "line per prompt); the command line wins.\n\nOptions");
  opts.add_options()("help,h", "show this help")("config", po::value(&config_file), kConfigOptionHelp)(
      "text-encoder", po::value(&encoder_dir),
      "text encoder directory (config.json + model.safetensors, transformers' CLIPTextModel)")(
      "tokenizer", po::value(&tokenizer_dir), "tokenizer directory (vocab.json, merges.txt, tokenizer_config.json)")(
      "model", po::value(&model_dir), "a pipeline directory: the defaults for the two above (MODEL/text_encoder, "
                                      "MODEL/tokenizer)")(
      "prompt", po::value(&prompts), "a prompt (repeatable; may be empty)")(
      "prompt-file", po::value(&prompt_file), "more prompts, one per line (UTF-8), after the --prompt ones")(
      "negative", po::value(&negative), "the negative prompt (may be empty: --negative '')")(
      "out", po::value(&out_path), "output file (safetensors); written under a temporary name, then renamed")(
      "device", po::value(&device_opt)->default_value(device_opt), "auto | cpu | cuda (computes in f32)")(
      "quiet,q", po::bool_switch(&quiet), "print only errors");
  po::variables_map vm;
  parse_options(args, opts, vm, "encode-text");
  if (vm.count("help")) {
    std::cout << opts << "\nExit status: 0 on success, 2 for bad input (the message names the file and key), 1 otherwise.\n";
    return 0;
  }
  VINF_INPUT_CHECK(vm.count("out"), "vinf encode-text: --out is required (see vinf encode-text --help)");
  VINF_INPUT_CHECK(!out_path.empty(), "vinf encode-text: --out is empty: give the output file");
  if (encoder_dir.empty() && !model_dir.empty()) encoder_dir = model_dir + "/text_encoder";
  if (tokenizer_dir.empty() && !model_dir.empty()) tokenizer_dir = model_dir + "/tokenizer";
  VINF_INPUT_CHECK(!encoder_dir.empty() && !tokenizer_dir.empty(),
                   "vinf encode-text: give --text-encoder DIR and --tokenizer DIR, or --model PIPELINE");
  VINF_INPUT_CHECK(negative.size() <= 1, "vinf encode-text: --negative is given ", negative.size(), " times");
  add_prompt_file(prompt_file, prompts);
  check_utf8(prompts, negative);
  VINF_INPUT_CHECK(!prompts.empty(), "vinf encode-text: no prompt: give --prompt TEXT (repeatable) or --prompt-file FILE");

  job::JobPlan plan;  // one job of its own on each rank, in f32: no group communicators
  plan.device = job::parse_device_choice(device_opt);
  plan.dtype = DType::f32;
  plan.clip_group = false;
  const std::unique_ptr<job::Job> job = job::start_job(plan);
  const Device device = job->device();
  Runtime& rt = job->runtime();
  const auto t0 = std::chrono::steady_clock::now();
  const model::ClipTokenizer tokenizer = model::ClipTokenizer::load(tokenizer_dir);
  for (const std::string& w : tokenizer.warnings()) std::cerr << "vinf encode-text: warning: " << w << "\n";
  const model::ClipTextModel encoder = model::ClipTextModel::load(encoder_dir, rt, DType::f32);
  std::vector<std::string> all = prompts;
  if (!negative.empty()) all.push_back(negative[0]);
  std::vector<model::TokenizedText> tokens;
  const std::vector<float> hidden = model::encode_prompts(rt, tokenizer, encoder, all, &tokens);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const auto n = static_cast<std::int64_t>(prompts.size());
  const std::int64_t length = tokenizer.max_length(), width = encoder.config().hidden_size;
  std::vector<std::int64_t> ids;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const model::TokenizedText& t = tokens[i];
    const std::string name = i < prompts.size() ? "prompt " + std::to_string(i) : "the negative prompt";
    if (t.truncated())
      std::cerr << "vinf encode-text: warning: " << name << " has " << t.length << " tokens; the text encoder takes "
                << length << ", so these are dropped: '" << t.dropped << "'\n";
    if (i < prompts.size()) ids.insert(ids.end(), t.ids.begin(), t.ids.end());
  }
  const std::size_t row = static_cast<std::size_t>(length * width);
  std::vector<io::TensorToWrite> tensors = {
      {"input_ids", DType::i64, {n, length}, ids.data(), {}},
      {"last_hidden_state", DType::f32, {n, length, width}, hidden.data(), {}}};
  if (!negative.empty()) {
    tensors.push_back({"prompt_embeds", DType::f32, {n, length, width}, hidden.data(), {}});
    tensors.push_back({"negative_prompt_embeds", DType::f32, {1, length, width}, hidden.data() + n * row, {}});
  }
  nlohmann::json meta_prompts = prompts;
  std::map<std::string, std::string> meta = {{"generator", std::string("vinf ") + VINF_VERSION + " encode-text"},
                                             {"text_encoder", encoder_dir},
                                             {"tokenizer", tokenizer.source()},
                                             {"prompts", meta_prompts.dump()}};
  if (!negative.empty()) meta["negative_prompt"] = negative[0];
  io::write_safetensors(out_path, tensors, meta);
  if (!quiet)
    std::cerr << "vinf encode-text: " << n << " prompt(s)" << (negative.empty() ? "" : " and the negative") << ", "
              << length << " tokens x " << width << " on " << device.name() << " in " << seconds << " s; wrote "
              << out_path << "\n";
  return 0;
}

}  // namespace vinf::app
