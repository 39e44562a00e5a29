#include "app/wan_pipeline.hpp"

#include <chrono>
#include <cstdint>

#include "core/error.hpp"
#include "io/image.hpp"
#include "mpi/communicator.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"
#include "sampling/sampler.hpp"

namespace vinf::app {

void wan_denoise(Runtime& rt, const WanDenoise& d, sampling::FlowSampler& sampler) {
  ExecContext& ctx = rt.ctx();
  const Tensor& x = sampler.latents();
  VINF_CHECK(x.rank() == 5 && x.size(0) == 1, "wan_denoise: latents ", x.describe(), " must be [1, C, F, H, W]");
  const bool cfg = d.guidance > 1.f, split = cfg && d.cfg_group != nullptr;
  const std::int64_t B = cfg && !split ? 2 : 1, L = d.prompt.size(1), D = d.prompt.size(2);
  VINF_CHECK(!cfg || (d.negative.rank() == 3 && d.negative.size(1) == L && d.negative.size(2) == D),
             "wan_denoise: the negative prompt's embeddings ", d.negative.describe(), " must match the prompt's ",
             d.prompt.describe());
  // The batch [negative, prompt] (the UNet family's order), the latents twice.
  const DType dt = d.transformer.weights().dtype();
  Shape batch_shape = x.shape;
  batch_shape[0] = B;
  OwnedTensor text = rt.arena().empty(dt, {B, L, D}), in = rt.arena().empty(dt, batch_shape),
              pred = rt.arena().empty(dt, batch_shape), t = rt.arena().empty(DType::f32, {B});
  if (split) {
    ops::copy(ctx, d.cfg_index == 0 ? d.negative : d.prompt, text);
  } else if (cfg) {
    ops::copy(ctx, d.negative, text.view().slice(0, 0, 1));
    ops::copy(ctx, d.prompt, text.view().slice(0, 1, 1));
  } else {
    ops::copy(ctx, d.prompt, text);
  }
  OwnedTensor v = rt.arena().empty(DType::f32, x.shape);
  Shape both_shape = x.shape;
  both_shape[0] = 2;
  OwnedTensor both = split ? rt.arena().empty(dt, both_shape) : OwnedTensor{};
  for (int i = sampler.steps_done(); i < d.scheduler.steps(); ++i) {
    const float tv = static_cast<float>(d.scheduler.timesteps()[static_cast<std::size_t>(i)]);
    float ts[2] = {tv, tv};
    ops::copy(ctx, Tensor::wrap(ts, DType::f32, Device::cpu(), {B}), t);
    ops::copy(ctx, x.expand(batch_shape), in);
    if (d.self_attention) d.self_attention->begin_call(tv);
    d.transformer.forward(ctx, in, t, text, pred, nullptr, d.frames, d.self_attention);
    if (split) {
      d.cfg_group->all_gather(ctx, pred, both);  // [negative, prompt], by cfg index
      sampling::guide(ctx, both.view().slice(0, 0, 1), both.view().slice(0, 1, 1), d.guidance, v);
    } else if (cfg) {
      sampling::guide(ctx, pred.view().slice(0, 0, 1), pred.view().slice(0, 1, 1), d.guidance, v);
    } else {
      ops::copy(ctx, pred, v);
    }
    sampler.step(ctx, i, v);
    if (d.after_step && !d.after_step(i)) return;
  }
}

void wan_latents_for_vae(Runtime& rt, const model::WanVaeConfig& vae, const Tensor& latents, const Tensor& z) {
  ExecContext& ctx = rt.ctx();
  const std::int64_t C = latents.size(1);
  VINF_INPUT_CHECK(C == vae.z_dim && static_cast<std::int64_t>(vae.latents_mean.size()) == C &&
                       static_cast<std::int64_t>(vae.latents_std.size()) == C,
                   "the Wan VAE's z_dim ", vae.z_dim, " and latents_mean / latents_std (", vae.latents_mean.size(),
                   " values) must match the ", C, " latent channels");
  std::vector<float> scale(vae.latents_std.begin(), vae.latents_std.end());
  std::vector<float> shift(vae.latents_mean.begin(), vae.latents_mean.end());
  OwnedTensor sc = rt.arena().empty(DType::f32, {C}), sh = rt.arena().empty(DType::f32, {C});
  ops::copy(ctx, Tensor::wrap(scale.data(), DType::f32, Device::cpu(), {C}), sc);
  ops::copy(ctx, Tensor::wrap(shift.data(), DType::f32, Device::cpu(), {C}), sh);
  const Shape per_channel{1, C, 1, 1, 1};
  ops::mul(ctx, latents, sc.view().reshape(per_channel).expand(latents.shape), z);
  ops::add(ctx, z, sh.view().reshape(per_channel).expand(latents.shape), z);
}

WanVideoFiles wan_write_video(Runtime& rt, const model::WanVae& vae, const Tensor& latents, const std::string& out_dir,
                              const io::FrameWriter::Settings& settings, std::int64_t tile) {
  const auto t0 = std::chrono::steady_clock::now();
  ExecContext& ctx = rt.ctx();
  const model::WanVaeConfig& vc = vae.config();
  const std::int64_t lf = latents.size(2), lh = latents.size(3), lw = latents.size(4);
  OwnedTensor z = rt.arena().empty(DType::f32, latents.shape);
  wan_latents_for_vae(rt, vc, latents, z);
  const std::int64_t frames = vc.video_frames(lf), r = vc.spatial_ratio(), height = lh * r, width = lw * r;
  OwnedTensor video = rt.arena().empty(DType::f32, {1, vc.out_channels, frames, height, width});
  vae.decode(ctx, z, video, tile);
  std::vector<float> host(static_cast<std::size_t>(video.numel()));
  const Shape frame_major{frames, vc.out_channels, height, width};
  ops::copy(ctx, video.view().select(0, 0).permute({1, 0, 2, 3}), Tensor::wrap(host.data(), DType::f32, Device::cpu(), frame_major));
  rt.synchronize();
  io::FrameWriter writer(out_dir, frames, width, height, settings);
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(height * width * 3));
  for (std::int64_t f = 0; f < frames; ++f) {
    io::to_rgb8(host.data() + f * vc.out_channels * height * width, height, width, rgb.data());
    writer.add(f, rgb.data());
  }
  const std::string error = writer.finish();
  VINF_CHECK(error.empty(), error);
  return {std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), writer.files()};
}

}  // namespace vinf::app
