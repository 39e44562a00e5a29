#include "app/wan_pipeline.hpp"

#include "core/error.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"
#include "sampling/sampler.hpp"

namespace vinf::app {

void wan_denoise(Runtime& rt, const WanDenoise& d, sampling::FlowSampler& sampler) {
  ExecContext& ctx = rt.ctx();
  const Tensor& x = sampler.latents();
  VINF_CHECK(x.rank() == 5 && x.size(0) == 1, "wan_denoise: latents ", x.describe(), " must be [1, C, F, H, W]");
  const bool cfg = d.guidance != 1.f;
  const std::int64_t B = cfg ? 2 : 1, L = d.prompt.size(1), D = d.prompt.size(2);
  VINF_CHECK(!cfg || (d.negative.rank() == 3 && d.negative.size(1) == L && d.negative.size(2) == D),
             "wan_denoise: the negative prompt's embeddings ", d.negative.describe(), " must match the prompt's ",
             d.prompt.describe());
  // The batch [negative, prompt] (the UNet family's order), the latents twice.
  const DType dt = d.transformer.weights().dtype();
  Shape batch_shape = x.shape;
  batch_shape[0] = B;
  OwnedTensor text = rt.arena().empty(dt, {B, L, D}), in = rt.arena().empty(dt, batch_shape),
              pred = rt.arena().empty(dt, batch_shape), t = rt.arena().empty(DType::f32, {B});
  if (cfg) {
    ops::copy(ctx, d.negative, text.view().slice(0, 0, 1));
    ops::copy(ctx, d.prompt, text.view().slice(0, 1, 1));
  } else {
    ops::copy(ctx, d.prompt, text);
  }
  OwnedTensor v = rt.arena().empty(DType::f32, x.shape);
  for (int i = sampler.steps_done(); i < d.scheduler.steps(); ++i) {
    const float tv = static_cast<float>(d.scheduler.timesteps()[static_cast<std::size_t>(i)]);
    float ts[2] = {tv, tv};
    ops::copy(ctx, Tensor::wrap(ts, DType::f32, Device::cpu(), {B}), t);
    ops::copy(ctx, x.expand(batch_shape), in);
    d.transformer.forward(ctx, in, t, text, pred);
    if (cfg) sampling::guide(ctx, pred.view().slice(0, 0, 1), pred.view().slice(0, 1, 1), d.guidance, v);
    else ops::copy(ctx, pred, v);
    sampler.step(ctx, i, v);
    if (d.after_step) d.after_step(i);
  }
}

}  // namespace vinf::app
