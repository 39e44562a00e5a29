// Video-Infinity's windows on a Wan2.1 transformer's joint attention (--vi.mode invariant): the
// tokens of latent frame f attend to the tokens of frames f - p .. f + p (clamped to the video) and
// to those of G global frames shared by every rank, floor(k T / G) for k < G of T frames, with
// the phase biases on the local and the global keys (design.md §2, counted in latent frames).
// Rotary positions are the frames' places in the whole video (model::WanFrames), so a video may
// be longer than the model was trained on; what a rank holds is its frames, p frames of each
// neighbour and the G global frames, whatever the video's length.
//
// The keys and values travel after the RMS norm and the rotary embedding: each rank sends its
// first and last p frames to its neighbours (design.md's rounds 2 and 3, or fused) and its global
// frames to every rank (round 1, an all-gather). Keys of a global frame inside a window are
// attended twice, as the UNet's global columns are. On one rank (no communicator, or a group of
// one) the same code is the one-process emulation of any number of ranks; a window that covers the
// video (p >= T - 1) with no global frames, attn-scale 1 and no token-count scale (the defaults)
// is the plain model's attention.
//
// Elements received per rank and block, in the activations' dtype: 2 B heads S d times (p for each
// neighbour + the global frames other ranks hold), S tokens per frame, d the head size.
#pragma once

#include <cstdint>
#include <vector>

#include "infinity/config.hpp"
#include "model/wan_transformer.hpp"
#include "mpi/communicator.hpp"

namespace vinf::infinity {

class WanWindowAttention final : public model::WanSelfAttention {
 public:
  // frames[r]: rank r's latent frames, in video order, the same list on every rank of comm (one
  // entry, and comm null or of size 1, for the whole video on this rank); tokens_per_frame: the
  // patches of a frame. The config must have passed check_wan_windows.
  WanWindowAttention(const Config& config, mpi::Communicator* comm, std::vector<std::int64_t> frames,
                     std::int64_t tokens_per_frame);

  void begin_call(double timestep) override { t_ = timestep; }
  void attend(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
              const ops::AttentionParams& p) override;

  // The video frames every frame also attends to, in key order.
  const std::vector<std::int64_t>& global_frames() const { return globals_; }
  // The elements rank r receives in one attend() over `rows` (sample, head) rows of head size d.
  static std::int64_t received_elements(const Config& config, const std::vector<std::int64_t>& frames, int r,
                                        std::int64_t tokens_per_frame, std::int64_t rows, std::int64_t head_dim);

 private:
  Config c_;
  mpi::Communicator* comm_;
  std::vector<std::int64_t> frames_, first_;  // per rank: frames, the first one's video index
  std::vector<std::int64_t> globals_;         // video frame indices, ascending
  std::vector<std::int64_t> owned_;           // global frames per rank
  std::int64_t s_, total_ = 0;
  int rank_ = 0, size_ = 1;
  double t_ = 0;
};

// Checks the windows against a Wan video of `frames` latent frames split as clip_frames does over
// `clips` ranks: p within every clip (a halo comes from the neighbour only), G within the video.
// Throws vinf::InputError naming the option.
void check_wan_windows(const Config& c, std::int64_t frames, int clips);

}  // namespace vinf::infinity
