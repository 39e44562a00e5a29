// Exact mode for a Wan2.1 transformer whose video is split over the ranks of a group by frames:
// the self-attention of every block over all the video's tokens, as one rank computes it.
//
// Ulysses-style over (sample, head) rows, with ring passes where the rows do not divide: the N
// ranks form r = N / u groups of u consecutive ranks, u the largest divisor of N that divides the
// R = B x heads rows (ulysses_degree). Within a group an all-to-all gives each member R / u rows
// over all the group's tokens; the groups then pass their keys and values of those rows round a
// ring (r - 1 passes, each overlapped with the attention over the block at hand), every part's
// output kept with its log-sum-exp and merged at the end (the softmax of the log-sum-exps weighs
// them); a second all-to-all returns each member its own tokens of every row. R divisible by N is
// pure Ulysses (one group); 4 heads on 3 ranks is a pure ring (u = 1), every rank keeping all rows
// of its own tokens. The work is shared evenly whatever the heads; the ring keeps a rank's keys
// and values to two blocks, its outputs to the r parts of its rows.
//
// Elements received per rank and block, in the activations' dtype: 3 (R/u) (T_g - T_k) d from the
// group, 2 (R/u) (T - T_g) d round the ring and (R - R/u) T_k d coming back (T tokens in all, T_g
// in the group, T_k here, d the head size).
#pragma once

#include <cstdint>
#include <vector>

#include "infinity/config.hpp"
#include "model/wan_transformer.hpp"
#include "mpi/communicator.hpp"

namespace vinf::infinity {

// Attention under diffusion forcing's block-causal mask, over dimension 2 of 4-dimensional
// operands: queries q of the video's tokens from q0, keys k and values v of its tokens from k0; each
// run of queries within one block of `block` tokens sees the keys before its block's end (when it
// sees none: a zero output and, with lse, a log-sum-exp of -inf, which weighs nothing in a merge).
void attend_causal_blocks(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t q0,
                          std::int64_t k0, std::int64_t block, const Tensor& out, const Tensor* lse,
                          const ops::AttentionParams& p);

class WanExactAttention final : public model::WanSelfAttention {
 public:
  // tokens[r]: rank r's tokens (its latent frames times the patches of a frame), in video order,
  // the same list on every rank of comm.
  WanExactAttention(mpi::Communicator& comm, std::vector<std::int64_t> tokens);

  void attend(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
              const ops::AttentionParams& p) override;
  // Diffusion forcing's causal blocks, applied in every part of the ring (a part wholly after a
  // block's end is skipped for its queries).
  bool set_causal_block(std::int64_t tokens) override;

  // The ranks of a Ulysses group for `ranks` ranks and `rows` rows: the largest divisor of both.
  static int ulysses_degree(int ranks, std::int64_t rows);
  // The elements rank r receives in one attend() over R rows of head size d.
  static std::int64_t received_elements(const std::vector<std::int64_t>& tokens, int r, std::int64_t rows,
                                        std::int64_t head_dim);

 private:
  mpi::Communicator& comm_;
  std::vector<std::int64_t> tokens_, token_first_;
  std::int64_t total_ = 0, block_ = 0;
};

}  // namespace vinf::infinity
