#include "model/clip_text.hpp"

#include <cmath>
#include <filesystem>

#include "core/arena.hpp"
#include "core/error.hpp"
#include "io/path_query.hpp"
#include "model/clip_encoder.hpp"
#include "ops/elementwise.hpp"
#include "ops/norm.hpp"
#include "ops/runtime.hpp"

namespace fs = std::filesystem;

namespace vinf::model {

ClipTextModel::ClipTextModel(ClipTextConfig config, Weights weights)
    : config_(std::move(config)), weights_(std::move(weights)) {}

ClipTextModel ClipTextModel::load(const std::string& dir_arg, Runtime& rt, DType dtype) {
  const ModelFiles files = find_text_encoder_files(dir_arg);
  ClipTextConfig c = load_clip_text_config(files.config);
  VINF_CHECK(activation_dtype(dtype, rt.device()) == dtype, "the CLIP text encoder computes in one dtype: ",
             dtype_name(dtype), " on ", rt.device().name(), " would store only its matrices in it");
  const WeightFiles wf(files);
  // Older files also hold the position_ids buffer and, for a whole CLIPModel, the vision tower.
  Weights w(wf, clip_text_parameters(c), rt, dtype, true, nullptr);
  return ClipTextModel(std::move(c), std::move(w));
}

void ClipTextModel::encode(ExecContext& ctx, const std::vector<std::int64_t>& ids, std::int64_t batch,
                           std::int64_t tokens, const Tensor& out) const {
  const ClipTextConfig& c = config_;
  const std::int64_t d = c.hidden_size, rows = batch * tokens, heads = c.heads, dh = d / heads;
  VINF_INPUT_CHECK(tokens >= 1 && tokens <= c.max_positions, "the text encoder takes at most ", c.max_positions,
                   " tokens, got ", tokens);
  VINF_CHECK(static_cast<std::int64_t>(ids.size()) == rows, "encode: ", ids.size(), " ids for ", batch, " x ", tokens);
  VINF_CHECK(out.rank() == 3 && out.size(0) == batch && out.size(1) == tokens && out.size(2) == d, "encode: out ",
             out.shape.str());
  const DType dt = weights_.dtype();
  auto w = [&](const std::string& name) -> const Tensor& { return weights_.get(name); };
  auto empty = [&](const Shape& s) { return ctx.arena->empty(dt, s); };

  // Token rows, then the positions added.
  OwnedTensor h = empty({batch, tokens, d});
  const Tensor& table = w("text_model.embeddings.token_embedding.weight");
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t id = ids[static_cast<std::size_t>(r)];
    VINF_INPUT_CHECK(id >= 0 && id < c.vocab_size, "token id ", id, " is outside the vocabulary of ", c.vocab_size);
    ops::copy(ctx, table.slice(0, id, 1), h.view().reshape({rows, d}).slice(0, r, 1));
  }
  const Tensor pos = w("text_model.embeddings.position_embedding.weight").slice(0, 0, tokens);
  ops::add(ctx, h, pos.reshape({1, tokens, d}).expand(h.shape), h);

  ops::AttentionParams causal;
  causal.scale = 1.f / std::sqrt(static_cast<float>(dh));
  causal.band_hi = 0;  // token i sees tokens 0 .. i
  run_clip_encoder(ctx, weights_, "text_model.encoder.layers", clip_encoder_shape(c), h, causal);
  OwnedTensor a = empty({batch, tokens, d});
  ops::layer_norm(ctx, h, w("text_model.final_layer_norm.weight"), w("text_model.final_layer_norm.bias"), a,
                  c.layer_norm_eps);
  ops::copy(ctx, a, out);
}

std::vector<float> encode_prompts(Runtime& rt, const ClipTokenizer& tokenizer, const ClipTextModel& encoder,
                                  const std::vector<std::string>& prompts, std::vector<TokenizedText>* tokens) {
  const ClipTextConfig& c = encoder.config();
  VINF_INPUT_CHECK(tokenizer.max_length() <= c.max_positions, "the tokenizer (", tokenizer.source(), ") makes ",
                   tokenizer.max_length(), " tokens but the text encoder has ", c.max_positions, " positions");
  VINF_INPUT_CHECK(tokenizer.vocab_size() <= c.vocab_size, "the tokenizer (", tokenizer.source(), ") has ids up to ",
                   tokenizer.vocab_size() - 1, " but the text encoder's vocabulary has ", c.vocab_size,
                   ": they are not from the same model");
  const auto batch = static_cast<std::int64_t>(prompts.size());
  const std::int64_t length = tokenizer.max_length(), width = c.hidden_size;
  std::vector<std::int64_t> ids;
  ids.reserve(static_cast<std::size_t>(batch * length));
  if (tokens) tokens->clear();
  for (const std::string& p : prompts) {
    TokenizedText t = tokenizer.encode(p);
    ids.insert(ids.end(), t.ids.begin(), t.ids.end());
    if (tokens) tokens->push_back(std::move(t));
  }
  std::vector<float> host(static_cast<std::size_t>(batch * length * width));
  if (batch == 0) return host;
  const Shape shape{batch, length, width};
  OwnedTensor out = rt.arena().empty(DType::f32, shape);
  encoder.encode(rt.ctx(), ids, batch, length, out);
  ops::copy(rt.ctx(), out, Tensor::wrap(host.data(), DType::f32, Device::cpu(), shape));
  rt.synchronize();
  return host;
}

}  // namespace vinf::model
