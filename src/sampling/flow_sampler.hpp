// The tensor side of flow_scheduler.hpp: the latents and UniPC's memories (the previous step's
// corrected latents and the last two data predictions) of one clip, updated in place.
#pragma once

#include "core/arena.hpp"
#include "ops/context.hpp"
#include "sampling/flow_scheduler.hpp"
#include "sampling/solver.hpp"

namespace vinf::sampling {

class FlowSampler : public Solver {
 public:
  // The latents and the memories, f32 tensors of `shape` from arena.
  FlowSampler(const FlowScheduler& scheduler, Arena& arena, const Shape& shape);

  // x: written by the caller before the first step, updated by every step.
  const Tensor& latents() const override { return x_; }
  // The memories after the last step taken: its corrected latents and the data predictions of it
  // and the step before (what a checkpoint keeps to continue UniPC bit for bit).
  const Tensor& last_corrected() const { return last_; }
  const Tensor& previous_x0() const { return m1_; }
  const Tensor& second_previous_x0() const { return m2_; }
  std::vector<std::pair<std::string, Tensor>> memories() const override {
    return {{"previous_x0", m1_}, {"last_corrected", last_}, {"second_previous_x0", m2_}};
  }
  static std::vector<std::string> memory_names() { return {"previous_x0", "last_corrected", "second_previous_x0"}; }

  // Step i with v the (guided) model output for latents() at timesteps()[i]. Steps come in order.
  void step(ExecContext& ctx, int i, const Tensor& v);
  // The same through the Solver interface (the flow sampler draws no noise).
  void step(ExecContext& ctx, int i, const Tensor& prediction, const Tensor& /*noise*/) override {
    step(ctx, i, prediction);
  }
  // Continues after step `done - 1` from copies of the latents and the memories.
  void restore(ExecContext& ctx, int done, const Tensor& x, const Tensor& last, const Tensor& m1, const Tensor& m2);
  int steps_done() const { return done_; }
  // SkyReels-V2's diffusion-forcing pipeline updates each frame in place, and its scheduler keeps
  // the very tensor it was given as the sample to correct from: after a step without a corrector
  // (a frame's first), that sample is the step's own result. True reproduces it.
  void set_uncorrected_last_is_result(bool on) { uncorrected_last_is_result_ = on; }

 private:
  const FlowScheduler& scheduler_;
  OwnedTensor x_, last_, m1_, m2_, m0_;
  int done_ = 0;
  bool uncorrected_last_is_result_ = false;
};

}  // namespace vinf::sampling
