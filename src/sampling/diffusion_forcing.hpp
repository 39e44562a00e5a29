// Diffusion forcing's schedule (SkyReels-V2): every frame carries its own noise level, frames are
// grouped in causal blocks, each block has a counter of the steps it has taken, and one row of the
// timestep matrix is one model call over the window. Synchronous with ar_step 0 (every block moves
// together); with ar_step > 0 a denoising wave in which each block lags the one before by ar_step
// rows. Prefix blocks (the overlap kept from the previous window) stay clean at timestep 0.
// And the windows a long video is cut into, as the reference pipeline cuts it.
#pragma once

#include <cstdint>
#include <vector>

namespace vinf::sampling {

struct DfSchedule {
  int steps = 0;               // S
  std::int64_t frames = 0;     // F (latent frames of the window)
  // Per row: each frame's counter (0: not started, 1..S: the step taken at this row or before,
  // S + 1: finished or prefix), its timestep T[counter] with T = [999, t_0 .. t_{S-1}, 0], and
  // whether the row advances it (the counter moved and is not S + 1).
  std::vector<std::vector<int>> counters;
  std::vector<std::vector<std::int64_t>> timesteps;
  std::vector<std::vector<bool>> update;
  std::size_t rows() const { return counters.size(); }
};

// The reference's generate_timestep_matrix: `timesteps` t_0 .. t_{S-1} of the flow scheduler,
// `prefix_frames` clean frames at the start, blocks of `block` frames (prefix_frames and frames are
// multiples of it), each block lagging the previous by `ar_step` rows.
DfSchedule df_schedule(std::int64_t frames, const std::vector<std::int64_t>& timesteps, std::int64_t prefix_frames,
                       int ar_step, std::int64_t block);

// A long video's windows in latent frames: L frames in windows of `base` that overlap the video so
// far by `overlap`; window k's first `prefix` frames are the last frames generated before it (the
// overlap cut to a multiple of the causal block), its frames after `overlap` are new.
struct DfWindow {
  std::int64_t first = 0;   // the window's first latent frame in the video
  std::int64_t frames = 0;  // its frames
  std::int64_t prefix = 0;  // the clean frames it starts with (0 for the first window)
  std::int64_t keep_from = 0;  // the frames from here on join the video (0, then overlap)
};
std::vector<DfWindow> df_windows(std::int64_t latent_frames, std::int64_t base, std::int64_t overlap,
                                 std::int64_t block);

}  // namespace vinf::sampling
