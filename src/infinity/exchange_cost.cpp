#include "infinity/exchange_cost.hpp"

#include <algorithm>
#include <limits>

#include "core/error.hpp"

namespace vinf::infinity {

namespace {

double bytes(double elements, std::size_t elt) { return model::arena_bytes(elements * static_cast<double>(elt)); }

}  // namespace

ExchangeCost::ExchangeCost(const Config& c, std::vector<std::int64_t> frames_per_clip, int clip)
    : c_(c), frames_(std::move(frames_per_clip)), clip_(clip), clips_(static_cast<int>(frames_.size())) {
  VINF_CHECK(c_.mode != Mode::off && clip_ >= 0 && clip_ < clips_, "ExchangeCost: clip ", clip_, " of ", clips_,
             " in mode ", mode_name(c_.mode));
  f_ = frames_[static_cast<std::size_t>(clip_)];
  for (std::int64_t n : frames_) total_ += n;
  has_left_ = clip_ > 0;
  has_right_ = clip_ < clips_ - 1;
  // The context's halo_for: compat pads both ends always, the other modes only towards a neighbour.
  conv_width_ = c_.mode == Mode::exact ? (clips_ > 1 ? kTemporalConvReach : 0) : c_.conv_halo;
  const bool compat = c_.mode == Mode::compat;
  conv_left_ = compat || has_left_ ? conv_width_ : 0;
  conv_right_ = compat || has_right_ ? conv_width_ : 0;
  if (c_.mode == Mode::exact) return;
  halo_keys_ = (compat || has_left_ ? c_.local_frames : 0) + (compat || has_right_ ? c_.local_frames : 0);
  plan_globals();
  plan_halos();
}

// Context::plan_globals: which frames travel in round 1 and how many keys they make.
void ExchangeCost::plan_globals() {
  const std::int64_t g = c_.global_frames, n = clips_;
  if (g == 0) return;
  if (c_.mode == Mode::compat) {
    // Frames 0, s, 2s, ... of every clip (only frame 0 when G < N), the first G kept.
    const std::int64_t share = g / n;
    const std::int64_t stride =
        share > 0 ? std::max<std::int64_t>(f_ / share, 1) : std::numeric_limits<std::int64_t>::max();
    mine_ = stride > f_ ? 1 : (f_ + stride - 1) / stride;
    gathered_ = mine_ * n;
    for (std::int64_t r = 0; r < n && static_cast<std::int64_t>(kept_.size()) < g; ++r)
      for (std::int64_t j = 0; j < mine_ && static_cast<std::int64_t>(kept_.size()) < g; ++j)
        kept_.push_back(r * f_ + j * stride);
    return;
  }
  // G frames spread uniformly over the video, each sent by the clip that holds it.
  for (std::int64_t k = 0; k < g; ++k) {
    const std::int64_t frame = k * total_ / g;
    kept_.push_back(frame);
    mine_ += frame / f_ == clip_;
  }
  gathered_ = g;
}

// Context::plan_halos: p frames each way, but with --vi.halo x a frame that is a global key
// already arrived in round 1 and does not travel again.
void ExchangeCost::plan_halos() {
  const std::int64_t p = c_.local_frames;
  auto travels = [&](std::int64_t frame) {
    return c_.halo != HaloData::x || std::find(kept_.begin(), kept_.end(), frame) == kept_.end();
  };
  const std::int64_t first = clip_ * f_;
  for (std::int64_t i = 0; i < p; ++i) {
    if (has_left_) {
      halo_sent_ += travels(first + i);
      halo_received_ += travels(first - p + i);
    }
    if (has_right_) {
      halo_sent_ += travels(first + f_ - p + i);
      halo_received_ += travels(first + f_ + i);
    }
  }
}

model::TemporalBytes ExchangeCost::attention(std::int64_t rows, std::int64_t frames, std::int64_t x_width,
                                             std::int64_t inner, std::size_t elt, bool stacked) const {
  (void)stacked;  // the contexts project Q, K and V one at a time
  if (c_.mode == Mode::exact) return exact_attention(rows, x_width, inner, elt);
  const auto r = static_cast<double>(rows);
  // What travels: x (one array of the input's width), or K and V (two of the shard's width).
  const double arrays = c_.halo == HaloData::x ? 1 : 2;
  const auto width = static_cast<double>(c_.halo == HaloData::x ? x_width : inner);
  const double kept = static_cast<double>(kept_.size()), in = static_cast<double>(inner);
  model::TemporalBytes b;
  // Q and one projection of the own frames; K and V over the padded clip and the global keys.
  b.buffers = 2 * bytes(r * static_cast<double>(frames) * in, elt) +
              2 * bytes(r * static_cast<double>(frames + halo_keys_) * in, elt) + 2 * bytes(r * kept * in, elt);
  if (gathered_ > 0)
    b.comm_buffers += arrays * (bytes(static_cast<double>(mine_) * r * width, elt) +
                                bytes(static_cast<double>(gathered_) * r * width, elt));
  b.comm_buffers += arrays * (bytes(static_cast<double>(halo_sent_) * r * width, elt) +
                              bytes(static_cast<double>(halo_received_) * r * width, elt));
  b.received = arrays * static_cast<double>(global_frames_received() + halo_received_) * r * width *
               static_cast<double>(elt);
  return b;
}

// Exact mode: an all-to-all from frames to sequences (every frame of rows R_k), full attention
// over the video there, and an all-to-all back.
model::TemporalBytes ExchangeCost::exact_attention(std::int64_t rows, std::int64_t x_width, std::int64_t inner,
                                                   std::size_t elt) const {
  const auto share = [&](int k) { return (k + 1) * rows / clips_ - k * rows / clips_; };
  const auto mine = static_cast<double>(share(clip_)), all = static_cast<double>(total_);
  const auto own = static_cast<double>(f_), d = static_cast<double>(x_width), in = static_cast<double>(inner);
  const double others = static_cast<double>(rows) - mine;
  model::TemporalBytes b;
  b.buffers = 4 * bytes(mine * all * in, elt) + bytes(mine * static_cast<double>(*std::max_element(frames_.begin(), frames_.end())) * in, elt);
  b.comm_buffers = bytes(others * own * d, elt) + bytes(mine * (all - own) * d, elt);
  b.received = (mine * (all - own) * d + others * own * in) * static_cast<double>(elt);
  b.full_frames = total_;
  return b;
}

// Context::fill_conv_halo: c frames to and from each neighbour.
model::TemporalBytes ExchangeCost::conv_halo(double frame_bytes) const {
  model::TemporalBytes b;
  const double sides = (has_left_ ? 1 : 0) + (has_right_ ? 1 : 0), piece = static_cast<double>(conv_width_) * frame_bytes;
  if (conv_width_ == 0 || sides == 0) return b;
  b.comm_buffers = 2 * sides * model::arena_bytes(piece);
  b.received = sides * piece;
  return b;
}

// Context::group_norm: whole-video statistics (invariant, exact) all-reduce batch x groups x 2
// doubles; compat with --vi.sync-groupnorm reduces the means and then the variances (batch x
// groups doubles each); plain compat keeps its own.
double ExchangeCost::norm_received(std::int64_t batch, int groups) const {
  if (clips_ == 1 || (c_.mode == Mode::compat && !c_.sync_groupnorm)) return 0;
  return static_cast<double>(batch * groups) * 2 * 8;
}

}  // namespace vinf::infinity
