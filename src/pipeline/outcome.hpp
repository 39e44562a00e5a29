// How one video's run on a unit ended, and what a pipeline stage hands the next: what the job list
// and the commands learn from a run of either family.
#pragma once

#include <string>
#include <vector>

#include "io/checkpoint.hpp"

namespace vinf::pipeline {

// What a pipeline stage hands the next for one job: the latents and the solver's memory after
// `step` steps (this rank's frames, frame-major, as a checkpoint holds them), the text
// embeddings, and what the outputs report (where they go, the times so far).
struct StageState {
  std::string out_dir;
  int step = 0, first_step = 0;  // steps done; the step this job's run started from
  std::vector<float> latents, previous_x0;
  io::TextEmbeddings text;
  std::vector<double> step_seconds;  // the slowest rank's time of every step so far
  double denoise_seconds = 0, checkpoint_seconds = 0;
  std::string resumed_from;
};

enum class VideoEnd {
  complete,  // the outputs are written (the last stage)
  handed_on,  // this stage's steps are done: `handoff` holds the state for the next stage
  stopped,  // a stop signal ended it after a checkpoint
  finished_before  // its directory holds a finished run: nothing to do
};

struct VideoOutcome {
  VideoEnd end = VideoEnd::complete;
  int stop_signal = 0;
  std::string out_dir;
  StageState handoff;
};

}  // namespace vinf::pipeline
