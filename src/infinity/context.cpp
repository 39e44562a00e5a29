#include "infinity/context.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "core/arena.hpp"
#include "core/error.hpp"
#include "ops/attention.hpp"
#include "ops/elementwise.hpp"
#include "ops/gemm.hpp"
#include "ops/norm.hpp"

namespace vinf::infinity {

namespace {

// Halo widths: compat pads both ends always (zero frames where there is no neighbour); invariant
// has no halo at the video's ends, exactly as the unpartitioned model.
model::Halo halo_for(Mode mode, int width, int rank, int size) {
  if (mode == Mode::compat) return {width, width};
  return {rank > 0 ? width : 0, rank < size - 1 ? width : 0};
}

OwnedTensor contiguous_copy(ExecContext& ctx, const Tensor& t) {
  OwnedTensor c = ctx.arena->empty(t.dtype, t.shape);
  ops::copy(ctx, t, c);
  return c;
}

}  // namespace

Context::Context(const Config& config, mpi::Communicator& clip_group, std::int64_t clip_frames)
    : c_(config), comm_(clip_group), f_(clip_frames), rank_(clip_group.rank()), size_(clip_group.size()) {
  VINF_CHECK(c_.mode != Mode::off, "infinity::Context: mode off runs the plain temporal context");
  VINF_CHECK(c_.local_frames <= f_ && c_.conv_halo <= f_, "infinity::Context: halo wider than the clip (unchecked config)");
  attn_halo_ = halo_for(c_.mode, c_.local_frames, rank_, size_);
  conv_halo_ = halo_for(c_.mode, c_.conv_halo, rank_, size_);
  const std::int64_t g = c_.global_frames, n = size_, total = f_ * n;
  counts_.assign(static_cast<std::size_t>(n), 0);
  if (g == 0) {
    plan_halos();
    return;
  }
  if (c_.mode == Mode::compat) {
    // Each rank shares frames 0, s, 2s, ... of its clip, s = F / (G / N) (only frame 0 when
    // G < N); the gathered list, in rank order, is cut to its first G.
    const std::int64_t share = g / n;
    const std::int64_t stride = share > 0 ? std::max<std::int64_t>(f_ / share, 1) : std::numeric_limits<std::int64_t>::max();
    for (std::int64_t j = 0; j < f_; j += stride) {
      my_globals_.push_back(j);
      if (stride > f_) break;
    }
    const auto m = static_cast<std::int64_t>(my_globals_.size());
    for (std::int64_t r = 0; r < n; ++r) {
      counts_[static_cast<std::size_t>(r)] = m;
      for (std::int64_t j : my_globals_) global_frames_.push_back(r * f_ + j);
    }
    gathered_ = m * n;
    global_frames_.resize(static_cast<std::size_t>(std::min(g, gathered_)));
  } else {
    // G frames spread uniformly over the video, each sent by the rank that holds it.
    for (std::int64_t k = 0; k < g; ++k) {
      const std::int64_t frame = k * total / g, owner = frame / f_;
      global_frames_.push_back(frame);
      ++counts_[static_cast<std::size_t>(owner)];
      if (owner == rank_) my_globals_.push_back(frame - rank_ * f_);
    }
    gathered_ = g;
  }
  plan_halos();
}

void Context::plan_halos() {
  const std::int64_t p = c_.local_frames;
  auto key_of = [&](std::int64_t frame) -> std::int64_t {
    if (c_.halo != HaloData::x) return -1;
    const auto it = std::find(global_frames_.begin(), global_frames_.end(), frame);
    return it == global_frames_.end() ? -1 : static_cast<std::int64_t>(it - global_frames_.begin());
  };
  // Sends own frames [send_at, send_at + p), receives video frames [recv_at, recv_at + p).
  auto plan = [&](std::int64_t send_at, std::int64_t recv_at) {
    HaloPlan h;
    for (std::int64_t i = 0; i < p; ++i) {
      if (key_of(rank_ * f_ + send_at + i) < 0) h.send.push_back(send_at + i);
      h.key.push_back(key_of(recv_at + i));
      h.received += h.key.back() < 0;
    }
    return h;
  };
  if (rank_ > 0) left_plan_ = plan(0, rank_ * f_ - p);
  if (rank_ < size_ - 1) right_plan_ = plan(f_ - p, (rank_ + 1) * f_);
}

std::vector<mpi::Pending> Context::start_halos(ExecContext& ctx, const std::vector<Tensor>& first,
                                               const std::vector<Tensor>& last, const std::vector<Tensor>& left,
                                               const std::vector<Tensor>& right) {
  const bool has_left = rank_ > 0, has_right = rank_ < size_ - 1;
  std::vector<mpi::Transfer> to_left, to_right;
  for (std::size_t i = 0; i < first.size() && has_left; ++i) to_left.push_back({rank_ - 1, first[i], left[i]});
  for (std::size_t i = 0; i < last.size() && has_right; ++i) to_right.push_back({rank_ + 1, last[i], right[i]});
  std::vector<mpi::Pending> started;
  if (c_.exchange == ExchangePattern::fused) {
    std::vector<mpi::Transfer> both = to_left;
    both.insert(both.end(), to_right.begin(), to_right.end());
    if (!both.empty()) started.push_back(comm_.start_exchange(ctx, both));
    return started;
  }
  // Round 2: pairs (0,1), (2,3), ...; round 3: pairs (1,2), (3,4), ... Each rank talks to one
  // neighbour at a time; both rounds are posted at once, and the transports keep their order.
  const bool even = rank_ % 2 == 0;
  const std::vector<mpi::Transfer>& round2 = even ? to_right : to_left;
  const std::vector<mpi::Transfer>& round3 = even ? to_left : to_right;
  if (!round2.empty()) started.push_back(comm_.start_exchange(ctx, round2));
  if (!round3.empty()) started.push_back(comm_.start_exchange(ctx, round3));
  return started;
}

void Context::fill_conv_halo(ExecContext& ctx, const Tensor& padded, model::Halo halo, const std::string& module) {
  VINF_CHECK(halo.left == conv_halo_.left && halo.right == conv_halo_.right, module, ": unexpected halo");
  // padded is the (B, C, T, S) view of frame-major (B, T, C, S) memory.
  const Tensor fm = padded.permute({0, 2, 1, 3});
  const std::int64_t b = fm.size(0), own = fm.size(1) - halo.total(), ch = fm.size(2), s = fm.size(3);
  const std::int64_t c = c_.conv_halo;
  const bool has_left = rank_ > 0, has_right = rank_ < size_ - 1;
  if (!has_left && halo.left > 0) ops::fill(ctx, fm.slice(1, 0, halo.left), 0.0);
  if (!has_right && halo.right > 0) ops::fill(ctx, fm.slice(1, halo.left + own, halo.right), 0.0);
  if (c == 0 || (!has_left && !has_right)) return;
  OwnedTensor first, last, left, right;
  if (has_left) {
    first = contiguous_copy(ctx, fm.slice(1, halo.left, c));
    left = ctx.arena->empty(fm.dtype, {b, c, ch, s});
  }
  if (has_right) {
    last = contiguous_copy(ctx, fm.slice(1, halo.left + own - c, c));
    right = ctx.arena->empty(fm.dtype, {b, c, ch, s});
  }
  std::vector<Tensor> send_left, send_right, recv_left, recv_right;
  if (has_left) {
    send_left.push_back(first);
    recv_left.push_back(left);
  }
  if (has_right) {
    send_right.push_back(last);
    recv_right.push_back(right);
  }
  for (mpi::Pending& r : start_halos(ctx, send_left, send_right, recv_left, recv_right)) comm_.finish(r);
  if (has_left) ops::copy(ctx, left, fm.slice(1, 0, halo.left));
  if (has_right) ops::copy(ctx, right, fm.slice(1, halo.left + own, halo.right));
}

void Context::group_norm(ExecContext& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& y,
                         const ops::GroupNormParams& p, model::Halo halo, const std::string& module) {
  (void)module;
  if (c_.mode == Mode::compat && !c_.sync_groupnorm) {
    // The released code: statistics over this rank's tensor, halo frames included.
    ops::group_norm(ctx, x, gamma, beta, y, p);
    return;
  }
  const std::int64_t b = x.size(0), ch = x.size(1), t = x.size(2), s = x.size(3);
  OwnedTensor sums = ctx.arena->empty(DType::f64, {b, p.groups, 2});
  if (c_.mode == Mode::invariant) {
    // Whole-video statistics: the sums over each rank's own frames (no halo counted twice).
    const std::int64_t own = t - halo.total();
    ops::group_norm_sums(ctx, x.slice(2, halo.left, own), p.groups, sums);
    comm_.all_reduce_sum(ctx, sums);
    const double count = static_cast<double>(ch / p.groups) * static_cast<double>(own * size_) * static_cast<double>(s);
    ops::group_norm_apply(ctx, x, sums, count, gamma, beta, y, p);
    return;
  }
  // compat + sync (the paper's plugin): the mean of the per-rank means over each rank's tensor,
  // then the mean of the per-rank variances about that common mean. The statistics are a few
  // numbers per group: they are formed on the host, and reduced from a buffer on the context's
  // device, where every transport (NCCL included) expects its buffers.
  const double n = static_cast<double>(ch / p.groups) * static_cast<double>(t) * static_cast<double>(s);
  ops::group_norm_sums(ctx, x, p.groups, sums);
  const std::int64_t k = b * p.groups;
  std::vector<double> host(static_cast<std::size_t>(2 * k)), stats(static_cast<std::size_t>(k));
  const Tensor host_sums = Tensor::wrap(host.data(), DType::f64, Device::cpu(), sums.shape);
  const Tensor host_stats = Tensor::wrap(stats.data(), DType::f64, Device::cpu(), {k});
  OwnedTensor reduced = ctx.arena->empty(DType::f64, {k});
  auto sum_over_ranks = [&] {
    ops::copy(ctx, host_stats, reduced);
    comm_.all_reduce_sum(ctx, reduced);
    ops::copy(ctx, reduced, host_stats);
  };
  ops::copy(ctx, sums, host_sums);
  for (std::int64_t i = 0; i < k; ++i) stats[static_cast<std::size_t>(i)] = host[2 * i] / n;
  sum_over_ranks();
  std::vector<double> mean(stats);
  for (double& m : mean) m /= size_;
  for (std::int64_t i = 0; i < k; ++i) {
    const double mu = mean[static_cast<std::size_t>(i)], s1 = host[2 * i], s2 = host[2 * i + 1];
    stats[static_cast<std::size_t>(i)] = (s2 - 2 * mu * s1 + n * mu * mu) / n;
  }
  sum_over_ranks();
  for (std::int64_t i = 0; i < k; ++i) {
    const double mu = mean[static_cast<std::size_t>(i)], var = stats[static_cast<std::size_t>(i)] / size_;
    host[2 * i] = mu;
    host[2 * i + 1] = var + mu * mu;
  }
  ops::copy(ctx, host_sums, sums);
  ops::group_norm_apply(ctx, x, sums, 1.0, gamma, beta, y, p);
}

void Context::attention(ExecContext& ctx, const model::AttentionWeights& w, const Tensor& x, const Tensor& out,
                        const std::string& module) {
  (void)module;
  const std::int64_t rows = x.size(0), f = x.size(1), inner = w.to_q.size(0);
  VINF_CHECK(f == f_, module, ": ", f, " frames, but this clip has ", f_);
  const std::int64_t p = c_.local_frames, lp = attn_halo_.total() + f;
  const auto kept = static_cast<std::int64_t>(global_frames_.size());
  const bool has_left = rank_ > 0, has_right = rank_ < size_ - 1, halo = p > 0 && (has_left || has_right);
  const bool carry_x = c_.halo == HaloData::x;
  const DType dt = x.dtype;

  // Q of the own frames; K and V over the padded clip (halo, own, halo frames) and the globals.
  OwnedTensor q = ctx.arena->empty(dt, {rows, f, inner});
  OwnedTensor kp = ctx.arena->empty(dt, {rows, lp, inner}), vp = ctx.arena->empty(dt, {rows, lp, inner});
  OwnedTensor kg = ctx.arena->empty(dt, {rows, kept, inner}), vg = ctx.arena->empty(dt, {rows, kept, inner});
  const std::array<Tensor, 2> padded{kp, vp}, globals{kg, vg};
  const std::array<Tensor, 2> own_kv{kp.slice(1, attn_halo_.left, f), vp.slice(1, attn_halo_.left, f)};

  // K (a = 0) or V (a = 1) of the own frames into place; with halo x also the own global frames'
  // (the other clips' global keys are projected once they arrive).
  OwnedTensor projected_own;
  auto project_own = [&](std::size_t a) {
    if (!projected_own.data) projected_own = ctx.arena->empty(dt, {rows, f, inner});
    ops::linear(ctx, x, a == 0 ? w.to_k : w.to_v, nullptr, projected_own);
    ops::copy(ctx, projected_own, own_kv[a]);
    for (std::int64_t j = 0; j < kept && carry_x; ++j) {
      const std::int64_t frame = global_frames_[static_cast<std::size_t>(j)];
      if (frame / f_ == rank_) ops::copy(ctx, projected_own.select(1, frame - rank_ * f_), globals[a].select(1, j));
    }
  };

  // What travels: x, projected here once it has arrived (one array), or K and V (two).
  std::vector<Tensor> own{x};
  if (!carry_x) {
    project_own(0);
    project_own(1);
    projected_own = {};
    own = {own_kv[0], own_kv[1]};
  }

  // Round 1 (the global frames) and rounds 2 and 3 (p boundary frames with each neighbour) start
  // together; the own frames' projections run while they travel. The buffers are declared before
  // the collectives, which must be finished before the buffers go.
  std::vector<OwnedTensor> gathered, sent, left, right;
  std::vector<mpi::Pending> rounds;
  if (kept > 0) {
    for (const Tensor& t : own) {
      const std::int64_t d = t.size(2);
      sent.push_back(ctx.arena->empty(dt, {static_cast<std::int64_t>(my_globals_.size()), rows, d}));
      for (std::size_t i = 0; i < my_globals_.size(); ++i)
        ops::copy(ctx, t.select(1, my_globals_[i]), sent.back().select(0, static_cast<std::int64_t>(i)));
      gathered.push_back(ctx.arena->empty(dt, {gathered_, rows, d}));
      std::vector<std::int64_t> counts(counts_.size());
      for (std::size_t r = 0; r < counts.size(); ++r) counts[r] = counts_[r] * rows * d;
      rounds.push_back(comm_.start_all_gather_v(ctx, sent.back(), gathered.back(), counts));
    }
  }
  if (halo) {
    // (rows, n, d) of the listed own frames of t, or nothing when the list is empty.
    auto frames_of = [&](const Tensor& t, const std::vector<std::int64_t>& list) -> Tensor {
      if (list.empty()) return {};
      sent.push_back(ctx.arena->empty(dt, {rows, static_cast<std::int64_t>(list.size()), t.size(2)}));
      for (std::size_t i = 0; i < list.size(); ++i)
        ops::copy(ctx, t.select(1, list[i]), sent.back().select(1, static_cast<std::int64_t>(i)));
      return sent.back();
    };
    auto room = [&](std::vector<OwnedTensor>& into, std::int64_t n, std::int64_t d) -> Tensor {
      if (n == 0) return {};
      into.push_back(ctx.arena->empty(dt, {rows, n, d}));
      return into.back();
    };
    std::vector<Tensor> first, last, from_left, from_right;
    for (const Tensor& t : own) {
      if (has_left) {
        first.push_back(frames_of(t, left_plan_.send));
        from_left.push_back(room(left, left_plan_.received, t.size(2)));
      }
      if (has_right) {
        last.push_back(frames_of(t, right_plan_.send));
        from_right.push_back(room(right, right_plan_.received, t.size(2)));
      }
    }
    for (mpi::Pending& r : start_halos(ctx, first, last, from_left, from_right)) rounds.push_back(std::move(r));
  }
  auto progress = [&] {
    for (mpi::Pending& r : rounds) comm_.progress(r);
  };

  ops::linear(ctx, x, w.to_q, nullptr, q);
  progress();
  if (carry_x) {
    project_own(0);
    progress();
    project_own(1);
    progress();
  }
  projected_own = {};
  // Zero frames at the video's ends in compat mode (attended, as the released code does).
  for (const Tensor& t : padded) {
    if (!has_left && attn_halo_.left > 0) ops::fill(ctx, t.slice(1, 0, attn_halo_.left), 0.0);
    if (!has_right && attn_halo_.right > 0) ops::fill(ctx, t.slice(1, attn_halo_.left + f, attn_halo_.right), 0.0);
  }
  for (mpi::Pending& r : rounds) comm_.finish(r);
  sent.clear();

  // The global frames, gathered (gathered_, rows, d) in rank order; the first `kept` are the keys.
  if (kept > 0 && !carry_x) {
    for (std::size_t a = 0; a < 2; ++a) ops::copy(ctx, gathered[a].slice(0, 0, kept).permute({1, 0, 2}), globals[a]);
  } else if (kept > 0) {
    std::vector<std::int64_t> remote;  // the global keys of other clips
    for (std::int64_t j = 0; j < kept; ++j)
      if (global_frames_[static_cast<std::size_t>(j)] / f_ != rank_) remote.push_back(j);
    const auto nr = static_cast<std::int64_t>(remote.size());
    if (nr > 0) {
      OwnedTensor xr = ctx.arena->empty(dt, {rows, nr, gathered[0].size(2)});
      for (std::int64_t i = 0; i < nr; ++i)
        ops::copy(ctx, gathered[0].select(0, remote[static_cast<std::size_t>(i)]), xr.select(1, i));
      OwnedTensor projected = nr < kept ? ctx.arena->empty(dt, {rows, nr, inner}) : OwnedTensor{};
      for (std::size_t a = 0; a < 2; ++a) {
        const Tensor& weight = a == 0 ? w.to_k : w.to_v;
        if (nr == kept) {
          ops::linear(ctx, xr, weight, nullptr, globals[a]);
          continue;
        }
        ops::linear(ctx, xr, weight, nullptr, projected);
        for (std::int64_t i = 0; i < nr; ++i)
          ops::copy(ctx, projected.select(1, i), globals[a].select(1, remote[static_cast<std::size_t>(i)]));
      }
    }
  }
  gathered.clear();

  // The arrived halo frames into place, from position `at` of the padded K and V: K and V as they
  // are; x through the projections, except frames that are global keys, whose K and V are there.
  auto place = [&](const HaloPlan& plan, const std::vector<OwnedTensor>& got, std::int64_t at) {
    if (!carry_x) {
      for (std::size_t a = 0; a < 2; ++a) ops::copy(ctx, got[a], padded[a].slice(1, at, p));
      return;
    }
    OwnedTensor projected = plan.received > 0 ? ctx.arena->empty(dt, {rows, plan.received, inner}) : OwnedTensor{};
    for (std::size_t a = 0; a < 2; ++a) {
      if (plan.received > 0) ops::linear(ctx, got[0], a == 0 ? w.to_k : w.to_v, nullptr, projected);
      std::int64_t next = 0;
      for (std::int64_t i = 0; i < p; ++i) {
        const std::int64_t key = plan.key[static_cast<std::size_t>(i)];
        ops::copy(ctx, key >= 0 ? globals[a].select(1, key) : projected.select(1, next++), padded[a].select(1, at + i));
      }
    }
  };
  if (halo && has_left) place(left_plan_, left, 0);
  if (halo && has_right) place(right_plan_, right, attn_halo_.left + f);

  // Query i (own frame) sees padded keys [i + left - p, i + left + p] and every global key.
  ops::AttentionParams ap;
  ap.scale = c_.attn_scale / std::sqrt(static_cast<float>(w.head_dim));
  ap.band_lo = attn_halo_.left - p;
  ap.band_hi = attn_halo_.left + p;
  c_.biases(t_, ap.local_bias, ap.global_bias);
  ap.token_count_log_base = c_.token_num_scale ? 16.f : 0.f;
  Tensor kgh, vgh;
  if (kept > 0) {
    kgh = model::split_heads(kg, w.heads);
    vgh = model::split_heads(vg, w.heads);
  }
  ops::attention(ctx, model::split_heads(q, w.heads), model::split_heads(kp, w.heads), model::split_heads(vp, w.heads),
                 kept > 0 ? &kgh : nullptr, kept > 0 ? &vgh : nullptr, model::split_heads(out, w.heads), ap);
}

}  // namespace vinf::infinity
