// The transformer encoder CLIP's text and vision towers share (transformers' CLIPEncoder): pre-LN
// layers of self-attention and an MLP, keys PREFIX.N.{self_attn.{q,k,v,out}_proj, layer_norm1,
// mlp.fc1, mlp.fc2, layer_norm2}. The parameter list is header-only, for the config readers
// that are built without the tensors (fuzz/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/params.hpp"
#include "ops/activation.hpp"
#include "ops/attention.hpp"
#include "ops/context.hpp"

namespace vinf::model {

class Weights;

// A config's hidden_act: "gelu" (erf) or "quick_gelu"; anything else is refused naming the file.
inline ops::Activation clip_activation(const std::string& act, const std::string& path) {
  VINF_INPUT_CHECK(act == "gelu" || act == "quick_gelu", path, ": hidden_act '", act,
                   "' is not supported (gelu, quick_gelu)");
  return act == "gelu" ? ops::Activation::gelu : ops::Activation::quick_gelu;
}

struct ClipEncoderShape {
  int hidden_size = 0, intermediate_size = 0, layers = 0, heads = 0;
  float layer_norm_eps = 1e-5f;
  ops::Activation act = ops::Activation::gelu;
};

// The layers' parameters under `prefix` ("text_model.encoder.layers").
inline void add_clip_encoder_parameters(std::vector<ParamSpec>& p, const std::string& prefix, const ClipEncoderShape& s) {
  const std::int64_t d = s.hidden_size, inner = s.intermediate_size;
  auto linear = [&](const std::string& name, std::int64_t out, std::int64_t in) {
    p.push_back({name + ".weight", {out, in}});
    p.push_back({name + ".bias", {out}});
  };
  auto norm = [&](const std::string& name) {
    p.push_back({name + ".weight", {d}});
    p.push_back({name + ".bias", {d}});
  };
  for (int i = 0; i < s.layers; ++i) {
    const std::string l = prefix + dot_index(static_cast<std::size_t>(i));
    for (const char* proj : {".self_attn.q_proj", ".self_attn.k_proj", ".self_attn.v_proj", ".self_attn.out_proj"})
      linear(l + proj, d, d);
    norm(l + ".layer_norm1");
    linear(l + ".mlp.fc1", inner, d);
    linear(l + ".mlp.fc2", d, inner);
    norm(l + ".layer_norm2");
  }
}

// Runs every layer on h (batch, tokens, hidden_size) in place; `attention` holds the scale and the
// mask (a causal band for text, none for images).
void run_clip_encoder(ExecContext& ctx, const Weights& weights, const std::string& prefix, const ClipEncoderShape& s,
                      const Tensor& h, const ops::AttentionParams& attention);

}  // namespace vinf::model
