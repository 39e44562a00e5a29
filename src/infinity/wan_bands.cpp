#include "infinity/wan_bands.hpp"

#include "core/arena.hpp"
#include "core/error.hpp"
#include "infinity/wan_exact.hpp"
#include "ops/elementwise.hpp"

namespace vinf::infinity {

WanBandAttention::WanBandAttention(mpi::Communicator& comm, std::vector<std::int64_t> tokens)
    : comm_(comm), tokens_(std::move(tokens)) {
  VINF_CHECK(static_cast<int>(tokens_.size()) == comm_.size(), "WanBandAttention: ", tokens_.size(),
             " token counts for a group of ", comm_.size());
  std::int64_t at = 0;
  for (std::int64_t n : tokens_) {
    VINF_CHECK(n > 0, "WanBandAttention: every rank needs a band of tokens");
    token_first_.push_back(at);
    at += n;
  }
}

bool WanBandAttention::set_causal_block(std::int64_t tokens) {
  if (tokens <= 0) return false;
  for (std::int64_t first : token_first_)
    VINF_CHECK(first % tokens == 0, "WanBandAttention: a band starts at token ", first, ", inside a causal block of ",
               tokens);
  block_ = tokens;
  return true;
}

std::int64_t WanBandAttention::received_elements(const std::vector<std::int64_t>& tokens, int r, std::int64_t rows,
                                                 std::int64_t head_dim) {
  std::int64_t before = 0;
  for (int k = 0; k < r; ++k) before += tokens[static_cast<std::size_t>(k)];
  return 2 * rows * before * head_dim;
}

void WanBandAttention::attend(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const ops::AttentionParams& p) {
  const int size = comm_.size(), me = comm_.rank();
  const std::int64_t B = q.size(0), H = q.size(1), here = q.size(2), d = q.size(3);
  VINF_CHECK(block_ > 0, "WanBandAttention: no causal blocks set");
  VINF_CHECK(here == tokens_[static_cast<std::size_t>(me)], "WanBandAttention: rank ", me, " holds ", here,
             " tokens, not the ", tokens_[static_cast<std::size_t>(me)], " it was made for");
  const DType dt = q.dtype;
  const std::int64_t before = token_first_[static_cast<std::size_t>(me)];
  // This band's keys and values, (2, B, H, here, d), to every later rank; every earlier band's
  // from its rank into keys and values (B, H, before + here, d), this band's last.
  OwnedTensor packed = ctx.arena->empty(dt, {2, B, H, here, d});
  ops::copy(ctx, k, packed.view().select(0, 0));
  ops::copy(ctx, v, packed.view().select(0, 1));
  OwnedTensor keys = ctx.arena->empty(dt, {B, H, before + here, d}), values = ctx.arena->empty(dt, keys.shape);
  std::vector<OwnedTensor> got;
  std::vector<mpi::Transfer> transfers;
  for (int r = 0; r < size; ++r) {
    if (r == me) continue;
    got.push_back(ctx.arena->empty(dt, {2, B, H, r < me ? tokens_[static_cast<std::size_t>(r)] : 0, d}));
    transfers.push_back(mpi::piece_transfer(r, r > me ? packed.view() : Tensor{}, got.back()));
  }
  mpi::Pending moving = comm_.start_all_to_all(ctx, transfers);
  ops::copy(ctx, k, keys.view().slice(2, before, here));
  ops::copy(ctx, v, values.view().slice(2, before, here));
  comm_.finish(moving);
  for (int r = 0, i = 0; r < size; ++r) {
    if (r == me) continue;
    const OwnedTensor& g = got[static_cast<std::size_t>(i++)];
    if (r > me) continue;
    const std::int64_t first = token_first_[static_cast<std::size_t>(r)], n = tokens_[static_cast<std::size_t>(r)];
    ops::copy(ctx, g.view().select(0, 0), keys.view().slice(2, first, n));
    ops::copy(ctx, g.view().select(0, 1), values.view().slice(2, first, n));
  }
  attend_causal_blocks(ctx, q, keys, values, before, 0, block_, out, nullptr, p);
}

}  // namespace vinf::infinity
