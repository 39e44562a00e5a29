// diffusers' UNet3DConditionModel with VideoCrafter2's fps conditioning, one call = one denoising
// step for one clip. Activations are frame-major (B*F, C, H, W) images, row b*F + f, so every
// spatial layer is a batched 2-D op and every temporal layer a strided (B, C, F, H*W) view. They
// live in the runtime's arena and are released as soon as they are dead; only the skip stack
// lives across blocks.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/params.hpp"
#include "model/temporal.hpp"
#include "model/tensor_group.hpp"
#include "model/weights.hpp"

namespace vinf::model {

// The names an UNet3D::Observer sees for a model of config c, in the order of the forward pass.
std::vector<std::string> observed_module_names(const UNetConfig& c);

class UNet3D {
 public:
  UNet3D(UNetConfig config, Weights weights);

  const UNetConfig& config() const { return config_; }
  const Weights& weights() const { return weights_; }
  DType dtype() const { return weights_.dtype(); }

  // Sees module outputs as the forward pass makes them: "time_embedding" [B, 4 C0], and in the
  // frame-major layout "conv_in", "transformer_in", "down_blocks.<i>", "mid_block", "up_blocks.<i>",
  // "conv_norm_out" (before its SiLU), "conv_out", plus "<module>.in" / "<module>.out" of every
  // TemporalConvLayer, TransformerTemporalModel and temporal attention ("<...>.attn1" input after
  // its LayerNorm and output after to_out, (B*H*W, F, inner)). The tensors are valid only during
  // the call.
  using Observer = std::function<void(const std::string& name, const Tensor& t)>;

  // sample (B, in_channels, F, H, W), text (B, L, cross_attention_dim), out (B, out_channels, F, H,
  // W), all on the context's device, any float dtype (computed in the weights' dtype). Throws
  // vinf::InputError when the shapes do not fit the model.
  void forward(ExecContext& ctx, const Tensor& sample, std::int64_t timestep, double fps, const Tensor& text,
               const Tensor& out, TemporalContext& temporal, const Observer& observe = {}) const;
  // The same with a timestep per frame (FIFO-Diffusion's diagonal denoising): `timesteps` holds F
  // values, frame f of every sample at timesteps[f] (its own time embedding row, "time_embedding"
  // is then [B*F, 4 C0]), or one value for all. Frames all at one timestep give exactly the call
  // above. The temporal context's begin_call sees timesteps[0].
  void forward(ExecContext& ctx, const Tensor& sample, std::span<const std::int64_t> timesteps, double fps,
               const Tensor& text, const Tensor& out, TemporalContext& temporal, const Observer& observe = {}) const;

  // Weights of a tensor shard (size > 1) need the group that sums the partial outputs: its rank
  // and size must be the shard's. Not owned; it must outlive the forward calls.
  void set_tensor_group(TensorGroup* group);

 private:
  UNetConfig config_;
  UNetLayout layout_;
  Weights weights_;
  TensorGroup* tensor_group_ = nullptr;
};

}  // namespace vinf::model
