// Exact mode for a Wan2.1 transformer whose video is split over the ranks of a group by frames:
// the self-attention of every block over all the video's tokens, as one rank computes it.
//
// Ulysses-style, over (sample, head) rows: the B x heads rows of the attention are shared out,
// rank k taking rows [k R / N, (k + 1) R / N) of R = B x heads (clip_frames's split). An all-to-all sends every rank the
// queries, keys and values of its rows for the tokens here, so that each holds every token of its
// rows; it attends there, and a second all-to-all returns each rank its own tokens of every row.
// Any number of heads goes on any number of ranks: 4 heads of a CFG batch of 2 on 3 ranks are 8
// rows shared 3, 3, 2; a rank left without rows only passes data on.
//
// Bytes received per rank and block, in the activations' dtype: 3 R_k (T - T_k) d going out and
// (R - R_k) T_k d coming back (T tokens in all, T_k here, d the head size).
#pragma once

#include <cstdint>
#include <vector>

#include "infinity/config.hpp"
#include "model/wan_transformer.hpp"
#include "mpi/communicator.hpp"

namespace vinf::infinity {

class WanExactAttention final : public model::WanSelfAttention {
 public:
  // tokens[r]: rank r's tokens (its latent frames times the patches of a frame), in video order,
  // the same list on every rank of comm.
  WanExactAttention(mpi::Communicator& comm, std::vector<std::int64_t> tokens);

  void attend(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
              const ops::AttentionParams& p) override;

  // The elements rank r receives in one attend() over R rows of head size d.
  static std::int64_t received_elements(const std::vector<std::int64_t>& tokens, int r, std::int64_t rows,
                                        std::int64_t head_dim);

 private:
  mpi::Communicator& comm_;
  std::vector<std::int64_t> tokens_, token_first_;
  std::int64_t total_ = 0;
};

}  // namespace vinf::infinity
