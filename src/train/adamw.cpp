#include "train/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "ops/elementwise.hpp"
#include "ops/optim.hpp"

namespace vinf::train {

std::string adamw_problem(const AdamWSettings& s) {
  auto finite = [](double v) { return std::isfinite(v); };
  if (!finite(s.lr) || s.lr < 0) return "the learning rate must be >= 0, got " + std::to_string(s.lr);
  if (!finite(s.beta1) || s.beta1 < 0 || s.beta1 >= 1) return "beta1 must be in [0, 1), got " + std::to_string(s.beta1);
  if (!finite(s.beta2) || s.beta2 < 0 || s.beta2 >= 1) return "beta2 must be in [0, 1), got " + std::to_string(s.beta2);
  if (!finite(s.eps) || s.eps <= 0) return "eps must be > 0, got " + std::to_string(s.eps);
  if (!finite(s.weight_decay) || s.weight_decay < 0) return "weight decay must be >= 0, got " + std::to_string(s.weight_decay);
  if (!finite(s.clip_grad_norm) || s.clip_grad_norm < 0)
    return "the gradient clipping norm must be >= 0 (0: none), got " + std::to_string(s.clip_grad_norm);
  return "";
}

AdamWSettings parse_adamw_json(const std::string& json, const std::string& source, const AdamWSettings& defaults) {
  AdamWSettings s = defaults;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    VINF_INPUT_FAIL(source, " is not valid JSON: ", e.what());
  }
  VINF_INPUT_CHECK(j.is_object(), source, " must be a JSON object with lr, betas, eps, weight_decay, clip_grad_norm");
  auto number = [&](const char* key, double& out) {
    if (!j.contains(key)) return;
    VINF_INPUT_CHECK(j[key].is_number(), source, ": '", key, "' must be a number, got ", j[key].dump());
    out = j[key].get<double>();
  };
  number("lr", s.lr);
  number("eps", s.eps);
  number("weight_decay", s.weight_decay);
  number("clip_grad_norm", s.clip_grad_norm);
  if (j.contains("betas")) {
    const auto& b = j["betas"];
    VINF_INPUT_CHECK(b.is_array() && b.size() == 2 && b[0].is_number() && b[1].is_number(), source,
                     ": 'betas' must be two numbers [beta1, beta2], got ", b.dump());
    s.beta1 = b[0].get<double>();
    s.beta2 = b[1].get<double>();
  }
  const std::string problem = adamw_problem(s);
  VINF_INPUT_CHECK(problem.empty(), source, ": ", problem);
  return s;
}

double global_norm(ExecContext& ctx, const ParamGrads& grads) {
  return std::sqrt(ops::sum_squares(ctx, grads.all()));
}

double clip_scale(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  return std::min(1.0, max_norm / (norm + 1e-6));
}

AdamW::AdamW(Arena& arena, ExecContext& ctx, const ParamGrads& grads) : AdamW(arena, ctx, 0, grads.all().numel()) {}

AdamW::AdamW(Arena& arena, ExecContext& ctx, std::int64_t first, std::int64_t count) : first_(first) {
  state_ = arena.empty(DType::f32, {2, count});
  if (state_.numel() > 0) ops::fill(ctx, state_, 0.0);
}

ops::AdamWUpdate AdamW::next(const AdamWSettings& s, double lr, double grad_scale) {
  ++steps_;
  ops::AdamWUpdate u;
  u.lr = lr;
  u.beta1 = s.beta1;
  u.beta2 = s.beta2;
  u.eps = s.eps;
  u.decay = 1.0 - lr * s.weight_decay;
  u.c1 = 1.0 - std::pow(s.beta1, static_cast<double>(steps_));
  u.c2 = std::sqrt(1.0 - std::pow(s.beta2, static_cast<double>(steps_)));
  u.grad_scale = grad_scale;
  return u;
}

void AdamW::step(ExecContext& ctx, const ParamGrads& grads, const ParamLookup& params, const AdamWSettings& s,
                 double lr, double grad_scale) {
  const std::int64_t n = state_.size(1);
  VINF_CHECK(first_ == 0 && n == grads.all().numel(), "AdamW::step: this optimizer holds a part");
  const ops::AdamWUpdate u = next(s, lr, grad_scale);
  const Tensor moments = state_.reshape({2 * n});
  std::int64_t at = 0;
  for (const auto& [name, g] : grads.list()) {
    const Tensor* p = params(name);
    VINF_CHECK(p != nullptr && p->shape == g.shape, "AdamW: no parameter ", name, " of shape ", g.shape.str());
    const std::int64_t k = g.numel();
    ops::adamw_update(ctx, u, *p, grads.all().slice(0, at, k), moments.slice(0, at, k), moments.slice(0, n + at, k));
    at += k;
  }
}

void AdamW::step_part(ExecContext& ctx, const Tensor& part_grads, const Tensor& master, const Tensor* copy,
                      const AdamWSettings& s, double lr, double grad_scale) {
  const std::int64_t n = state_.size(1);
  VINF_CHECK(part_grads.numel() == n && master.numel() == n, "AdamW::step_part: ", n, " elements expected, got ",
             part_grads.describe(), " and ", master.describe());
  const ops::AdamWUpdate u = next(s, lr, grad_scale);
  const Tensor moments = state_.reshape({2 * n});
  ops::adamw_update(ctx, u, master, part_grads, moments.slice(0, 0, n), moments.slice(0, n, n), copy);
}

}  // namespace vinf::train
