// The two ends of the pipeline, random weights:
//   tokenizer     prompts/s of the CLIP BPE tokenizer on the 25 reference prompts (needs the real
//                 vocabulary: --vinf_tokenizer=DIR, default ../shared/fixtures/clip-tokenizer;
//                 skipped when absent)
//   text_encoder  tokens/s of the CLIP text encoder, a batch of 2 x 77 tokens (negative + prompt,
//                 what a run encodes): the OpenCLIP-H shape (23 layers, 1024 wide, 340 M params)
//   vae_decode    frames/s of one rank's VAE decoding at 320 x 512 (40 x 64 latent): the small
//                 preset and the kl-f8 shape (zeroscope's VAE) on the CPU; kl-f8 on a GPU in
//                 f32/bf16/f16; also with --vae.tile 16 and 8 (tiled convolutions, the same numbers).
//                 "peak GiB" is the arena's high-water mark while decoding (the weights, latents
//                 and output included)
//   --vinf_suite=smoke: tiny shapes, to check that the harness runs.
//
//   vinf_bench_text_vae [--vinf_suite=bench|smoke] [--vinf_devices=cpu,cuda] [--vinf_tokenizer=DIR]
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_flags.hpp"
#include "model/clip_text.hpp"
#include "model/tokenizer.hpp"
#include "model/vae.hpp"
#include "ops/random.hpp"
#include "ops/runtime.hpp"

using namespace vinf;

namespace {

struct TextSetup {
  model::ClipTextConfig config;
  Device device;
  DType dtype;
};

struct VaeSetup {
  model::VaeConfig config;
  Device device;
  DType dtype;
  std::int64_t h, w, frames;
  std::int64_t tile = 0;  // --vae.tile
};

std::string device_label(const Device& d, DType t) { return std::string(d.is_cpu() ? "cpu " : "cuda ") + dtype_name(t); }

void tokenize(benchmark::State& state, const model::ClipTokenizer& tok, const std::vector<std::string>& prompts) {
  std::int64_t tokens = 0;
  for (auto _ : state) {
    for (const std::string& p : prompts) {
      // A fresh tokenizer cache per round would measure the BPE itself; the cache is per word, so
      // a new prompt mostly hits it anyway. Measure the steady state, as a run sees it.
      const model::TokenizedText t = tok.encode(p);
      tokens += t.length;
      benchmark::DoNotOptimize(t.ids.data());
    }
  }
  state.counters["prompts/s"] = benchmark::Counter(static_cast<double>(prompts.size()), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}

void encode(benchmark::State& state, const TextSetup& s) {
  Runtime rt(s.device);
  const model::ClipTextModel enc(s.config, model::Weights::random(model::clip_text_parameters(s.config), rt, s.dtype, 3));
  const std::int64_t batch = 2, tokens = s.config.max_positions;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(batch * tokens));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>((i * 7919) % static_cast<std::size_t>(s.config.vocab_size));
  OwnedTensor out = rt.arena().empty(DType::f32, {batch, tokens, s.config.hidden_size});
  enc.encode(rt.ctx(), ids, batch, tokens, out);  // warm-up
  rt.synchronize();
  for (auto _ : state) {
    enc.encode(rt.ctx(), ids, batch, tokens, out);
    rt.synchronize();
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(batch * tokens), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["params M"] = static_cast<double>(enc.weights().count()) / 1e6;
}

void decode(benchmark::State& state, const VaeSetup& s) {
  Runtime rt(s.device);
  const model::VaeDecoder vae(s.config, model::Weights::random(model::vae_decoder_parameters(s.config), rt, s.dtype, 4));
  const std::int64_t up = s.config.upscale();
  OwnedTensor z = rt.arena().empty(DType::f32, {s.frames, s.config.latent_channels, s.h, s.w});
  OwnedTensor y = rt.arena().empty(DType::f32, {s.frames, s.config.out_channels, s.h * up, s.w * up});
  ops::normal(rt.ctx(), z, 5, 0, 0);
  vae.decode(rt.ctx(), z, y, s.frames, s.tile);  // warm-up
  rt.synchronize();
  rt.arena().reset_peak();
  for (auto _ : state) {
    vae.decode(rt.ctx(), z, y, s.frames, s.tile);
    rt.synchronize();
  }
  state.counters["frames/s"] = benchmark::Counter(static_cast<double>(s.frames), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak GiB"] = static_cast<double>(rt.arena().stats().peak_in_use) / (1u << 30);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string suite = bench::take_flag(argc, argv, "vinf_suite", "bench");
  const std::string devices = bench::take_flag(argc, argv, "vinf_devices", "cpu,cuda");
  const std::string vocab = bench::take_flag(argc, argv, "vinf_tokenizer", VINF_SHARED_FIXTURES "/clip-tokenizer");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  const bool smoke = suite == "smoke";
  const bool cpu = devices.find("cpu") != std::string::npos;
  const bool gpu = devices.find("cuda") != std::string::npos && cuda_device_count() > 0;
  if (devices.find("cuda") != std::string::npos && !gpu)
    std::cout << "cuda: skipped (" << (built_with_cuda() ? "no GPU visible" : "built without CUDA") << ")\n";
  const double min_time = smoke ? 0.001 : 2.0;

  static std::unique_ptr<model::ClipTokenizer> tokenizer;
  static std::vector<std::string> prompts;
  if (std::filesystem::exists(vocab + "/vocab.json") && std::filesystem::exists(vocab + "/reference_ids.json")) {
    tokenizer = std::make_unique<model::ClipTokenizer>(model::ClipTokenizer::load(vocab));
    std::ifstream in(vocab + "/reference_ids.json");
    for (const auto& c : nlohmann::json::parse(in)) prompts.push_back(c["text"].get<std::string>());
    benchmark::RegisterBenchmark("tokenizer/clip [25 reference prompts]",
                                 [](benchmark::State& st) { tokenize(st, *tokenizer, prompts); })
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(min_time);
  } else {
    std::cout << "tokenizer: skipped (" << vocab << " has no vocab.json/reference_ids.json)\n";
  }

  static std::vector<TextSetup> texts;
  static std::vector<VaeSetup> vaes;
  const model::ClipTextConfig openclip_h;  // the defaults are the OpenCLIP-H text tower
  if (smoke) {
    if (cpu) texts.push_back({model::clip_text_preset(32), Device::cpu(), DType::f32});
    if (cpu) vaes.push_back({model::vae_preset("tiny"), Device::cpu(), DType::f32, 8, 8, 2});
    if (cpu) vaes.push_back({model::vae_preset("tiny"), Device::cpu(), DType::f32, 8, 8, 2, 3});
  } else {
    if (cpu) texts.push_back({openclip_h, Device::cpu(), DType::f32});
    if (cpu) vaes.push_back({model::vae_preset("small"), Device::cpu(), DType::f32, 40, 64, 1});
    for (std::int64_t tile : {0, 16, 8})
      if (cpu) vaes.push_back({model::vae_preset("vc2"), Device::cpu(), DType::f32, 40, 64, 1, tile});
    if (gpu) {
      for (DType t : {DType::f32, DType::bf16}) texts.push_back({openclip_h, Device::cuda(0), t});
      for (DType t : {DType::f32, DType::bf16, DType::f16})
        vaes.push_back({model::vae_preset("vc2"), Device::cuda(0), t, 40, 64, 8});
      vaes.push_back({model::vae_preset("vc2"), Device::cuda(0), DType::bf16, 40, 64, 8, 16});
    }
  }
  for (const TextSetup& s : texts) {
    const std::string name = "text_encoder/" + std::to_string(s.config.layers) + "x" + std::to_string(s.config.hidden_size) +
                             " [" + device_label(s.device, s.dtype) + "] 2x" + std::to_string(s.config.max_positions);
    benchmark::RegisterBenchmark(name.c_str(), [&s](benchmark::State& st) { encode(st, s); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(min_time);
  }
  for (const VaeSetup& s : vaes) {
    const std::int64_t up = s.config.upscale();
    const std::string name = "vae_decode/" + std::to_string(s.config.block_out_channels.back()) + "ch [" +
                             device_label(s.device, s.dtype) + "] " + std::to_string(s.frames) + " x " +
                             std::to_string(s.h * up) + "x" + std::to_string(s.w * up) +
                             (s.tile > 0 ? " tile " + std::to_string(s.tile) : "");
    benchmark::RegisterBenchmark(name.c_str(), [&s](benchmark::State& st) { decode(st, s); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(min_time);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
