#include "sampling/flow_scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/json_file.hpp"
#include "io/path_query.hpp"

namespace vinf::sampling {

FlowSolver parse_flow_solver(const std::string& name) {
  if (name == "unipc") return FlowSolver::unipc;
  VINF_INPUT_CHECK(name == "flow-euler", "scheduler '", name, "' is not one of the flow-matching schedulers ",
                   "(unipc, flow-euler)");
  return FlowSolver::euler;
}

const char* flow_solver_name(FlowSolver s) { return s == FlowSolver::unipc ? "unipc" : "flow-euler"; }

namespace {

std::string config_file(const std::string& path) {
  return io::is_directory(path) ? path + "/scheduler_config.json" : path;
}

}  // namespace

bool is_flow_schedule_config(const std::string& path_in) {
  const std::string path = config_file(path_in);
  const nlohmann::json j = io::read_json_file(path, "scheduler config");
  if (!j.is_object()) return false;
  if (j.contains("use_flow_sigmas") && j["use_flow_sigmas"] == true) return true;
  if (j.contains("prediction_type") && j["prediction_type"] == "flow_prediction") return true;
  return j.contains("_class_name") && j["_class_name"].is_string() &&
         j["_class_name"].get<std::string>().rfind("FlowMatch", 0) == 0;
}

FlowScheduleConfig read_flow_schedule_config(const std::string& path_in) {
  const std::string path = config_file(path_in);
  const nlohmann::json j = io::read_json_file(path, "scheduler config");
  io::JsonConfig r(j, path);
  FlowScheduleConfig c;
  auto must_be = [&](const char* key, auto ok, const char* what) {
    if (const nlohmann::json* v = r.find(key))
      VINF_INPUT_CHECK(ok(*v), path, ": '", key, "' = ", v->dump(), " is not supported (", what, ")");
  };
  std::string text;
  if (r.read("_class_name", text))
    VINF_INPUT_CHECK(text == "UniPCMultistepScheduler", path, ": _class_name \"", text,
                     "\" is not UniPCMultistepScheduler (the Wan family's scheduler)");
  r.read("num_train_timesteps", c.num_train_timesteps);
  r.read("flow_shift", c.flow_shift);
  r.read("solver_order", c.solver_order);
  r.read("lower_order_final", c.lower_order_final);
  r.read("disable_corrector", c.disable_corrector);
  if (r.read("solver_type", text)) {
    VINF_INPUT_CHECK(text == "bh1" || text == "bh2", path, ": solver_type '", text, "' is not supported (bh1, bh2)");
    c.bh2 = text == "bh2";
  }
  if (r.read("final_sigmas_type", text)) {
    VINF_INPUT_CHECK(text == "zero" || text == "sigma_min", path, ": final_sigmas_type '", text,
                     "' is not supported (zero, sigma_min)");
    c.final_sigma_zero = text == "zero";
  }
  must_be(
      "prediction_type", [](const nlohmann::json& v) { return v == "flow_prediction"; },
      "the Wan family predicts a flow: flow_prediction");
  must_be(
      "use_flow_sigmas", [](const nlohmann::json& v) { return v == true; }, "flow sigmas");
  must_be(
      "predict_x0", [](const nlohmann::json& v) { return v == true; }, "UniPC with predict_x0");
  must_be(
      "thresholding", [](const nlohmann::json& v) { return v == false; }, "dynamic thresholding");
  must_be(
      "solver_p", [](const nlohmann::json&) { return false; }, "an external predictor");
  for (const char* key : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas"})
    must_be(
        key, [](const nlohmann::json& v) { return v == false; }, "only flow sigmas");
  VINF_INPUT_CHECK(c.num_train_timesteps >= 2 && c.num_train_timesteps <= 100000, path,
                   ": num_train_timesteps must be in [2, 100000], got ", c.num_train_timesteps);
  VINF_INPUT_CHECK(c.flow_shift > 0 && c.flow_shift <= 1000, path, ": flow_shift must be in (0, 1000], got ",
                   c.flow_shift);
  VINF_INPUT_CHECK(c.solver_order == 1 || c.solver_order == 2, path, ": solver_order must be 1 or 2, got ",
                   c.solver_order);
  return c;
}

FlowScheduler::FlowScheduler(FlowSolver solver, const FlowScheduleConfig& c, int steps) : solver_(solver), config_(c) {
  VINF_INPUT_CHECK(steps >= 1 && steps <= 10000, "the number of steps must be in [1, 10000], got ", steps);
  // diffusers: alphas = linspace(1, 1/N, steps + 1), sigmas = 1 - alphas, shifted, reversed, the
  // last (0) dropped; all in f64, then stored in f32 with the final sigma appended.
  const double n = c.num_train_timesteps;
  std::vector<double> s(static_cast<std::size_t>(steps) + 1);
  for (int k = 0; k <= steps; ++k) {
    const double alpha = 1.0 + (1.0 / n - 1.0) * k / steps;
    const double sigma = 1.0 - alpha;
    s[static_cast<std::size_t>(k)] = c.flow_shift * sigma / (1.0 + (c.flow_shift - 1.0) * sigma);
  }
  std::reverse(s.begin(), s.end());
  s.pop_back();
  for (double v : s) {
    sigmas_.push_back(static_cast<float>(v));
    timesteps_.push_back(static_cast<std::int64_t>(v * n));
  }
  sigmas_.push_back(c.final_sigma_zero ? 0.f : sigmas_.back());
}

namespace {

// UniPC's coefficients in diffusers' arithmetic: lambda = log(alpha) - log(sigma) with
// alpha = 1 - sigma; h = lambda_t - lambda_s0; hh = -h (predict_x0).
struct Phi {
  double h = 0, h_phi_1 = 0, B_h = 0;
  std::vector<double> b;  // b_k for k = 1 .. order
};

double lambda_of(double sigma) { return std::log(1.0 - sigma) - std::log(sigma); }

Phi phi(double lambda_t, double lambda_s0, int order, bool bh2) {
  Phi p;
  p.h = lambda_t - lambda_s0;
  const double hh = -p.h;
  p.h_phi_1 = std::expm1(hh);
  double h_phi_k = p.h_phi_1 / hh - 1.0, factorial = 1;
  p.B_h = bh2 ? std::expm1(hh) : hh;
  for (int i = 1; i <= order; ++i) {
    p.b.push_back(h_phi_k * factorial / p.B_h);
    factorial *= i + 1;
    h_phi_k = h_phi_k / hh - 1.0 / factorial;
  }
  return p;
}

}  // namespace

FlowStepCoefficients FlowScheduler::coefficients(int i) const {
  VINF_CHECK(i >= first_ && i < steps(), "flow scheduler: step ", i, " of ", steps(), " (from ", first_, ")");
  FlowStepCoefficients k;
  const auto sig = [&](int j) { return static_cast<double>(sigmas_[static_cast<std::size_t>(j)]); };
  k.x0_v = -sig(i);
  if (solver_ == FlowSolver::euler) {
    k.euler_dt = sig(i + 1) - sig(i);
    return k;
  }
  const int S = steps(), max_order = config_.solver_order;
  // The predictor's order at step j: lower at the start (fewer memories) and, with
  // lower_order_final, at the end.
  auto order_at = [&](int j) {
    int o = config_.lower_order_final ? std::min(max_order, S - j) : max_order;
    return std::min(o, j - first_ + 1);
  };
  // UniC: corrects x_i with m_i, from the previous step's xc and memories, at the previous order.
  const bool disabled = std::find(config_.disable_corrector.begin(), config_.disable_corrector.end(), i - 1) !=
                        config_.disable_corrector.end();
  if (i > first_ && !disabled) {
    const int order = order_at(i - 1);
    const double sigma_t = sig(i), sigma_s0 = sig(i - 1), alpha_t = 1.0 - sigma_t;
    const Phi p = phi(lambda_of(sigma_t), lambda_of(sigma_s0), order, config_.bh2);
    k.correct = true;
    k.c_last = sigma_t / sigma_s0;
    k.c_m1 = -alpha_t * p.h_phi_1;
    double rho_d1 = 0, rho_t = 0.5, rk = 0;
    if (order == 2) {
      // R = [[1, 1], [rk, 1]], rho = R^-1 b.
      rk = (lambda_of(sig(i - 2)) - lambda_of(sigma_s0)) / p.h;
      const double det = 1.0 - rk;
      rho_d1 = (p.b[0] - p.b[1]) / det;
      rho_t = (p.b[1] - rk * p.b[0]) / det;
    }
    // x_t = x_t_ - alpha_t B_h (rho_d1 (m2 - m1) / rk + rho_t (m0 - m1))
    const double a = -alpha_t * p.B_h;
    if (order == 2) {
      k.c_m2 += a * rho_d1 / rk;
      k.c_m1 -= a * rho_d1 / rk;
    }
    k.c_m0 += a * rho_t;
    k.c_m1 -= a * rho_t;
  }
  // UniP: from xc_i with m_i (and m_{i-1} at order 2).
  const double sigma_t = sig(i + 1), sigma_s0 = sig(i), alpha_t = 1.0 - sigma_t;
  // Into a final sigma of 0 only the first order is finite (diffusers' lower_order_final).
  k.order = sigma_t == 0 ? 1 : order_at(i);
  const double lambda_t = sigma_t == 0 ? INFINITY : lambda_of(sigma_t);
  const Phi p = phi(lambda_t, lambda_of(sigma_s0), k.order, config_.bh2);
  k.p_x = sigma_t / sigma_s0;
  k.p_m0 = -alpha_t * p.h_phi_1;
  if (k.order == 2) {
    const double rk = (lambda_of(sig(i - 1)) - lambda_of(sigma_s0)) / p.h;
    // pred_res = 0.5 (m1 - m0) / rk
    const double a = -alpha_t * p.B_h * 0.5 / rk;
    k.p_m1 += a;
    k.p_m0 -= a;
  }
  return k;
}

void FlowScheduler::start_at(int first) {
  VINF_CHECK(first >= 0 && first < steps(), "flow scheduler: start at step ", first, " of ", steps());
  first_ = first;
}

}  // namespace vinf::sampling
