#include "infinity/wan_windows.hpp"

#include <algorithm>
#include <cmath>

#include "core/arena.hpp"
#include "core/error.hpp"
#include "infinity/context.hpp"
#include "ops/attention.hpp"
#include "ops/elementwise.hpp"

namespace vinf::infinity {

namespace {

// Frame indices floor(k T / G), k < G: the global frames of a video of T frames.
std::vector<std::int64_t> spread_frames(std::int64_t g, std::int64_t total) {
  std::vector<std::int64_t> v;
  for (std::int64_t k = 0; k < g; ++k) v.push_back(k * total / g);
  return v;
}

// The rank whose frames hold video frame `frame`.
int owner_of(const std::vector<std::int64_t>& first, std::int64_t frame) {
  const auto it = std::upper_bound(first.begin(), first.end(), frame);
  return static_cast<int>(it - first.begin()) - 1;
}

}  // namespace

void check_wan_windows(const Config& c, std::int64_t frames, int clips) {
  const std::int64_t fewest = frames / clips;  // clip_frames's smallest share
  VINF_INPUT_CHECK(clips == 1 || c.local_frames <= fewest, "--vi.local-frames ", c.local_frames, " is larger than the ",
                   fewest, " latent frame(s) the smallest rank holds (", frames, " latent frames over ", clips,
                   " ranks): a rank's window reaches its neighbours' frames only; use at most ", fewest,
                   ", or fewer ranks");
  VINF_INPUT_CHECK(c.global_frames <= frames, "--vi.global-frames ", c.global_frames, " is larger than the video (",
                   frames, " latent frames); use at most ", frames);
}

WanWindowAttention::WanWindowAttention(const Config& config, mpi::Communicator* comm, std::vector<std::int64_t> frames,
                                       std::int64_t tokens_per_frame)
    : c_(config), comm_(comm), frames_(std::move(frames)), s_(tokens_per_frame) {
  if (comm_ != nullptr) {
    rank_ = comm_->rank();
    size_ = comm_->size();
  }
  VINF_CHECK(static_cast<int>(frames_.size()) == size_, "WanWindowAttention: ", frames_.size(),
             " frame counts for a group of ", size_);
  VINF_CHECK(s_ > 0 && c_.local_frames >= 0 && c_.global_frames >= 0, "WanWindowAttention: bad shape or settings");
  for (std::int64_t n : frames_) {
    VINF_CHECK(n > 0 && (size_ == 1 || n >= c_.local_frames), "WanWindowAttention: a rank of ", n,
               " frames cannot hold a halo of ", c_.local_frames, " (unchecked settings)");
    first_.push_back(total_);
    total_ += n;
  }
  VINF_CHECK(c_.global_frames <= total_, "WanWindowAttention: more global frames than frames (unchecked settings)");
  globals_ = spread_frames(c_.global_frames, total_);
  owned_.assign(frames_.size(), 0);
  for (std::int64_t g : globals_) ++owned_[static_cast<std::size_t>(owner_of(first_, g))];
}

std::int64_t WanWindowAttention::received_elements(const Config& config, const std::vector<std::int64_t>& frames,
                                                   int r, std::int64_t tokens_per_frame, std::int64_t rows,
                                                   std::int64_t head_dim) {
  const int size = static_cast<int>(frames.size());
  if (size == 1) return 0;
  std::int64_t total = 0;
  for (std::int64_t n : frames) total += n;
  std::int64_t mine = 0, first = 0;
  for (int k = 0; k < r; ++k) first += frames[static_cast<std::size_t>(k)];
  for (std::int64_t g : spread_frames(config.global_frames, total))
    mine += g >= first && g < first + frames[static_cast<std::size_t>(r)];
  const std::int64_t halo = config.local_frames * ((r > 0) + (r < size - 1));
  return 2 * rows * tokens_per_frame * head_dim * (halo + config.global_frames - mine);
}

void WanWindowAttention::attend(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                const ops::AttentionParams& p) {
  const std::int64_t B = q.size(0), H = q.size(1), d = q.size(3), f = frames_[static_cast<std::size_t>(rank_)];
  const std::int64_t first = first_[static_cast<std::size_t>(rank_)], pw = c_.local_frames, S = s_;
  const auto G = static_cast<std::int64_t>(globals_.size());
  VINF_CHECK(q.size(2) == f * S && k.size(2) == f * S && v.size(2) == f * S, "WanWindowAttention: rank ", rank_,
             " holds ", q.size(2), " tokens, not the ", f * S, " of its ", f, " frames");
  const DType dt = q.dtype;
  const bool has_left = rank_ > 0, has_right = rank_ < size_ - 1;
  const std::int64_t left = has_left ? pw : 0, right = has_right ? pw : 0, padded = left + f + right;
  // Frames [a, a + n) of this rank's K and V as (2, B, H, n S, d): what a neighbour or the
  // all-gather takes, one piece.
  auto pack = [&](const Tensor& into, std::int64_t a, std::int64_t n) {
    ops::copy(ctx, k.slice(2, a * S, n * S), into.select(0, 0));
    ops::copy(ctx, v.slice(2, a * S, n * S), into.select(0, 1));
  };
  // Rounds 1 (this rank's global frames to all) and 2, 3 (p frames with each neighbour), started.
  // The buffers first: the collectives, declared after them, are settled before they go.
  std::vector<OwnedTensor> held;
  OwnedTensor gathered;  // (G, 2, B, H, S, d), in frame order
  OwnedTensor from_left, from_right;
  std::vector<mpi::Pending> rounds;
  std::vector<std::int64_t> mine;
  for (std::int64_t g : globals_)
    if (g >= first && g < first + f) mine.push_back(g - first);
  if (size_ > 1 && G > 0) {
    OwnedTensor sent = ctx.arena->empty(dt, {static_cast<std::int64_t>(mine.size()), 2, B, H, S, d});
    for (std::size_t i = 0; i < mine.size(); ++i) pack(sent.view().select(0, static_cast<std::int64_t>(i)), mine[i], 1);
    gathered = ctx.arena->empty(dt, {G, 2, B, H, S, d});
    std::vector<std::int64_t> counts;
    for (std::int64_t n : owned_) counts.push_back(n * 2 * B * H * S * d);
    rounds.push_back(comm_->start_all_gather_v(ctx, sent, gathered, counts));
    held.push_back(std::move(sent));
  }
  if (size_ > 1 && pw > 0) {
    std::vector<mpi::Transfer> to_left, to_right;
    if (has_left) {
      held.push_back(ctx.arena->empty(dt, {2, B, H, pw * S, d}));
      pack(held.back(), 0, pw);
      from_left = ctx.arena->empty(dt, held.back().shape);
      to_left.push_back({rank_ - 1, held.back(), from_left});
    }
    if (has_right) {
      held.push_back(ctx.arena->empty(dt, {2, B, H, pw * S, d}));
      pack(held.back(), f - pw, pw);
      from_right = ctx.arena->empty(dt, held.back().shape);
      to_right.push_back({rank_ + 1, held.back(), from_right});
    }
    for (mpi::Pending& r : start_neighbour_exchange(ctx, *comm_, c_.exchange, to_left, to_right))
      rounds.push_back(std::move(r));
  }
  // While they travel: the own frames' keys and values into the padded ones, the own global
  // frames' into theirs (all of them on one rank).
  OwnedTensor kp = ctx.arena->empty(dt, {B, H, padded * S, d}), vp = ctx.arena->empty(dt, kp.shape);
  ops::copy(ctx, k, kp.view().slice(2, left * S, f * S));
  ops::copy(ctx, v, vp.view().slice(2, left * S, f * S));
  OwnedTensor kg, vg;
  if (G > 0) {
    kg = ctx.arena->empty(dt, {B, H, G * S, d});
    vg = ctx.arena->empty(dt, kg.shape);
    for (std::int64_t j = 0; j < G; ++j) {
      const std::int64_t g = globals_[static_cast<std::size_t>(j)];
      if (g < first || g >= first + f) continue;
      ops::copy(ctx, k.slice(2, (g - first) * S, S), kg.view().slice(2, j * S, S));
      ops::copy(ctx, v.slice(2, (g - first) * S, S), vg.view().slice(2, j * S, S));
    }
  }
  for (mpi::Pending& r : rounds) comm_->finish(r);
  held.clear();
  if (gathered.numel() > 0) {
    for (std::int64_t j = 0; j < G; ++j) {
      const std::int64_t g = globals_[static_cast<std::size_t>(j)];
      if (g >= first && g < first + f) continue;
      ops::copy(ctx, gathered.view().select(0, j).select(0, 0), kg.view().slice(2, j * S, S));
      ops::copy(ctx, gathered.view().select(0, j).select(0, 1), vg.view().slice(2, j * S, S));
    }
  }
  if (has_left && left > 0) {
    ops::copy(ctx, from_left.view().select(0, 0), kp.view().slice(2, 0, left * S));
    ops::copy(ctx, from_left.view().select(0, 1), vp.view().slice(2, 0, left * S));
  }
  if (has_right && right > 0) {
    ops::copy(ctx, from_right.view().select(0, 0), kp.view().slice(2, (left + f) * S, right * S));
    ops::copy(ctx, from_right.view().select(0, 1), vp.view().slice(2, (left + f) * S, right * S));
  }
  // Each own frame's queries over its window of the padded keys and the global keys.
  ops::AttentionParams ap = p;
  ap.scale = p.scale * c_.attn_scale;
  ap.band_lo = -ops::AttentionParams::kUnbounded;
  ap.band_hi = ops::AttentionParams::kUnbounded;
  c_.biases(static_cast<std::int64_t>(std::floor(t_)), ap.local_bias, ap.global_bias);
  ap.token_count_log_base = c_.token_num_scale ? 16.f : 0.f;
  const std::int64_t padded_first = first - left;  // video index of the padded keys' first frame
  for (std::int64_t i = 0; i < f; ++i) {
    const std::int64_t g = first + i, lo = std::max<std::int64_t>(g - pw, 0), hi = std::min(g + pw, total_ - 1);
    const std::int64_t at = (lo - padded_first) * S, n = (hi - lo + 1) * S;
    const Tensor kw = kp.view().slice(2, at, n), vw = vp.view().slice(2, at, n);
    const Tensor kgv = G > 0 ? kg.view() : Tensor{}, vgv = G > 0 ? vg.view() : Tensor{};
    ops::attention(ctx, q.slice(2, i * S, S), kw, vw, G > 0 ? &kgv : nullptr, G > 0 ? &vgv : nullptr,
                   out.slice(2, i * S, S), ap);
  }
}

}  // namespace vinf::infinity
