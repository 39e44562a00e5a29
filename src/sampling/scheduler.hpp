// The denoising schedulers of model-spec §6: DPM-Solver++ multistep order 2 (SDE variant, as the
// released Video-Infinity code runs it, with linspace or Karras sigmas; ODE variant) and DDIM.
//
// A scheduler is pure arithmetic on the noise schedule: it turns the step index into the
// coefficients of one update,
//   x0     = x0_x * x + x0_eps * eps                         (the data prediction)
//   x_next = x * c_x + m0 * c_m0 + m1 * c_m1 + eps * c_eps + z * c_noise
// where m0 is this step's x0, m1 the previous step's, eps the guided model output and z fresh
// standard normal noise. The tensor side (sampler.hpp) applies them, so every variant and every
// backend shares one update path, and a resumed run only needs the step index.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vinf::sampling {

enum class SchedulerKind { dpmpp_sde, dpmpp_sde_karras, dpmpp, ddim };
const char* scheduler_name(SchedulerKind k);
// "dpmpp-sde" | "dpmpp-sde-karras" | "dpmpp" | "ddim"; throws vinf::InputError naming them.
SchedulerKind parse_scheduler(const std::string& name);

enum class BetaSchedule { linear, scaled_linear };
enum class Spacing { linspace, leading, trailing };
const char* spacing_name(Spacing s);

// VideoCrafter's use_scale (LVDM's DDIM sampler, model config keys use_scale, scale_a, scale_b,
// mid_step): the data prediction of a step at timestep t is divided by s[t], and the step to the
// next timestep t' multiplies it by s[t'] (by s[0] = a after the last step), where
// s = linspace(a, b, mid_step) over the first mid_step timesteps and b after. VideoCrafter2's
// config: a 1, b 0.7, mid_step 400. The diffusers port that Video-Infinity runs has none.
struct X0Scale {
  double a = 1.0, b = 0.7;
  int mid_step = 400;
  // s[t] as the reference holds it (f32).
  double at(std::int64_t t) const;
  bool operator==(const X0Scale&) const = default;
};

// Where DDIM steps and what it scales. The default is diffusers' DDIM (and VideoCrafter's): each
// step goes from t to t - T / steps. to_next_on_grid: each step goes to the grid's next timestep,
// and the last from abar[t_last] to abar[0] (FIFO-Diffusion's released code, whose grid is
// round(linspace(0, T - 1, steps)): its last step, at t = 0, is an identity-like step).
struct DdimOptions {
  double eta = 0.0;
  bool to_next_on_grid = false;
  std::optional<X0Scale> x0_scale;
};

// The keys of a diffusers scheduler_config.json that change the numbers. Defaults: zeroscope's
// file (model-spec §6.1).
struct NoiseScheduleConfig {
  int num_train_timesteps = 1000;
  double beta_start = 0.00085, beta_end = 0.012;
  BetaSchedule beta_schedule = BetaSchedule::scaled_linear;
  int steps_offset = 1;
  std::optional<Spacing> timestep_spacing;  // unset: linspace for DPM-Solver, leading for DDIM
  bool set_alpha_to_one = false;  // DDIM's alpha after the last step
  // LVDM's use_scale with its scale_a, scale_b, mid_step, when the file says (X0Scale); unset: it
  // says nothing. A file with "use_scale": false gives `x0_scale_off`.
  std::optional<X0Scale> x0_scale;
  bool x0_scale_off = false;
};

// Reads DIR/scheduler_config.json or a file. Throws vinf::InputError naming the file and key for
// what it cannot use (a prediction type other than epsilon, thresholding, clip_sample, an unknown
// beta schedule or spacing).
NoiseScheduleConfig read_scheduler_config(const std::string& path);

// alphas_cumprod[t] for t = 0 .. num_train_timesteps - 1: the betas in f32 as diffusers makes
// them, the cumulative product in double, stored in f32.
std::vector<float> make_alphas_cumprod(const NoiseScheduleConfig& c);

struct StepCoefficients {
  double x0_x = 0, x0_eps = 0;
  double c_x = 0, c_m0 = 0, c_m1 = 0, c_eps = 0, c_noise = 0;
  int order = 1;
};

class Scheduler {
 public:
  // eta: DDIM's noise scale (0: deterministic); ignored by the DPM-Solver variants.
  Scheduler(SchedulerKind kind, const NoiseScheduleConfig& config, int steps, double eta = 0.0);
  // DDIM with the grid rule and the scale of `ddim` (InputError for another kind with either).
  Scheduler(SchedulerKind kind, const NoiseScheduleConfig& config, int steps, const DdimOptions& ddim);

  SchedulerKind kind() const { return kind_; }
  int steps() const { return static_cast<int>(timesteps_.size()); }
  // The integer timestep the UNet gets at each step.
  const std::vector<std::int64_t>& timesteps() const { return timesteps_; }
  // steps + 1 noise levels sqrt((1 - abar) / abar): the one each step starts from, then the
  // final one (0 for DPM-Solver, the level after the last DDIM step).
  const std::vector<double>& sigmas() const { return sigmas_; }
  // Whether step i draws fresh noise (the SDE variants always do, DDIM when eta > 0).
  bool stochastic() const;
  // The scale of the initial noise (1 for every variant here: the latents start as N(0, I)).
  double init_noise_sigma() const { return 1.0; }
  StepCoefficients coefficients(int i) const;

  // abar_t for t = 0 .. num_train_timesteps - 1, in f32 as the reference computes it.
  const std::vector<float>& alphas_cumprod() const { return alphas_cumprod_; }

 private:
  // DDIM's abar after step i (the grid's next point, or t - T / steps), with its scale.
  double ddim_previous_abar(int i) const;
  // The timestep DDIM's step i goes to (0 after the last one), for use_scale's s[t'].
  std::int64_t next_timestep(int i) const;
  SchedulerKind kind_;
  NoiseScheduleConfig config_;
  double eta_;
  DdimOptions ddim_;
  std::vector<float> alphas_cumprod_;
  std::vector<std::int64_t> timesteps_;
  std::vector<double> sigmas_;
};

}  // namespace vinf::sampling
