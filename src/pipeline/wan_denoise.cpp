#include "pipeline/wan_denoise.hpp"

#include <chrono>
#include <algorithm>
#include <cstdint>
#include <memory>

#include "core/error.hpp"
#include "infinity/config.hpp"
#include "io/image.hpp"
#include "mpi/communicator.hpp"
#include "mpi/session.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"
#include "pipeline/guidance.hpp"
#include "pipeline/wan_stream.hpp"
#include "sampling/sampler.hpp"

namespace vinf::pipeline {

WanStepper::WanStepper(Runtime& rt, const WanDenoise& d, sampling::FlowSampler& sampler)
    : rt_(rt), d_(d), sampler_(sampler), guidance_(Guidance::of(d.guidance > 1.f, d.guidance, d.cfg_group)) {
  ExecContext& ctx = rt.ctx();
  const Tensor& x = sampler.latents();
  VINF_CHECK(x.rank() == 5 && x.size(0) == 1, "wan_denoise: latents ", x.describe(), " must be [1, C, F, H, W]");
  const bool cfg = guidance_.layout != Guidance::Layout::none;
  const bool split = guidance_.layout == Guidance::Layout::across_ranks;
  const std::int64_t B = guidance_.batch(), L = d.prompt.size(1), D = d.prompt.size(2);
  VINF_CHECK(!cfg || (d.negative.rank() == 3 && d.negative.size(1) == L && d.negative.size(2) == D),
             "wan_denoise: the negative prompt's embeddings ", d.negative.describe(), " must match the prompt's ",
             d.prompt.describe());
  // The batch [negative, prompt] (the UNet family's order), the latents twice; an image-to-video
  // model's input holds the condition channels after them, the same in every call.
  const DType dt = d.transformer.weights().dtype();
  const model::WanTransformerConfig& tc = d.transformer.config();
  VINF_CHECK(x.size(1) == tc.out_channels && (tc.condition_channels() == 0 || d.condition.rank() == 5),
             "wan_denoise: latents ", x.describe(), " for a model of ", tc.out_channels, " latent channels",
             tc.condition_channels() > 0 ? " and its condition channels" : "");
  batch_shape_ = x.shape;
  batch_shape_[0] = B;
  Shape in_shape = batch_shape_;
  in_shape[1] = tc.in_channels;
  text_ = rt.arena().empty(dt, {B, L, D});
  in_ = rt.arena().empty(dt, in_shape);
  pred_ = rt.arena().empty(dt, batch_shape_);
  if (tc.condition_channels() > 0) {
    Shape cond_shape = in_shape;
    cond_shape[1] = tc.condition_channels();
    VINF_CHECK(d.condition.shape == Shape({1, cond_shape[1], x.size(2), x.size(3), x.size(4)}),
               "wan_denoise: condition ", d.condition.describe(), " for latents ", x.describe());
    ops::copy(ctx, d.condition.expand(cond_shape), in_.view().slice(1, tc.out_channels, tc.condition_channels()));
  }
  t_ = rt.arena().empty(DType::f32, {B});
  guidance_.text_batch(ctx, d.prompt, d.negative, d.cfg_index, text_);
  v_ = rt.arena().empty(DType::f32, x.shape);
  Shape both_shape = x.shape;
  both_shape[0] = 2;
  if (split) both_ = rt.arena().empty(dt, both_shape);
}

void WanStepper::step(int i) {
  ExecContext& ctx = rt_.ctx();
  const float tv = static_cast<float>(d_.scheduler.timesteps()[static_cast<std::size_t>(i)]);
  float ts[2] = {tv, tv};
  ops::copy(ctx, Tensor::wrap(ts, DType::f32, Device::cpu(), {batch_shape_[0]}), t_);
  ops::copy(ctx, sampler_.latents().expand(batch_shape_), in_.view().slice(1, 0, batch_shape_[1]));
  if (d_.self_attention) d_.self_attention->begin_call(tv);
  d_.transformer.forward(ctx, in_, t_, text_, pred_, nullptr, d_.frames, d_.self_attention, d_.image);
  guidance_.combine(ctx, pred_, both_, v_);
  sampler_.step(ctx, i, v_);
}

void wan_denoise(Runtime& rt, const WanDenoise& d, sampling::FlowSampler& sampler) {
  WanStepper stepper(rt, d, sampler);
  for (int i = sampler.steps_done(); i < d.scheduler.steps(); ++i) {
    stepper.step(i);
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
                              const io::FrameWriter::Settings& settings, std::int64_t tile,
                              const WanVideoParts& parts) {
  const auto t0 = std::chrono::steady_clock::now();
  ExecContext& ctx = rt.ctx();
  const model::WanVaeConfig& vc = vae.config();
  const int n = parts.session ? static_cast<int>(parts.ranks.size()) : 1, k = parts.session ? parts.index : 0;
  const std::int64_t total = parts.session ? parts.total : latents.size(2), lh = latents.size(3), lw = latents.size(4);
  const infinity::FrameRange mine = infinity::clip_frames(total, n, k);
  VINF_CHECK(latents.size(2) == mine.count && k >= 0 && k < n, "wan_write_video: part ", k, " of ", n, " holds ",
             latents.size(2), " latent frames, not ", mine.count);
  const std::int64_t r = vc.spatial_ratio(), height = lh * r, width = lw * r, frame_bytes = height * width * 3;
  // This part's frames: the causal memory of the part before (from its rank), decoded, the memory
  // handed on to the next part's rank before anything else.
  // The memory travels as bytes in pieces of at most 1 GiB (a point-to-point message counts its
  // bytes in an int; at 480 x 832 the memory is several GB).
  constexpr std::uint64_t kPiece = std::uint64_t{1} << 30;
  model::WanVae::Memory memory;
  auto peer = [&](int i) { return parts.ranks[static_cast<std::size_t>(i)]; };
  if (k > 0) {
    std::uint64_t bytes = 0;
    parts.session->receive(&bytes, sizeof bytes, peer(k - 1));
    std::string handed(bytes, '\0');
    for (std::uint64_t at = 0; at < bytes; at += kPiece)
      parts.session->receive(handed.data() + at, std::min(kPiece, bytes - at), peer(k - 1));
    memory = vae.load_memory(ctx, handed);
  }
  const std::int64_t frames = vae.part_frames(mine.first, mine.count);
  WanVideoFiles result;
  std::unique_ptr<io::FrameWriter> writer;
  if (k == 0) writer = std::make_unique<io::FrameWriter>(out_dir, vc.video_frames(total), width, height, settings);
  // This part: the first part's rank writes its frames as they come, the others keep theirs for it.
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>((k == 0 ? 1 : frames) * frame_bytes));
  WanFrameDecoder decoder(rt, vae, tile);
  decoder.memory() = std::move(memory);
  std::int64_t at = 0;
  decoder.decode(latents, mine.first, [&](const std::uint8_t* frame) {
    if (writer) {
      writer->add(at++, frame);
    } else {
      std::copy(frame, frame + frame_bytes, rgb.data() + (at++) * frame_bytes);
    }
  });
  memory = std::move(decoder.memory());
  if (k + 1 < n) {
    const std::string handed = model::WanVae::save_memory(ctx, memory);
    const std::uint64_t bytes = handed.size();
    parts.session->send(&bytes, sizeof bytes, peer(k + 1));
    for (std::uint64_t at = 0; at < bytes; at += kPiece)
      parts.session->send(handed.data() + at, std::min(kPiece, bytes - at), peer(k + 1));
  }
  memory.frames.clear();
  if (k > 0) {  // to the first part's rank, which writes the video
    for (std::int64_t f = 0; f < frames; ++f)
      parts.session->send(rgb.data() + f * frame_bytes, static_cast<std::size_t>(frame_bytes), peer(0));
  } else {
    // Every frame is taken (a writer's error is kept for the end), so no sender waits forever.
    for (int i = 1; i < n; ++i) {
      const infinity::FrameRange theirs = infinity::clip_frames(total, n, i);
      for (std::int64_t f = 0; f < vae.part_frames(theirs.first, theirs.count); ++f, ++at) {
        parts.session->receive(rgb.data(), static_cast<std::size_t>(frame_bytes), peer(i));
        writer->add(at, rgb.data());
      }
    }
    result.error = writer->finish();
    result.files = writer->files();
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace vinf::pipeline
