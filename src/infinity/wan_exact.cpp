#include "infinity/wan_exact.hpp"

#include "core/arena.hpp"
#include "core/error.hpp"
#include "ops/attention.hpp"
#include "ops/elementwise.hpp"

namespace vinf::infinity {

WanExactAttention::WanExactAttention(mpi::Communicator& comm, std::vector<std::int64_t> tokens)
    : comm_(comm), tokens_(std::move(tokens)) {
  VINF_CHECK(static_cast<int>(tokens_.size()) == comm_.size(), "WanExactAttention: ", tokens_.size(),
             " token counts for a group of ", comm_.size());
  for (std::int64_t n : tokens_) {
    VINF_CHECK(n >= 0, "WanExactAttention: a negative token count");
    token_first_.push_back(total_);
    total_ += n;
  }
}

std::int64_t WanExactAttention::received_elements(const std::vector<std::int64_t>& tokens, int r, std::int64_t rows,
                                                  std::int64_t head_dim) {
  std::int64_t total = 0;
  for (std::int64_t n : tokens) total += n;
  const int size = static_cast<int>(tokens.size());
  const std::int64_t mine = clip_frames(rows, size, r).count, here = tokens[static_cast<std::size_t>(r)];
  return (3 * mine * (total - here) + (rows - mine) * here) * head_dim;
}

void WanExactAttention::attend(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                               const ops::AttentionParams& p) {
  const int size = comm_.size(), me = comm_.rank();
  const std::int64_t B = q.size(0), H = q.size(1), here = q.size(2), d = q.size(3), R = B * H;
  VINF_CHECK(here == tokens_[static_cast<std::size_t>(me)], "WanExactAttention: rank ", me, " holds ", here,
             " tokens, not the ", tokens_[static_cast<std::size_t>(me)], " it was made for");
  const DType dt = q.dtype;
  // This rank's q, k and v as (rows, 3, tokens here, d): a share of rows is one contiguous piece.
  OwnedTensor packed = ctx.arena->empty(dt, {B, H, 3, here, d});
  for (const auto& [i, t] : {std::pair{0, &q}, std::pair{1, &k}, std::pair{2, &v}})
    ops::copy(ctx, *t, packed.view().select(2, i));
  const Tensor rows = packed.view().reshape({R, 3, here, d});
  const FrameRange mine = clip_frames(R, size, me);
  // Every token of this rank's rows: (rows, 3, T, d).
  OwnedTensor whole = ctx.arena->empty(dt, {mine.count, 3, total_, d});
  {
    std::vector<OwnedTensor> got;
    std::vector<mpi::Transfer> transfers;
    for (int r = 0; r < size; ++r) {
      if (r == me) continue;
      const FrameRange theirs = clip_frames(R, size, r);
      got.push_back(ctx.arena->empty(dt, {mine.count, 3, tokens_[static_cast<std::size_t>(r)], d}));
      transfers.push_back(mpi::piece_transfer(r, rows.slice(0, theirs.first, theirs.count), got.back()));
    }
    mpi::Pending moving;
    if (!transfers.empty()) moving = comm_.start_all_to_all(ctx, transfers);
    if (mine.count > 0 && here > 0)
      ops::copy(ctx, rows.slice(0, mine.first, mine.count),
                whole.view().slice(2, token_first_[static_cast<std::size_t>(me)], here));
    comm_.finish(moving);
    for (int r = 0, i = 0; r < size; ++r) {
      if (r == me) continue;
      const OwnedTensor& g = got[static_cast<std::size_t>(i++)];
      if (g.numel() > 0)
        ops::copy(ctx, g, whole.view().slice(2, token_first_[static_cast<std::size_t>(r)], tokens_[static_cast<std::size_t>(r)]));
    }
  }
  // The attention of this rank's rows over the whole video (each row a batch of one head).
  OwnedTensor o = ctx.arena->empty(dt, {mine.count, 1, total_, d});
  if (mine.count > 0) {
    auto part = [&](int i) { return whole.view().select(1, i).unsqueeze(1); };
    ops::attention(ctx, part(0), part(1), part(2), nullptr, nullptr, o, p);
  }
  // Back: each rank its own tokens of every row.
  OwnedTensor result = ctx.arena->empty(dt, {R, here, d});
  std::vector<OwnedTensor> sent, got;
  std::vector<mpi::Transfer> transfers;
  for (int r = 0; r < size; ++r) {
    if (r == me) continue;
    const FrameRange theirs = clip_frames(R, size, r);
    const std::int64_t n = tokens_[static_cast<std::size_t>(r)];
    sent.push_back(ctx.arena->empty(dt, {mine.count, n, d}));
    if (sent.back().numel() > 0)
      ops::copy(ctx, o.view().select(1, 0).slice(1, token_first_[static_cast<std::size_t>(r)], n), sent.back());
    got.push_back(ctx.arena->empty(dt, {theirs.count, here, d}));
    transfers.push_back(mpi::piece_transfer(r, sent.back(), got.back()));
  }
  mpi::Pending moving;
  if (!transfers.empty()) moving = comm_.start_all_to_all(ctx, transfers);
  if (mine.count > 0 && here > 0)
    ops::copy(ctx, o.view().select(1, 0).slice(1, token_first_[static_cast<std::size_t>(me)], here),
              result.view().slice(0, mine.first, mine.count));
  comm_.finish(moving);
  for (int r = 0, i = 0; r < size; ++r) {
    if (r == me) continue;
    const FrameRange theirs = clip_frames(R, size, r);
    const OwnedTensor& g = got[static_cast<std::size_t>(i++)];
    if (g.numel() > 0) ops::copy(ctx, g, result.view().slice(0, theirs.first, theirs.count));
  }
  ops::copy(ctx, result.view().reshape({B, H, here, d}), out);
}

}  // namespace vinf::infinity
