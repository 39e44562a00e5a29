// transformers' UMT5EncoderModel, the Wan pipelines' text encoder: token embeddings (`shared`),
// pre-RMS-norm layers of T5 attention (no 1/sqrt(d) scale, a relative position bias of its own in
// every layer, padded keys masked) and a gated tanh-GELU feed-forward, a final RMS norm. Weights
// come from a `text_encoder/` directory (config.json + model.safetensors, transformers key names).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/params.hpp"
#include "model/t5_tokenizer.hpp"
#include "model/weights.hpp"
#include "ops/context.hpp"

namespace vinf::model {

struct Umt5Config {
  int vocab_size = 256384, d_model = 4096, d_kv = 64, d_ff = 10240, layers = 24, heads = 64;
  int num_buckets = 32, max_distance = 128;
  float layer_norm_eps = 1e-6f;
};

// Whether a text encoder's config.json describes a T5-family encoder (model_type "umt5" or "t5", or
// a T5 class among its architectures) rather than CLIP. Throws vinf::InputError for a file that is
// not a JSON object.
bool is_t5_family_config_file(const std::string& path);
// Reads transformers' config.json. Throws vinf::InputError naming the file and key, also for a
// plain T5 (its layers share one position bias) and a feed-forward other than gated-gelu with the
// tanh GELU.
Umt5Config load_umt5_config(const std::string& path);
std::vector<ParamSpec> umt5_encoder_parameters(const Umt5Config& c);
// Built-in shapes: "wan-tiny" (the test fixture's: vocabulary 800, 2 layers of 32, 4 heads of 8,
// feed-forward 64) and "umt5-xxl" (google/umt5-xxl's encoder, Wan2.1's text encoder: the defaults
// above). Throws vinf::InputError naming both for another name.
Umt5Config umt5_preset(const std::string& name);
// transformers' config.json of a UMT5EncoderModel with c's shape: every key load_umt5_config reads,
// and the encoder-decoder keys transformers keeps beside them.
std::string umt5_config_json(const Umt5Config& c);

// T5's relative position bucket of memory_position - query_position (transformers'
// `_relative_position_bucket`): bidirectional, half the buckets for each sign (positive distances
// in the upper half), in each half exact buckets for distances below a quarter of num_buckets,
// logarithmic ones up to max_distance, the last bucket for everything beyond.
int t5_relative_position_bucket(std::int64_t relative_position, int num_buckets, int max_distance);

class Umt5Encoder {
 public:
  Umt5Encoder(Umt5Config config, Weights weights);
  // dir: a text encoder directory, or a pipeline root with text_encoder/. f32 only for now.
  static Umt5Encoder load(const std::string& dir, Runtime& rt, DType dtype);

  const Umt5Config& config() const { return config_; }
  const Weights& weights() const { return weights_; }

  // ids and mask: batch x tokens (row-major; mask 1 on tokens the attention sees, 0 on padding);
  // out (batch, tokens, d_model) f32 on the context's device: last_hidden_state. The norms and the
  // GELU run on the CPU for now (a CUDA context is refused). Throws vinf::InputError for an id
  // outside the vocabulary.
  void encode(ExecContext& ctx, const std::vector<std::int64_t>& ids, const std::vector<std::int64_t>& mask,
              std::int64_t batch, std::int64_t tokens, const Tensor& out) const;

 private:
  Umt5Config config_;
  Weights weights_;
};

// Prompts to the encoder's last_hidden_state on the host, [N, max_length, d_model], in one batch;
// `tokens` (when given) gets each prompt's ids and mask. Throws vinf::InputError when the
// tokenizer's ids do not fit the encoder's vocabulary.
std::vector<float> encode_prompts(Runtime& rt, const T5Tokenizer& tokenizer, const Umt5Encoder& encoder,
                                  const std::vector<std::string>& prompts, int max_length,
                                  std::vector<T5TokenizedText>* tokens = nullptr);

// What the Wan pipeline does to the encoder's output before the transformer sees it: rows at and
// past each prompt's length (its count of mask ones) set to zero. hidden: [N, L, D] on the host;
// lengths: N values in [0, L].
void zero_past_length(std::vector<float>& hidden, std::int64_t batch, std::int64_t tokens, std::int64_t width,
                      const std::vector<std::int64_t>& lengths);

}  // namespace vinf::model
