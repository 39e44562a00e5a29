// A Wan video written as it is made, in constant memory: the causal VAE over the latent frames in
// order, a few at a time (its memory carried from one call to the next), and a stream that takes
// each final part of the video as it comes (a diffusion-forcing window's new frames): into
// latents.h5 (written under latents.h5.partial, flushed per part) and, with a VAE, decoded into
// video.mp4, contact.png and the PNG frames.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.hpp"
#include "io/video.hpp"
#include "model/wan_vae.hpp"

namespace vinf {
class Runtime;
}

namespace vinf::pipeline {

// The VAE's decoding of one video's latent frames, in video order over any number of calls.
class WanFrameDecoder {
 public:
  WanFrameDecoder(Runtime& rt, const model::WanVae& vae, std::int64_t tile) : rt_(rt), vae_(vae), tile_(tile) {}
  // latents [1, C, n, h, w] f32 on rt's device, the video's latent frames [first, first + n) (first
  // where the last call ended): their frames, as the reference exports them (clamp(x / 2 + 0.5) x
  // 255, truncated), to `frame` one at a time as height x width x 3 bytes, 4 latent frames a
  // decoder call.
  void decode(const Tensor& latents, std::int64_t first, const std::function<void(const std::uint8_t*)>& frame);
  model::WanVae::Memory& memory() { return memory_; }

 private:
  Runtime& rt_;
  const model::WanVae& vae_;
  std::int64_t tile_;
  model::WanVae::Memory memory_;
  std::vector<std::uint8_t> rgb_;
};

class WanVideoStream {
 public:
  struct Settings {
    std::string out_dir;
    io::RunStamp stamp;
    Shape full;  // the video's latents [F, C, h, w]
    std::string vae_dir;  // "" for latents.h5 alone
    io::FrameWriter::Settings frames;
    std::int64_t tile = 0;
  };
  // With `resume_frames` > 0 the run continues: latents.h5.partial must hold that many final frames
  // (io::LatentsStream), which are decoded again into new video files (the video files of the
  // start before are not kept).
  WanVideoStream(Runtime& rt, const Settings& s, std::int64_t resume_frames);
  ~WanVideoStream();
  // The video's latent frames [first, first + n), latents [1, C, n, h, w] f32 on rt's device; first
  // is where the last call ended.
  void append(const Tensor& latents, std::int64_t first);
  std::int64_t frames() const { return latents_.frames(); }
  // latents.h5 with `boundaries`, the video's files; the files written and the first writer error
  // ("" when none). Seconds spent decoding and writing so far.
  struct Finished {
    std::vector<std::string> files;
    std::string error;
  };
  Finished finish(const std::vector<std::int64_t>& boundaries);
  double seconds() const { return seconds_; }

 private:
  void decode(const Tensor& latents, std::int64_t first);
  Runtime& rt_;
  Settings s_;
  io::LatentsStream latents_;
  std::unique_ptr<model::WanVae> vae_;
  std::unique_ptr<WanFrameDecoder> decoder_;
  std::unique_ptr<io::FrameWriter> writer_;
  std::int64_t decoded_ = 0, video_frame_ = 0;  // latent frames decoded, video frames written
  double seconds_ = 0;
};

}  // namespace vinf::pipeline
