// transformers' CLIPTextModel (model-spec §5.1-5.3): token + position embeddings, pre-LN encoder
// layers with a causal mask, final LayerNorm; the output `last_hidden_state` is the UNet's text
// conditioning. Weights come from a `text_encoder/` directory (config.json + model.safetensors,
// transformers key names).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/params.hpp"
#include "model/weights.hpp"
#include "ops/activation.hpp"
#include "ops/context.hpp"

namespace vinf::model {

struct ClipTextConfig {
  int vocab_size = 49408, hidden_size = 1024, intermediate_size = 4096, layers = 23, heads = 16;
  int max_positions = 77;
  float layer_norm_eps = 1e-5f;
  ops::Activation act = ops::Activation::gelu;  // "gelu" (erf) or "quick_gelu"
};

// Reads transformers' config.json. Throws vinf::InputError naming the file and key.
ClipTextConfig load_clip_text_config(const std::string& path);
std::vector<ParamSpec> clip_text_parameters(const ClipTextConfig& c);

class ClipTextModel {
 public:
  ClipTextModel(ClipTextConfig config, Weights weights);
  // dir: a text encoder directory, or a pipeline root with text_encoder/.
  static ClipTextModel load(const std::string& dir, Runtime& rt, DType dtype);

  const ClipTextConfig& config() const { return config_; }

  // ids: batch x tokens token ids (row-major); out (batch, tokens, hidden_size) on the context's
  // device. Throws vinf::InputError for an id outside the vocabulary or too many tokens.
  void encode(ExecContext& ctx, const std::vector<std::int64_t>& ids, std::int64_t batch, std::int64_t tokens,
              const Tensor& out) const;

 private:
  ClipTextConfig config_;
  Weights weights_;
};

}  // namespace vinf::model
