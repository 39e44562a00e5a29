// The UNet3DConditionModel configuration (diffusers' config.json) and the block layout that follows
// from it: channels of every resnet, the skip stack, head counts. Values the runtime does not
// implement are rejected by name when the file is read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vinf::model {

// The UNet's feed-forward runs in chunks of rows whose GEGLU projection (8 x inner per row) holds at
// most this many elements: what unet3d.cpp computes at once and footprint.cpp estimates.
inline constexpr std::int64_t kFeedForwardChunkElements = std::int64_t{1} << 24;

struct UNetConfig {
  int in_channels = 4;
  int out_channels = 4;
  std::vector<int> block_out_channels{320, 640, 1280, 1280};
  // true: CrossAttn{Down,Up}Block3D (resnet, temporal conv, spatial transformer, temporal
  // transformer per layer); false: {Down,Up}Block3D (resnet and temporal conv only).
  std::vector<bool> down_cross{true, true, true, false};
  std::vector<bool> up_cross{false, true, true, true};
  int layers_per_block = 2;
  // diffusers' `attention_head_dim` as the 3-D UNet uses it: the width of one head in every spatial
  // and temporal transformer (heads = channels / this); transformer_in has 8 heads of this width.
  int attention_head_dim = 64;
  int cross_attention_dim = 1024;
  int norm_num_groups = 32;
  float norm_eps = 1e-5f;
  int downsample_padding = 1;
  float mid_block_scale_factor = 1.f;
  bool fps_cond = true;  // VideoCrafter2's fps embedding, added to the time embedding
  int sample_size = 0;   // informational only

  static constexpr int kTransformerInHeads = 8;
  int time_embed_dim() const { return 4 * block_out_channels.front(); }
  int blocks() const { return static_cast<int>(block_out_channels.size()); }
};

// Parses config.json text; `source` names the file in messages. Throws vinf::InputError naming the
// key for a missing, malformed or unsupported value. Unknown keys are reported through `warnings`.
UNetConfig parse_unet_config(const std::string& text, const std::string& source, std::vector<std::string>* warnings);
UNetConfig load_unet_config(const std::string& path, std::vector<std::string>* warnings);
// The config as diffusers writes it (for make-model).
std::string unet_config_json(const UNetConfig& c);

// Where every layer's channels come from, shared by the parameter grammar and the forward pass.
struct BlockLayout {
  std::string prefix;           // "down_blocks.1", "up_blocks.0"
  bool cross = false;           // has attentions / temp_attentions
  int out_channels = 0;
  std::vector<int> resnet_in;   // input channels of resnet j (up blocks: current + skip)
  std::vector<int> skip_in;     // up blocks: channels of the skip popped by layer j
  bool resample = false;        // downsampler (down blocks) or upsampler (up blocks)
};

struct UNetLayout {
  std::vector<BlockLayout> down, up;
  int mid_channels = 0;
};

UNetLayout unet_layout(const UNetConfig& c);

// Heads of the spatial and temporal transformers at `channels`.
inline int transformer_heads(const UNetConfig& c, int channels) { return channels / c.attention_head_dim; }
// The fewest heads of any of the model's attentions: the most tensor ranks it can be split over.
int fewest_heads(const UNetConfig& c);
// --parallel.tensor T against the model: 1 <= T <= fewest_heads. Throws vinf::InputError naming
// the option, the config file `source` and what would fit.
void check_tensor_split(const UNetConfig& c, int tensor, const std::string& source);

}  // namespace vinf::model
