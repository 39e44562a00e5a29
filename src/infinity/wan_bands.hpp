// Diffusion forcing's windows over ranks in bands of causal blocks: rank r holds a band of whole
// blocks of the window (its frames follow rank r - 1's), at the noise levels the wave has reached
// there. Under the block-causal mask a band's queries see the keys of every earlier band and of
// its own blocks up to theirs, never a later band's: each self-attention sends this rank's keys and
// values to every later rank and takes every earlier rank's, one way. Rank r's layer waits only
// for the earlier ranks' same layer, so the ranks run through the blocks a few layers apart.
//
// Elements received per rank and block: 2 R T_<r d (R = B x heads rows, T_<r the tokens of the
// bands before rank r, d the head size); the first rank receives nothing, the last the most. Its
// attention attends its queries over T_<r plus its own keys, so the later bands also compute more.
#pragma once

#include <cstdint>
#include <vector>

#include "model/wan_transformer.hpp"
#include "mpi/communicator.hpp"

namespace vinf::infinity {

class WanBandAttention final : public model::WanSelfAttention {
 public:
  // tokens[r]: rank r's tokens in video order, the same list on every rank of comm; every band
  // must start at a block's first token (checked by set_causal_block).
  WanBandAttention(mpi::Communicator& comm, std::vector<std::int64_t> tokens);

  // Causal blocks are what makes the bands work: false for 0 (every token sees every other).
  bool set_causal_block(std::int64_t tokens) override;
  void attend(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
              const ops::AttentionParams& p) override;

  static std::int64_t received_elements(const std::vector<std::int64_t>& tokens, int r, std::int64_t rows,
                                        std::int64_t head_dim);

 private:
  mpi::Communicator& comm_;
  std::vector<std::int64_t> tokens_, token_first_;
  std::int64_t block_ = 0;
};

}  // namespace vinf::infinity
