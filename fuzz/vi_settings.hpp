// What an accepted set of Video-Infinity settings must hold, whichever way it was given: numbers a
// run can use (no infinity or NaN in a scale or a bias).
#pragma once

#include <cmath>

#include "infinity/config.hpp"

namespace vinf::fuzz {

inline bool usable(const infinity::Config& c) {
  for (float v : {c.attn_scale, c.local_phase.local_bias, c.local_phase.global_bias, c.global_phase.local_bias,
                  c.global_phase.global_bias})
    if (!std::isfinite(v)) return false;
  return c.local_frames >= 0 && c.global_frames >= 0 && c.conv_halo >= 0 && c.attn_scale > 0;
}

}  // namespace vinf::fuzz
