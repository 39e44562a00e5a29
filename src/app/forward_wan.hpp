// `vinf forward` on a Wan2.1 transformer (design.md §5.1): one call per timestep of the inputs'
// `timesteps` (F32), written as noise_pred.t<i> by index. One rank for now.
#pragma once

#include <string>

#include "job/job.hpp"

namespace vinf::app {

struct WanForwardRequest {
  std::string model_dir, inputs_path, out_path, dump;
  job::JobPlan plan;
  bool ignore_unexpected = false;
  // Options of the UNet's layouts, refused for Wan in this version when they ask for more than one
  // rank's work.
  int cfg = 1, tensor = 1, emulate = 0;
  bool vi_given = false;
};

int forward_wan(const WanForwardRequest& r);

}  // namespace vinf::app
