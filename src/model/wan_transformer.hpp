// Wan2.1's diffusion transformer (diffusers' WanTransformer3DModel) on one device: patch embedding,
// time and text conditioning, blocks of self-attention with RMS-normed q/k and 3-D rotary
// positions, cross-attention to the text and a tanh-GELU feed-forward, each modulated by the
// timestep (AdaLN: shift, scale, gate), then the output norm, projection and unpatchify.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/wan_config.hpp"
#include "model/weights.hpp"
#include "ops/context.hpp"

namespace vinf {
class Runtime;
}

namespace vinf::model {

// Called with a module's output as the reference names it ("patch_embedding.out",
// "condition_embedder.temb", "blocks.0.out", ...), for tests and activation dumps.
using WanProbe = std::function<void(const std::string& name, const Tensor& value)>;

class WanTransformer {
 public:
  WanTransformer(WanTransformerConfig config, Weights weights);
  // dir: a transformer directory, or a pipeline root with transformer/. The weights are checked
  // against the config's parameter list and copied to rt's device as `dtype`.
  static WanTransformer load(const std::string& dir, Runtime& rt, DType dtype, bool allow_unexpected,
                             std::vector<std::string>* warnings);
  const WanTransformerConfig& config() const { return config_; }
  const Weights& weights() const { return weights_; }

  // x [B, in_channels, F, H, W] latents, t [B] timesteps (f32, on the device), text [B, L, text_dim];
  // out [B, out_channels, F, H, W]. F, H and W must divide by the patch size. All on ctx's device
  // in the weights' activation dtype (t f32).
  void forward(ExecContext& ctx, const Tensor& x, const Tensor& t, const Tensor& text, const Tensor& out,
               const WanProbe& probe = nullptr) const;

 private:
  WanTransformerConfig config_;
  Weights weights_;
};

}  // namespace vinf::model
