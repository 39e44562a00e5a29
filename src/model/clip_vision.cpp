#include "model/clip_vision.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/arena.hpp"
#include "core/error.hpp"
#include "io/image_resize.hpp"
#include "io/json_file.hpp"
#include "io/path_query.hpp"
#include "ops/conv.hpp"
#include "ops/elementwise.hpp"
#include "ops/gemm.hpp"
#include "ops/norm.hpp"

namespace fs = std::filesystem;

namespace vinf::model {

ClipVisionConfig load_clip_vision_config(const std::string& path) {
  const nlohmann::json j = io::read_json_file(path, "CLIP vision config");
  VINF_INPUT_CHECK(j.is_object(), path, ": the file must hold a JSON object");
  // A whole CLIPConfig keeps the vision tower's settings under vision_config, the projection's
  // width beside it.
  const bool nested = j.contains("vision_config") && j["vision_config"].is_object();
  io::JsonConfig r(nested ? j["vision_config"] : j, path, nested ? "vision_config" : "");
  ClipVisionConfig c;
  ClipEncoderShape& e = c.encoder;
  r.read("image_size", c.image_size);
  r.read("patch_size", c.patch_size);
  r.read("num_channels", c.channels);
  r.read("hidden_size", e.hidden_size);
  r.read("intermediate_size", e.intermediate_size);
  r.read("num_hidden_layers", e.layers);
  r.read("num_attention_heads", e.heads);
  r.read("layer_norm_eps", e.layer_norm_eps);
  r.read("projection_dim", c.projection_dim);
  if (nested) {
    io::JsonConfig top(j, path);
    top.read("projection_dim", c.projection_dim);
  }
  std::string act;
  if (r.read("hidden_act", act)) e.act = clip_activation(act, path);
  VINF_INPUT_CHECK(c.image_size > 0 && c.patch_size > 0 && c.image_size % c.patch_size == 0 && c.channels == 3 &&
                       c.projection_dim > 0 && e.hidden_size > 0 && e.intermediate_size > 0 && e.layers > 0 &&
                       e.heads > 0 && e.hidden_size % e.heads == 0 && e.layer_norm_eps > 0,
                   path,
                   ": the sizes must be positive, image_size a multiple of patch_size, hidden_size of "
                   "num_attention_heads, num_channels 3 and layer_norm_eps positive");
  VINF_INPUT_CHECK(c.image_size <= 4096 && e.hidden_size <= 65536 && e.intermediate_size <= 262144 && e.layers <= 256 &&
                       c.projection_dim <= 65536,
                   path,
                   ": the sizes are beyond any CLIP vision model (image_size <= 4096, hidden_size <= 65536, "
                   "num_hidden_layers <= 256)");
  return c;
}

std::vector<ParamSpec> clip_vision_parameters(const ClipVisionConfig& c, bool projection) {
  const std::int64_t d = c.encoder.hidden_size;
  std::vector<ParamSpec> p = {
      {"vision_model.embeddings.class_embedding", {d}},
      {"vision_model.embeddings.patch_embedding.weight", {d, c.channels, c.patch_size, c.patch_size}},
      {"vision_model.embeddings.position_embedding.weight", {c.tokens(), d}},
      {"vision_model.pre_layrnorm.weight", {d}},
      {"vision_model.pre_layrnorm.bias", {d}}};
  add_clip_encoder_parameters(p, "vision_model.encoder.layers", c.encoder);
  p.push_back({"vision_model.post_layernorm.weight", {d}});
  p.push_back({"vision_model.post_layernorm.bias", {d}});
  if (projection) p.push_back({"visual_projection.weight", {c.projection_dim, d}});
  return p;
}

ClipImageProcessor load_clip_image_processor(const std::string& path) {
  const nlohmann::json j = io::read_json_file(path, "image processor config");
  VINF_INPUT_CHECK(j.is_object(), path, ": the file must hold a JSON object");
  io::JsonConfig r(j, path);
  ClipImageProcessor p;
  for (const char* key : {"do_resize", "do_center_crop", "do_rescale", "do_normalize"}) {
    bool on = true;
    r.read(key, on);
    VINF_INPUT_CHECK(on, path, ": config key '", key, "' is false; vinf runs CLIPImageProcessor with every step on");
  }
  int resample = 3;
  r.read("resample", resample);
  VINF_INPUT_CHECK(resample == 3, path, ": config key 'resample' is ", resample,
                   "; vinf resizes with bicubic (3) only");
  if (const nlohmann::json* size = r.find("size")) {
    VINF_INPUT_CHECK(
        size->is_object() && size->contains("shortest_edge") && (*size)["shortest_edge"].is_number_integer(), path,
        ": config key 'size' must be {\"shortest_edge\": N}, got ", size->dump());
    p.shortest_edge = (*size)["shortest_edge"].get<std::int64_t>();
  }
  if (const nlohmann::json* crop = r.find("crop_size")) {
    VINF_INPUT_CHECK(crop->is_object() && crop->contains("height") && crop->contains("width") &&
                         (*crop)["height"].is_number_integer() && (*crop)["width"].is_number_integer(),
                     path, ": config key 'crop_size' must be {\"height\": H, \"width\": W}, got ", crop->dump());
    p.crop_height = (*crop)["height"].get<std::int64_t>();
    p.crop_width = (*crop)["width"].get<std::int64_t>();
  }
  r.read("rescale_factor", p.rescale_factor);
  for (const auto& [key, values] : {std::pair{"image_mean", p.mean}, std::pair{"image_std", p.std}}) {
    std::vector<double> v;
    if (!r.read(key, v)) continue;
    VINF_INPUT_CHECK(v.size() == 3, path, ": config key '", key, "' must hold 3 values, got ", v.size());
    for (int c = 0; c < 3; ++c) values[c] = static_cast<float>(v[static_cast<std::size_t>(c)]);
  }
  VINF_INPUT_CHECK(p.shortest_edge >= 1 && p.shortest_edge <= 8192 && p.crop_height >= 1 &&
                       p.crop_height <= p.shortest_edge && p.crop_width >= 1 && p.crop_width <= p.shortest_edge,
                   path, ": the crop must fit the resized image's shorter side (", p.crop_height, "x", p.crop_width,
                   " of ", p.shortest_edge, ")");
  for (int c = 0; c < 3; ++c) VINF_INPUT_CHECK(p.std[c] > 0, path, ": config key 'image_std' must be positive");
  return p;
}

std::vector<float> clip_image_pixels(const std::uint8_t* hwc, std::int64_t width, std::int64_t height,
                                     const ClipImageProcessor& p) {
  // transformers' shortest-edge size: the longer side scaled and truncated.
  const std::int64_t s = p.shortest_edge, short_side = std::min(width, height), long_side = std::max(width, height);
  const auto scaled = static_cast<std::int64_t>(static_cast<double>(s) * static_cast<double>(long_side) /
                                                static_cast<double>(short_side));
  const std::int64_t rw = width <= height ? s : scaled, rh = width <= height ? scaled : s;
  const std::vector<std::uint8_t> resized = io::resize_rgb8(hwc, width, height, rw, rh, io::ResizeFilter::bicubic);
  const std::int64_t ch = p.crop_height, cw = p.crop_width, top = (rh - ch) / 2, left = (rw - cw) / 2;
  std::vector<float> out(static_cast<std::size_t>(3 * ch * cw));
  for (int c = 0; c < 3; ++c)
    for (std::int64_t y = 0; y < ch; ++y)
      for (std::int64_t x = 0; x < cw; ++x) {
        const std::uint8_t v = resized[static_cast<std::size_t>(((top + y) * rw + left + x) * 3 + c)];
        const auto scaled_v = static_cast<float>(static_cast<double>(v) * p.rescale_factor);
        out[static_cast<std::size_t>((c * ch + y) * cw + x)] = (scaled_v - p.mean[c]) / p.std[c];
      }
  return out;
}

std::vector<float> clip_preprocess(const std::uint8_t* hwc, std::int64_t width, std::int64_t height, int image_size) {
  ClipImageProcessor p;
  p.shortest_edge = p.crop_height = p.crop_width = image_size;
  return clip_image_pixels(hwc, width, height, p);
}

ClipVisionModel::ClipVisionModel(ClipVisionConfig config, Weights weights, bool projection)
    : config_(std::move(config)), weights_(std::move(weights)), projection_(projection) {}

ClipVisionModel ClipVisionModel::load(const std::string& dir_arg, Runtime& rt, bool projection,
                                      const std::string& option) {
  const fs::path dir(dir_arg);
  VINF_INPUT_CHECK(io::is_directory(dir), option, ": directory ", dir_arg, " does not exist");
  ModelFiles files;
  files.dir = dir.string();
  files.config = (dir / "config.json").string();
  VINF_INPUT_CHECK(io::path_exists(files.config), option, ": ", files.dir, " has no config.json (a transformers ",
                   projection ? "CLIPVisionModelWithProjection" : "CLIPVisionModel",
                   " directory has config.json and model.safetensors)");
  VINF_INPUT_CHECK(
      io::path_exists(dir / "model.safetensors"), option, ": ", files.dir, " has no model.safetensors",
      io::path_exists(dir / "pytorch_model.bin") ? " (it has pytorch_model.bin: convert it to safetensors first)" : "");
  files.weights = {(dir / "model.safetensors").string()};
  ClipVisionConfig c = load_clip_vision_config(files.config);
  const WeightFiles wf(files);
  // A whole CLIPModel's file also holds the text tower and logit_scale.
  Weights w(wf, clip_vision_parameters(c, projection), rt, DType::f32, true, nullptr);
  return ClipVisionModel(std::move(c), std::move(w), projection);
}

OwnedTensor ClipVisionModel::embed_tokens(ExecContext& ctx, const Tensor& pixels) const {
  const ClipVisionConfig& c = config_;
  const std::int64_t n = pixels.size(0), d = c.encoder.hidden_size, g = c.grid(), tokens = c.tokens();
  VINF_CHECK(
      pixels.rank() == 4 && pixels.size(1) == 3 && pixels.size(2) == c.image_size && pixels.size(3) == c.image_size,
      "ClipVisionModel: pixels ", pixels.shape.str());
  auto w = [&](const std::string& name) -> const Tensor& { return weights_.get(name); };
  auto empty = [&](const Shape& s) { return ctx.arena->empty(weights_.dtype(), s); };
  OwnedTensor patches = empty({n, d, g, g});
  ops::Conv2dParams stride;
  stride.stride = c.patch_size;
  ops::conv2d(ctx, pixels, w("vision_model.embeddings.patch_embedding.weight"), nullptr, patches, stride);
  // Tokens: the class embedding, then the patches in row-major order; positions added.
  OwnedTensor h = empty({n, tokens, d}), a = empty({n, tokens, d});
  ops::copy(ctx, w("vision_model.embeddings.class_embedding").reshape({1, 1, d}).expand({n, 1, d}),
            h.view().slice(1, 0, 1));
  ops::copy(ctx, patches.view().reshape({n, d, g * g}).permute({0, 2, 1}), h.view().slice(1, 1, g * g));
  ops::add(ctx, h, w("vision_model.embeddings.position_embedding.weight").reshape({1, tokens, d}).expand(h.shape), h);
  ops::layer_norm(ctx, h, w("vision_model.pre_layrnorm.weight"), w("vision_model.pre_layrnorm.bias"), a,
                  c.encoder.layer_norm_eps);
  return a;
}

void ClipVisionModel::hidden_state(ExecContext& ctx, const Tensor& pixels, int layers_run, const Tensor& out) const {
  const ClipVisionConfig& c = config_;
  VINF_CHECK(layers_run >= 0 && layers_run <= c.encoder.layers, "ClipVisionModel::hidden_state: ", layers_run, " of ",
             c.encoder.layers, " layers");
  VINF_CHECK(out.rank() == 3 && out.size(0) == pixels.size(0) && out.size(1) == c.tokens() &&
                 out.size(2) == c.encoder.hidden_size,
             "ClipVisionModel::hidden_state: out ", out.shape.str());
  const OwnedTensor a = embed_tokens(ctx, pixels);
  ClipEncoderShape first = c.encoder;
  first.layers = layers_run;
  ops::AttentionParams all;
  all.scale = 1.f / std::sqrt(static_cast<float>(c.encoder.hidden_size / c.encoder.heads));
  run_clip_encoder(ctx, weights_, "vision_model.encoder.layers", first, a, all);
  ops::copy(ctx, a, out);
}

void ClipVisionModel::embed(ExecContext& ctx, const Tensor& pixels, const Tensor& out) const {
  const ClipVisionConfig& c = config_;
  const std::int64_t n = pixels.size(0), d = c.encoder.hidden_size;
  VINF_CHECK(projection_, "ClipVisionModel::embed: a CLIPVisionModel has no visual projection");
  VINF_CHECK(out.rank() == 2 && out.size(0) == n && out.size(1) == c.projection_dim, "ClipVisionModel::embed: out ",
             out.shape.str());
  auto w = [&](const std::string& name) -> const Tensor& { return weights_.get(name); };
  auto empty = [&](const Shape& s) { return ctx.arena->empty(weights_.dtype(), s); };
  const OwnedTensor a = embed_tokens(ctx, pixels);
  ops::AttentionParams all;
  all.scale = 1.f / std::sqrt(static_cast<float>(d / c.encoder.heads));
  run_clip_encoder(ctx, weights_, "vision_model.encoder.layers", c.encoder, a, all);
  OwnedTensor cls = empty({n, d}), pooled = empty({n, d});
  ops::copy(ctx, a.view().slice(1, 0, 1), cls.view().reshape({n, 1, d}));
  ops::layer_norm(ctx, cls, w("vision_model.post_layernorm.weight"), w("vision_model.post_layernorm.bias"), pooled,
                  c.encoder.layer_norm_eps);
  ops::linear(ctx, pooled, w("visual_projection.weight"), nullptr, out);
}

double cosine_similarity(const float* a, const float* b, std::int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 0.0;
}

}  // namespace vinf::model
