// SkyReels-V2's diffusion forcing as its pipeline runs it: the video in windows of base latent
// frames, each window after the first starting from the clean last frames of the video so far (its
// prefix), one transformer call per row of the window's timestep matrix (every frame at its own
// noise level; the prefix at timestep 0, or noised to addnoise_condition in the model's input
// only), guidance, then each frame advanced by its own flow solver (its own multistep memory) where
// the row's update mask says; the window's new frames join the video.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "model/wan_transformer.hpp"
#include "pipeline/guidance.hpp"
#include "sampling/flow_scheduler.hpp"

namespace vinf {
class Runtime;
}
namespace vinf::mpi {
class Communicator;
}

namespace vinf::pipeline {

// The options in latent frames (the reference's video frames converted: (n - 1) / 4 + 1).
struct DfSettings {
  std::int64_t base = 0;      // frames per window
  std::int64_t overlap = 0;   // frames a window shares with the video before it (0: one window)
  std::int64_t block = 1;     // frames per causal block
  int ar_step = 0;            // rows a block lags the one before (0: synchronous)
  double addnoise = 0;        // the prefix's noise level in the model's input (0: clean)
  int fps = 24;               // the fps embedding's frame rate
};

// The run's random draws: each window's starting noise and, with addnoise, each row's noise of the
// prefix. Given in a file (the reference's keys window<k>.noise and window<k>.addnoise.row<i>), or
// the seed's, keyed by the video's latent frames (the same on any ranks).
struct DfDraws {
  std::string file;  // --latents-init
  std::uint64_t seed = 0;
};

struct DfDenoise {
  const model::WanTransformer& transformer;
  const sampling::FlowScheduler& scheduler;
  Tensor prompt, negative;  // [1, L, text_dim] on the device
  float guidance = 6.f;
  mpi::Communicator* cfg_group = nullptr;  // --parallel.cfg 2: the pair of branch ranks
  int cfg_index = 0;                       // this rank's branch there (0 the negative prompt)
  DfSettings settings;
  DfDraws draws;
  // After each row: the window, the row, the window's rows.
  std::function<void(std::size_t window, std::size_t row, std::size_t rows)> progress = nullptr;
  // For tests and dumps, after each row: "model_input" (the first sample of the model's batch),
  // "timesteps" (f32 [F]) and "latents" (the window's after the row's updates), [1, C, F, h, w].
  std::function<void(std::size_t window, std::size_t row, const char* what, const Tensor& value)> probe = nullptr;
};

// The whole video into `video` [1, C, latent frames, h, w] (f32 on the device). Throws
// vinf::InputError for draws missing from the file.
void df_denoise(Runtime& rt, const DfDenoise& d, const Tensor& video);

}  // namespace vinf::pipeline
