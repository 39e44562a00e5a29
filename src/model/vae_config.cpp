#include "model/vae_config.hpp"

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/json_file.hpp"

namespace vinf::model {

namespace {
constexpr std::size_t kMaxVaeBlocks = 8;
constexpr int kMaxVaeLayers = 64, kMaxVaeChannels = 1 << 20;
}  // namespace

VaeConfig vae_preset(const std::string& name) {
  VaeConfig c;
  if (name == "tiny") {
    c.block_out_channels = {32, 32, 64, 64};
    c.layers_per_block = 1;
    c.norm_num_groups = 8;
  } else if (name == "small") {
    c.block_out_channels = {64, 128, 128, 128};
    c.norm_num_groups = 16;
  } else {
    VINF_INPUT_CHECK(name == "vc2", "there is no built-in VAE '", name, "' (tiny, small, vc2)");  // vc2: kl-f8 itself
  }
  return c;
}

std::string vae_config_json(const VaeConfig& c) {
  const std::size_t blocks = c.block_out_channels.size();
  const nlohmann::ordered_json j = {{"_class_name", "AutoencoderKL"},
                                    {"act_fn", "silu"},
                                    {"in_channels", c.in_channels},
                                    {"out_channels", c.out_channels},
                                    {"latent_channels", c.latent_channels},
                                    {"block_out_channels", c.block_out_channels},
                                    {"down_block_types", std::vector<std::string>(blocks, "DownEncoderBlock2D")},
                                    {"up_block_types", std::vector<std::string>(blocks, "UpDecoderBlock2D")},
                                    {"layers_per_block", c.layers_per_block},
                                    {"norm_num_groups", c.norm_num_groups},
                                    {"scaling_factor", c.scaling_factor},
                                    {"use_quant_conv", c.use_quant_conv},
                                    {"use_post_quant_conv", c.use_post_quant_conv},
                                    {"mid_block_add_attention", c.mid_block_attention}};
  return j.dump(2) + "\n";
}

VaeConfig load_vae_config(const std::string& path) {
  const nlohmann::json j = io::read_json_file(path, "VAE config");
  io::JsonConfig r(j, path);
  VaeConfig c;
  std::string text;
  if (r.read("_class_name", text))
    VINF_INPUT_CHECK(text == "AutoencoderKL", path, ": _class_name \"", text, "\" is not AutoencoderKL");
  r.read("in_channels", c.in_channels);
  r.read("out_channels", c.out_channels);
  r.read("latent_channels", c.latent_channels);
  r.read("block_out_channels", c.block_out_channels);
  r.read("layers_per_block", c.layers_per_block);
  r.read("norm_num_groups", c.norm_num_groups);
  r.read("scaling_factor", c.scaling_factor);
  r.read("use_quant_conv", c.use_quant_conv);
  r.read("use_post_quant_conv", c.use_post_quant_conv);
  r.read("mid_block_add_attention", c.mid_block_attention);
  if (r.read("act_fn", text))
    VINF_INPUT_CHECK(text == "silu", path, ": act_fn \"", text, "\" is not supported (silu)");
  std::vector<std::string> up_types;
  r.read("up_block_types", up_types);
  for (const std::string& t : up_types)
    VINF_INPUT_CHECK(t == "UpDecoderBlock2D", path, ": up block type \"", t, "\" is not UpDecoderBlock2D");
  if (r.find("shift_factor")) VINF_INPUT_FAIL(path, ": shift_factor is not supported (a kl-f8 VAE has none)");
  VINF_INPUT_CHECK(!c.block_out_channels.empty() && c.layers_per_block >= 1 && c.norm_num_groups >= 1 &&
                       c.latent_channels >= 1 && c.out_channels >= 1,
                   path, ": block_out_channels, layers_per_block, norm_num_groups and the channel counts must be positive");
  // Bounds far above any VAE, which keep the parameter count and the upscale 2^(blocks - 1) in range.
  VINF_INPUT_CHECK(c.block_out_channels.size() <= kMaxVaeBlocks, path, ": block_out_channels has ",
                   c.block_out_channels.size(), " blocks; vinf reads VAEs of 1 to ", kMaxVaeBlocks, " blocks");
  VINF_INPUT_CHECK(c.layers_per_block <= kMaxVaeLayers, path, ": layers_per_block ", c.layers_per_block,
                   " is more than ", kMaxVaeLayers);
  for (int ch : {c.latent_channels, c.out_channels})
    VINF_INPUT_CHECK(ch < kMaxVaeChannels, path, ": a channel count of ", ch, " is more than ", kMaxVaeChannels - 1);
  for (int ch : c.block_out_channels) {
    VINF_INPUT_CHECK(ch > 0 && ch < kMaxVaeChannels, path, ": block_out_channels ", ch, " is not in [1, ",
                     kMaxVaeChannels - 1, "]");
    VINF_INPUT_CHECK(ch % c.norm_num_groups == 0, path, ": block_out_channels ", ch,
                     " is not a multiple of norm_num_groups ", c.norm_num_groups);
  }
  VINF_INPUT_CHECK(c.scaling_factor > 0, path, ": scaling_factor must be > 0");
  return c;
}

namespace {

// The parameter-list grammar both halves share.
struct VaeParams {
  std::vector<ParamSpec> p;
  void conv(const std::string& name, std::int64_t out, std::int64_t in, std::int64_t k) {
    p.push_back({name + ".weight", {out, in, k, k}});
    p.push_back({name + ".bias", {out}});
  }
  void norm(const std::string& name, std::int64_t ch) {
    p.push_back({name + ".weight", {ch}});
    p.push_back({name + ".bias", {ch}});
  }
  void resnet(const std::string& name, std::int64_t in, std::int64_t out) {
    norm(name + ".norm1", in);
    conv(name + ".conv1", out, in, 3);
    norm(name + ".norm2", out);
    conv(name + ".conv2", out, out, 3);
    if (in != out) conv(name + ".conv_shortcut", out, in, 1);
  }
  // resnet, single-head attention (when the config has it), resnet.
  void mid_block(const std::string& prefix, const VaeConfig& c, std::int64_t top) {
    resnet(prefix + ".resnets.0", top, top);
    if (c.mid_block_attention) {
      const std::string a = prefix + ".attentions.0.";
      norm(a + "group_norm", top);
      const std::pair<const char*, const char*> names[] = {
          {"to_q", "query"}, {"to_k", "key"}, {"to_v", "value"}, {"to_out.0", "proj_attn"}};
      for (const auto& [now, old] : names) {
        p.push_back({a + now + ".weight", {top, top}, {a + old + ".weight"}});
        p.push_back({a + now + ".bias", {top}, {a + old + ".bias"}});
      }
    }
    resnet(prefix + ".resnets.1", top, top);
  }
};

}  // namespace

std::vector<ParamSpec> vae_decoder_parameters(const VaeConfig& c) {
  VaeParams v;
  const std::int64_t lat = c.latent_channels, top = c.block_out_channels.back();
  if (c.use_post_quant_conv) v.conv("post_quant_conv", lat, lat, 1);
  v.conv("decoder.conv_in", top, lat, 3);
  v.mid_block("decoder.mid_block", c, top);
  std::int64_t in = top;
  const int blocks = static_cast<int>(c.block_out_channels.size());
  for (int i = 0; i < blocks; ++i) {
    const std::int64_t out = c.block_out_channels[static_cast<std::size_t>(blocks - 1 - i)];
    const std::string b = "decoder.up_blocks" + dot_index(static_cast<std::size_t>(i));
    for (int j = 0; j <= c.layers_per_block; ++j)
      v.resnet(b + ".resnets" + dot_index(static_cast<std::size_t>(j)), j == 0 ? in : out, out);
    if (i + 1 < blocks) v.conv(b + ".upsamplers.0.conv", out, out, 3);
    in = out;
  }
  v.norm("decoder.conv_norm_out", in);
  v.conv("decoder.conv_out", c.out_channels, in, 3);
  return v.p;
}

std::vector<ParamSpec> vae_encoder_parameters(const VaeConfig& c) {
  VaeParams v;
  const std::int64_t lat = c.latent_channels, top = c.block_out_channels.back();
  std::int64_t in = c.block_out_channels.front();
  v.conv("encoder.conv_in", in, c.in_channels, 3);
  const int blocks = static_cast<int>(c.block_out_channels.size());
  for (int i = 0; i < blocks; ++i) {
    const std::int64_t out = c.block_out_channels[static_cast<std::size_t>(i)];
    const std::string b = "encoder.down_blocks" + dot_index(static_cast<std::size_t>(i));
    for (int j = 0; j < c.layers_per_block; ++j)
      v.resnet(b + ".resnets" + dot_index(static_cast<std::size_t>(j)), j == 0 ? in : out, out);
    if (i + 1 < blocks) v.conv(b + ".downsamplers.0.conv", out, out, 3);
    in = out;
  }
  v.mid_block("encoder.mid_block", c, top);
  v.norm("encoder.conv_norm_out", top);
  v.conv("encoder.conv_out", 2 * lat, top, 3);
  if (c.use_quant_conv) v.conv("quant_conv", 2 * lat, 2 * lat, 1);
  return v.p;
}

}  // namespace vinf::model
