#include "sampling/sampler.hpp"

#include <utility>

#include "core/error.hpp"
#include "ops/elementwise.hpp"

namespace vinf::sampling {

void guide(ExecContext& ctx, const Tensor& uncond, const Tensor& cond, float scale, const Tensor& out) {
  ops::axpby(ctx, 1.f - scale, uncond, scale, cond, out);
}

void step_frames(ExecContext& ctx, const Scheduler& scheduler, const Tensor& x, const Tensor& eps, const Tensor& noise,
                 const std::vector<int>& steps, int frame_dim, Arena& arena) {
  VINF_CHECK(eps.shape == x.shape && static_cast<std::int64_t>(steps.size()) == x.size(frame_dim),
             "step_frames: latents ", x.shape.str(), ", model output ", eps.shape.str(), ", ", steps.size(), " steps");
  for (std::size_t j = 0; j < steps.size(); ++j) {
    if (steps[j] < 0) continue;
    const StepCoefficients k = scheduler.coefficients(steps[j]);
    VINF_CHECK(k.c_m1 == 0, "step_frames: ", scheduler_name(scheduler.kind()),
               " is a multistep solver; one step per frame needs a first-order one (ddim)");
    const auto f = static_cast<std::int64_t>(j);
    const Tensor xf = x.slice(frame_dim, f, 1), ef = eps.slice(frame_dim, f, 1);
    OwnedTensor x0 = arena.empty(DType::f32, xf.shape);
    ops::axpby(ctx, static_cast<float>(k.x0_x), xf, static_cast<float>(k.x0_eps), ef, x0);
    ops::axpby(ctx, static_cast<float>(k.c_x), xf, static_cast<float>(k.c_m0), x0, xf);
    if (k.c_eps != 0) ops::axpby(ctx, 1.f, xf, static_cast<float>(k.c_eps), ef, xf);
    if (k.c_noise != 0) ops::axpby(ctx, 1.f, xf, static_cast<float>(k.c_noise), noise.slice(frame_dim, f, 1), xf);
  }
}

Sampler::Sampler(const Scheduler& scheduler, Arena& arena, const Shape& shape)
    : scheduler_(scheduler),
      x_(arena.empty(DType::f32, shape)),
      m0_(arena.empty(DType::f32, shape)),
      m1_(arena.empty(DType::f32, shape)) {}

void Sampler::restore(ExecContext& ctx, const Tensor& latents, const Tensor& previous_x0) {
  ops::copy(ctx, latents, x_);
  ops::copy(ctx, previous_x0, m0_);
}

void Sampler::step(ExecContext& ctx, int i, const Tensor& eps, const Tensor& noise) {
  VINF_CHECK(eps.shape == x_.shape, "sampler: the model output ", eps.shape.str(), " does not match the latents ",
             x_.shape.str());
  const StepCoefficients k = scheduler_.coefficients(i);
  std::swap(m0_, m1_);  // the previous data prediction moves down the history
  ops::axpby(ctx, static_cast<float>(k.x0_x), x_, static_cast<float>(k.x0_eps), eps, m0_);
  ops::axpby(ctx, static_cast<float>(k.c_x), x_, static_cast<float>(k.c_m0), m0_, x_);
  if (k.c_m1 != 0) ops::axpby(ctx, 1.f, x_, static_cast<float>(k.c_m1), m1_, x_);
  if (k.c_eps != 0) ops::axpby(ctx, 1.f, x_, static_cast<float>(k.c_eps), eps, x_);
  if (k.c_noise != 0) {
    VINF_CHECK(noise.shape == x_.shape, "sampler: step ", i, " of ", scheduler_name(scheduler_.kind()),
               " needs noise of shape ", x_.shape.str(), ", got ", noise.shape.str());
    ops::axpby(ctx, 1.f, x_, static_cast<float>(k.c_noise), noise, x_);
  }
}

}  // namespace vinf::sampling
