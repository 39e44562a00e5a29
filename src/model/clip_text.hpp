// transformers' CLIPTextModel (model-spec §5.1-5.3): token + position embeddings, pre-LN encoder
// layers with a causal mask, final LayerNorm; the output `last_hidden_state` is the UNet's text
// conditioning. Weights come from a `text_encoder/` directory (config.json + model.safetensors,
// transformers key names).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/clip_text_config.hpp"
#include "model/params.hpp"
#include "model/tokenizer.hpp"
#include "model/weights.hpp"
#include "ops/activation.hpp"
#include "ops/context.hpp"

namespace vinf::model {

class ClipTextModel {
 public:
  ClipTextModel(ClipTextConfig config, Weights weights);
  // dir: a text encoder directory, or a pipeline root with text_encoder/.
  static ClipTextModel load(const std::string& dir, Runtime& rt, DType dtype);

  const ClipTextConfig& config() const { return config_; }
  const Weights& weights() const { return weights_; }

  // ids: batch x tokens token ids (row-major); out (batch, tokens, hidden_size) on the context's
  // device. Throws vinf::InputError for an id outside the vocabulary or too many tokens.
  void encode(ExecContext& ctx, const std::vector<std::int64_t>& ids, std::int64_t batch, std::int64_t tokens,
              const Tensor& out) const;

 private:
  ClipTextConfig config_;
  Weights weights_;
};

// Prompts to text conditioning: tokenized (truncated to the tokenizer's max_length; `tokens`, when
// given, gets each prompt's TokenizedText to report truncation), encoded in one batch in f32, and
// returned on the host as [N, max_length, hidden_size]. Throws vinf::InputError when the
// tokenizer's ids or length do not fit the encoder.
std::vector<float> encode_prompts(Runtime& rt, const ClipTokenizer& tokenizer, const ClipTextModel& encoder,
                                  const std::vector<std::string>& prompts, std::vector<TokenizedText>* tokens = nullptr);

}  // namespace vinf::model
