// `vinf generate` on a Wan2.1 pipeline directory (model_index.json's WanPipeline: transformer/,
// text_encoder/ (UMT5), tokenizer/ (SentencePiece), scheduler/ (UniPC with flow sigmas), vae/):
// the prompt and the negative prompt through UMT5, the guided flow-matching loop from seeded or
// given (--latents-init) latents, checkpoints, latents.h5, the video and run.json; one rank or
// one per guidance branch, and job lists over replicas; the frames are the
// pipeline's num_frames (1 + 4k video frames, (frames - 1) / 4 + 1 latent frames).
#pragma once

#include <memory>

#include "job/job.hpp"
#include "pipeline/generate_spec.hpp"
#include "pipeline/outcome.hpp"

namespace vinf::pipeline {

class VideoRun;

// The options are ones the Wan path runs (InputError naming the option otherwise).
void check_wan_plan(const GenerateSpec& o);

// The world's size fits a Wan video (its ranks: one, or two with --parallel.cfg 2) and the options
// are ones the Wan path runs; InputError naming the option otherwise. Before MPI starts its work.
void check_wan_job(const GenerateSpec& o, int world);

// One Wan video on the job's unit (a single run's world, or a replica taking jobs from a list):
// collective over job.session(). Throws vinf::InputError on every rank of the unit for bad input.
std::unique_ptr<VideoRun> start_wan_video(const GenerateSpec& o, job::Job& job);

}  // namespace vinf::pipeline
