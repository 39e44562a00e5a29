#include "model/clip_text_config.hpp"

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/json_file.hpp"

namespace vinf::model {

namespace {
constexpr int kMaxSize = 1 << 20, kMaxLayers = 256;
}  // namespace

ClipTextConfig load_clip_text_config(const std::string& path) {
  const nlohmann::json j = io::read_json_file(path, "text encoder config");
  VINF_INPUT_CHECK(j.is_object(), path, ": the file must hold a JSON object");
  // A full CLIPModel config keeps the text tower's settings under text_config.
  const bool nested = j.contains("text_config") && j["text_config"].is_object();
  io::JsonConfig r(nested ? j["text_config"] : j, path, nested ? "text_config" : "");
  ClipTextConfig c;
  r.read("vocab_size", c.vocab_size);
  r.read("hidden_size", c.hidden_size);
  r.read("intermediate_size", c.intermediate_size);
  r.read("num_hidden_layers", c.layers);
  r.read("num_attention_heads", c.heads);
  r.read("max_position_embeddings", c.max_positions);
  r.read("layer_norm_eps", c.layer_norm_eps);
  std::string act;
  if (r.read("hidden_act", act)) c.act = clip_activation(act, path);
  VINF_INPUT_CHECK(c.vocab_size > 0 && c.hidden_size > 0 && c.intermediate_size > 0 && c.layers > 0 && c.heads > 0 &&
                       c.max_positions > 0 && c.hidden_size % c.heads == 0,
                   path, ": the sizes must be positive and hidden_size a multiple of num_attention_heads");
  // Bounds far above any text encoder, which keep the parameter count in range.
  for (const auto& [key, v] : {std::pair{"vocab_size", c.vocab_size}, std::pair{"hidden_size", c.hidden_size},
                               std::pair{"intermediate_size", c.intermediate_size},
                               std::pair{"max_position_embeddings", c.max_positions}})
    VINF_INPUT_CHECK(v < kMaxSize, path, ": ", key, " ", v, " is more than ", kMaxSize - 1);
  VINF_INPUT_CHECK(c.layers <= kMaxLayers, path, ": num_hidden_layers ", c.layers, " is more than ", kMaxLayers);
  // As the UNet's norm_eps: 0 (1e-300 rounds to it in f32) would divide by a zero variance.
  VINF_INPUT_CHECK(c.layer_norm_eps > 0, path, ": config key 'layer_norm_eps' must be positive, got ", c.layer_norm_eps);
  return c;
}

std::string clip_text_config_json(const ClipTextConfig& c) {
  const nlohmann::ordered_json j = {{"architectures", {"CLIPTextModel"}},
                                    {"model_type", "clip_text_model"},
                                    {"vocab_size", c.vocab_size},
                                    {"hidden_size", c.hidden_size},
                                    {"intermediate_size", c.intermediate_size},
                                    {"num_hidden_layers", c.layers},
                                    {"num_attention_heads", c.heads},
                                    {"max_position_embeddings", c.max_positions},
                                    {"layer_norm_eps", c.layer_norm_eps},
                                    {"hidden_act", c.act == ops::Activation::gelu ? "gelu" : "quick_gelu"},
                                    {"bos_token_id", 0},
                                    {"eos_token_id", 2},
                                    {"pad_token_id", 1},
                                    {"torch_dtype", "float32"}};
  return j.dump(2) + "\n";
}

ClipTextConfig clip_text_preset(int width) {
  ClipTextConfig c;
  c.vocab_size = 514;
  c.hidden_size = width;
  c.intermediate_size = 4 * width;
  c.layers = 2;
  c.heads = 2;
  VINF_CHECK(width > 0 && width % c.heads == 0, "clip_text_preset: width ", width);
  return c;
}

std::vector<ParamSpec> clip_text_parameters(const ClipTextConfig& c) {
  std::vector<ParamSpec> p;
  const std::int64_t d = c.hidden_size;
  auto norm = [&](const std::string& name) {
    p.push_back({name + ".weight", {d}});
    p.push_back({name + ".bias", {d}});
  };
  p.push_back({"text_model.embeddings.token_embedding.weight", {c.vocab_size, d}});
  p.push_back({"text_model.embeddings.position_embedding.weight", {c.max_positions, d}});
  add_clip_encoder_parameters(p, "text_model.encoder.layers", clip_encoder_shape(c));
  norm("text_model.final_layer_norm");
  return p;
}

}  // namespace vinf::model
