// What Video-Infinity's temporal context (context.cpp, exact.cpp) costs one rank of a clip group
// per temporal module, without a communicator: the global frames it gathers and the halo frames it
// receives (planned as the context plans them), the buffers it holds while they travel, and the
// bytes its collectives count. model::unet_footprint sums them over the UNet's temporal modules.
#pragma once

#include <cstdint>
#include <vector>

#include "infinity/config.hpp"
#include "model/footprint.hpp"

namespace vinf::infinity {

class ExchangeCost final : public model::TemporalCost {
 public:
  // Clip `clip` of frames_per_clip.size() clips of these frames; the config passed
  // check_partition (equal clips but in exact mode) and its mode is not off.
  ExchangeCost(const Config& c, std::vector<std::int64_t> frames_per_clip, int clip);

  model::TemporalBytes attention(std::int64_t rows, std::int64_t frames, std::int64_t x_width, std::int64_t inner,
                                 std::size_t elt, bool stacked = false) const override;
  std::int64_t conv_halo_frames() const override { return conv_left_ + conv_right_; }
  model::TemporalBytes conv_halo(double frame_bytes) const override;
  double norm_received(std::int64_t batch, int groups) const override;

  // Per sequence of one attention call: global frames received in round 1 and halo frames
  // received from the neighbours (rounds 2 and 3), each carrying x (--vi.halo x) or K and V.
  std::int64_t global_frames_received() const { return gathered_ - mine_; }
  std::int64_t halo_frames_received() const { return halo_received_; }

 private:
  void plan_globals();
  void plan_halos();
  model::TemporalBytes exact_attention(std::int64_t rows, std::int64_t x_width, std::int64_t inner,
                                       std::size_t elt) const;

  Config c_;
  std::vector<std::int64_t> frames_;
  int clip_ = 0, clips_ = 1;
  std::int64_t f_ = 0, total_ = 0;
  bool has_left_ = false, has_right_ = false;
  std::vector<std::int64_t> kept_;      // the global frames every query attends to (video indices)
  std::int64_t mine_ = 0, gathered_ = 0;  // global frames this rank sends, and all ranks together
  std::int64_t halo_keys_ = 0;          // halo frames in the padded keys (both sides)
  std::int64_t halo_sent_ = 0, halo_received_ = 0;
  std::int64_t conv_left_ = 0, conv_right_ = 0, conv_width_ = 0;
};

}  // namespace vinf::infinity
