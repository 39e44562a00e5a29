// Wan2.1's diffusion transformer (diffusers' WanTransformer3DModel) on one device: patch embedding,
// time and text conditioning, blocks of self-attention with RMS-normed q/k and 3-D rotary
// positions, cross-attention to the text and a tanh-GELU feed-forward, each modulated by the
// timestep (AdaLN: shift, scale, gate), then the output norm, projection and unpatchify.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/tensor_group.hpp"
#include "model/wan_config.hpp"
#include "model/weights.hpp"
#include "ops/attention.hpp"
#include "ops/context.hpp"

namespace vinf {
class Runtime;
}

namespace vinf::model {

// Called with a module's output as the reference names it ("patch_embedding.out",
// "condition_embedder.temb", "blocks.0.out", ...), for tests and activation dumps.
using WanProbe = std::function<void(const std::string& name, const Tensor& value)>;

// Which latent frames of the video a forward call's x holds: [first, first + x's frames) of `total`
// (0: x is the whole video). The rotary positions are those of the frames in the whole video.
struct WanFrames {
  std::int64_t first = 0, total = 0;
  // SkyReels-V2 (diffusion forcing): the video's frame rate for its fps embedding (16, or another
  // rate), and the frames per causal block of the self-attention (a block's tokens see the blocks
  // up to it; 1: every token sees every token).
  int fps = 24;
  std::int64_t block_frames = 1;
};

// The self-attention of every block over the video's tokens. forward calls it with the queries,
// keys and values of the tokens at hand, [B, heads, L, head_dim] (RMS-normed and rotated; views;
// this rank's heads under tensor parallelism), and out of the same shape. Without one, forward
// attends over the tokens at hand: the whole video on one rank. A video split over ranks by frames
// brings one that sees every rank's tokens (infinity::WanExactAttention).
class WanSelfAttention {
 public:
  virtual ~WanSelfAttention() = default;
  // The diffusion timestep of the forward calls that follow (Video-Infinity's phase biases).
  virtual void begin_call(double timestep) { (void)timestep; }
  // The block-causal mask of the calls that follow: the queries of each block of `tokens` tokens
  // (in the whole video's order) see the keys of the blocks up to theirs; 0 for none. False when
  // this attention cannot apply it.
  virtual bool set_causal_block(std::int64_t tokens) { return tokens == 0; }
  virtual void attend(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                      const ops::AttentionParams& p) = 0;
};

class WanTransformer {
 public:
  WanTransformer(WanTransformerConfig config, Weights weights);
  // dir: a transformer directory, or a pipeline root with transformer/. The weights are checked
  // against the config's parameter list and copied to rt's device as `dtype`.
  // With a tensor shard of T > 1 ranks (`--parallel.tensor T`), this rank holds its share of the
  // heads of every attention (q, k, v rows, their RMS norms' scales, to_out's columns) and of the
  // feed-forward's inner columns; set_tensor_group names the group that sums the partial outputs.
  static WanTransformer load(const std::string& dir, Runtime& rt, DType dtype, bool allow_unexpected,
                             std::vector<std::string>* warnings, TensorShard shard = {});
  const WanTransformerConfig& config() const { return config_; }
  const Weights& weights() const { return weights_; }
  void set_tensor_group(TensorGroup* group);

  // x [B, in_channels, F, H, W] latents, t [B] timesteps (f32, on the device), text [B, L, text_dim];
  // out [B, out_channels, F, H, W]. F, H and W must divide by the patch size. All on ctx's device
  // in the weights' activation dtype (t f32). frames and self_attention: for a part of the video's
  // frames (above); the patch size must divide frames.first and frames.total.
  // An image-to-video model's x holds the noisy latents, then the mask and image latents (in_channels
  // in all), and `image` the CLIP states [1 or B, Li, image_dim] every sample sees (a first-and-last-
  // frame model: both images' tokens, pos_embed_seq_len of them); null for text-to-video.
  void forward(ExecContext& ctx, const Tensor& x, const Tensor& t, const Tensor& text, const Tensor& out,
               const WanProbe& probe = nullptr, const WanFrames& frames = {},
               WanSelfAttention* self_attention = nullptr, const Tensor* image = nullptr) const;

 private:
  WanTransformerConfig config_;
  Weights weights_;
  TensorGroup* tensor_group_ = nullptr;
};

}  // namespace vinf::model
