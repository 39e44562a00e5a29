// Wan2.1's diffusion transformer (diffusers' WanTransformer3DModel): its config.json, the presets
// make-model writes, and the parameter list in diffusers' key names. The image-to-video variants
// (image_dim, added_kv_proj_dim; first-and-last-frame with pos_embed_seq_len) add an image embedder
// and each block's keys and values of the image tokens.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/params.hpp"

namespace vinf::model {

struct WanTransformerConfig {
  std::array<std::int64_t, 3> patch_size{1, 2, 2};  // frames, height, width
  std::int64_t heads = 12, head_dim = 128;  // inner dim = heads x head_dim
  std::int64_t in_channels = 16, out_channels = 16;
  std::int64_t text_dim = 4096, freq_dim = 256, ffn_dim = 8960, layers = 30;
  bool cross_attn_norm = true;
  float eps = 1e-6f;
  std::int64_t rope_max_seq_len = 1024;
  // Image-to-video: the CLIP states' width (0: text-to-video), the width the image tokens' keys and
  // values are projected from (the inner dim), and the image embedder's position table's length
  // (first-and-last-frame: 2 x 257; 0: none).
  std::int64_t image_dim = 0, added_kv_proj_dim = 0, pos_embed_seq_len = 0;
  // SkyReels-V2's diffusion-forcing transformer (SkyReelsV2Transformer3DModel): per-frame timesteps,
  // the fps embedding when inject_sample_info, the frames per causal block of its attention.
  bool skyreels = false, inject_sample_info = false;
  std::int64_t num_frame_per_block = 1;

  std::int64_t dim() const { return heads * head_dim; }
  std::int64_t patch_volume() const { return patch_size[0] * patch_size[1] * patch_size[2]; }
  bool image_conditioned() const { return image_dim > 0; }
  // The channels of the conditioning beside the noisy latents in the input (mask and image latents).
  std::int64_t condition_channels() const { return in_channels - out_channels; }
};

// "wan-tiny" (the shape of the test fixture: 2 blocks, 2 heads of 16), "wan-1.3b", "wan-14b", and
// the image-to-video "wan-i2v-tiny" (the image-to-video fixture's shape), "wan-i2v-14b",
// "wan-flf2v-14b".
WanTransformerConfig wan_transformer_preset(const std::string& name);
// Reads a transformer/config.json; refuses q/k norms other than "rms_norm_across_heads" and image
// settings that do not fit together, naming the file and key.
// Unknown keys are reported through `warnings`.
WanTransformerConfig load_wan_transformer_config(const std::string& path, std::vector<std::string>* warnings = nullptr);
std::string wan_transformer_config_json(const WanTransformerConfig& c);
// Whether config.json (of a model directory) names WanTransformer3DModel as its class.
bool is_wan_transformer_config(const std::string& config_path);
// Where a directory's transformer config is: DIR/config.json, or DIR/transformer/config.json for a
// pipeline root; empty when neither names WanTransformer3DModel.
std::string find_wan_transformer_config(const std::string& dir);

// Every parameter, in diffusers' names and shapes.
std::vector<ParamSpec> wan_transformer_parameters(const WanTransformerConfig& c);

// Floating-point operations of one transformer call (a multiply-add counts 2) on `batch` samples of
// frames x height x width latent pixels with `text_tokens` text rows: the products (patch
// embedding, q/k/v/out of both attentions, the text's keys and values, the feed-forward, the
// conditioning and output projections) and attention's two products per head (every key seen).
struct WanFlops {
  double linear = 0, attention = 0;
  double total() const { return linear + attention; }
};
WanFlops wan_transformer_flops(const WanTransformerConfig& c, std::int64_t batch, std::int64_t frames,
                               std::int64_t height, std::int64_t width, std::int64_t text_tokens);

// Rotary angles of every token of a (frames, height, width) grid of patches: row l = (f H + h) W + w,
// column i < head_dim / 2. The pairs split into frame, height and width parts as Wan's do
// (head_dim/2 - 2 (head_dim/6), head_dim/6, head_dim/6 pairs); pair j of a part of d = 2 n channels
// turns by position / 10000^(2j / d). Returns cos and sin, each [F H W, head_dim / 2], in f64 rounded
// to f32 (the reference builds its table in f64).
struct RotaryTable {
  std::vector<float> cos, sin;
  std::int64_t rows = 0, half = 0;
};
RotaryTable wan_rotary_table(const WanTransformerConfig& c, std::int64_t frames, std::int64_t height,
                             std::int64_t width);

}  // namespace vinf::model
