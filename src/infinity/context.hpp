// Video-Infinity's temporal context (design.md §2): the UNet's temporal modules see, through it,
// the halo frames of the neighbouring clips, the global frames of the whole video, phase biases and
// GroupNorm statistics across clips. All communication goes through the clip group's communicator
// (MPI, NCCL, or threads when one process emulates N clips), in the three rounds of design.md §2
// or fused.
#pragma once

#include <cstdint>
#include <vector>

#include "infinity/config.hpp"
#include "model/temporal.hpp"
#include "mpi/communicator.hpp"

namespace vinf::infinity {

// Halo rounds 2 and 3 (design.md §2: pairs (0,1), (2,3), ... then (1,2), (3,4), ...), both posted
// at once, or one fused exchange: `to_left` with rank - 1, `to_right` with rank + 1 (empty where
// there is no neighbour). Every returned collective must be finished.
std::vector<mpi::Pending> start_neighbour_exchange(ExecContext& ctx, mpi::Communicator& comm, ExchangePattern pattern,
                                                   const std::vector<mpi::Transfer>& to_left,
                                                   const std::vector<mpi::Transfer>& to_right);

class Context final : public model::TemporalContext {
 public:
  // This rank holds clip comm.rank() of comm.size(), `clip_frames` frames each. The config must
  // have passed check_partition for clip_frames * comm.size() frames and a mode other than off.
  Context(const Config& config, mpi::Communicator& clip_group, std::int64_t clip_frames);
  // Clips of any sizes, frames_per_clip[k] frames on clip k (in video order): exact mode only,
  // the others take equal clips.
  Context(const Config& config, mpi::Communicator& clip_group, std::vector<std::int64_t> frames_per_clip);

  void begin_call(std::int64_t timestep) override { t_ = timestep; }
  void group_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                  const ops::GroupNormParams& p, model::Halo halo, const std::string& module) override;
  model::Halo conv_halo() const override { return conv_halo_; }
  void fill_conv_halo(ExecContext& ctx, const Tensor& padded, model::Halo halo, const std::string& module) override;
  void attention(ExecContext& ctx, const model::AttentionWeights& w, const Tensor& x, const Tensor& out,
                 const std::string& module) override;

  // The video frames (global indices) whose keys every frame attends to, in key order.
  const std::vector<std::int64_t>& global_frames() const { return global_frames_; }

 private:
  void plan_globals();  // global_frames_, my_globals_, counts_, gathered_ (compat and invariant)
  void plan_halos();    // left_plan_ and right_plan_, once the global frames are known
  // Halo rounds 2 and 3 (or one fused call), started: send `first` to the left neighbour and
  // `last` to the right one, receive into `left` / `right` (one tensor per carried array; empty
  // lists on the side without a neighbour). Every returned collective must be finished.
  std::vector<mpi::Pending> start_halos(ExecContext& ctx, const std::vector<Tensor>& first,
                                        const std::vector<Tensor>& last, const std::vector<Tensor>& left,
                                        const std::vector<Tensor>& right);

  // The steps of attention(), in order, on one call's shapes and buffers (AttentionCall, defined
  // in context.cpp); project_own_keys and progress_rounds serve the others.
  struct AttentionCall;
  void start_attention_rounds(ExecContext& ctx, AttentionCall& a);
  void project_own_frames(ExecContext& ctx, AttentionCall& a);
  void assemble_global_keys(ExecContext& ctx, AttentionCall& a);
  void place_halos(ExecContext& ctx, AttentionCall& a);
  void attend(ExecContext& ctx, AttentionCall& a, const Tensor& out);
  void project_own_keys(ExecContext& ctx, AttentionCall& a);
  void progress_rounds(AttentionCall& a);

  // Exact mode's attention (exact.cpp): an all-to-all from frames to rows (each rank gets every
  // frame of its share of the R sequences), full attention there, and an all-to-all back.
  void exact_attention(ExecContext& ctx, const model::AttentionWeights& w, const Tensor& x, const Tensor& out);
  struct ExactCall;
  void exact_scatter(ExecContext& ctx, ExactCall& a);
  void exact_attend(ExecContext& ctx, ExactCall& a);
  void exact_return(ExecContext& ctx, ExactCall& a, const Tensor& out);

  // One side's attention halo: the own boundary frames sent to that neighbour, and per received
  // halo position (in frame order) the global key that already holds the same frame, or -1 when
  // the frame travels. Only halo x takes frames from the global keys (x of a global frame is
  // gathered anyway); kv sends every halo frame, as the released code does.
  struct HaloPlan {
    std::vector<std::int64_t> send;  // local frame indices, ascending
    std::vector<std::int64_t> key;   // p entries
    std::int64_t received = 0;       // entries of `key` that are -1
  };

  Config c_;
  mpi::Communicator& comm_;
  std::vector<std::int64_t> frames_;  // per clip, in video order
  std::int64_t f_, first_ = 0, total_ = 0, t_ = 0;  // own frames, the first one's video index, all
  int rank_, size_;
  int conv_width_ = 0;  // frames of each neighbour's halo for the temporal convolutions
  model::Halo attn_halo_, conv_halo_;
  std::vector<std::int64_t> global_frames_;  // video frame indices, in key order (the first G kept)
  std::vector<std::int64_t> my_globals_;     // this rank's contributed local frame indices
  std::vector<std::int64_t> counts_;         // frames contributed per rank
  std::int64_t gathered_ = 0;                // frames gathered in all (>= global_frames_.size())
  HaloPlan left_plan_, right_plan_;          // with the left / right neighbour (where there is one)
};

}  // namespace vinf::infinity
