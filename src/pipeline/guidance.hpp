// Classifier-free guidance, written once for every denoising loop: how the two branches (the
// negative prompt's and the prompt's predictions) are laid out, and their combination
// uncond + scale (cond - uncond) into the prediction the solver steps with.
#pragma once

#include <cstdint>

#include "core/tensor.hpp"
#include "ops/context.hpp"

namespace vinf::mpi {
class Communicator;
}

namespace vinf::pipeline {

struct Guidance {
  enum class Layout {
    none,  // the prompt alone (guidance 1 or below)
    batched,  // [negative, prompt] as one batch of 2 on this rank
    across_ranks,  // --parallel.cfg 2: this rank's branch (cfg index 0 the negative), all-gathered
  };
  Layout layout = Layout::none;
  float scale = 1.f;
  mpi::Communicator* cfg_group = nullptr;  // across_ranks: the two ranks of the branches

  // none when not guided, across_ranks with a cfg group, else batched.
  static Guidance of(bool guided, float scale, mpi::Communicator* cfg_group);
  // The batch each model call runs on this rank: 2 when batched, else 1.
  std::int64_t batch() const { return layout == Layout::batched ? 2 : 1; }
  // pred (this rank's batch) into the guided prediction `out` (batch 1). `both` holds the two
  // branches [2, ...] when across_ranks (unused otherwise).
  void combine(ExecContext& ctx, const Tensor& pred, const Tensor& both, const Tensor& out) const;
  // The text each model call takes, text [batch(), L, D]: [negative, prompt] when batched, this
  // rank's branch across ranks (cfg index 0 the negative prompt), else the prompt ([1, L, D] each).
  void text_batch(ExecContext& ctx, const Tensor& prompt, const Tensor& negative, int cfg_index,
                  const Tensor& text) const;
};

}  // namespace vinf::pipeline
