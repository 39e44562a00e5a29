// The video outputs of `vinf generate`: every clip rank decodes its own frames with the VAE (no
// communication) and streams them, in rank order, to rank 0, which writes video.mp4 through
// ffmpeg, the optional PNG frames and contact.png. No process holds more than one clip's frames.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/generate_spec.hpp"
#include "model/vae.hpp"
#include "job/job.hpp"

namespace vinf::pipeline {

struct VideoResult {
  double decode_seconds = 0, write_seconds = 0;
  std::vector<std::string> files;  // relative to the output directory
};

// Collective over the world. latents: this rank's (1, C, F_clip, h, w) on rt's device. Throws the
// same vinf::Error on every rank when ffmpeg or a file failed (latents.h5 is written before).
VideoResult write_video_outputs(const GenerateSpec& o, job::Job& job, const model::VaeDecoder& vae,
                                const Tensor& latents, std::int64_t frames, const std::string& out_dir);

}  // namespace vinf::pipeline
