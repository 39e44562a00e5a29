#include "train/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "ops/elementwise.hpp"

namespace vinf::train {
namespace {

// A host copy of a device tensor's f32 elements, or the tensor itself when it is on the CPU.
float* host_f32(const Tensor& t, const char* what) {
  VINF_CHECK(t.device.is_cpu() && t.dtype == DType::f32 && t.is_contiguous(), "AdamW: ", what, " ", t.describe(),
             " must be contiguous f32 in host memory (the optimizer runs on the CPU)");
  return t.ptr<float>();
}

}  // namespace

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
  (void)ctx;
  const Tensor& all = grads.all();
  const float* g = host_f32(all, "the gradients");
  double sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
  for (std::int64_t i = 0; i < all.numel(); ++i) sum += static_cast<double>(g[i]) * g[i];
  return std::sqrt(sum);
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

void AdamW::step(ExecContext& ctx, const ParamGrads& grads, const ParamLookup& params, const AdamWSettings& s,
                 double lr, double grad_scale) {
  VINF_CHECK(first_ == 0 && state_.size(1) == grads.all().numel(), "AdamW::step: this optimizer holds a part");
  step_part(ctx, grads, host_f32(grads.all(), "the gradients"), params, s, lr, grad_scale);
}

void AdamW::step_part(ExecContext& ctx, const ParamGrads& layout, const float* shard_grads, const ParamLookup& params,
                      const AdamWSettings& s, double lr, double grad_scale) {
  (void)ctx;
  ++steps_;
  const double c1 = 1.0 - std::pow(s.beta1, static_cast<double>(steps_));
  const double c2 = std::sqrt(1.0 - std::pow(s.beta2, static_cast<double>(steps_)));
  const double decay = 1.0 - lr * s.weight_decay;
  const std::int64_t n = state_.size(1), last = first_ + n;
  float* m = n > 0 ? host_f32(state_, "the moments") : nullptr;
  float* v = m + n;
  std::int64_t at = 0;
  for (const auto& [name, g] : layout.list()) {
    const std::int64_t k = g.numel(), lo = std::max(at, first_), hi = std::min(at + k, last);
    at += k;
    if (lo >= hi) continue;
    const Tensor* p = params(name);
    VINF_CHECK(p != nullptr && p->shape == g.shape, "AdamW: no parameter ", name, " of shape ", g.shape.str());
    float* pp = host_f32(*p, name.c_str()) + (lo - (at - k));
    const float* gg = shard_grads + (lo - first_);
    float* mm = m + (lo - first_);
    float* vv = v + (lo - first_);
#pragma omp parallel for schedule(static) if (hi - lo >= 4096)
    for (std::int64_t i = 0; i < hi - lo; ++i) {
      const double gi = static_cast<double>(gg[i]) * grad_scale;
      const double mi = s.beta1 * mm[i] + (1.0 - s.beta1) * gi;
      const double vi = s.beta2 * vv[i] + (1.0 - s.beta2) * gi * gi;
      mm[i] = static_cast<float>(mi);
      vv[i] = static_cast<float>(vi);
      pp[i] = static_cast<float>(pp[i] * decay - lr / c1 * mi / (std::sqrt(vi) / c2 + s.eps));
    }
  }
}

}  // namespace vinf::train
