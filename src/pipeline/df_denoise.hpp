// SkyReels-V2's diffusion forcing as its pipeline runs it: the video in windows of base latent
// frames, each window after the first starting from the clean last frames of the video so far (its
// prefix), one transformer call per row of the window's timestep matrix (every frame at its own
// noise level; the prefix at timestep 0, or noised to addnoise_condition in the model's input
// only), guidance, then each frame advanced by its own flow solver (its own multistep memory) where
// the row's update mask says; the window's new frames join the video.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/wan_transformer.hpp"
#include "pipeline/guidance.hpp"
#include "sampling/diffusion_forcing.hpp"
#include "sampling/flow_scheduler.hpp"

namespace vinf {
class Runtime;
}
namespace vinf::mpi {
class Communicator;
}
namespace vinf::io {
class SafetensorsFile;
}

namespace vinf::pipeline {

// The options in latent frames (the reference's video frames converted: (n - 1) / 4 + 1).
struct DfSettings {
  std::int64_t base = 0;  // frames per window
  std::int64_t overlap = 0;  // frames a window shares with the video before it (0: one window)
  std::int64_t block = 1;  // frames per causal block
  int ar_step = 0;  // rows a block lags the one before (0: synchronous)
  double addnoise = 0;  // the prefix's noise level in the model's input (0: clean)
  int fps = 24;  // the fps embedding's frame rate
  // Over ranks, bands of whole causal blocks per rank (infinity::WanBandAttention) instead of exact
  // mode's share of the frames (infinity::WanExactAttention).
  bool bands = false;
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
  int cfg_index = 0;  // this rank's branch there (0 the negative prompt)
  DfSettings settings;
  DfDraws draws;
  // Exact mode: the ranks each model call's frames are split over (infinity::clip_frames of the
  // window; the self-attention sees every rank's tokens, the causal blocks respected), null for
  // this rank alone. Every rank holds the whole window and advances every frame alike.
  mpi::Communicator* clip_group = nullptr;
  // A finished window's new frames: the video's latent frames [first, first + n), [1, C, n, h, w].
  std::function<void(std::int64_t first, const Tensor& frames)> emit = nullptr;
  // After each row: the window, the row, the window's rows.
  std::function<void(std::size_t window, std::size_t row, std::size_t rows)> progress = nullptr;
  // For tests and dumps, after each row: "model_input" (the first sample of the model's batch),
  // "timesteps" (f32 [F]) and "latents" (the window's after the row's updates), [1, C, F, h, w].
  std::function<void(std::size_t window, std::size_t row, const char* what, const Tensor& value)> probe = nullptr;
};

// The run's rows one at a time: every window's rows in order are the run's steps, so that a stop
// or a checkpoint can fall between any two of them. The memory it holds is one window's (its
// latents, every frame's solver and the model call's buffers), whatever the video's length: a
// window's new frames leave through DfDenoise::emit as the window ends.
class DfStepper {
 public:
  // video: the whole video's latent shape [1, C, latent frames, h, w].
  DfStepper(Runtime& rt, const DfDenoise& d, const Shape& video);
  ~DfStepper();
  DfStepper(const DfStepper&) = delete;
  DfStepper& operator=(const DfStepper&) = delete;
  int rows() const;
  int rows_done() const { return done_; }
  // Row i of the run (i == rows_done()). Throws vinf::InputError for draws missing from the file.
  void step(int i);
  // The window of row i, its rows, and the video frames final once `done` rows are.
  std::size_t window_of(int i) const;
  std::size_t window_rows(std::size_t k) const;
  std::int64_t frames_final(int done) const;
  // What a checkpoint keeps after rows_done() rows, each [1, C, base, h, w] f32 on the device (the
  // window's frames first, zeros after): "latents", then each frame's solver memories by name.
  std::vector<std::pair<std::string, Tensor>> state();
  // Their names in that order, and their shape, without copying anything.
  static std::vector<std::string> state_names();
  Shape state_shape() const { return lat_.shape; }
  // The fault hook's NaN in the window's latents (every frame's).
  void spoil();
  // Continues after `done` rows from copies of state()'s tensors, in its order.
  void restore(int done, const std::vector<Tensor>& state);

 private:
  struct Window;
  void begin_window(std::size_t k, bool from_noise);
  void run_row(std::size_t r);
  Runtime& rt_;
  const DfDenoise& d_;
  Shape video_;
  std::vector<sampling::DfWindow> windows_;
  std::map<std::pair<std::int64_t, std::int64_t>, sampling::DfSchedule> distinct_;  // by (frames, prefix)
  std::vector<const sampling::DfSchedule*> schedules_;  // each window's
  std::vector<int> first_row_;  // each window's first row in the run
  std::unique_ptr<io::SafetensorsFile> file_;
  Guidance guidance_;
  std::unique_ptr<Window> w_;
  OwnedTensor lat_, carry_, text_;
  std::vector<OwnedTensor> memories_;  // state()'s
  int done_ = 0;
};

// Each rank's frames of a window of `frames` over `ranks`: shared evenly (block 0), or in whole
// causal blocks of `block` frames (bands).
std::vector<std::int64_t> df_rank_frames(std::int64_t frames, int ranks, std::int64_t block);

// The whole video into `video` [1, C, latent frames, h, w] (f32 on the device): every row of a
// DfStepper, the windows' frames emitted into it. Throws vinf::InputError for draws missing from the
// file.
void df_denoise(Runtime& rt, const DfDenoise& d, const Tensor& video);

}  // namespace vinf::pipeline
