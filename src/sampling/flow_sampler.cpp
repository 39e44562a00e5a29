#include "sampling/flow_sampler.hpp"

#include <utility>

#include "core/error.hpp"
#include "ops/elementwise.hpp"

namespace vinf::sampling {

FlowSampler::FlowSampler(const FlowScheduler& scheduler, Arena& arena, const Shape& shape)
    : scheduler_(scheduler),
      x_(arena.empty(DType::f32, shape)),
      last_(arena.empty(DType::f32, shape)),
      m1_(arena.empty(DType::f32, shape)),
      m2_(arena.empty(DType::f32, shape)),
      m0_(arena.empty(DType::f32, shape)),
      done_(scheduler.first_step()) {}

void FlowSampler::step(ExecContext& ctx, int i, const Tensor& v) {
  VINF_CHECK(i == done_, "flow sampler: step ", i, " after ", done_, " steps");
  check_same_shape("flow sampler", "v", v, "latents", x_);
  const FlowStepCoefficients k = scheduler_.coefficients(i);
  auto f = [](double c) { return static_cast<float>(c); };
  if (scheduler_.solver() == FlowSolver::euler) {
    ops::axpby(ctx, 1.f, x_, f(k.euler_dt), v, x_);
    ++done_;
    return;
  }
  ops::axpby(ctx, 1.f, x_, f(k.x0_v), v, m0_);  // m_i = x_i - s_i v_i
  if (k.correct) {  // UniC: x_i corrected into last_
    ops::axpby(ctx, f(k.c_last), last_, f(k.c_m1), m1_, last_);
    if (k.c_m2 != 0) ops::axpby(ctx, 1.f, last_, f(k.c_m2), m2_, last_);
    ops::axpby(ctx, 1.f, last_, f(k.c_m0), m0_, last_);
  } else {
    ops::copy(ctx, x_, last_);
  }
  // UniP from the corrected latents.
  ops::axpby(ctx, f(k.p_x), last_, f(k.p_m0), m0_, x_);
  if (k.p_m1 != 0) ops::axpby(ctx, 1.f, x_, f(k.p_m1), m1_, x_);
  if (!k.correct && uncorrected_last_is_result_) ops::copy(ctx, x_, last_);
  std::swap(m2_, m1_);
  std::swap(m1_, m0_);
  ++done_;
}

void FlowSampler::restore(ExecContext& ctx, int done, const Tensor& x, const Tensor& last, const Tensor& m1,
                          const Tensor& m2) {
  VINF_CHECK(done >= scheduler_.first_step() && done <= scheduler_.steps(), "flow sampler: restore after ", done,
             " steps");
  ops::copy(ctx, x, x_);
  ops::copy(ctx, last, last_);
  ops::copy(ctx, m1, m1_);
  ops::copy(ctx, m2, m2_);
  done_ = done;
}

}  // namespace vinf::sampling
