#include "infinity/context.hpp"

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
  if (g == 0) return;
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
}

void Context::gather_globals(ExecContext& ctx, const std::vector<Tensor>& arrays, const std::vector<Tensor>& outs) {
  if (gathered_ == 0) return;
  const auto kept = static_cast<std::int64_t>(global_frames_.size());
  for (std::size_t a = 0; a < arrays.size(); ++a) {
    const Tensor& x = arrays[a];
    const std::int64_t rows = x.size(0), width = x.size(2);
    OwnedTensor send = ctx.arena->empty(x.dtype, {static_cast<std::int64_t>(my_globals_.size()), rows, width});
    for (std::size_t i = 0; i < my_globals_.size(); ++i)
      ops::copy(ctx, x.select(1, my_globals_[i]), send.select(0, static_cast<std::int64_t>(i)));
    OwnedTensor recv = ctx.arena->empty(x.dtype, {gathered_, rows, width});
    std::vector<std::int64_t> counts(counts_.size());
    for (std::size_t r = 0; r < counts.size(); ++r) counts[r] = counts_[r] * rows * width;
    comm_.all_gather_v(ctx, send, recv, counts);
    ops::copy(ctx, recv.slice(0, 0, kept).permute({1, 0, 2}), outs[a]);
  }
}

void Context::exchange_halos(ExecContext& ctx, const std::vector<Tensor>& first, const std::vector<Tensor>& last,
                             const std::vector<Tensor>& left, const std::vector<Tensor>& right) {
  const bool has_left = rank_ > 0, has_right = rank_ < size_ - 1;
  std::vector<mpi::Transfer> to_left, to_right;
  for (std::size_t i = 0; i < first.size(); ++i) {
    if (has_left) to_left.push_back({rank_ - 1, first[i], left[i]});
    if (has_right) to_right.push_back({rank_ + 1, last[i], right[i]});
  }
  if (c_.exchange == ExchangePattern::fused) {
    std::vector<mpi::Transfer> both = to_left;
    both.insert(both.end(), to_right.begin(), to_right.end());
    if (!both.empty()) comm_.exchange(ctx, both);
    return;
  }
  // Round 2: pairs (0,1), (2,3), ...; round 3: pairs (1,2), (3,4), ... Each rank talks to one
  // neighbour at a time.
  const bool even = rank_ % 2 == 0;
  const std::vector<mpi::Transfer>& round2 = even ? to_right : to_left;
  const std::vector<mpi::Transfer>& round3 = even ? to_left : to_right;
  if (!round2.empty()) comm_.exchange(ctx, round2);
  if (!round3.empty()) comm_.exchange(ctx, round3);
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
  exchange_halos(ctx, {first}, {last}, {left}, {right});
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
  // then the mean of the per-rank variances about that common mean.
  const double n = static_cast<double>(ch / p.groups) * static_cast<double>(t) * static_cast<double>(s);
  ops::group_norm_sums(ctx, x, p.groups, sums);
  const std::int64_t k = b * p.groups;
  std::vector<double> host(static_cast<std::size_t>(2 * k)), stats(static_cast<std::size_t>(k));
  const Tensor host_sums = Tensor::wrap(host.data(), DType::f64, Device::cpu(), sums.shape);
  ops::copy(ctx, sums, host_sums);
  const Tensor stats_t = Tensor::wrap(stats.data(), DType::f64, Device::cpu(), {k});
  for (std::int64_t i = 0; i < k; ++i) stats[static_cast<std::size_t>(i)] = host[2 * i] / n;
  comm_.all_reduce_sum(ctx, stats_t);
  std::vector<double> mean(stats);
  for (double& m : mean) m /= size_;
  for (std::int64_t i = 0; i < k; ++i) {
    const double mu = mean[static_cast<std::size_t>(i)], s1 = host[2 * i], s2 = host[2 * i + 1];
    stats[static_cast<std::size_t>(i)] = (s2 - 2 * mu * s1 + n * mu * mu) / n;
  }
  comm_.all_reduce_sum(ctx, stats_t);
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
  const std::int64_t rows = x.size(0), f = x.size(1), width = x.size(2), inner = w.to_q.size(0);
  VINF_CHECK(f == f_, module, ": ", f, " frames, but this clip has ", f_);
  const std::int64_t p = c_.local_frames, lp = attn_halo_.total() + f;
  const auto kept = static_cast<std::int64_t>(global_frames_.size());
  const bool has_left = rank_ > 0, has_right = rank_ < size_ - 1;
  const DType dt = x.dtype;

  OwnedTensor q = ctx.arena->empty(dt, {rows, f, inner});
  OwnedTensor kp = ctx.arena->empty(dt, {rows, lp, inner}), vp = ctx.arena->empty(dt, {rows, lp, inner});
  OwnedTensor kg = ctx.arena->empty(dt, {rows, kept, inner}), vg = ctx.arena->empty(dt, {rows, kept, inner});
  ops::linear(ctx, x, w.to_q, nullptr, q);

  // The arrays whose boundary and global frames travel: x (then projected here) or K and V.
  std::vector<Tensor> own, padded, global;
  OwnedTensor xp, xg, k, v;
  if (c_.halo == HaloData::x) {
    xp = ctx.arena->empty(dt, {rows, lp, width});
    xg = ctx.arena->empty(dt, {rows, kept, width});
    ops::copy(ctx, x, xp.slice(1, attn_halo_.left, f));
    own = {x};
    padded = {xp};
    global = {xg};
  } else {
    k = ctx.arena->empty(dt, {rows, f, inner});
    v = ctx.arena->empty(dt, {rows, f, inner});
    ops::linear(ctx, x, w.to_k, nullptr, k);
    ops::linear(ctx, x, w.to_v, nullptr, v);
    ops::copy(ctx, k, kp.slice(1, attn_halo_.left, f));
    ops::copy(ctx, v, vp.slice(1, attn_halo_.left, f));
    own = {k, v};
    padded = {kp, vp};
    global = {kg, vg};
  }

  // Round 1: the global frames.
  gather_globals(ctx, own, global);

  // Rounds 2 and 3: p boundary frames with each neighbour; zero frames at the video's ends in
  // compat mode (attended, as the released code does).
  for (const Tensor& t : padded) {
    if (!has_left && attn_halo_.left > 0) ops::fill(ctx, t.slice(1, 0, attn_halo_.left), 0.0);
    if (!has_right && attn_halo_.right > 0) ops::fill(ctx, t.slice(1, attn_halo_.left + f, attn_halo_.right), 0.0);
  }
  if (p > 0 && (has_left || has_right)) {
    std::vector<OwnedTensor> keep;
    std::vector<Tensor> first, last, left, right;
    for (const Tensor& t : own) {
      const std::int64_t d = t.size(2);
      keep.push_back(has_left ? contiguous_copy(ctx, t.slice(1, 0, p)) : OwnedTensor{});
      first.push_back(keep.back());
      keep.push_back(has_right ? contiguous_copy(ctx, t.slice(1, f - p, p)) : OwnedTensor{});
      last.push_back(keep.back());
      keep.push_back(has_left ? ctx.arena->empty(dt, {rows, p, d}) : OwnedTensor{});
      left.push_back(keep.back());
      keep.push_back(has_right ? ctx.arena->empty(dt, {rows, p, d}) : OwnedTensor{});
      right.push_back(keep.back());
    }
    exchange_halos(ctx, first, last, left, right);
    for (std::size_t i = 0; i < own.size(); ++i) {
      if (has_left) ops::copy(ctx, left[i], padded[i].slice(1, 0, p));
      if (has_right) ops::copy(ctx, right[i], padded[i].slice(1, attn_halo_.left + f, p));
    }
  }

  if (c_.halo == HaloData::x) {
    ops::linear(ctx, xp, w.to_k, nullptr, kp);
    ops::linear(ctx, xp, w.to_v, nullptr, vp);
    if (kept > 0) {
      ops::linear(ctx, xg, w.to_k, nullptr, kg);
      ops::linear(ctx, xg, w.to_v, nullptr, vg);
    }
  }

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
