#include "model/umt5.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/arena.hpp"
#include "core/error.hpp"
#include "io/json_file.hpp"
#include "io/path_query.hpp"
#include "ops/elementwise.hpp"
#include "ops/activation.hpp"
#include "ops/gemm.hpp"
#include "ops/norm.hpp"
#include "ops/runtime.hpp"
#include "ops/softmax.hpp"

namespace fs = std::filesystem;

namespace vinf::model {

namespace {

constexpr int kMaxT5Size = 1 << 20, kMaxT5Layers = 256;

}  // namespace

bool is_t5_family_config_file(const std::string& path) {
  const nlohmann::json j = io::read_json_file(path, "text encoder config");
  VINF_INPUT_CHECK(j.is_object(), path, ": the file must hold a JSON object");
  const auto type = j.find("model_type");
  if (type != j.end() && type->is_string()) {
    const std::string t = type->get<std::string>();
    if (t == "umt5" || t == "t5") return true;
  }
  const auto arch = j.find("architectures");
  if (arch != j.end() && arch->is_array())
    for (const auto& a : *arch)
      if (a.is_string() && a.get<std::string>().find("T5") != std::string::npos) return true;
  return false;
}

Umt5Config load_umt5_config(const std::string& path) {
  const nlohmann::json j = io::read_json_file(path, "text encoder config");
  io::JsonConfig r(j, path);
  std::string type;
  if (r.read("model_type", type))
    VINF_INPUT_CHECK(type == "umt5", path, ": model_type '", type,
                     "' is not supported: the T5 text encoder vinf runs is UMT5 (model_type \"umt5\", a position bias "
                     "in every layer)");
  Umt5Config c;
  r.read("vocab_size", c.vocab_size);
  r.read("d_model", c.d_model);
  r.read("d_kv", c.d_kv);
  r.read("d_ff", c.d_ff);
  r.read("num_layers", c.layers);
  r.read("num_heads", c.heads);
  r.read("relative_attention_num_buckets", c.num_buckets);
  r.read("relative_attention_max_distance", c.max_distance);
  r.read("layer_norm_epsilon", c.layer_norm_eps);
  std::string proj = "gated-gelu", act = "gelu_new";
  r.read("feed_forward_proj", proj);
  r.read("dense_act_fn", act);
  VINF_INPUT_CHECK(proj == "gated-gelu", path, ": feed_forward_proj '", proj,
                   "' is not supported (gated-gelu, the feed-forward of UMT5)");
  VINF_INPUT_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", path, ": dense_act_fn '", act,
                   "' is not supported (gelu_new, gelu_pytorch_tanh: the tanh GELU)");
  bool gated = true;
  r.read("is_gated_act", gated);
  VINF_INPUT_CHECK(gated, path, ": is_gated_act false contradicts feed_forward_proj 'gated-gelu'");
  VINF_INPUT_CHECK(c.vocab_size > 0 && c.d_model > 0 && c.d_kv > 0 && c.d_ff > 0 && c.layers > 0 && c.heads > 0, path,
                   ": vocab_size, d_model, d_kv, d_ff, num_layers and num_heads must be positive");
  for (const auto& [key, v] : {std::pair{"vocab_size", c.vocab_size}, std::pair{"d_model", c.d_model},
                               std::pair{"d_kv", c.d_kv}, std::pair{"d_ff", c.d_ff}, std::pair{"num_heads", c.heads},
                               std::pair{"relative_attention_max_distance", c.max_distance},
                               std::pair{"relative_attention_num_buckets", c.num_buckets}})
    VINF_INPUT_CHECK(v < kMaxT5Size, path, ": ", key, " ", v, " is more than ", kMaxT5Size - 1);
  VINF_INPUT_CHECK(static_cast<std::int64_t>(c.heads) * c.d_kv < kMaxT5Size, path, ": num_heads x d_kv is more than ",
                   kMaxT5Size - 1);
  VINF_INPUT_CHECK(c.layers <= kMaxT5Layers, path, ": num_layers ", c.layers, " is more than ", kMaxT5Layers);
  // A quarter of the buckets are exact distances on each side; the logarithmic ones need room above them.
  VINF_INPUT_CHECK(c.num_buckets >= 4 && c.max_distance > c.num_buckets / 4, path,
                   ": relative_attention_num_buckets must be at least 4 and relative_attention_max_distance more "
                   "than a quarter of it, got ",
                   c.num_buckets, " and ", c.max_distance);
  VINF_INPUT_CHECK(c.layer_norm_eps > 0, path, ": config key 'layer_norm_epsilon' must be positive, got ",
                   c.layer_norm_eps);
  return c;
}

Umt5Config umt5_preset(const std::string& name) {
  Umt5Config c;
  if (name == "wan-tiny") {
    c.vocab_size = 800;
    c.d_model = 32;
    c.d_kv = 8;
    c.d_ff = 64;
    c.layers = 2;
    c.heads = 4;
    return c;
  }
  VINF_INPUT_CHECK(name == "umt5-xxl", "there is no built-in UMT5 text encoder '", name, "' (wan-tiny, umt5-xxl)");
  return c;
}

std::string umt5_config_json(const Umt5Config& c) {
  const nlohmann::ordered_json j = {{"architectures", {"UMT5EncoderModel"}},
                                    {"classifier_dropout", 0.0},
                                    {"d_ff", c.d_ff},
                                    {"d_kv", c.d_kv},
                                    {"d_model", c.d_model},
                                    {"decoder_start_token_id", 0},
                                    {"dense_act_fn", "gelu_new"},
                                    {"dropout_rate", 0.0},
                                    {"eos_token_id", 1},
                                    {"feed_forward_proj", "gated-gelu"},
                                    {"initializer_factor", 1.0},
                                    {"is_encoder_decoder", true},
                                    {"is_gated_act", true},
                                    {"layer_norm_epsilon", io::json_float(c.layer_norm_eps)},
                                    {"model_type", "umt5"},
                                    {"num_decoder_layers", c.layers},
                                    {"num_heads", c.heads},
                                    {"num_layers", c.layers},
                                    {"pad_token_id", 0},
                                    {"relative_attention_max_distance", c.max_distance},
                                    {"relative_attention_num_buckets", c.num_buckets},
                                    {"tie_word_embeddings", false},
                                    {"tokenizer_class", "T5Tokenizer"},
                                    {"use_cache", true},
                                    {"vocab_size", c.vocab_size}};
  return j.dump(2) + "\n";
}

std::vector<ParamSpec> umt5_encoder_parameters(const Umt5Config& c) {
  std::vector<ParamSpec> p;
  const std::int64_t d = c.d_model, inner = static_cast<std::int64_t>(c.heads) * c.d_kv, ff = c.d_ff;
  // UMT5EncoderModel ties encoder.embed_tokens to shared; a file may hold either or both.
  p.push_back({"shared.weight", {c.vocab_size, d}, {"encoder.embed_tokens.weight"}});
  for (int i = 0; i < c.layers; ++i) {
    const std::string b = "encoder.block" + dot_index(static_cast<std::size_t>(i));
    const std::string a = b + ".layer.0.SelfAttention";
    for (const char* proj : {".q", ".k", ".v"}) p.push_back({a + proj + ".weight", {inner, d}});
    p.push_back({a + ".o.weight", {d, inner}});
    p.push_back({a + ".relative_attention_bias.weight", {c.num_buckets, c.heads}});
    p.push_back({b + ".layer.0.layer_norm.weight", {d}});
    const std::string f = b + ".layer.1.DenseReluDense";
    p.push_back({f + ".wi_0.weight", {ff, d}});
    p.push_back({f + ".wi_1.weight", {ff, d}});
    p.push_back({f + ".wo.weight", {d, ff}});
    p.push_back({b + ".layer.1.layer_norm.weight", {d}});
  }
  p.push_back({"encoder.final_layer_norm.weight", {d}});
  return p;
}

int t5_relative_position_bucket(std::int64_t relative_position, int num_buckets, int max_distance) {
  const int half = num_buckets / 2, max_exact = half / 2;
  const int base = relative_position > 0 ? half : 0;
  const std::int64_t n = relative_position < 0 ? -relative_position : relative_position;
  if (n < max_exact) return base + static_cast<int>(n);
  // In f32 as transformers computes it, so that distances on a bucket's edge fall alike.
  const float ratio = std::log(static_cast<float>(n) / static_cast<float>(max_exact)) /
                      static_cast<float>(std::log(static_cast<double>(max_distance) / max_exact));
  const auto large = static_cast<std::int64_t>(ratio * static_cast<float>(half - max_exact));
  return base + static_cast<int>(std::min<std::int64_t>(max_exact + large, half - 1));
}

Umt5Encoder::Umt5Encoder(Umt5Config config, Weights weights) : config_(std::move(config)), weights_(std::move(weights)) {}

Umt5Encoder Umt5Encoder::load(const std::string& dir_arg, Runtime& rt, DType dtype) {
  const ModelFiles files = find_text_encoder_files(dir_arg);
  Umt5Config c = load_umt5_config(files.config);
  VINF_CHECK(dtype == DType::f32, "the UMT5 text encoder computes in f32 for now, not ", dtype_name(dtype));
  const WeightFiles wf(files);
  // A whole UMT5Model also holds the decoder and the head.
  Weights w(wf, umt5_encoder_parameters(c), rt, dtype, true, nullptr);
  return Umt5Encoder(std::move(c), std::move(w));
}

void Umt5Encoder::encode(ExecContext& ctx, const std::vector<std::int64_t>& ids, const std::vector<std::int64_t>& mask,
                         std::int64_t batch, std::int64_t tokens, const Tensor& out) const {
  const Umt5Config& c = config_;
  const std::int64_t d = c.d_model, heads = c.heads, dk = c.d_kv, inner = heads * dk, L = tokens, rows = batch * tokens;
  VINF_CHECK(static_cast<std::int64_t>(ids.size()) == rows && static_cast<std::int64_t>(mask.size()) == rows,
             "encode: ", ids.size(), " ids and ", mask.size(), " mask values for ", batch, " x ", tokens);
  VINF_CHECK(out.rank() == 3 && out.size(0) == batch && out.size(1) == tokens && out.size(2) == d, "encode: out ",
             out.shape.str());
  VINF_CHECK(weights_.dtype() == DType::f32, "the UMT5 text encoder computes in f32 for now");
  if (rows == 0) return;
  auto w = [&](const std::string& name) -> const Tensor& { return weights_.get(name); };
  auto empty = [&](const Shape& s) { return ctx.arena->empty(DType::f32, s); };

  OwnedTensor x = empty({batch, L, d});
  const Tensor& table = w("shared.weight");
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t id = ids[static_cast<std::size_t>(r)];
    VINF_INPUT_CHECK(id >= 0 && id < c.vocab_size, "token id ", id, " is outside the vocabulary of ", c.vocab_size);
    ops::copy(ctx, table.slice(0, id, 1), x.view().reshape({rows, d}).slice(0, r, 1));
  }

  // The padding mask as an additive term on the keys: 0 where a key is seen, and where it is not
  // the most negative f32, as transformers adds finfo.min (the softmax then gives it exactly 0).
  std::vector<float> host_mask(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < host_mask.size(); ++i)
    host_mask[i] = mask[i] != 0 ? 0.f : std::numeric_limits<float>::lowest();
  OwnedTensor key_mask = empty({batch, L});
  ops::copy(ctx, Tensor::wrap(host_mask.data(), DType::f32, Device::cpu(), {batch, L}), key_mask);

  std::vector<int> bucket(static_cast<std::size_t>(L * L));
  for (std::int64_t i = 0; i < L; ++i)
    for (std::int64_t j = 0; j < L; ++j)
      bucket[static_cast<std::size_t>(i * L + j)] = t5_relative_position_bucket(j - i, c.num_buckets, c.max_distance);
  std::vector<float> bias_table(static_cast<std::size_t>(c.num_buckets * heads));
  std::vector<float> host_bias(static_cast<std::size_t>(heads * L * L));

  OwnedTensor xn = empty({batch, L, d}), q = empty({batch, L, inner}), k = empty({batch, L, inner}),
              v = empty({batch, L, inner});
  OwnedTensor qh = empty({batch, heads, L, dk}), kh = empty({batch, heads, L, dk}), vh = empty({batch, heads, L, dk});
  OwnedTensor scores = empty({batch, heads, L, L}), probs = empty({batch, heads, L, L}), bias = empty({heads, L, L});
  OwnedTensor heads_out = empty({batch, heads, L, dk}), merged = empty({batch, L, inner});
  OwnedTensor gate = empty({batch, L, c.d_ff}), linear = empty({batch, L, c.d_ff});
  const Shape per_head{batch * heads, L, dk}, split{batch, L, heads, dk}, all_scores{batch, heads, L, L};
  auto to_heads = [&](const Tensor& t, const Tensor& dst) { ops::copy(ctx, t.reshape(split).permute({0, 2, 1, 3}), dst); };

  for (int layer = 0; layer < c.layers; ++layer) {
    const std::string b = "encoder.block" + dot_index(static_cast<std::size_t>(layer));
    const std::string a = b + ".layer.0.SelfAttention";
    // Self-attention: no 1/sqrt(d_kv) (T5 folds it into the initialisation), this layer's bias.
    ops::rms_norm(ctx, x, w(b + ".layer.0.layer_norm.weight"), xn, c.layer_norm_eps);
    ops::linear(ctx, xn, w(a + ".q.weight"), nullptr, q);
    ops::linear(ctx, xn, w(a + ".k.weight"), nullptr, k);
    ops::linear(ctx, xn, w(a + ".v.weight"), nullptr, v);
    to_heads(q, qh);
    to_heads(k, kh);
    to_heads(v, vh);
    ops::bmm(ctx, qh.view().reshape(per_head), kh.view().reshape(per_head).transpose(1, 2),
             scores.view().reshape({batch * heads, L, L}));
    ops::copy(ctx, w(a + ".relative_attention_bias.weight"),
              Tensor::wrap(bias_table.data(), DType::f32, Device::cpu(), {c.num_buckets, heads}));
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t ij = 0; ij < L * L; ++ij)
        host_bias[static_cast<std::size_t>(h * L * L + ij)] =
            bias_table[static_cast<std::size_t>(bucket[static_cast<std::size_t>(ij)] * heads + h)];
    ops::copy(ctx, Tensor::wrap(host_bias.data(), DType::f32, Device::cpu(), {heads, L, L}), bias);
    ops::add(ctx, scores, bias.view().unsqueeze(0).expand(all_scores), scores);
    ops::add(ctx, scores, key_mask.view().reshape({batch, 1, 1, L}).expand(all_scores), scores);
    ops::softmax(ctx, scores, probs);
    ops::bmm(ctx, probs.view().reshape({batch * heads, L, L}), vh.view().reshape(per_head),
             heads_out.view().reshape(per_head));
    ops::copy(ctx, heads_out, merged.view().reshape(split).permute({0, 2, 1, 3}));
    ops::linear_add(ctx, merged, w(a + ".o.weight"), nullptr, x);

    // Gated feed-forward: wo(gelu_tanh(wi_0 x) * wi_1 x).
    const std::string f = b + ".layer.1.DenseReluDense";
    ops::rms_norm(ctx, x, w(b + ".layer.1.layer_norm.weight"), xn, c.layer_norm_eps);
    ops::linear(ctx, xn, w(f + ".wi_0.weight"), nullptr, gate);
    ops::activation(ctx, ops::Activation::gelu_tanh, gate, gate);
    ops::linear(ctx, xn, w(f + ".wi_1.weight"), nullptr, linear);
    ops::mul(ctx, gate, linear, gate);
    ops::linear_add(ctx, gate, w(f + ".wo.weight"), nullptr, x);
  }
  ops::rms_norm(ctx, x, w("encoder.final_layer_norm.weight"), xn, c.layer_norm_eps);
  ops::copy(ctx, xn, out);
}

std::vector<float> encode_prompts(Runtime& rt, const T5Tokenizer& tokenizer, const Umt5Encoder& encoder,
                                  const std::vector<std::string>& prompts, int max_length,
                                  std::vector<T5TokenizedText>* tokens) {
  const Umt5Config& c = encoder.config();
  VINF_INPUT_CHECK(max_length >= 1, "the T5 tokenizer's max length must be at least 1, got ", max_length);
  VINF_INPUT_CHECK(tokenizer.vocab_size() <= c.vocab_size, "the tokenizer (", tokenizer.source(), ") has ids up to ",
                   tokenizer.vocab_size() - 1, " but the text encoder's vocabulary has ", c.vocab_size,
                   ": they are not from the same model");
  const auto batch = static_cast<std::int64_t>(prompts.size());
  const std::int64_t length = max_length, width = c.d_model;
  std::vector<std::int64_t> ids, mask;
  ids.reserve(static_cast<std::size_t>(batch * length));
  mask.reserve(static_cast<std::size_t>(batch * length));
  if (tokens) tokens->clear();
  for (const std::string& p : prompts) {
    T5TokenizedText t = tokenizer.encode(p, max_length);
    ids.insert(ids.end(), t.ids.begin(), t.ids.end());
    mask.insert(mask.end(), t.mask.begin(), t.mask.end());
    if (tokens) tokens->push_back(std::move(t));
  }
  std::vector<float> host(static_cast<std::size_t>(batch * length * width));
  if (batch == 0) return host;
  const Shape shape{batch, length, width};
  OwnedTensor out = rt.arena().empty(DType::f32, shape);
  encoder.encode(rt.ctx(), ids, mask, batch, length, out);
  ops::copy(rt.ctx(), out, Tensor::wrap(host.data(), DType::f32, Device::cpu(), shape));
  rt.synchronize();
  return host;
}

void zero_past_length(std::vector<float>& hidden, std::int64_t batch, std::int64_t tokens, std::int64_t width,
                      const std::vector<std::int64_t>& lengths) {
  VINF_CHECK(static_cast<std::int64_t>(hidden.size()) == batch * tokens * width &&
                 static_cast<std::int64_t>(lengths.size()) == batch,
             "zero_past_length: ", hidden.size(), " values and ", lengths.size(), " lengths for ", batch, " x ", tokens,
             " x ", width);
  for (std::int64_t n = 0; n < batch; ++n) {
    const std::int64_t len = lengths[static_cast<std::size_t>(n)];
    VINF_CHECK(len >= 0 && len <= tokens, "zero_past_length: length ", len, " of prompt ", n, " is outside [0, ", tokens,
               "]");
    const auto first = hidden.begin() + static_cast<std::ptrdiff_t>((n * tokens + len) * width);
    std::fill(first, first + static_cast<std::ptrdiff_t>((tokens - len) * width), 0.f);
  }
}

}  // namespace vinf::model
