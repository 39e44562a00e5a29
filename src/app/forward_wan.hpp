// `vinf forward` on a Wan2.1 transformer (design.md §5.1): one call per timestep of the inputs'
// `timesteps` (F32), written as noise_pred.t<i> by index. On one rank, or on N ranks per guidance
// branch with the latent frames split over them, in exact mode (infinity::WanExactAttention) or
// with Video-Infinity's windows (infinity::WanWindowAttention); --parallel.cfg 2 splits the batch
// over rank pairs. Rank 0 writes all.
#pragma once

#include <string>

#include "infinity/config.hpp"
#include "job/job.hpp"
#include "job/profile_run.hpp"

namespace vinf::app {

struct WanForwardRequest {
  std::string model_dir, inputs_path, out_path, dump;
  std::string profile;  // --profile FILE (job/profile_run.hpp)
  job::JobPlan plan;
  bool ignore_unexpected = false;
  // --parallel.cfg (1 or 2); --parallel.tensor and --vi.emulate-clips, refused for Wan.
  int cfg = 1, tensor = 1, emulate = 0;
  bool vi_given = false;  // a --vi.* setting other than the mode
  infinity::Config vi;    // its mode off unless --vi.mode was given
};

int forward_wan(const WanForwardRequest& r);

}  // namespace vinf::app
