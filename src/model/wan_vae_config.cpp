#include "model/wan_vae_config.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/json_file.hpp"

namespace vinf::model {

namespace {

constexpr std::size_t kMaxStages = 8;
constexpr int kMaxResBlocks = 64, kMaxChannels = 1 << 20;

// Wan2.1's per-channel latent statistics (diffusers' AutoencoderKLWan defaults, from the Wan
// release).
const std::vector<float> kWan21LatentsMean{-0.7571f, -0.7089f, -0.9113f, 0.1075f, -0.1745f, 0.9653f,
                                           -0.1517f, 1.5508f,  0.4134f,  -0.0715f, 0.5517f, -0.3632f,
                                           -0.1922f, -0.9497f, 0.2503f,  -0.2921f};
const std::vector<float> kWan21LatentsStd{2.8184f, 1.4541f, 2.3275f, 2.6558f, 1.2196f, 1.7708f, 2.6052f, 2.0743f,
                                          3.2687f, 2.1526f, 2.8652f, 1.5579f, 1.6382f, 1.1253f, 2.8251f, 1.9160f};

// The fixture's (tests/fixtures/wan-tiny/vae/config.json).
const std::vector<float> kTinyLatentsMean{0.0f,    0.0841f,  0.0909f, 0.0141f, -0.0757f, -0.0959f,
                                          -0.0279f, 0.0657f, 0.0989f, 0.0412f, -0.0544f, -0.1f,
                                          -0.0537f, 0.042f,  0.0991f, 0.065f};
const std::vector<float> kTinyLatentsStd{1.5f,    1.2702f, 0.7919f, 0.505f,  0.6732f, 1.1418f, 1.4801f, 1.377f,
                                         0.9272f, 0.5444f, 0.5805f, 1.0022f, 1.4219f, 1.4537f, 1.0684f, 0.6202f};

}  // namespace

int WanVaeConfig::temporal_ratio() const {
  return 1 << static_cast<int>(std::count(temperal_downsample.begin(), temperal_downsample.end(), true));
}

std::int64_t WanVaeConfig::latent_frames(std::int64_t frames) const {
  return 1 + (frames - 1) / kChunkFrames * (kChunkFrames / temporal_ratio());
}

std::int64_t WanVaeConfig::video_frames(std::int64_t latent) const { return 1 + (latent - 1) * temporal_ratio(); }

WanVaeConfig wan_vae_preset(const std::string& name) {
  WanVaeConfig c;
  if (name == "wan-tiny") {
    c.base_dim = c.decoder_base_dim = 8;
    c.dim_mult = {1, 2, 2, 2};
    c.num_res_blocks = 1;
    c.latents_mean = kTinyLatentsMean;
    c.latents_std = kTinyLatentsStd;
  } else {
    VINF_INPUT_CHECK(name == "wan2.1", "there is no built-in Wan VAE '", name, "' (wan-tiny, wan2.1)");
    c.latents_mean = kWan21LatentsMean;
    c.latents_std = kWan21LatentsStd;
  }
  return c;
}

std::string wan_vae_config_json(const WanVaeConfig& c) {
  const nlohmann::ordered_json j = {{"_class_name", "AutoencoderKLWan"},
                                    {"attn_scales", nlohmann::ordered_json::array()},
                                    {"base_dim", c.base_dim},
                                    {"decoder_base_dim", c.decoder_base_dim},
                                    {"dim_mult", c.dim_mult},
                                    {"dropout", 0.0},
                                    {"in_channels", c.in_channels},
                                    {"is_residual", false},
                                    {"latents_mean", io::json_floats(c.latents_mean)},
                                    {"latents_std", io::json_floats(c.latents_std)},
                                    {"num_res_blocks", c.num_res_blocks},
                                    {"out_channels", c.out_channels},
                                    {"patch_size", nullptr},
                                    {"scale_factor_spatial", c.spatial_ratio()},
                                    {"scale_factor_temporal", c.temporal_ratio()},
                                    {"temperal_downsample", c.temperal_downsample},
                                    {"z_dim", c.z_dim}};
  return j.dump(2) + "\n";
}

WanVaeConfig load_wan_vae_config(const std::string& path) {
  const nlohmann::json j = io::read_json_file(path, "VAE config");
  io::JsonConfig r(j, path);
  WanVaeConfig c;
  c.latents_mean = kWan21LatentsMean;
  c.latents_std = kWan21LatentsStd;
  std::string text;
  if (r.read("_class_name", text))
    VINF_INPUT_CHECK(text == "AutoencoderKLWan", path, ": _class_name \"", text, "\" is not AutoencoderKLWan");
  r.read("base_dim", c.base_dim);
  c.decoder_base_dim = c.base_dim;
  r.read("decoder_base_dim", c.decoder_base_dim);
  r.read("z_dim", c.z_dim);
  r.read("dim_mult", c.dim_mult);
  r.read("num_res_blocks", c.num_res_blocks);
  r.read("temperal_downsample", c.temperal_downsample);
  r.read("in_channels", c.in_channels);
  r.read("out_channels", c.out_channels);
  r.read("latents_mean", c.latents_mean);
  r.read("latents_std", c.latents_std);
  double dropout = 0;
  r.read("dropout", dropout);  // inference: no effect
  std::vector<double> attn_scales;
  if (r.read("attn_scales", attn_scales) && !attn_scales.empty())
    r.fail("attn_scales", "empty (vinf runs Wan2.1's VAE, which has attention in the mid blocks only)", j["attn_scales"]);
  bool is_residual = false;
  if (r.read("is_residual", is_residual) && is_residual)
    r.fail("is_residual", "false (Wan2.2's residual down and up blocks are not supported)", j["is_residual"]);
  int patch_size = 1;
  if (r.read("patch_size", patch_size) && patch_size != 1)
    r.fail("patch_size", "null or 1 (Wan2.2's patchified VAE is not supported)", j["patch_size"]);

  const std::size_t stages = c.dim_mult.size();
  VINF_INPUT_CHECK(stages >= 1 && stages <= kMaxStages, path, ": dim_mult has ", stages, " entries; vinf reads 1 to ",
                   kMaxStages);
  VINF_INPUT_CHECK(c.temperal_downsample.size() == stages - 1, path, ": temperal_downsample has ",
                   c.temperal_downsample.size(), " entries; dim_mult's ", stages, " stages need ", stages - 1);
  const auto temporal = std::count(c.temperal_downsample.begin(), c.temperal_downsample.end(), true);
  if (temporal > 2)
    r.fail("temperal_downsample", "a list with at most two true entries (the encoder reads chunks of 4 frames)",
           j["temperal_downsample"]);
  VINF_INPUT_CHECK(c.num_res_blocks >= 1 && c.num_res_blocks <= kMaxResBlocks, path, ": num_res_blocks ",
                   c.num_res_blocks, " is not in [1, ", kMaxResBlocks, "]");
  for (const auto& [key, v] : {std::pair<const char*, int>{"z_dim", c.z_dim}, {"in_channels", c.in_channels},
                               {"out_channels", c.out_channels}})
    VINF_INPUT_CHECK(v >= 1 && v < kMaxChannels, path, ": ", key, " ", v, " is not in [1, ", kMaxChannels - 1, "]");
  for (const auto& [key, base] :
       {std::pair<const char*, int>{"base_dim", c.base_dim}, {"decoder_base_dim", c.decoder_base_dim}}) {
    for (int m : c.dim_mult) {
      const long long ch = static_cast<long long>(base) * m;
      VINF_INPUT_CHECK(base >= 1 && m >= 1 && ch < kMaxChannels, path, ": ", key, " ", base, " x dim_mult ", m,
                       " is not a channel count in [1, ", kMaxChannels - 1, "]");
      // The decoder's upsamplers halve the channels.
      VINF_INPUT_CHECK(ch % 2 == 0, path, ": ", key, " ", base, " x dim_mult ", m, " = ", ch,
                       " is odd; the decoder halves every stage's channels");
    }
  }
  VINF_INPUT_CHECK(c.latents_mean.size() == static_cast<std::size_t>(c.z_dim) &&
                       c.latents_std.size() == static_cast<std::size_t>(c.z_dim),
                   path, ": latents_mean and latents_std need z_dim = ", c.z_dim, " entries, got ",
                   c.latents_mean.size(), " and ", c.latents_std.size());
  for (float s : c.latents_std) VINF_INPUT_CHECK(s > 0, path, ": latents_std ", s, " is not positive");
  // Newer diffusers write the compression ratios too; they must be the ones the layout implies.
  int ratio = 0;
  if (r.read("scale_factor_temporal", ratio) && ratio != c.temporal_ratio())
    r.fail("scale_factor_temporal", std::to_string(c.temporal_ratio()) + " (from temperal_downsample)",
           j["scale_factor_temporal"]);
  if (r.read("scale_factor_spatial", ratio) && ratio != c.spatial_ratio())
    r.fail("scale_factor_spatial", std::to_string(c.spatial_ratio()) + " (from dim_mult)", j["scale_factor_spatial"]);
  // A key vinf does not know may change the architecture: refuse rather than guess.
  const std::vector<std::string> unknown = r.unknown_keys();
  if (!unknown.empty())
    VINF_INPUT_FAIL(path, ": config key '", unknown.front(), "' is not supported by vinf's AutoencoderKLWan");
  return c;
}

namespace {

std::vector<std::int64_t> encoder_dims(const WanVaeConfig& c) {
  std::vector<std::int64_t> d{c.base_dim};
  for (int m : c.dim_mult) d.push_back(static_cast<std::int64_t>(c.base_dim) * m);
  return d;
}

std::vector<std::int64_t> decoder_dims(const WanVaeConfig& c) {
  std::vector<std::int64_t> d{static_cast<std::int64_t>(c.decoder_base_dim) * c.dim_mult.back()};
  for (auto it = c.dim_mult.rbegin(); it != c.dim_mult.rend(); ++it)
    d.push_back(static_cast<std::int64_t>(c.decoder_base_dim) * *it);
  return d;
}

// The parameter-list grammar of both halves.
struct Params {
  std::vector<ParamSpec> p;
  // A causal Conv3d with a kt x k x k kernel.
  void conv3d(const std::string& name, std::int64_t out, std::int64_t in, std::int64_t kt, std::int64_t k) {
    p.push_back({name + ".weight", {out, in, kt, k, k}});
    p.push_back({name + ".bias", {out}});
  }
  void conv2d(const std::string& name, std::int64_t out, std::int64_t in) {
    p.push_back({name + ".weight", {out, in, 3, 3}});
    p.push_back({name + ".bias", {out}});
  }
  // WanRMS_norm over channels: gamma [C, 1, 1, 1] over videos, [C, 1, 1] over images.
  void rms(const std::string& name, std::int64_t ch, bool images = false) {
    p.push_back({name + ".gamma", images ? Shape{ch, 1, 1} : Shape{ch, 1, 1, 1}});
  }
  void resnet(const std::string& name, std::int64_t in, std::int64_t out) {
    rms(name + ".norm1", in);
    conv3d(name + ".conv1", out, in, 3, 3);
    rms(name + ".norm2", out);
    conv3d(name + ".conv2", out, out, 3, 3);
    if (in != out) conv3d(name + ".conv_shortcut", out, in, 1, 1);
  }
  // 1x1 Conv2d projections, read as matrices (stored [out, in, 1, 1]).
  void attention(const std::string& name, std::int64_t ch) {
    rms(name + ".norm", ch, true);
    p.push_back({name + ".to_qkv.weight", {3 * ch, ch}});
    p.push_back({name + ".to_qkv.bias", {3 * ch}});
    p.push_back({name + ".proj.weight", {ch, ch}});
    p.push_back({name + ".proj.bias", {ch}});
  }
  void mid_block(const std::string& name, std::int64_t ch) {
    resnet(name + ".resnets.0", ch, ch);
    attention(name + ".attentions.0", ch);
    resnet(name + ".resnets.1", ch, ch);
  }
  void layer(const WanVaeLayer& l) {
    switch (l.kind) {
      case WanVaeLayer::resnet: resnet(l.name, l.in, l.out); break;
      case WanVaeLayer::downsample3d: conv3d(l.name + ".time_conv", l.in, l.in, 3, 1); [[fallthrough]];
      case WanVaeLayer::downsample2d: conv2d(l.name + ".resample.1", l.out, l.in); break;
      case WanVaeLayer::upsample3d: conv3d(l.name + ".time_conv", 2 * l.in, l.in, 3, 1); [[fallthrough]];
      case WanVaeLayer::upsample2d: conv2d(l.name + ".resample.1", l.out, l.in); break;
    }
  }
};

}  // namespace

std::vector<WanVaeLayer> wan_vae_encoder_layers(const WanVaeConfig& c) {
  const std::vector<std::int64_t> d = encoder_dims(c);
  const std::size_t stages = c.dim_mult.size();
  std::vector<WanVaeLayer> layers;
  auto name = [&] { return "encoder.down_blocks" + dot_index(layers.size()); };
  for (std::size_t i = 0; i < stages; ++i) {
    std::int64_t in = d[i];
    const std::int64_t out = d[i + 1];
    for (int r = 0; r < c.num_res_blocks; ++r) {
      layers.push_back({WanVaeLayer::resnet, name(), in, out});
      in = out;
    }
    if (i + 1 < stages)
      layers.push_back(
          {c.temperal_downsample[i] ? WanVaeLayer::downsample3d : WanVaeLayer::downsample2d, name(), out, out});
  }
  return layers;
}

std::vector<WanVaeLayer> wan_vae_decoder_layers(const WanVaeConfig& c) {
  const std::vector<std::int64_t> d = decoder_dims(c);
  const std::size_t stages = c.dim_mult.size();
  std::vector<WanVaeLayer> layers;
  for (std::size_t i = 0; i < stages; ++i) {
    // Every stage but the first receives the previous upsampler's halved channels.
    std::int64_t in = i == 0 ? d[i] : d[i] / 2;
    const std::int64_t out = d[i + 1];
    const std::string block = "decoder.up_blocks" + dot_index(i);
    for (int r = 0; r <= c.num_res_blocks; ++r) {
      layers.push_back({WanVaeLayer::resnet, block + ".resnets" + dot_index(static_cast<std::size_t>(r)), in, out});
      in = out;
    }
    // The upsamplers run in the encoder's reverse order: stage i undoes downsampling stage
    // stages - 2 - i.
    if (i + 1 < stages)
      layers.push_back({c.temperal_downsample[stages - 2 - i] ? WanVaeLayer::upsample3d : WanVaeLayer::upsample2d,
                        block + ".upsamplers.0", out, out / 2});
  }
  return layers;
}

std::int64_t wan_vae_encoder_top(const WanVaeConfig& c) { return encoder_dims(c).back(); }
std::int64_t wan_vae_decoder_top(const WanVaeConfig& c) { return decoder_dims(c).front(); }

std::vector<ParamSpec> wan_vae_encoder_parameters(const WanVaeConfig& c) {
  Params v;
  const std::int64_t top = wan_vae_encoder_top(c), z2 = 2 * static_cast<std::int64_t>(c.z_dim);
  v.conv3d("encoder.conv_in", c.base_dim, c.in_channels, 3, 3);
  for (const WanVaeLayer& l : wan_vae_encoder_layers(c)) v.layer(l);
  v.mid_block("encoder.mid_block", top);
  v.rms("encoder.norm_out", top);
  v.conv3d("encoder.conv_out", z2, top, 3, 3);
  v.conv3d("quant_conv", z2, z2, 1, 1);
  return v.p;
}

std::vector<ParamSpec> wan_vae_decoder_parameters(const WanVaeConfig& c) {
  Params v;
  const std::int64_t top = wan_vae_decoder_top(c), z = c.z_dim;
  v.conv3d("post_quant_conv", z, z, 1, 1);
  v.conv3d("decoder.conv_in", top, z, 3, 3);
  v.mid_block("decoder.mid_block", top);
  const std::vector<WanVaeLayer> layers = wan_vae_decoder_layers(c);
  for (const WanVaeLayer& l : layers) v.layer(l);
  const std::int64_t last = layers.back().out;
  v.rms("decoder.norm_out", last);
  v.conv3d("decoder.conv_out", c.out_channels, last, 3, 3);
  return v.p;
}

std::vector<ParamSpec> wan_vae_parameters(const WanVaeConfig& c) {
  std::vector<ParamSpec> all = wan_vae_encoder_parameters(c);
  for (ParamSpec& p : wan_vae_decoder_parameters(c)) all.push_back(std::move(p));
  return all;
}

}  // namespace vinf::model
