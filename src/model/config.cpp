#include "model/config.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "io/json_file.hpp"

namespace vinf::model {

namespace {

using nlohmann::json;

// A count that must be a positive integer (one for all blocks, where diffusers allows per-block lists).
int positive_int(io::JsonConfig& r, const char* key, int fallback, bool required = false) {
  const json* v = r.find(key);
  if (!v) {
    VINF_INPUT_CHECK(!required, r.source(), ": config key '", key, "' is missing");
    return fallback;
  }
  if (!v->is_number_integer() || v->get<long long>() <= 0 || v->get<long long>() >= (1 << 24))
    r.fail(key, "a positive integer", *v,
           v->is_array() ? " (a per-block list is not supported: vinf needs one value for all blocks)" : "");
  return v->get<int>();
}

std::vector<bool> block_types(io::JsonConfig& r, const char* key, const char* cross_name, const char* plain_name,
                              std::size_t count) {
  const json* v = r.find(key);
  if (!v || !v->is_array()) r.fail(key, "a list of block types", v ? *v : json());
  VINF_INPUT_CHECK(v->size() == count, r.source(), ": config key '", key, "' has ", v->size(),
                   " entries but block_out_channels has ", count);
  std::vector<bool> cross;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& t = (*v)[i];
    const std::string name = t.is_string() ? t.get<std::string>() : t.dump();
    VINF_INPUT_CHECK(name == cross_name || name == plain_name, r.source(), ": unknown block type '", name, "' in ", key,
                     "[", i, "]; vinf supports ", cross_name, " and ", plain_name);
    cross.push_back(name == cross_name);
  }
  return cross;
}

}  // namespace

UNetConfig parse_unet_config(const std::string& text, const std::string& source, std::vector<std::string>* warnings) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    VINF_INPUT_FAIL(source, " is not valid JSON (", e.what(), ")");
  }
  io::JsonConfig r(j, source);
  UNetConfig c;

  const json* boc = r.find("block_out_channels");
  if (!boc || !boc->is_array() || boc->empty())
    r.fail("block_out_channels", "a non-empty list of channel counts", boc ? *boc : json());
  c.block_out_channels.clear();
  for (const json& v : *boc) {
    if (!v.is_number_integer() || v.get<long long>() <= 0 || v.get<long long>() >= (1 << 20))
      r.fail("block_out_channels", "a list of positive integers", *boc);
    c.block_out_channels.push_back(v.get<int>());
  }
  const std::size_t n = c.block_out_channels.size();
  c.down_cross = block_types(r, "down_block_types", "CrossAttnDownBlock3D", "DownBlock3D", n);
  c.up_cross = block_types(r, "up_block_types", "CrossAttnUpBlock3D", "UpBlock3D", n);
  c.in_channels = positive_int(r, "in_channels", 4);
  c.out_channels = positive_int(r, "out_channels", 4);
  c.layers_per_block = positive_int(r, "layers_per_block", 2);
  c.attention_head_dim = positive_int(r, "attention_head_dim", 64);
  c.cross_attention_dim = positive_int(r, "cross_attention_dim", 1024);
  c.norm_num_groups = positive_int(r, "norm_num_groups", 32);
  c.norm_eps = 1e-5f;
  r.read("norm_eps", c.norm_eps);
  VINF_INPUT_CHECK(c.norm_eps > 0, source, ": config key 'norm_eps' must be positive");
  c.downsample_padding = 1;
  r.read("downsample_padding", c.downsample_padding);
  VINF_INPUT_CHECK(c.downsample_padding == 1, source, ": config key 'downsample_padding' is ", c.downsample_padding,
                   "; vinf supports only 1 (the UNet3D value)");
  c.mid_block_scale_factor = 1.f;
  r.read("mid_block_scale_factor", c.mid_block_scale_factor);
  VINF_INPUT_CHECK(c.mid_block_scale_factor > 0, source, ": config key 'mid_block_scale_factor' must be positive");
  std::string act = "silu";
  r.read("act_fn", act);
  VINF_INPUT_CHECK(act == "silu", source, ": config key 'act_fn' is \"", act, "\"; vinf supports only \"silu\"");
  if (const json* v = r.find("num_attention_heads"))
    VINF_INPUT_FAIL(source, ": config key 'num_attention_heads' is ", v->dump(), "; UNet3DConditionModel does not ",
                    "support it (diffusers raises); set it to null and use attention_head_dim");
  if (const json* v = r.find("time_cond_proj_dim"))
    VINF_INPUT_FAIL(source, ": config key 'time_cond_proj_dim' is ", v->dump(),
                    "; timestep-conditioning projections are not supported");
  c.fps_cond = false;
  r.read("fps_cond", c.fps_cond);
  // Informational only; diffusers allows one size or a [height, width] pair.
  if (const json* v = r.find("sample_size"); v && !(v->is_array() && v->size() == 2)) r.read("sample_size", c.sample_size);

  for (std::size_t i = 0; i < n; ++i) {
    const int ch = c.block_out_channels[i];
    VINF_INPUT_CHECK(ch % c.norm_num_groups == 0, source, ": block_out_channels[", i, "] = ", ch,
                     " is not divisible by norm_num_groups = ", c.norm_num_groups);
    VINF_INPUT_CHECK(ch % c.attention_head_dim == 0, source, ": block_out_channels[", i, "] = ", ch,
                     " is not divisible by attention_head_dim = ", c.attention_head_dim);
  }
  if (warnings) {
    for (const std::string& k : r.unknown_keys())
      warnings->push_back(source + ": config key '" + k + "' is not used by vinf and was ignored");
  }
  return c;
}

UNetConfig load_unet_config(const std::string& path, std::vector<std::string>* warnings) {
  std::ifstream in(path);
  VINF_INPUT_CHECK(in.good(), "cannot read ", path, " (a model directory needs a diffusers config.json)");
  std::stringstream s;
  s << in.rdbuf();
  return parse_unet_config(s.str(), path, warnings);
}

std::string unet_config_json(const UNetConfig& c) {
  nlohmann::ordered_json j;
  j["_class_name"] = "UNet3DConditionModel";
  j["_diffusers_version"] = "0.29.2";
  j["act_fn"] = "silu";
  j["attention_head_dim"] = c.attention_head_dim;
  j["block_out_channels"] = c.block_out_channels;
  j["cross_attention_dim"] = c.cross_attention_dim;
  std::vector<std::string> down, up;
  for (bool x : c.down_cross) down.push_back(x ? "CrossAttnDownBlock3D" : "DownBlock3D");
  for (bool x : c.up_cross) up.push_back(x ? "CrossAttnUpBlock3D" : "UpBlock3D");
  j["down_block_types"] = down;
  j["downsample_padding"] = c.downsample_padding;
  j["fps_cond"] = c.fps_cond;
  j["in_channels"] = c.in_channels;
  j["layers_per_block"] = c.layers_per_block;
  j["mid_block_scale_factor"] = c.mid_block_scale_factor;
  j["norm_eps"] = c.norm_eps;
  j["norm_num_groups"] = c.norm_num_groups;
  j["num_attention_heads"] = nullptr;
  j["out_channels"] = c.out_channels;
  j["sample_size"] = c.sample_size;
  j["time_cond_proj_dim"] = nullptr;
  j["up_block_types"] = up;
  return j.dump(2) + "\n";
}

UNetLayout unet_layout(const UNetConfig& c) {
  UNetLayout l;
  const int n = c.blocks();
  const auto& boc = c.block_out_channels;
  for (int i = 0; i < n; ++i) {
    BlockLayout b;
    b.prefix = "down_blocks." + std::to_string(i);
    b.cross = c.down_cross[i];
    b.out_channels = boc[i];
    const int in = i == 0 ? boc[0] : boc[i - 1];
    for (int j = 0; j < c.layers_per_block; ++j) b.resnet_in.push_back(j == 0 ? in : boc[i]);
    b.resample = i < n - 1;
    l.down.push_back(b);
  }
  l.mid_channels = boc.back();
  int prev_out = boc.back();
  for (int i = 0; i < n; ++i) {
    BlockLayout b;
    b.prefix = "up_blocks." + std::to_string(i);
    b.cross = c.up_cross[i];
    b.out_channels = boc[n - 1 - i];
    const int in = boc[n - 1 - std::min(i + 1, n - 1)];
    const int layers = c.layers_per_block + 1;
    for (int j = 0; j < layers; ++j) {
      const int skip = j == layers - 1 ? in : b.out_channels;
      b.skip_in.push_back(skip);
      b.resnet_in.push_back((j == 0 ? prev_out : b.out_channels) + skip);
    }
    b.resample = i < n - 1;
    prev_out = b.out_channels;
    l.up.push_back(b);
  }
  return l;
}

int fewest_heads(const UNetConfig& c) {
  int fewest = UNetConfig::kTransformerInHeads;
  const UNetLayout l = unet_layout(c);
  for (const auto* blocks : {&l.down, &l.up})
    for (const BlockLayout& b : *blocks)
      if (b.cross) fewest = std::min(fewest, transformer_heads(c, static_cast<int>(b.out_channels)));
  return std::min(fewest, transformer_heads(c, static_cast<int>(l.mid_channels)));
}

void check_tensor_split(const UNetConfig& c, int tensor, const std::string& source) {
  VINF_INPUT_CHECK(tensor >= 1, "--parallel.tensor must be >= 1, got ", tensor);
  const int most = fewest_heads(c);
  VINF_INPUT_CHECK(tensor <= most, "--parallel.tensor ", tensor, " splits every attention's heads over ", tensor,
                   " ranks, but the model (", source, ") has attentions of only ", most,
                   " heads; use at most --parallel.tensor ", most);
}

}  // namespace vinf::model
