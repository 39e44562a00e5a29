#include "pipeline/guidance.hpp"

#include "mpi/communicator.hpp"
#include "ops/elementwise.hpp"
#include "sampling/sampler.hpp"

namespace vinf::pipeline {

Guidance Guidance::of(bool guided, float scale, mpi::Communicator* cfg_group) {
  Guidance g;
  g.scale = scale;
  g.cfg_group = guided ? cfg_group : nullptr;
  g.layout = !guided ? Layout::none : cfg_group ? Layout::across_ranks : Layout::batched;
  return g;
}

void Guidance::combine(ExecContext& ctx, const Tensor& pred, const Tensor& both, const Tensor& out) const {
  switch (layout) {
    case Layout::none: ops::copy(ctx, pred, out); return;
    case Layout::across_ranks:
      cfg_group->all_gather(ctx, pred, both);  // [uncond, cond]: cfg index 0 runs the negative prompt
      sampling::guide(ctx, both.slice(0, 0, 1), both.slice(0, 1, 1), scale, out);
      return;
    case Layout::batched: sampling::guide(ctx, pred.slice(0, 0, 1), pred.slice(0, 1, 1), scale, out); return;
  }
}

void Guidance::text_batch(ExecContext& ctx, const Tensor& prompt, const Tensor& negative, int cfg_index,
                          const Tensor& text) const {
  switch (layout) {
    case Layout::none: ops::copy(ctx, prompt, text); return;
    case Layout::across_ranks: ops::copy(ctx, cfg_index == 0 ? negative : prompt, text); return;
    case Layout::batched:
      ops::copy(ctx, negative, text.slice(0, 0, 1));
      ops::copy(ctx, prompt, text.slice(0, 1, 1));
      return;
  }
}

}  // namespace vinf::pipeline
