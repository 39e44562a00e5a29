// The flow-matching schedulers of the Wan family: UniPC (diffusers' UniPCMultistepScheduler with
// use_flow_sigmas, flow_prediction, predict_x0; bh1 or bh2, order 1 or 2, its corrector), as the
// Wan pipeline runs it, and first-order Euler on the same noise levels.
//
// The model predicts a velocity v; at noise level s the latents are x = (1 - s) x0 + s noise and
// the data prediction is m = x - s v. As in scheduler.hpp the scheduler is arithmetic on the noise
// levels: step i turns into coefficients, and flow_sampler.hpp applies them to tensors,
//   m_i   = x_i - s_i v_i
//   xc_i  = c_last last + c_m2 m_{i-2} + c_m1 m_{i-1} + c_m0 m_i   (UniC, from step 1 on; else x_i)
//   x_i+1 = p_x xc_i + p_m1 m_{i-1} + p_m0 m_i                    (UniP)
// where `last` is the previous step's xc. Euler is x_i+1 = x_i + (s_i+1 - s_i) v_i.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vinf::sampling {

enum class FlowSolver { unipc, euler };
// "unipc" | "flow-euler"; throws vinf::InputError naming them.
FlowSolver parse_flow_solver(const std::string& name);
const char* flow_solver_name(FlowSolver s);

// The keys of a UniPC scheduler_config.json (flow sigmas) that change the numbers.
struct FlowScheduleConfig {
  int num_train_timesteps = 1000;
  double flow_shift = 3.0;  // Wan2.1's default for 480p is 3, for 720p 5
  int solver_order = 2;  // 1 or 2
  bool bh2 = true;  // solver_type bh2 (else bh1)
  bool lower_order_final = true;
  bool final_sigma_zero = true;  // final_sigmas_type "zero" (else "sigma_min": the last sigma again)
  std::vector<int> disable_corrector;
};

// Reads DIR/scheduler_config.json or a file; refuses (InputError, naming the file and key) what
// vinf does not compute: another prediction type, no flow sigmas, predict_x0 false, thresholding,
// solver orders above 2, a solver type other than bh1/bh2, Karras/exponential/beta sigmas.
FlowScheduleConfig read_flow_schedule_config(const std::string& path);
// Whether a scheduler_config.json holds flow sigmas (use_flow_sigmas true or a FlowMatch class).
bool is_flow_schedule_config(const std::string& path);

struct FlowStepCoefficients {
  double x0_v = 0;  // m_i = x_i + x0_v v_i (x0_v = -s_i)
  bool correct = false;
  double c_last = 0, c_m2 = 0, c_m1 = 0, c_m0 = 0;
  double p_x = 0, p_m1 = 0, p_m0 = 0;
  int order = 1;  // of the predictor
  double euler_dt = 0;  // Euler: s_i+1 - s_i
};

class FlowScheduler {
 public:
  FlowScheduler(FlowSolver solver, const FlowScheduleConfig& config, int steps);
  FlowSolver solver() const { return solver_; }
  int steps() const { return static_cast<int>(timesteps_.size()); }
  // What the transformer gets at each step (sigma x num_train_timesteps, truncated as diffusers
  // casts it to int64).
  const std::vector<std::int64_t>& timesteps() const { return timesteps_; }
  // steps + 1 noise levels (f32 values, as diffusers keeps them): each step's, then the final one.
  const std::vector<float>& sigmas() const { return sigmas_; }
  FlowStepCoefficients coefficients(int i) const;
  // Video-to-video's cut schedule: the steps before `first` are not run (the latents start at
  // timesteps()[first], noised to sigmas()[first]); UniPC's memories and its orders count from
  // there, as diffusers' scheduler does when the pipeline slices its timesteps.
  void start_at(int first);
  int first_step() const { return first_; }

 private:
  FlowSolver solver_;
  FlowScheduleConfig config_;
  std::vector<std::int64_t> timesteps_;
  std::vector<float> sigmas_;
  int first_ = 0;
};

}  // namespace vinf::sampling
