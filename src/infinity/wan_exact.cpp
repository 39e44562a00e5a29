#include "infinity/wan_exact.hpp"

#include <algorithm>
#include <limits>

#include "core/arena.hpp"
#include "core/error.hpp"
#include "ops/attention.hpp"
#include "ops/elementwise.hpp"
#include "ops/softmax.hpp"

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

int WanExactAttention::ulysses_degree(int ranks, std::int64_t rows) {
  int u = 1;
  for (int d = 1; d <= ranks; ++d)
    if (ranks % d == 0 && rows % d == 0) u = d;
  return u;
}

std::int64_t WanExactAttention::received_elements(const std::vector<std::int64_t>& tokens, int r, std::int64_t rows,
                                                  std::int64_t head_dim) {
  const int size = static_cast<int>(tokens.size()), u = ulysses_degree(size, rows), g = r / u;
  std::int64_t total = 0, group = 0;
  for (int k = 0; k < size; ++k) {
    total += tokens[static_cast<std::size_t>(k)];
    if (k / u == g) group += tokens[static_cast<std::size_t>(k)];
  }
  const std::int64_t mine = rows / u, here = tokens[static_cast<std::size_t>(r)];
  // Out to the group (q, k, v of its rows), the ring (k and v of the other groups' tokens), back.
  return (3 * mine * (group - here) + 2 * mine * (total - group) + (rows - mine) * here) * head_dim;
}

namespace {

// The tokens of each Ulysses group of u consecutive ranks, and where each group's start.
void group_spans(const std::vector<std::int64_t>& tokens, int u, std::vector<std::int64_t>& group_tokens,
                 std::vector<std::int64_t>& group_first) {
  const int size = static_cast<int>(tokens.size()), r = size / u;
  group_tokens.assign(static_cast<std::size_t>(r), 0);
  group_first.assign(static_cast<std::size_t>(r), 0);
  for (int k = 0; k < size; ++k) group_tokens[static_cast<std::size_t>(k / u)] += tokens[static_cast<std::size_t>(k)];
  for (int k = 1; k < r; ++k)
    group_first[static_cast<std::size_t>(k)] =
        group_first[static_cast<std::size_t>(k - 1)] + group_tokens[static_cast<std::size_t>(k - 1)];
}

// The ring's r parts of each row's output, (r, rows, 1, T_g, d), merged into o by their
// log-sum-exps (r, rows, 1, T_g): each part weighed by the softmax of the log-sum-exps over the
// parts, in f32 whatever the activations' dtype, rounded once at the end.
void merge_ring_parts(ExecContext& ctx, const Tensor& parts, const Tensor& lse, const Tensor& o) {
  const std::int64_t r = parts.size(0), rows = parts.size(1), tg = parts.size(3);
  const std::int64_t n = rows * tg;
  OwnedTensor by_row = ctx.arena->empty(DType::f32, {n, r}), probs = ctx.arena->empty(DType::f32, {n, r});
  OwnedTensor weights = ctx.arena->empty(DType::f32, {r, n});
  ops::copy(ctx, lse.reshape({r, n}).permute({1, 0}), by_row);
  ops::softmax(ctx, by_row, probs);
  ops::copy(ctx, probs.view().permute({1, 0}), weights);
  OwnedTensor sum = ctx.arena->empty(DType::f32, o.shape), part = ctx.arena->empty(DType::f32, o.shape);
  for (std::int64_t step = 0; step < r; ++step) {
    ops::copy(ctx, parts.select(0, step), part);
    ops::mul(ctx, part, weights.view().select(0, step).reshape({rows, 1, tg, 1}).expand(o.shape),
             step == 0 ? sum.view() : part.view());
    if (step > 0) ops::add(ctx, sum, part, sum);
  }
  ops::copy(ctx, sum, o);
}

}  // namespace

bool WanExactAttention::set_causal_block(std::int64_t tokens) {
  VINF_CHECK(tokens >= 0, "WanExactAttention: causal blocks of ", tokens, " tokens");
  block_ = tokens;
  return true;
}

void attend_causal_blocks(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t q0,
                          std::int64_t k0, std::int64_t block, const Tensor& out, const Tensor* lse,
                          const ops::AttentionParams& p) {
  VINF_CHECK(block > 0 && q.rank() == 4 && k.rank() == 4, "attend_causal_blocks: blocks of ", block, " tokens");
  const std::int64_t tq = q.size(2), tk = k.size(2);
  for (std::int64_t a = 0; a < tq;) {
    const std::int64_t end = ((q0 + a) / block + 1) * block, n = std::min(tq - a, end - q0 - a);
    const std::int64_t seen = std::clamp<std::int64_t>(end - k0, 0, tk);
    const Tensor o = out.slice(2, a, n);
    if (seen == 0) {
      ops::fill(ctx, o, 0.0);
      if (lse) ops::fill(ctx, lse->slice(2, a, n), -std::numeric_limits<double>::infinity());
    } else if (lse) {
      OwnedTensor part_lse = ctx.arena->empty(DType::f32, {q.size(0), q.size(1), n});
      const Tensor part_view = part_lse.view();
      ops::attention(ctx, q.slice(2, a, n), k.slice(2, 0, seen), v.slice(2, 0, seen), nullptr, nullptr, o, p,
                     &part_view);
      ops::copy(ctx, part_lse, lse->slice(2, a, n));
    } else {
      ops::attention(ctx, q.slice(2, a, n), k.slice(2, 0, seen), v.slice(2, 0, seen), nullptr, nullptr, o, p);
    }
    a += n;
  }
}

void WanExactAttention::attend(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                               const ops::AttentionParams& p) {
  const int size = comm_.size(), me = comm_.rank();
  const std::int64_t B = q.size(0), H = q.size(1), here = q.size(2), d = q.size(3), R = B * H;
  VINF_CHECK(here == tokens_[static_cast<std::size_t>(me)], "WanExactAttention: rank ", me, " holds ", here,
             " tokens, not the ", tokens_[static_cast<std::size_t>(me)], " it was made for");
  const DType dt = q.dtype;
  // The layout: Ulysses groups of u consecutive ranks share out the rows (R / u each) over the
  // group's tokens; the r = N / u groups pass their keys and values round a ring.
  const int u = ulysses_degree(size, R), r = size / u, g = me / u, j = me % u;
  const std::int64_t rows = R / u;
  std::vector<std::int64_t> group_tokens, group_first;
  group_spans(tokens_, u, group_tokens, group_first);
  const std::int64_t tg = group_tokens[static_cast<std::size_t>(g)];
  // Where rank k's tokens sit among its group's.
  auto offset_in_group = [&](int k2) {
    return token_first_[static_cast<std::size_t>(k2)] - group_first[static_cast<std::size_t>(k2 / u)];
  };
  // This rank's q, k and v as (rows, 3, tokens here, d): a share of rows is one contiguous piece.
  OwnedTensor packed = ctx.arena->empty(dt, {B, H, 3, here, d});
  for (const auto& [i, t] : {std::pair{0, &q}, std::pair{1, &k}, std::pair{2, &v}})
    ops::copy(ctx, *t, packed.view().select(2, i));
  const Tensor all_rows = packed.view().reshape({R, 3, here, d});
  // 1. Within the group: every member's tokens of this rank's rows, (rows, 3, T_g, d).
  OwnedTensor whole = ctx.arena->empty(dt, {rows, 3, tg, d});
  {
    std::vector<OwnedTensor> got;
    std::vector<mpi::Transfer> transfers;
    for (int k2 = 0; k2 < size; ++k2) {
      if (k2 == me) continue;
      const bool member = k2 / u == g;
      got.push_back(ctx.arena->empty(dt, {member ? rows : 0, 3, tokens_[static_cast<std::size_t>(k2)], d}));
      const Tensor send = member ? all_rows.slice(0, (k2 % u) * rows, rows) : all_rows.slice(0, 0, 0);
      transfers.push_back(mpi::piece_transfer(k2, send, got.back()));
    }
    mpi::Pending moving;
    if (!transfers.empty()) moving = comm_.start_all_to_all(ctx, transfers);
    if (here > 0) ops::copy(ctx, all_rows.slice(0, j * rows, rows), whole.view().slice(2, offset_in_group(me), here));
    comm_.finish(moving);
    for (int k2 = 0, i = 0; k2 < size; ++k2) {
      if (k2 == me) continue;
      const OwnedTensor& got_k = got[static_cast<std::size_t>(i++)];
      if (got_k.numel() > 0)
        ops::copy(ctx, got_k, whole.view().slice(2, offset_in_group(k2), tokens_[static_cast<std::size_t>(k2)]));
    }
  }
  // 2. Round the ring: the group's queries against each group's keys and values in turn, each
  // part's output and log-sum-exp kept; the next block travels while this one is attended.
  const Tensor queries = whole.view().select(1, 0).unsqueeze(1);  // (rows, 1, T_g, d)
  OwnedTensor parts = ctx.arena->empty(dt, {r, rows, 1, tg, d}), lse = ctx.arena->empty(DType::f32, {r, rows, 1, tg});
  OwnedTensor current = ctx.arena->empty(dt, {rows, 2, tg, d});
  ops::copy(ctx, whole.view().slice(1, 1, 2), current);
  const int next = ((g + 1) % r) * u + j, prev = ((g + r - 1) % r) * u + j;
  for (int step = 0; step < r; ++step) {
    OwnedTensor incoming;
    mpi::Pending moving;
    if (step + 1 < r) {
      const int from = (g - step - 1 + 2 * r) % r;
      incoming = ctx.arena->empty(dt, {rows, 2, group_tokens[static_cast<std::size_t>(from)], d});
      std::vector<mpi::Transfer> pass;
      if (next == prev) {
        pass.push_back(mpi::piece_transfer(next, current, incoming));
      } else {
        pass.push_back(mpi::piece_transfer(next, current, Tensor{}));
        pass.push_back(mpi::piece_transfer(prev, Tensor{}, incoming));
      }
      moving = comm_.start_exchange(ctx, pass);
    }
    const Tensor lse_part = lse.view().select(0, step);
    const int from = (g - step + r) % r;
    if (tg > 0 && rows > 0 && block_ == 0)
      ops::attention(ctx, queries, current.view().select(1, 0).unsqueeze(1), current.view().select(1, 1).unsqueeze(1),
                     nullptr, nullptr, parts.view().select(0, step), p, &lse_part);
    if (tg > 0 && rows > 0 && block_ > 0)  // a part wholly after a block's end weighs nothing for its queries
      attend_causal_blocks(ctx, queries, current.view().select(1, 0).unsqueeze(1),
                           current.view().select(1, 1).unsqueeze(1), group_first[static_cast<std::size_t>(g)],
                           group_first[static_cast<std::size_t>(from)], block_, parts.view().select(0, step), &lse_part,
                           p);
    comm_.finish(moving);
    if (step + 1 < r) current = std::move(incoming);
  }
  // The parts merged: weights softmax over the parts of each row's log-sum-exps.
  OwnedTensor o = ctx.arena->empty(dt, {rows, 1, tg, d});
  if (r == 1) {
    ops::copy(ctx, parts.view().select(0, 0), o);
  } else if (tg > 0 && rows > 0) {
    merge_ring_parts(ctx, parts, lse, o);
  }
  // 3. Back within the group: each member its own tokens of this rank's rows.
  OwnedTensor result = ctx.arena->empty(dt, {R, here, d});
  std::vector<OwnedTensor> sent, got;
  std::vector<mpi::Transfer> transfers;
  for (int k2 = 0; k2 < size; ++k2) {
    if (k2 == me) continue;
    const bool member = k2 / u == g;
    const std::int64_t n = member ? tokens_[static_cast<std::size_t>(k2)] : 0;
    sent.push_back(ctx.arena->empty(dt, {member ? rows : 0, n, d}));
    if (sent.back().numel() > 0) ops::copy(ctx, o.view().select(1, 0).slice(1, offset_in_group(k2), n), sent.back());
    got.push_back(ctx.arena->empty(dt, {member ? rows : 0, member ? here : 0, d}));
    transfers.push_back(mpi::piece_transfer(k2, sent.back(), got.back()));
  }
  mpi::Pending moving;
  if (!transfers.empty()) moving = comm_.start_all_to_all(ctx, transfers);
  if (rows > 0 && here > 0)
    ops::copy(ctx, o.view().select(1, 0).slice(1, offset_in_group(me), here), result.view().slice(0, j * rows, rows));
  comm_.finish(moving);
  for (int k2 = 0, i = 0; k2 < size; ++k2) {
    if (k2 == me) continue;
    const OwnedTensor& got_k = got[static_cast<std::size_t>(i++)];
    if (got_k.numel() > 0) ops::copy(ctx, got_k, result.view().slice(0, (k2 % u) * rows, rows));
  }
  ops::copy(ctx, result.view().reshape({B, H, here, d}), out);
}

}  // namespace vinf::infinity
