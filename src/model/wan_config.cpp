#include "model/wan_config.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/json_file.hpp"
#include "io/path_query.hpp"

namespace vinf::model {

WanTransformerConfig wan_transformer_preset(const std::string& name) {
  WanTransformerConfig c;
  if (name == "wan-tiny") {
    c.heads = 2;
    c.head_dim = 16;
    c.text_dim = 32;
    c.freq_dim = 32;
    c.ffn_dim = 64;
    c.layers = 2;
  } else if (name == "skyreels-df-tiny" || name == "skyreels-df-1.3b") {
    c = wan_transformer_preset(name == "skyreels-df-tiny" ? "wan-tiny" : "wan-1.3b");
    c.skyreels = c.inject_sample_info = true;
  } else if (name == "wan-i2v-tiny" || name == "wan-flf2v-tiny") {
    c = wan_transformer_preset("wan-tiny");
    c.in_channels = 36;
    c.image_dim = 24;
    c.added_kv_proj_dim = c.dim();
    if (name == "wan-flf2v-tiny") c.pos_embed_seq_len = 2 * 257;
  } else if (name == "wan-14b" || name == "wan-i2v-14b" || name == "wan-flf2v-14b") {
    c.heads = 40;
    c.ffn_dim = 13824;
    c.layers = 40;
    if (name != "wan-14b") {
      c.in_channels = 36;
      c.image_dim = 1280;
      c.added_kv_proj_dim = c.dim();
      if (name == "wan-flf2v-14b") c.pos_embed_seq_len = 2 * 257;
    }
  } else {
    VINF_INPUT_CHECK(name == "wan-1.3b", "there is no built-in Wan transformer '", name,
                     "' (wan-tiny, wan-1.3b, wan-14b, wan-i2v-tiny, wan-flf2v-tiny, wan-i2v-14b, wan-flf2v-14b, ",
                     "skyreels-df-tiny, skyreels-df-1.3b)");
  }
  return c;
}

WanTransformerConfig load_wan_transformer_config(const std::string& path, std::vector<std::string>* warnings) {
  const nlohmann::json j = io::read_json_file(path, "transformer config");
  io::JsonConfig r(j, path);
  WanTransformerConfig c;
  std::string text;
  if (r.read("_class_name", text)) {
    VINF_INPUT_CHECK(text == "WanTransformer3DModel" || text == "SkyReelsV2Transformer3DModel", path,
                     ": _class_name \"", text, "\" is not WanTransformer3DModel or SkyReelsV2Transformer3DModel");
    c.skyreels = text == "SkyReelsV2Transformer3DModel";
  }
  r.read("inject_sample_info", c.inject_sample_info);
  r.read("num_frame_per_block", c.num_frame_per_block);
  VINF_INPUT_CHECK(c.num_frame_per_block >= 1 && c.num_frame_per_block <= 1024, path,
                   ": config key 'num_frame_per_block' must be in [1, 1024], got ", c.num_frame_per_block);
  VINF_INPUT_CHECK(c.skyreels || (!c.inject_sample_info && c.num_frame_per_block == 1), path,
                   ": 'inject_sample_info' and 'num_frame_per_block' are SkyReelsV2Transformer3DModel's keys");
  std::vector<std::int64_t> patch;
  if (r.read("patch_size", patch)) {
    VINF_INPUT_CHECK(patch.size() == 3, path,
                     ": config key 'patch_size' must hold 3 sizes (frames, height, width), got ", patch.size());
    for (int i = 0; i < 3; ++i) c.patch_size[static_cast<std::size_t>(i)] = patch[static_cast<std::size_t>(i)];
  }
  r.read("num_attention_heads", c.heads);
  r.read("attention_head_dim", c.head_dim);
  r.read("in_channels", c.in_channels);
  r.read("out_channels", c.out_channels);
  r.read("text_dim", c.text_dim);
  r.read("freq_dim", c.freq_dim);
  r.read("ffn_dim", c.ffn_dim);
  r.read("num_layers", c.layers);
  r.read("cross_attn_norm", c.cross_attn_norm);
  r.read("eps", c.eps);
  r.read("rope_max_seq_len", c.rope_max_seq_len);
  if (r.read("qk_norm", text))
    VINF_INPUT_CHECK(text == "rms_norm_across_heads", path, ": config key 'qk_norm' is \"", text,
                     "\"; vinf runs Wan's \"rms_norm_across_heads\" only");
  else if (const nlohmann::json* v = r.find("qk_norm"); v == nullptr && j.contains("qk_norm"))
    VINF_INPUT_FAIL(path, ": config key 'qk_norm' is null; vinf runs Wan's \"rms_norm_across_heads\" only");
  r.read("image_dim", c.image_dim);
  r.read("added_kv_proj_dim", c.added_kv_proj_dim);
  r.read("pos_embed_seq_len", c.pos_embed_seq_len);
  VINF_INPUT_CHECK((c.image_dim > 0) == (c.added_kv_proj_dim > 0), path, ": config keys 'image_dim' (", c.image_dim,
                   ") and 'added_kv_proj_dim' (", c.added_kv_proj_dim,
                   ") are set together (an image-to-video model) or both null (text-to-video)");
  VINF_INPUT_CHECK(c.image_dim <= (1 << 16) && c.added_kv_proj_dim <= (1 << 20) && c.pos_embed_seq_len >= 0 &&
                       c.pos_embed_seq_len <= (1 << 16) && (c.pos_embed_seq_len == 0 || c.image_dim > 0),
                   path, ": config keys 'image_dim', 'added_kv_proj_dim' and 'pos_embed_seq_len' must be in range ",
                   "(pos_embed_seq_len only with image_dim)");
  for (std::int64_t p : c.patch_size)
    VINF_INPUT_CHECK(p >= 1 && p <= 16, path, ": config key 'patch_size' must hold sizes in [1, 16]");
  VINF_INPUT_CHECK(c.heads >= 1 && c.head_dim >= 6 && c.head_dim % 2 == 0, path,
                   ": num_attention_heads must be >= 1 and attention_head_dim even and >= 6, got ", c.heads, " and ",
                   c.head_dim);
  for (auto [key, v] : {std::pair{"in_channels", c.in_channels},
                        {"out_channels", c.out_channels},
                        {"text_dim", c.text_dim},
                        {"ffn_dim", c.ffn_dim},
                        {"num_layers", c.layers},
                        {"rope_max_seq_len", c.rope_max_seq_len}})
    VINF_INPUT_CHECK(v >= 1 && v <= (1 << 20), path, ": config key '", key, "' must be in [1, 1048576], got ", v);
  VINF_INPUT_CHECK(c.freq_dim >= 2 && c.freq_dim % 2 == 0, path, ": config key 'freq_dim' must be even and >= 2, got ",
                   c.freq_dim);
  VINF_INPUT_CHECK(c.eps > 0, path, ": config key 'eps' must be > 0");
  VINF_INPUT_CHECK(
      c.in_channels >= c.out_channels && (c.image_dim > 0 || c.in_channels == c.out_channels), path, ": in_channels ",
      c.in_channels, " and out_channels ", c.out_channels,
      ": a text-to-video model takes as many as it gives, an image-to-video model more (its mask and image "
      "latents beside the noisy latents)");
  if (warnings)
    for (const std::string& k : r.unknown_keys())
      if (k != "window_size" && k != "cross_attn_norm")
        warnings->push_back(path + ": unknown config key '" + k + "' ignored");
  return c;
}

namespace {

// A config value that is null when 0 (diffusers' None).
nlohmann::ordered_json optional_size(std::int64_t v) {
  return v > 0 ? nlohmann::ordered_json(v) : nlohmann::ordered_json();
}

}  // namespace

std::string wan_transformer_config_json(const WanTransformerConfig& c) {
  const nlohmann::ordered_json j = {{"_class_name", c.skyreels ? "SkyReelsV2Transformer3DModel" : "WanTransformer3DModel"},
                                    {"_diffusers_version", c.skyreels ? "0.35.1" : "0.33.1"},
                                    {"added_kv_proj_dim", optional_size(c.added_kv_proj_dim)},
                                    {"attention_head_dim", c.head_dim},
                                    {"cross_attn_norm", c.cross_attn_norm},
                                    {"eps", c.eps},
                                    {"ffn_dim", c.ffn_dim},
                                    {"freq_dim", c.freq_dim},
                                    {"image_dim", optional_size(c.image_dim)},
                                    {"in_channels", c.in_channels},
                                    {"num_attention_heads", c.heads},
                                    {"num_layers", c.layers},
                                    {"out_channels", c.out_channels},
                                    {"patch_size", c.patch_size},
                                    {"qk_norm", "rms_norm_across_heads"},
                                    {"rope_max_seq_len", c.rope_max_seq_len},
                                    {"text_dim", c.text_dim}};
  nlohmann::ordered_json k = j;
  if (c.pos_embed_seq_len > 0) k["pos_embed_seq_len"] = c.pos_embed_seq_len;
  if (c.skyreels) {
    k["inject_sample_info"] = c.inject_sample_info;
    k["num_frame_per_block"] = c.num_frame_per_block;
  }
  return k.dump(2) + "\n";
}

bool is_wan_transformer_config(const std::string& config_path) {
  const nlohmann::json j = io::read_json_file(config_path, "model config");
  return j.is_object() && j.contains("_class_name") &&
         (j["_class_name"] == "WanTransformer3DModel" || j["_class_name"] == "SkyReelsV2Transformer3DModel");
}

std::string find_wan_transformer_config(const std::string& dir) {
  for (const std::string& p : {dir + "/config.json", dir + "/transformer/config.json"})
    if (io::path_exists(p) && is_wan_transformer_config(p)) return p;
  return {};
}

std::vector<ParamSpec> wan_transformer_parameters(const WanTransformerConfig& c) {
  const std::int64_t d = c.dim();
  std::vector<ParamSpec> p;
  // Tensor parallelism's shares: the rows of q, k, v (and their biases and RMS-norm scales) and the
  // columns of to_out by heads; the feed-forward's inner width by rows, then columns. to_out's and
  // ffn.net.2's biases stay whole (one rank adds them).
  auto linear = [&](const std::string& name, std::int64_t out, std::int64_t in, ParamSplit split = {}) {
    p.push_back({name + ".weight", {out, in}, {}, split});
    p.push_back({name + ".bias", {out}, {}, split.kind == ParamSplit::heads_rows ? split : ParamSplit{}});
  };
  const ParamSplit head_rows{ParamSplit::heads_rows, c.heads, c.head_dim},
      head_cols{ParamSplit::heads_cols, c.heads, c.head_dim};
  p.push_back({"patch_embedding.weight", {d, c.in_channels, c.patch_size[0], c.patch_size[1], c.patch_size[2]}});
  p.push_back({"patch_embedding.bias", {d}});
  linear("condition_embedder.time_embedder.linear_1", d, c.freq_dim);
  linear("condition_embedder.time_embedder.linear_2", d, d);
  linear("condition_embedder.time_proj", 6 * d, d);
  linear("condition_embedder.text_embedder.linear_1", d, c.text_dim);
  linear("condition_embedder.text_embedder.linear_2", d, d);
  if (c.inject_sample_info) {
    p.push_back({"fps_embedding.weight", {2, d}});
    linear("fps_projection.net.0.proj", d, d);
    linear("fps_projection.net.2", 6 * d, d);
  }
  if (c.image_conditioned()) {
    const std::string ie = "condition_embedder.image_embedder.";
    for (const auto& [norm, width] : {std::pair{"norm1", c.image_dim}, std::pair{"norm2", d}}) {
      p.push_back({ie + norm + ".weight", {width}});
      p.push_back({ie + norm + ".bias", {width}});
    }
    linear(ie + "ff.net.0.proj", c.image_dim, c.image_dim);
    linear(ie + "ff.net.2", d, c.image_dim);
    if (c.pos_embed_seq_len > 0) p.push_back({ie + "pos_embed", {1, c.pos_embed_seq_len, c.image_dim}});
  }
  for (std::int64_t b = 0; b < c.layers; ++b) {
    const std::string k = "blocks." + std::to_string(b) + ".";
    for (const char* attn : {"attn1", "attn2"}) {
      const std::string a = k + attn + ".";
      for (const char* proj : {"to_q", "to_k", "to_v"}) linear(a + proj, d, d, head_rows);
      linear(a + "to_out.0", d, d, head_cols);
      p.push_back({a + "norm_q.weight", {d}, {}, head_rows});
      p.push_back({a + "norm_k.weight", {d}, {}, head_rows});
    }
    if (c.image_conditioned()) {
      linear(k + "attn2.add_k_proj", d, c.added_kv_proj_dim, head_rows);
      linear(k + "attn2.add_v_proj", d, c.added_kv_proj_dim, head_rows);
      p.push_back({k + "attn2.norm_added_k.weight", {d}, {}, head_rows});
    }
    if (c.cross_attn_norm) {
      p.push_back({k + "norm2.weight", {d}});
      p.push_back({k + "norm2.bias", {d}});
    }
    linear(k + "ffn.net.0.proj", c.ffn_dim, d, {ParamSplit::heads_rows, c.ffn_dim, 1});
    linear(k + "ffn.net.2", d, c.ffn_dim, {ParamSplit::ff_cols, c.ffn_dim, 1});
    p.push_back({k + "scale_shift_table", {1, 6, d}});
  }
  p.push_back({"scale_shift_table", {1, 2, d}});
  linear("proj_out", c.out_channels * c.patch_volume(), d);
  return p;
}

WanFlops wan_transformer_flops(const WanTransformerConfig& c, std::int64_t batch, std::int64_t frames,
                               std::int64_t height, std::int64_t width, std::int64_t text_tokens) {
  const double B = static_cast<double>(batch), D = static_cast<double>(c.dim()), T = static_cast<double>(text_tokens);
  const double L =
      static_cast<double>((frames / c.patch_size[0]) * (height / c.patch_size[1]) * (width / c.patch_size[2]));
  const double P = static_cast<double>(c.patch_volume()), F = static_cast<double>(c.ffn_dim);
  WanFlops f;
  const double per_block_linear = L * (4 * D * D + 2 * D * D + 2 * D * F) + T * 2 * D * D;
  f.linear = 2 * B *
             (static_cast<double>(c.layers) * per_block_linear + L * D * static_cast<double>(c.in_channels) * P +
              L * D * static_cast<double>(c.out_channels) * P + T * (static_cast<double>(c.text_dim) * D + D * D) +
              static_cast<double>(c.freq_dim) * D + D * D + 6 * D * D);
  f.attention = 2 * B * static_cast<double>(c.layers) * (2 * L * L * D + 2 * L * T * D);
  return f;
}

RotaryTable wan_rotary_table(const WanTransformerConfig& c, std::int64_t frames, std::int64_t height,
                             std::int64_t width) {
  RotaryTable t;
  t.half = c.head_dim / 2;
  t.rows = frames * height * width;
  const std::int64_t n_hw = c.head_dim / 6, n_f = t.half - 2 * n_hw;
  const std::int64_t parts[3] = {n_f, n_hw, n_hw};
  t.cos.resize(static_cast<std::size_t>(t.rows * t.half));
  t.sin.resize(t.cos.size());
  for (std::int64_t f = 0; f < frames; ++f)
    for (std::int64_t h = 0; h < height; ++h)
      for (std::int64_t w = 0; w < width; ++w) {
        const std::int64_t row = (f * height + h) * width + w;
        const std::int64_t pos[3] = {f, h, w};
        std::int64_t i = 0;
        for (int part = 0; part < 3; ++part)
          for (std::int64_t j = 0; j < parts[part]; ++j, ++i) {
            const double inv = std::pow(10000.0, -static_cast<double>(2 * j) / static_cast<double>(2 * parts[part]));
            const double angle = static_cast<double>(pos[part]) * inv;
            t.cos[static_cast<std::size_t>(row * t.half + i)] = static_cast<float>(std::cos(angle));
            t.sin[static_cast<std::size_t>(row * t.half + i)] = static_cast<float>(std::sin(angle));
          }
      }
  return t;
}

}  // namespace vinf::model
