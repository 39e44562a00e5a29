#include "sampling/scheduler.hpp"

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/json_file.hpp"
#include "io/path_query.hpp"

namespace vinf::sampling {

namespace {

constexpr double kKarrasRho = 7.0;

// numpy's round: half to even (the default floating-point rounding mode).
std::int64_t round_half_even(double x) {
  VINF_CHECK(std::fegetround() == FE_TONEAREST, "the floating-point rounding mode was changed");
  return static_cast<std::int64_t>(std::nearbyint(x));
}

// torch.linspace in f32 (the betas): the first half counts up from start, the second half down
// from end, with an f32 step.
std::vector<float> linspace_f32(float start, float end, int n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  const float step = n > 1 ? (end - start) / static_cast<float>(n - 1) : 0.f;
  for (int i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] =
        i < n / 2 ? start + step * static_cast<float>(i) : end - step * static_cast<float>(n - 1 - i);
  return v;
}

// sqrt((1 - abar) / abar) in f32, as diffusers derives its sigma table.
float ve_sigma(float abar) { return std::sqrt((1.f - abar) / abar); }

// diffusers' timestep spacings: a descending grid of `points` timesteps, of which the first `keep`
// are used. DPM-Solver takes n of a grid of n + 1 (dropping 0), DDIM all n of a grid of n.
std::vector<std::int64_t> spaced_timesteps(const NoiseScheduleConfig& c, Spacing spacing, int points, int keep) {
  const int T = c.num_train_timesteps;
  std::vector<std::int64_t> ts;
  for (int k = points - 1; static_cast<int>(ts.size()) < keep; --k) {
    switch (spacing) {
      case Spacing::linspace:  // numpy's linspace(0, T - 1, points), rounded half to even
        if (points == 1)
          ts.push_back(0);
        else
          ts.push_back(k == points - 1 ? T - 1 : round_half_even(k * (static_cast<double>(T - 1) / (points - 1))));
        break;
      case Spacing::leading: ts.push_back(static_cast<std::int64_t>(k) * (T / points) + c.steps_offset); break;
      case Spacing::trailing:  // T, T - T/keep, ... minus 1
        ts.push_back(round_half_even(T - (points - 1 - k) * (static_cast<double>(T) / keep)) - 1);
        break;
    }
  }
  return ts;
}

// diffusers' _sigma_to_t: ln sigma interpolated piecewise-linearly in the table of ln sigma_j.
double sigma_to_t(double sigma, const std::vector<float>& log_sigmas) {
  const double ls = std::log(std::max(sigma, 1e-10));
  const int last = static_cast<int>(log_sigmas.size()) - 2;
  int low = 0;
  for (int j = 0; j <= last + 1; ++j)
    if (ls - static_cast<double>(log_sigmas[static_cast<std::size_t>(j)]) >= 0) low = j;
  low = std::min(low, last);
  const double lo = log_sigmas[static_cast<std::size_t>(low)], hi = log_sigmas[static_cast<std::size_t>(low + 1)];
  const double w = std::clamp((lo - ls) / (lo - hi), 0.0, 1.0);
  return (1.0 - w) * low + w * (low + 1);
}

Spacing parse_spacing(const std::string& s, const std::string& where) {
  if (s == "linspace") return Spacing::linspace;
  if (s == "leading") return Spacing::leading;
  if (s == "trailing") return Spacing::trailing;
  VINF_INPUT_FAIL(where, ": timestep_spacing '", s, "' is not one of linspace, leading, trailing");
}

}  // namespace

std::vector<float> make_alphas_cumprod(const NoiseScheduleConfig& c) {
  std::vector<float> betas;
  if (c.beta_schedule == BetaSchedule::linear) {
    betas = linspace_f32(static_cast<float>(c.beta_start), static_cast<float>(c.beta_end), c.num_train_timesteps);
  } else {
    betas = linspace_f32(static_cast<float>(std::sqrt(c.beta_start)), static_cast<float>(std::sqrt(c.beta_end)),
                         c.num_train_timesteps);
    for (float& b : betas) b = b * b;
  }
  std::vector<float> out(betas.size());
  double running = 1.0;  // the cumulative product is accumulated in double, stored in f32
  for (std::size_t i = 0; i < betas.size(); ++i) {
    running *= static_cast<double>(1.f - betas[i]);
    out[i] = static_cast<float>(running);
  }
  return out;
}

const char* scheduler_name(SchedulerKind k) {
  switch (k) {
    case SchedulerKind::dpmpp_sde: return "dpmpp-sde";
    case SchedulerKind::dpmpp_sde_karras: return "dpmpp-sde-karras";
    case SchedulerKind::dpmpp: return "dpmpp";
    case SchedulerKind::ddim: return "ddim";
  }
  return "?";
}

SchedulerKind parse_scheduler(const std::string& name) {
  for (SchedulerKind k :
       {SchedulerKind::dpmpp_sde, SchedulerKind::dpmpp_sde_karras, SchedulerKind::dpmpp, SchedulerKind::ddim})
    if (name == scheduler_name(k)) return k;
  VINF_INPUT_FAIL("--sampler.scheduler '", name,
                  "' is not one of dpmpp-sde (what the released code runs), dpmpp-sde-karras, dpmpp (ODE), ddim");
}

const char* spacing_name(Spacing s) {
  switch (s) {
    case Spacing::linspace: return "linspace";
    case Spacing::leading: return "leading";
    case Spacing::trailing: return "trailing";
  }
  return "?";
}

NoiseScheduleConfig read_scheduler_config(const std::string& path_in) {
  std::string path = path_in;
  if (io::is_directory(path)) path += "/scheduler_config.json";
  const nlohmann::json j = io::read_json_file(path, "scheduler config");
  io::JsonConfig r(j, path);
  NoiseScheduleConfig c;
  auto must_be = [&](const char* key, auto ok, const char* what) {
    if (const nlohmann::json* v = r.find(key))
      VINF_INPUT_CHECK(ok(*v), path, ": '", key, "' = ", v->dump(), " is not supported (", what, ")");
  };
  r.read("num_train_timesteps", c.num_train_timesteps);
  r.read("beta_start", c.beta_start);
  r.read("beta_end", c.beta_end);
  r.read("steps_offset", c.steps_offset);
  std::string text;
  if (r.read("beta_schedule", text)) {
    VINF_INPUT_CHECK(text == "linear" || text == "scaled_linear", path, ": beta_schedule '", text,
                     "' is not supported (linear or scaled_linear)");
    c.beta_schedule = text == "linear" ? BetaSchedule::linear : BetaSchedule::scaled_linear;
  }
  if (r.read("timestep_spacing", text)) c.timestep_spacing = parse_spacing(text, path);
  r.read("set_alpha_to_one", c.set_alpha_to_one);
  bool use_scale = false;
  if (r.read("use_scale", use_scale)) {
    c.x0_scale_off = !use_scale;
    if (use_scale) {
      X0Scale x;
      r.read("scale_a", x.a);
      r.read("scale_b", x.b);
      r.read("mid_step", x.mid_step);
      VINF_INPUT_CHECK(x.a > 0 && x.a <= 10 && x.b > 0 && x.b <= 10, path,
                       ": scale_a and scale_b must be in (0, 10], got ", x.a, " and ", x.b);
      VINF_INPUT_CHECK(x.mid_step >= 2 && x.mid_step <= c.num_train_timesteps, path, ": mid_step must be in [2, ",
                       c.num_train_timesteps, "] (num_train_timesteps), got ", x.mid_step);
      c.x0_scale = x;
    }
  }
  must_be(
      "prediction_type", [](const nlohmann::json& v) { return v == "epsilon"; }, "vinf predicts epsilon");
  must_be(
      "thresholding", [](const nlohmann::json& v) { return v == false; }, "dynamic thresholding");
  must_be(
      "clip_sample", [](const nlohmann::json& v) { return v == false; }, "sample clipping");
  must_be(
      "trained_betas", [](const nlohmann::json&) { return false; }, "explicit betas");
  must_be(
      "rescale_betas_zero_snr", [](const nlohmann::json& v) { return v == false; }, "zero-SNR rescaling");
  VINF_INPUT_CHECK(c.num_train_timesteps >= 2 && c.num_train_timesteps <= 100000, path,
                   ": num_train_timesteps must be in [2, 100000], got ", c.num_train_timesteps);
  VINF_INPUT_CHECK(c.beta_start > 0 && c.beta_end > c.beta_start && c.beta_end < 1, path,
                   ": need 0 < beta_start < beta_end < 1, got ", c.beta_start, " and ", c.beta_end);
  // steps_offset shifts the leading spacing's timesteps: from num_train_timesteps on, every one of
  // them lies outside the training timesteps whatever the number of steps.
  VINF_INPUT_CHECK(c.steps_offset >= 0 && c.steps_offset < c.num_train_timesteps, path,
                   ": steps_offset must be in [0, ", c.num_train_timesteps, ") (num_train_timesteps), got ",
                   c.steps_offset);
  // Every noise level must stay finite: betas that drive alphas_cumprod (nearly) to 0 in f32 leave
  // no signal, and the sigma sqrt((1 - abar) / abar) of such a timestep is infinite.
  const std::vector<float> abar = make_alphas_cumprod(c);
  const auto lost = std::find_if(abar.begin(), abar.end(), [](float a) { return !std::isfinite(ve_sigma(a)); });
  VINF_INPUT_CHECK(lost == abar.end(), path, ": beta_start ", c.beta_start, " and beta_end ", c.beta_end, " (",
                   c.beta_schedule == BetaSchedule::linear ? "linear" : "scaled_linear", ", ", c.num_train_timesteps,
                   " timesteps) leave no signal from timestep ", lost - abar.begin(),
                   " on (alphas_cumprod reaches 0, the noise level is infinite); use a smaller beta_end");
  return c;
}

double X0Scale::at(std::int64_t t) const {
  // numpy's linspace(a, b, mid_step) then full(b), stored as f32.
  if (t >= mid_step) return static_cast<float>(b);
  const double step = (b - a) / (mid_step - 1);
  return static_cast<float>(t == mid_step - 1 ? b : a + static_cast<double>(t) * step);
}

Scheduler::Scheduler(SchedulerKind kind, const NoiseScheduleConfig& config, int steps, double eta)
    : Scheduler(kind, config, steps, DdimOptions{eta, false, std::nullopt}) {}

Scheduler::Scheduler(SchedulerKind kind, const NoiseScheduleConfig& config, int steps, const DdimOptions& ddim)
    : kind_(kind), config_(config), eta_(ddim.eta), ddim_(ddim), alphas_cumprod_(make_alphas_cumprod(config)) {
  const double eta = ddim.eta;
  VINF_CHECK(kind == SchedulerKind::ddim || (!ddim.to_next_on_grid && !ddim.x0_scale),
             "the grid rule and use_scale are DDIM's");
  const int T = config.num_train_timesteps;
  VINF_INPUT_CHECK(steps >= 1 && steps <= T, "--sampler.steps must be in [1, ", T, "], got ", steps);
  VINF_INPUT_CHECK(eta >= 0 && eta <= 1, "--sampler.eta must be in [0, 1], got ", eta);
  // The leading spacing adds steps_offset to a grid of T / steps: the last timestep is
  // (steps - 1) * (T / steps) + steps_offset, which must be one of the T training timesteps.
  auto check_range = [&](Spacing spacing) {
    for (std::int64_t t : timesteps_)
      VINF_INPUT_CHECK(t >= 0 && t < T, "--sampler.steps ", steps, " with timestep_spacing ", spacing_name(spacing),
                       " and steps_offset ", config.steps_offset, " gives timestep ", t, ", outside the ", T,
                       " training timesteps; use fewer steps or a smaller steps_offset");
  };
  if (kind == SchedulerKind::ddim) {
    const Spacing spacing = config.timestep_spacing.value_or(Spacing::leading);
    timesteps_ = spaced_timesteps(config, spacing, steps, steps);
    check_range(spacing);
    for (std::int64_t t : timesteps_) sigmas_.push_back(ve_sigma(alphas_cumprod_[static_cast<std::size_t>(t)]));
    sigmas_.push_back(ve_sigma(static_cast<float>(ddim_previous_abar(steps - 1))));
    return;
  }
  std::vector<float> table(alphas_cumprod_.size());
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = ve_sigma(alphas_cumprod_[i]);
  if (kind == SchedulerKind::dpmpp_sde_karras) {
    std::vector<float> log_sigmas(table.size());
    for (std::size_t i = 0; i < table.size(); ++i) log_sigmas[i] = std::log(table[i]);
    const double lo = std::pow(static_cast<double>(table.front()), 1.0 / kKarrasRho);
    const double hi = std::pow(static_cast<double>(table.back()), 1.0 / kKarrasRho);
    for (int i = 0; i < steps; ++i) {
      const double ramp = steps > 1 ? static_cast<double>(i) / (steps - 1) : 0.0;
      const double s = std::pow(hi + ramp * (lo - hi), kKarrasRho);
      timesteps_.push_back(round_half_even(sigma_to_t(s, log_sigmas)));
      sigmas_.push_back(static_cast<float>(s));  // kept in f32, as diffusers keeps its sigmas
    }
  } else {
    const Spacing spacing = config.timestep_spacing.value_or(Spacing::linspace);
    timesteps_ = spaced_timesteps(config, spacing, steps + 1, steps);
    check_range(spacing);
    for (std::int64_t t : timesteps_) sigmas_.push_back(table[static_cast<std::size_t>(t)]);
  }
  sigmas_.push_back(0.0);
}

bool Scheduler::stochastic() const {
  return kind_ == SchedulerKind::dpmpp_sde || kind_ == SchedulerKind::dpmpp_sde_karras ||
         (kind_ == SchedulerKind::ddim && eta_ > 0);
}

std::int64_t Scheduler::next_timestep(int i) const {
  if (ddim_.to_next_on_grid) return i + 1 < steps() ? timesteps_[static_cast<std::size_t>(i) + 1] : 0;
  return std::max<std::int64_t>(0, timesteps_[static_cast<std::size_t>(i)] - config_.num_train_timesteps / steps());
}

double Scheduler::ddim_previous_abar(int i) const {
  if (ddim_.to_next_on_grid)
    return alphas_cumprod_[static_cast<std::size_t>(i + 1 < steps() ? timesteps_[static_cast<std::size_t>(i) + 1] : 0)];
  const std::int64_t prev = timesteps_[static_cast<std::size_t>(i)] - config_.num_train_timesteps / steps();
  if (prev >= 0) return alphas_cumprod_[static_cast<std::size_t>(prev)];
  return config_.set_alpha_to_one ? 1.0 : alphas_cumprod_[0];
}

StepCoefficients Scheduler::coefficients(int i) const {
  VINF_CHECK(i >= 0 && i < steps(), "step ", i, " is outside the schedule of ", steps(), " steps");
  StepCoefficients k;
  if (kind_ == SchedulerKind::ddim) {
    const std::int64_t t = timesteps_[static_cast<std::size_t>(i)];
    const double a_t = alphas_cumprod_[static_cast<std::size_t>(t)], a_prev = ddim_previous_abar(i);
    // use_scale: x0 / s[t], then s[t'] x0 towards the next timestep t' (s[0] after the last step).
    double scale = 1.0, scale_next = 1.0;
    if (ddim_.x0_scale) {
      scale = ddim_.x0_scale->at(t);
      scale_next = ddim_.x0_scale->at(next_timestep(i));
    }
    k.x0_x = 1.0 / std::sqrt(a_t) / scale;
    k.x0_eps = -std::sqrt(1.0 - a_t) / std::sqrt(a_t) / scale;
    const double std_dev = eta_ * std::sqrt((1.0 - a_prev) / (1.0 - a_t) * (1.0 - a_t / a_prev));
    k.c_m0 = std::sqrt(a_prev) * scale_next;
    k.c_eps = std::sqrt(std::max(0.0, 1.0 - a_prev - std_dev * std_dev));
    k.c_noise = std_dev;
    return k;
  }
  // DPM-Solver++ in the noise levels s (VE sigma): alpha = 1 / sqrt(s^2 + 1), sigma = s alpha,
  // lambda = -ln s, so e^-h = s_next / s.
  const double s = sigmas_[static_cast<std::size_t>(i)], s_next = sigmas_[static_cast<std::size_t>(i) + 1];
  const double alpha_s = 1.0 / std::sqrt(s * s + 1.0);
  k.x0_x = 1.0 / alpha_s;
  k.x0_eps = -s;
  if (s_next == 0.0) {  // the final step lands on the data prediction (lambda = +inf)
    k.c_m0 = 1.0;
    return k;
  }
  const double alpha_t = 1.0 / std::sqrt(s_next * s_next + 1.0), sigma_t = s_next * alpha_t, sigma_s = s * alpha_s;
  const double e_h = s_next / s;  // e^-h
  // Order 1 at the first step (no history) and, with final sigma 0, at the last; 2 otherwise.
  k.order = (i == 0 || i == steps() - 1) ? 1 : 2;
  const bool sde = kind_ != SchedulerKind::dpmpp;
  const double d0 = sde ? alpha_t * (1.0 - e_h * e_h) : alpha_t * (1.0 - e_h);
  k.c_x = sde ? sigma_t / sigma_s * e_h : sigma_t / sigma_s;
  k.c_m0 = d0;
  if (sde) k.c_noise = sigma_t * std::sqrt(1.0 - e_h * e_h);
  if (k.order == 2) {
    // Midpoint: + 1/2 d0 D1, D1 = (m0 - m1) / r0, r0 = h_prev / h.
    const double s_prev = sigmas_[static_cast<std::size_t>(i) - 1];
    const double r0 = std::log(s_prev / s) / std::log(s / s_next);
    k.c_m0 += 0.5 * d0 / r0;
    k.c_m1 = -0.5 * d0 / r0;
  }
  return k;
}

}  // namespace vinf::sampling
