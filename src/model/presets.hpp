// Built-in model shapes and random-weight models in the diffusers directory layout:
//   tiny  the golden-fixture shape (channels 32/64, one layer per block), for tests and demos;
//   small VideoCrafter2's block structure at a fifth of its width (~57 M parameters), for CPU work;
//   vc2   the full VideoCrafter2 UNet (1,413,284,420 parameters), for benchmarks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "model/clip_text.hpp"
#include "model/config.hpp"
#include "model/params.hpp"

namespace vinf::model {

const std::vector<std::string>& preset_names();
// Throws vinf::InputError naming the presets for an unknown name.
UNetConfig preset_config(const std::string& name);
// The dtype make-model writes unless told otherwise: f16 for vc2 (2.8 GB), f32 below.
DType preset_default_dtype(const std::string& name);

// Writes DIR/config.json and DIR/diffusion_pytorch_model.safetensors with random weights drawn
// from the counter-based generator (seed, parameter index), so the same seed gives the same
// model, distributed as random_init() says (params.hpp).
// Files are written under temporary names and renamed, so a failure leaves nothing half-written.
// progress(done, total) is called after every tensor.
void write_random_model(const UNetConfig& c, std::uint64_t seed, DType dtype, const std::string& dir,
                        const std::function<void(std::size_t, std::size_t)>& progress = {});

// Any parameter list as one safetensors file, drawn as above (what Weights::random draws in memory).
void write_random_weights(const std::vector<ParamSpec>& params, std::uint64_t seed, DType dtype, const std::string& path,
                          const std::function<void(std::size_t, std::size_t)>& progress = {});

// A built-in pipeline's parts beside its UNet (drawn with `seed`): the VAE drawn with vae_seed,
// the text encoder of pipeline_text_config drawn with text_encoder_seed, the byte-level tokenizer.
// make-model writes them and `--model builtin:<preset>` makes them in memory, from these alone.
inline std::uint64_t vae_seed(std::uint64_t seed) { return seed + 1; }
inline std::uint64_t text_encoder_seed(std::uint64_t seed) { return seed + 2; }
// clip_text_preset of the UNet's cross_attention_dim; the full OpenCLIP-H shape for vc2.
ClipTextConfig pipeline_text_config(const std::string& preset);

// A whole pipeline in diffusers layout: DIR/unet, DIR/vae (decoder), DIR/text_encoder,
// DIR/tokenizer and model_index.json, as above.
void write_random_pipeline(const std::string& preset, std::uint64_t seed, DType dtype, const std::string& dir,
                           const std::function<void(std::size_t, std::size_t)>& progress = {});

}  // namespace vinf::model
