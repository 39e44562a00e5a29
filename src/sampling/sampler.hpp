// The tensor side of a scheduler: the latents and the multistep memory of one clip, updated in
// place on the runtime's device with the coefficients of scheduler.hpp. Classifier-free guidance
// combines the two branches' predictions before the update.
#pragma once

#include <vector>

#include "core/arena.hpp"
#include "ops/context.hpp"
#include "sampling/scheduler.hpp"
#include "sampling/solver.hpp"

namespace vinf::sampling {

// out = uncond + scale (cond - uncond), batch order [uncond, cond] (model-spec §0.8). out may be
// either input.
void guide(ExecContext& ctx, const Tensor& uncond, const Tensor& cond, float scale, const Tensor& out);

// One first-order scheduler step per frame, each at its own step index (FIFO-Diffusion's diagonal
// denoising): frame j of x, eps and noise (frame-major (F, C, H, W) or any layout whose dim
// `frame_dim` is the frames) goes through step steps[j] (-1: left as it is). noise is read only
// where the step is stochastic. Throws when the scheduler is multistep (the frames would need
// their own memories): DDIM.
void step_frames(ExecContext& ctx, const Scheduler& scheduler, const Tensor& x, const Tensor& eps, const Tensor& noise,
                 const std::vector<int>& steps, int frame_dim, Arena& arena);

class Sampler : public Solver {
 public:
  // The latents and the solver memory, f32 tensors of `shape` from arena.
  Sampler(const Scheduler& scheduler, Arena& arena, const Shape& shape);

  // x: written by the caller before the first step (initial noise), updated by every step.
  const Tensor& latents() const override { return x_; }
  // The data prediction of the last step taken (the multistep memory a checkpoint keeps).
  const Tensor& previous_x0() const { return m0_; }
  std::vector<std::pair<std::string, Tensor>> memories() const override { return {{"previous_x0", m0_}}; }

  // Step i: eps is the guided model output for latents() at timesteps()[i]; noise a standard
  // normal draw of the same shape when the scheduler is stochastic (ignored otherwise). Steps must
  // come in order; the first step of a resumed run needs previous_x0 restored through restore().
  void step(ExecContext& ctx, int i, const Tensor& eps, const Tensor& noise) override;
  // Sets the latents and the multistep memory (copies) for continuing after step `done - 1`.
  void restore(ExecContext& ctx, const Tensor& latents, const Tensor& previous_x0);

 private:
  const Scheduler& scheduler_;
  OwnedTensor x_, m0_, m1_;
};

}  // namespace vinf::sampling
