// `vinf forward` on a Wan2.1 transformer (design.md §5.1): one call per timestep of the inputs'
// `timesteps` (F32), written as noise_pred.t<i> by index. On one rank, or with --vi.mode exact on
// N ranks: the latent frames split over them (infinity::WanExactAttention), rank 0 writing all.
#pragma once

#include <string>

#include "infinity/config.hpp"
#include "job/job.hpp"

namespace vinf::app {

struct WanForwardRequest {
  std::string model_dir, inputs_path, out_path, dump;
  job::JobPlan plan;
  bool ignore_unexpected = false;
  // Options of the UNet's layouts, refused for Wan in this version.
  int cfg = 1, tensor = 1, emulate = 0;
  bool vi_given = false;  // a --vi.* setting other than the mode
  infinity::Config vi;    // its mode off unless --vi.mode was given
};

int forward_wan(const WanForwardRequest& r);

}  // namespace vinf::app
