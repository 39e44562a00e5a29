#include "pipeline/video_files.hpp"

#include <chrono>

#include "pipeline/unet_support.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "infinity/config.hpp"
#include "io/image.hpp"
#include "io/video.hpp"
#include "ops/elementwise.hpp"

namespace vinf::pipeline {

VideoResult write_video_outputs(const GenerateSpec& o, job::Job& job, const model::VaeDecoder& vae,
                                const Tensor& latents, std::int64_t frames, const std::string& out_dir) {
  const mpi::Session& mpi = job.session();
  const mpi::ProcessGrid& grid = job.grid();
  Runtime& rt = job.runtime();
  VideoResult result;
  const model::VaeConfig& vc = vae.config();
  const std::int64_t nf = latents.size(2), ch = latents.size(1), lh = latents.size(3), lw = latents.size(4);
  const std::int64_t height = lh * vc.upscale(), width = lw * vc.upscale(), frame_bytes = height * width * 3;
  const int clips = grid.clip_size();
  ExecContext& ctx = rt.ctx();

  // This clip's frames as RGB bytes (branch 1 and tensor ranks other than the first hold the same
  // latents and decode nothing).
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::uint8_t> mine;
  const bool decodes = grid.cfg_index() == 0 && grid.tensor_index() == 0;
  if (decodes) {
    mine.resize(static_cast<std::size_t>(nf * frame_bytes));
    OwnedTensor z = rt.arena().empty(DType::f32, {nf, ch, lh, lw});
    ops::copy(ctx, latents.permute({0, 2, 1, 3, 4}), z.view().reshape({1, nf, ch, lh, lw}));
    ops::scale(ctx, z, 1.f / vc.scaling_factor, z);
    constexpr std::int64_t kFramesPerCall = 4;
    std::vector<float> host(static_cast<std::size_t>(kFramesPerCall * vc.out_channels * height * width));
    for (std::int64_t f0 = 0; f0 < nf; f0 += kFramesPerCall) {
      const std::int64_t k = std::min(kFramesPerCall, nf - f0);
      const Shape shape{k, vc.out_channels, height, width};
      OwnedTensor images = rt.arena().empty(DType::f32, shape);
      vae.decode(ctx, z.slice(0, f0, k), images, kFramesPerCall, o.vae_tile);
      ops::copy(ctx, images, Tensor::wrap(host.data(), DType::f32, Device::cpu(), shape));
      rt.synchronize();
      for (std::int64_t f = 0; f < k; ++f)
        io::to_rgb8(host.data() + f * vc.out_channels * height * width, height, width,
                    mine.data() + (f0 + f) * frame_bytes);
    }
  }
  result.decode_seconds = mpi.max(seconds_since(t0));

  // Rank 0 writes the frames in video order as they arrive; the others send theirs.
  t0 = std::chrono::steady_clock::now();
  std::string error;
  if (mpi.rank() == 0) {
    io::FrameWriter writer(out_dir, frames, width, height, {o.video, o.png, o.output_fps, o.ffmpeg});
    std::vector<std::uint8_t> received(static_cast<std::size_t>(frame_bytes));
    for (int c = 0; c < clips; ++c) {
      const infinity::FrameRange range = infinity::clip_frames(frames, clips, c);
      for (std::int64_t f = 0; f < range.count; ++f) {
        const std::uint8_t* rgb = mine.data() + f * frame_bytes;
        if (c != 0) {
          mpi.receive(received.data(), static_cast<std::size_t>(frame_bytes), grid.world_rank(0, c, 0));
          rgb = received.data();
        }
        writer.add(range.first + f, rgb);
      }
    }
    error = writer.finish();
    result.files = writer.files();
  } else if (decodes) {
    for (std::int64_t f = 0; f < nf; ++f)
      mpi.send(mine.data() + f * frame_bytes, static_cast<std::size_t>(frame_bytes), 0);
  }
  mpi.broadcast(error);
  if (!error.empty()) throw Error(error + " (latents.h5 is written and complete)");
  result.write_seconds = mpi.max(seconds_since(t0));
  return result;
}

}  // namespace vinf::pipeline
