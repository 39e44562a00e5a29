#include "pipeline/wan_stream.hpp"

#include <algorithm>
#include <cmath>
#include <chrono>

#include "core/error.hpp"
#include "io/image.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"
#include "pipeline/wan_denoise.hpp"

namespace vinf::pipeline {

void WanFrameDecoder::decode(const Tensor& latents, std::int64_t first,
                             const std::function<void(const std::uint8_t*)>& frame) {
  ExecContext& ctx = rt_.ctx();
  const model::WanVaeConfig& vc = vae_.config();
  const std::int64_t lh = latents.size(3), lw = latents.size(4), r = vc.spatial_ratio();
  const std::int64_t height = lh * r, width = lw * r, frame_bytes = height * width * 3;
  rgb_.resize(static_cast<std::size_t>(frame_bytes));
  // A few latent frames per call: the device holds their frames, not the part's.
  constexpr std::int64_t kLatentFramesPerCall = 4;
  const std::int64_t n = latents.size(2);
  for (std::int64_t f0 = 0; f0 < n; f0 += kLatentFramesPerCall) {
    const std::int64_t count = std::min(kLatentFramesPerCall, n - f0), at = first + f0;
    const std::int64_t out_frames = vae_.part_frames(at, count);
    OwnedTensor z = rt_.arena().empty(DType::f32, {1, latents.size(1), count, lh, lw});
    wan_latents_for_vae(rt_, vc, latents.slice(2, f0, count), z);
    OwnedTensor video = rt_.arena().empty(DType::f32, {1, vc.out_channels, out_frames, height, width});
    vae_.decode_part(ctx, z, at, memory_, video, tile_);
    std::vector<float> host(static_cast<std::size_t>(video.numel()));
    const Shape frame_major{out_frames, vc.out_channels, height, width};
    ops::copy(ctx, video.view().select(0, 0).permute({1, 0, 2, 3}),
              Tensor::wrap(host.data(), DType::f32, Device::cpu(), frame_major));
    rt_.synchronize();
    for (std::int64_t f = 0; f < out_frames; ++f) {
      io::to_rgb8(host.data() + f * vc.out_channels * height * width, height, width, rgb_.data());
      frame(rgb_.data());
    }
  }
}

WanVideoStream::WanVideoStream(Runtime& rt, const Settings& s, std::int64_t resume_frames)
    : rt_(rt), s_(s), latents_(s.out_dir + "/latents.h5", s.stamp, s.full, resume_frames) {
  if (s.vae_dir.empty() || !(s.frames.video || s.frames.png)) return;
  vae_ = std::make_unique<model::WanVae>(model::WanVae::load(s.vae_dir, rt, DType::f32, model::WanVae::decoder));
  decoder_ = std::make_unique<WanFrameDecoder>(rt, *vae_, s.tile);
  const model::WanVaeConfig& vc = vae_->config();
  const std::int64_t r = vc.spatial_ratio();
  writer_ =
      std::make_unique<io::FrameWriter>(s.out_dir, vc.video_frames(s.full[0]), s.full[3] * r, s.full[2] * r, s.frames);
  // A resumed run's frames so far, read back a few at a time: the decoder's memory and the video
  // files as they were.
  const Shape per{s.full[1], s.full[2], s.full[3]};
  constexpr std::int64_t kFramesPerRead = 4;
  std::vector<float> host;
  for (std::int64_t f0 = 0; f0 < resume_frames; f0 += kFramesPerRead) {
    const std::int64_t n = std::min(kFramesPerRead, resume_frames - f0);
    host.resize(static_cast<std::size_t>(n * per.numel()));
    latents_.read(f0, n, host.data());
    OwnedTensor t = rt.arena().empty(DType::f32, {1, per[0], n, per[1], per[2]});
    ops::copy(rt.ctx(),
              Tensor::wrap(host.data(), DType::f32, Device::cpu(), {n, per[0], per[1], per[2]})
                  .permute({1, 0, 2, 3})
                  .unsqueeze(0),
              t);
    decode(t, f0);
  }
}

WanVideoStream::~WanVideoStream() = default;

void WanVideoStream::decode(const Tensor& latents, std::int64_t first) {
  VINF_CHECK(first == decoded_, "WanVideoStream: latent frame ", first, " after ", decoded_, " decoded");
  decoder_->decode(latents, first, [&](const std::uint8_t* rgb) { writer_->add(video_frame_++, rgb); });
  decoded_ += latents.size(2);
}

void WanVideoStream::append(const Tensor& latents, std::int64_t first) {
  const auto t0 = std::chrono::steady_clock::now();
  VINF_CHECK(latents.rank() == 5 && latents.size(0) == 1 && first == latents_.frames(),
             "WanVideoStream: ", latents.describe(), " from latent frame ", first, " after ", latents_.frames());
  const std::int64_t n = latents.size(2);
  std::vector<float> host(static_cast<std::size_t>(latents.numel()));
  ops::copy(rt_.ctx(), latents.select(0, 0).permute({1, 0, 2, 3}),
            Tensor::wrap(host.data(), DType::f32, Device::cpu(), {n, s_.full[1], s_.full[2], s_.full[3]}));
  rt_.synchronize();
  for (float v : host)
    VINF_CHECK(std::isfinite(v), "the latents of frames ", first, " to ", first + n - 1,
               " are not finite: not written (latents.h5.partial keeps the frames before them)");
  latents_.append(first, n, host.data());
  if (decoder_) decode(latents, first);
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

WanVideoStream::Finished WanVideoStream::finish(const std::vector<std::int64_t>& boundaries) {
  const auto t0 = std::chrono::steady_clock::now();
  latents_.finish(boundaries);
  Finished f;
  if (writer_) {
    f.error = writer_->finish();
    f.files = writer_->files();
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return f;
}

}  // namespace vinf::pipeline
