// What a denoising loop and its checkpoints need of a solver, whichever family's: the UNet family's
// samplers (DPM-Solver++ SDE/ODE, DDIM: sampling::Sampler) and the Wan family's flow-matching
// sampler (UniPC, Euler: sampling::FlowSampler).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"
#include "ops/context.hpp"

namespace vinf::sampling {

class Solver {
 public:
  virtual ~Solver() = default;
  // The latents: written by the caller before the first step, updated by every step.
  virtual const Tensor& latents() const = 0;
  // Step i: `prediction` is the guided model output for latents() at the schedule's step i (the
  // noise for the UNet family, the velocity for the flow sampler); `noise` a standard normal draw
  // of the latents' shape where the solver is stochastic (ignored otherwise).
  virtual void step(ExecContext& ctx, int i, const Tensor& prediction, const Tensor& noise) = 0;
  // The memories a checkpoint keeps beside the latents to continue bit for bit, by their names
  // under a checkpoint's /state ("previous_x0" first, which every solver has).
  virtual std::vector<std::pair<std::string, Tensor>> memories() const = 0;
};

}  // namespace vinf::sampling
