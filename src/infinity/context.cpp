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

// 0, 1, ..., n - 1.
std::vector<std::int64_t> first_n(std::size_t n) {
  std::vector<std::int64_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::int64_t>(i);
  return v;
}

OwnedTensor contiguous_copy(ExecContext& ctx, const Tensor& t) {
  OwnedTensor c = ctx.arena->empty(t.dtype, t.shape);
  ops::copy(ctx, t, c);
  return c;
}

}  // namespace

std::vector<mpi::Pending> start_neighbour_exchange(ExecContext& ctx, mpi::Communicator& comm, ExchangePattern pattern,
                                                   const std::vector<mpi::Transfer>& to_left,
                                                   const std::vector<mpi::Transfer>& to_right) {
  std::vector<mpi::Pending> started;
  if (pattern == ExchangePattern::fused) {
    std::vector<mpi::Transfer> both = to_left;
    both.insert(both.end(), to_right.begin(), to_right.end());
    if (!both.empty()) started.push_back(comm.start_exchange(ctx, both));
    return started;
  }
  // Round 2: pairs (0,1), (2,3), ...; round 3: pairs (1,2), (3,4), ... Each rank talks to one
  // neighbour at a time; both rounds are posted at once, and the transports keep their order.
  const bool even = comm.rank() % 2 == 0;
  const std::vector<mpi::Transfer>& round2 = even ? to_right : to_left;
  const std::vector<mpi::Transfer>& round3 = even ? to_left : to_right;
  if (!round2.empty()) started.push_back(comm.start_exchange(ctx, round2));
  if (!round3.empty()) started.push_back(comm.start_exchange(ctx, round3));
  return started;
}

Context::Context(const Config& config, mpi::Communicator& clip_group, std::int64_t clip_frames)
    : Context(config, clip_group, std::vector<std::int64_t>(static_cast<std::size_t>(clip_group.size()), clip_frames)) {}

Context::Context(const Config& config, mpi::Communicator& clip_group, std::vector<std::int64_t> frames_per_clip)
    : c_(config), comm_(clip_group), frames_(std::move(frames_per_clip)), rank_(clip_group.rank()), size_(clip_group.size()) {
  VINF_CHECK(c_.mode != Mode::off, "infinity::Context: mode off runs the plain temporal context");
  VINF_CHECK(static_cast<int>(frames_.size()) == size_, "infinity::Context: ", frames_.size(), " clip sizes for ",
             size_, " clips");
  f_ = frames_[static_cast<std::size_t>(rank_)];
  for (int k = 0; k < size_; ++k) {
    if (k < rank_) first_ += frames_[static_cast<std::size_t>(k)];
    total_ += frames_[static_cast<std::size_t>(k)];
  }
  if (c_.mode == Mode::exact) {
    // No windows and no global frames: full attention, and halos that reach as far as the four
    // convolutions do (none at the video's ends, as the plain model).
    conv_width_ = size_ > 1 ? kTemporalConvReach : 0;
    for (std::int64_t n : frames_)
      VINF_CHECK(n >= conv_width_, "infinity::Context: a clip of ", n, " frames is shorter than the halo (unchecked)");
    conv_halo_ = halo_for(c_.mode, conv_width_, rank_, size_);
    return;
  }
  for (std::int64_t n : frames_) VINF_CHECK(n == f_, "infinity::Context: --vi.mode ", mode_name(c_.mode), " takes equal clips");
  VINF_CHECK(c_.local_frames <= f_ && c_.conv_halo <= f_, "infinity::Context: halo wider than the clip (unchecked config)");
  conv_width_ = c_.conv_halo;
  attn_halo_ = halo_for(c_.mode, c_.local_frames, rank_, size_);
  conv_halo_ = halo_for(c_.mode, conv_width_, rank_, size_);
  plan_globals();
  plan_halos();
}

// The global frames: which video frames every query attends to, who contributes which.
void Context::plan_globals() {
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
  return start_neighbour_exchange(ctx, comm_, c_.exchange, to_left, to_right);
}

void Context::fill_conv_halo(ExecContext& ctx, const Tensor& padded, model::Halo halo, const std::string& module) {
  VINF_CHECK(halo.left == conv_halo_.left && halo.right == conv_halo_.right, module, ": unexpected halo");
  // padded is the (B, C, T, S) view of frame-major (B, T, C, S) memory.
  const Tensor fm = padded.permute({0, 2, 1, 3});
  const std::int64_t b = fm.size(0), own = fm.size(1) - halo.total(), ch = fm.size(2), s = fm.size(3);
  const std::int64_t c = conv_width_;
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
  if (c_.mode == Mode::invariant || c_.mode == Mode::exact) {
    // Whole-video statistics: the sums over each rank's own frames (no halo counted twice).
    const std::int64_t own = t - halo.total();
    ops::group_norm_sums(ctx, x.slice(2, halo.left, own), p.groups, sums);
    comm_.all_reduce_sum(ctx, sums);
    const double count = static_cast<double>(ch / p.groups) * static_cast<double>(total_) * static_cast<double>(s);
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

// One attention call's shapes and buffers, shared by its steps. The collectives are declared
// last: they are finished (or, when a step throws, settled) before the buffers they use go.
struct Context::AttentionCall {
  AttentionCall(ExecContext& ctx, const Context& vc, const model::AttentionWeights& weights, const Tensor& input)
      : w(weights),
        x(input),
        rows(x.size(0)),
        f(x.size(1)),
        inner(w.to_q.size(0)),
        p(vc.c_.local_frames),
        kept(static_cast<std::int64_t>(vc.global_frames_.size())),
        has_left(vc.rank_ > 0),
        has_right(vc.rank_ < vc.size_ - 1),
        halo(p > 0 && (has_left || has_right)),
        carry_x(vc.c_.halo == HaloData::x),
        dt(x.dtype) {
    // Q of the own frames; K and V over the padded clip (halo, own, halo frames) and the globals.
    const std::int64_t lp = vc.attn_halo_.total() + f;
    q = ctx.arena->empty(dt, {rows, f, inner});
    kp = ctx.arena->empty(dt, {rows, lp, inner});
    vp = ctx.arena->empty(dt, {rows, lp, inner});
    kg = ctx.arena->empty(dt, {rows, kept, inner});
    vg = ctx.arena->empty(dt, {rows, kept, inner});
    padded = {kp, vp};
    globals = {kg, vg};
    own_kv = {kp.slice(1, vc.attn_halo_.left, f), vp.slice(1, vc.attn_halo_.left, f)};
    // What travels: x, projected here once it has arrived (one array), or K and V (two).
    own = carry_x ? std::vector<Tensor>{x} : std::vector<Tensor>{own_kv[0], own_kv[1]};
  }

  const model::AttentionWeights& w;
  const Tensor& x;
  const std::int64_t rows, f, inner, p, kept;
  const bool has_left, has_right, halo, carry_x;
  const DType dt;
  OwnedTensor q, kp, vp, kg, vg;
  std::array<Tensor, 2> padded, globals, own_kv;  // K (a = 0) and V (a = 1)
  std::vector<Tensor> own;
  // Round 1's buffers (the own global frames sent, every rank's received) and the halos' (the
  // boundary frames sent, those received from the left and right neighbours).
  std::vector<OwnedTensor> gathered, sent, left, right;
  std::vector<mpi::Pending> rounds;
};

void Context::attention(ExecContext& ctx, const model::AttentionWeights& w, const Tensor& x, const Tensor& out,
                        const std::string& module) {
  VINF_CHECK(x.size(1) == f_, module, ": ", x.size(1), " frames, but this clip has ", f_);
  if (c_.mode == Mode::exact) {
    exact_attention(ctx, w, x, out);
    return;
  }
  AttentionCall a(ctx, *this, w, x);
  if (!a.carry_x) project_own_keys(ctx, a);  // K and V travel: projected before they leave
  start_attention_rounds(ctx, a);
  project_own_frames(ctx, a);
  for (mpi::Pending& r : a.rounds) comm_.finish(r);
  a.sent.clear();
  assemble_global_keys(ctx, a);
  place_halos(ctx, a);
  attend(ctx, a, out);
}

void Context::progress_rounds(AttentionCall& a) {
  for (mpi::Pending& r : a.rounds) comm_.progress(r);
}

// K and V of the own frames into place; with halo x also the own global frames' (the other clips'
// global keys are projected once they arrive).
void Context::project_own_keys(ExecContext& ctx, AttentionCall& a) {
  OwnedTensor projected = ctx.arena->empty(a.dt, {a.rows, a.f, a.inner});
  std::vector<std::int64_t> own_frames, keys;  // with halo x: the own global frames, and their keys
  for (std::int64_t j = 0; j < a.kept && a.carry_x; ++j) {
    const std::int64_t frame = global_frames_[static_cast<std::size_t>(j)];
    if (frame / f_ != rank_) continue;
    own_frames.push_back(frame - rank_ * f_);
    keys.push_back(j);
  }
  for (std::size_t k = 0; k < 2; ++k) {
    ops::linear(ctx, a.x, k == 0 ? a.w.to_k : a.w.to_v, nullptr, projected);
    ops::copy(ctx, projected, a.own_kv[k]);
    ops::copy_frames(ctx, projected, 1, own_frames, a.globals[k], 1, keys);
    progress_rounds(a);
  }
}

// Round 1 (the global frames) and rounds 2 and 3 (p boundary frames with each neighbour) start
// together; the own frames' projections run while they travel.
void Context::start_attention_rounds(ExecContext& ctx, AttentionCall& a) {
  const std::int64_t rows = a.rows;
  if (a.kept > 0) {
    for (const Tensor& t : a.own) {
      const std::int64_t d = t.size(2);
      a.sent.push_back(ctx.arena->empty(a.dt, {static_cast<std::int64_t>(my_globals_.size()), rows, d}));
      ops::copy_frames(ctx, t, 1, my_globals_, a.sent.back(), 0, first_n(my_globals_.size()));
      a.gathered.push_back(ctx.arena->empty(a.dt, {gathered_, rows, d}));
      std::vector<std::int64_t> counts(counts_.size());
      for (std::size_t r = 0; r < counts.size(); ++r) counts[r] = counts_[r] * rows * d;
      a.rounds.push_back(comm_.start_all_gather_v(ctx, a.sent.back(), a.gathered.back(), counts));
    }
  }
  if (!a.halo) return;
  // (rows, n, d) of the listed own frames of t, or nothing when the list is empty.
  auto frames_of = [&](const Tensor& t, const std::vector<std::int64_t>& list) -> Tensor {
    if (list.empty()) return {};
    a.sent.push_back(ctx.arena->empty(a.dt, {rows, static_cast<std::int64_t>(list.size()), t.size(2)}));
    ops::copy_frames(ctx, t, 1, list, a.sent.back(), 1, first_n(list.size()));
    return a.sent.back();
  };
  auto room = [&](std::vector<OwnedTensor>& into, std::int64_t n, std::int64_t d) -> Tensor {
    if (n == 0) return {};
    into.push_back(ctx.arena->empty(a.dt, {rows, n, d}));
    return into.back();
  };
  std::vector<Tensor> first, last, from_left, from_right;
  for (const Tensor& t : a.own) {
    if (a.has_left) {
      first.push_back(frames_of(t, left_plan_.send));
      from_left.push_back(room(a.left, left_plan_.received, t.size(2)));
    }
    if (a.has_right) {
      last.push_back(frames_of(t, right_plan_.send));
      from_right.push_back(room(a.right, right_plan_.received, t.size(2)));
    }
  }
  for (mpi::Pending& r : start_halos(ctx, first, last, from_left, from_right)) a.rounds.push_back(std::move(r));
}

// While the rounds travel: Q of the own frames, and K and V when x travels (when K and V travel
// they were projected before); zero frames at the video's ends in compat mode (attended, as the
// released code does).
void Context::project_own_frames(ExecContext& ctx, AttentionCall& a) {
  ops::linear(ctx, a.x, a.w.to_q, nullptr, a.q);
  progress_rounds(a);
  if (a.carry_x) project_own_keys(ctx, a);
  for (const Tensor& t : a.padded) {
    if (!a.has_left && attn_halo_.left > 0) ops::fill(ctx, t.slice(1, 0, attn_halo_.left), 0.0);
    if (!a.has_right && attn_halo_.right > 0) ops::fill(ctx, t.slice(1, attn_halo_.left + a.f, attn_halo_.right), 0.0);
  }
}

// The global frames, gathered (gathered_, rows, d) in rank order; the first `kept` are the keys.
// K and V arrived as they are; x is projected, except the own global frames' (already in place).
void Context::assemble_global_keys(ExecContext& ctx, AttentionCall& a) {
  if (a.kept > 0 && !a.carry_x) {
    for (std::size_t k = 0; k < 2; ++k)
      ops::copy(ctx, a.gathered[k].slice(0, 0, a.kept).permute({1, 0, 2}), a.globals[k]);
  } else if (a.kept > 0) {
    std::vector<std::int64_t> remote;  // the global keys of other clips
    for (std::int64_t j = 0; j < a.kept; ++j)
      if (global_frames_[static_cast<std::size_t>(j)] / f_ != rank_) remote.push_back(j);
    const auto nr = static_cast<std::int64_t>(remote.size());
    if (nr > 0) {
      OwnedTensor xr = ctx.arena->empty(a.dt, {a.rows, nr, a.gathered[0].size(2)});
      ops::copy_frames(ctx, a.gathered[0], 0, remote, xr, 1, first_n(remote.size()));
      OwnedTensor projected = nr < a.kept ? ctx.arena->empty(a.dt, {a.rows, nr, a.inner}) : OwnedTensor{};
      for (std::size_t k = 0; k < 2; ++k) {
        const Tensor& weight = k == 0 ? a.w.to_k : a.w.to_v;
        if (nr == a.kept) {
          ops::linear(ctx, xr, weight, nullptr, a.globals[k]);
          continue;
        }
        ops::linear(ctx, xr, weight, nullptr, projected);
        ops::copy_frames(ctx, projected, 1, first_n(remote.size()), a.globals[k], 1, remote);
      }
    }
  }
  a.gathered.clear();
}

// The arrived halo frames into place in the padded K and V: K and V as they are; x through the
// projections, except frames that are global keys, whose K and V are there.
void Context::place_halos(ExecContext& ctx, AttentionCall& a) {
  if (!a.halo) return;
  const std::int64_t p = a.p;
  // One side's frames, from position `at` of the padded K and V.
  auto place = [&](const HaloPlan& plan, const std::vector<OwnedTensor>& got, std::int64_t at) {
    if (!a.carry_x) {
      for (std::size_t k = 0; k < 2; ++k) ops::copy(ctx, got[k], a.padded[k].slice(1, at, p));
      return;
    }
    OwnedTensor projected =
        plan.received > 0 ? ctx.arena->empty(a.dt, {a.rows, plan.received, a.inner}) : OwnedTensor{};
    // Positions at + i take global key plan.key[i], or the next projected frame where that is -1.
    std::vector<std::int64_t> keys, key_at, arrived_at;
    for (std::int64_t i = 0; i < p; ++i) {
      const std::int64_t key = plan.key[static_cast<std::size_t>(i)];
      if (key >= 0) {
        keys.push_back(key);
        key_at.push_back(at + i);
      } else {
        arrived_at.push_back(at + i);
      }
    }
    for (std::size_t k = 0; k < 2; ++k) {
      if (plan.received > 0) ops::linear(ctx, got[0], k == 0 ? a.w.to_k : a.w.to_v, nullptr, projected);
      ops::copy_frames(ctx, a.globals[k], 1, keys, a.padded[k], 1, key_at);
      if (plan.received > 0) ops::copy_frames(ctx, projected, 1, first_n(arrived_at.size()), a.padded[k], 1, arrived_at);
    }
  };
  if (a.has_left) place(left_plan_, a.left, 0);
  if (a.has_right) place(right_plan_, a.right, attn_halo_.left + a.f);
}

// Query i (own frame) sees padded keys [i + left - p, i + left + p] and every global key.
void Context::attend(ExecContext& ctx, AttentionCall& a, const Tensor& out) {
  const model::AttentionWeights& w = a.w;
  ops::AttentionParams ap = model::attention_params(w, c_.attn_scale);
  ap.band_lo = attn_halo_.left - a.p;
  ap.band_hi = attn_halo_.left + a.p;
  c_.biases(t_, ap.local_bias, ap.global_bias);
  ap.token_count_log_base = c_.token_num_scale ? 16.f : 0.f;
  Tensor kgh, vgh;
  if (a.kept > 0) {
    kgh = model::split_heads(a.kg, w.heads);
    vgh = model::split_heads(a.vg, w.heads);
  }
  ops::attention(ctx, model::split_heads(a.q, w.heads), model::split_heads(a.kp, w.heads),
                 model::split_heads(a.vp, w.heads), a.kept > 0 ? &kgh : nullptr, a.kept > 0 ? &vgh : nullptr,
                 model::split_heads(out, w.heads), ap);
}

}  // namespace vinf::infinity
