// Exact mode's temporal attention (design.md §5, `--vi.mode exact`): the plain model's full
// attention over every frame of the video, with the frames spread over the clip group.
//
// Each rank holds x (R, F_k, d) for its own frames of all R = B·H·W sequences. A first all-to-all
// re-partitions by sequence: rank k gets every frame of its share of the R sequences
// (rows [k R / N, (k + 1) R / N)), attends over the whole video there, and a second all-to-all
// returns each rank its own frames of every sequence. The own block's projections run while the
// first all-to-all travels. Bytes received per rank and call: R_k (T - F_k) d going out and
// (R - R_k) F_k inner coming back (T frames in all), in x's dtype.
#include <cmath>

#include "core/arena.hpp"
#include "core/error.hpp"
#include "infinity/context.hpp"
#include "ops/elementwise.hpp"
#include "ops/gemm.hpp"

namespace vinf::infinity {

// One call's shares and buffers. The collectives are declared last: they are finished (or, when a
// step throws, settled) before the buffers they use go.
struct Context::ExactCall {
  ExactCall(ExecContext& ctx, const Context& vc, const model::AttentionWeights& weights, const Tensor& input)
      : w(weights), x(input), dt(input.dtype), inner(weights.to_q.size(0)) {
    const std::int64_t rows = x.size(0);
    for (int k = 0; k < vc.size_; ++k) {
      row_first.push_back(k * rows / vc.size_);
      row_count.push_back((k + 1) * rows / vc.size_ - row_first.back());
    }
    mine = row_count[static_cast<std::size_t>(vc.rank_)];
    for (OwnedTensor* t : {&q, &k, &v, &o}) *t = ctx.arena->empty(dt, {mine, vc.total_, inner});
  }
  // Rank k's share of the sequences, as rows of a (R, ., .) tensor.
  Tensor rows_of(const Tensor& t, int k) const {
    return t.slice(0, row_first[static_cast<std::size_t>(k)], row_count[static_cast<std::size_t>(k)]);
  }

  const model::AttentionWeights& w;
  const Tensor& x;
  const DType dt;
  const std::int64_t inner;
  std::vector<std::int64_t> row_first, row_count;
  std::int64_t mine = 0;
  OwnedTensor q, k, v, o;  // (mine, T, inner): every frame of this rank's sequences
  std::vector<OwnedTensor> sent, got;
  std::vector<mpi::Pending> moving;
};

namespace {

OwnedTensor contiguous(ExecContext& ctx, const Tensor& t) {
  OwnedTensor c = ctx.arena->empty(t.dtype, t.shape);
  if (t.numel() > 0) ops::copy(ctx, t, c);
  return c;
}

}  // namespace

void Context::exact_attention(ExecContext& ctx, const model::AttentionWeights& w, const Tensor& x, const Tensor& out) {
  ExactCall a(ctx, *this, w, x);
  exact_scatter(ctx, a);
  exact_attend(ctx, a);
  exact_return(ctx, a, out);
}

// Frames to sequences: every other rank's share of x's rows goes to it, and this rank's share of
// every other rank's frames arrives; Q, K and V of the frames at hand are projected meanwhile.
void Context::exact_scatter(ExecContext& ctx, ExactCall& a) {
  std::vector<mpi::Transfer> transfers;
  for (int k = 0; k < size_; ++k) {
    if (k == rank_) continue;
    a.sent.push_back(contiguous(ctx, a.rows_of(a.x, k)));
    a.got.push_back(ctx.arena->empty(a.dt, {a.mine, frames_[static_cast<std::size_t>(k)], a.x.size(2)}));
    transfers.push_back(mpi::piece_transfer(k, a.sent.back(), a.got.back()));
  }
  if (!transfers.empty()) a.moving.push_back(comm_.start_all_to_all(ctx, transfers));
  // Q, K and V of frames [first, first + n) of this rank's sequences, from x of those (mine, n, d).
  auto project = [&](const Tensor& xs, std::int64_t first) {
    const std::int64_t n = xs.size(1);
    if (a.mine == 0 || n == 0) return;
    OwnedTensor projected = ctx.arena->empty(a.dt, {a.mine, n, a.inner});
    for (const auto& [weight, into] : {std::pair{&a.w.to_q, &a.q}, std::pair{&a.w.to_k, &a.k}, std::pair{&a.w.to_v, &a.v}}) {
      ops::linear(ctx, xs, *weight, nullptr, projected);
      ops::copy(ctx, projected, into->slice(1, first, n));
      for (mpi::Pending& p : a.moving) comm_.progress(p);
    }
  };
  project(a.rows_of(a.x, rank_), first_);
  for (mpi::Pending& p : a.moving) comm_.finish(p);
  a.moving.clear();
  a.sent.clear();
  std::int64_t first = 0;
  for (int k = 0, i = 0; k < size_; first += frames_[static_cast<std::size_t>(k)], ++k)
    if (k != rank_) project(a.got[static_cast<std::size_t>(i++)], first);
  a.got.clear();
}

// The plain model's attention over the whole video (TemporalContext::attention's parameters).
void Context::exact_attend(ExecContext& ctx, ExactCall& a) {
  if (a.mine == 0) return;
  const ops::AttentionParams p = model::attention_params(a.w);
  model::attend(ctx, model::split_heads(a.q, a.w.heads), model::split_heads(a.k, a.w.heads),
                model::split_heads(a.v, a.w.heads), model::split_heads(a.o, a.w.heads), p);
}

// Sequences back to frames: each rank gets its own frames of every sequence, heads merged.
void Context::exact_return(ExecContext& ctx, ExactCall& a, const Tensor& out) {
  std::vector<mpi::Transfer> transfers;
  std::int64_t first = 0;
  for (int k = 0; k < size_; first += frames_[static_cast<std::size_t>(k)], ++k) {
    if (k == rank_) continue;
    a.sent.push_back(contiguous(ctx, a.o.slice(1, first, frames_[static_cast<std::size_t>(k)])));
    a.got.push_back(ctx.arena->empty(a.dt, {a.row_count[static_cast<std::size_t>(k)], f_, a.inner}));
    transfers.push_back(mpi::piece_transfer(k, a.sent.back(), a.got.back()));
  }
  if (!transfers.empty()) a.moving.push_back(comm_.start_all_to_all(ctx, transfers));
  if (a.mine > 0) ops::copy(ctx, a.o.slice(1, first_, f_), a.rows_of(out, rank_));
  for (mpi::Pending& p : a.moving) comm_.finish(p);
  a.moving.clear();
  for (int k = 0, i = 0; k < size_; ++k) {
    if (k == rank_) continue;
    const Tensor& got = a.got[static_cast<std::size_t>(i++)];
    if (got.numel() > 0) ops::copy(ctx, got, a.rows_of(out, k));
  }
}

}  // namespace vinf::infinity
