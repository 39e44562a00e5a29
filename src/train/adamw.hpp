// AdamW (Loshchilov and Hutter, decoupled weight decay) as torch.optim.AdamW computes it, with
// global-norm gradient clipping as torch.nn.utils.clip_grad_norm_ does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.hpp"
#include "ops/optim.hpp"
#include "train/graph.hpp"

namespace vinf::train {

struct AdamWSettings {
  double lr = 1e-5;  // fine-tuning's order of magnitude
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  double clip_grad_norm = 1.0;  // 0: no clipping
};

// What a bad setting is, or "" when the settings are usable (lr >= 0, betas in [0, 1), eps > 0,
// weight decay >= 0, clipping >= 0).
std::string adamw_problem(const AdamWSettings& s);

// The JSON object {"lr", "betas": [b1, b2], "eps", "weight_decay", "clip_grad_norm"} (every key
// optional; missing ones keep `defaults`). Throws vinf::InputError naming `source` and the key.
AdamWSettings parse_adamw_json(const std::string& json, const std::string& source, const AdamWSettings& defaults);

// sqrt(sum of every gradient element squared), in double.
double global_norm(ExecContext& ctx, const ParamGrads& grads);

// The scale clip_grad_norm_ multiplies the gradients by: min(1, max_norm / (norm + 1e-6)); 1 when
// max_norm is 0 (no clipping).
double clip_scale(double norm, double max_norm);

// The optimizer's state (first and second moments) for the trainable parameters of `grads`, in
// one f32 buffer in the same order, zero at the start; or for a part of them: the elements
// [first, first + count) of the gradients' buffer (ParamGrads::all), a data-parallel rank's shard.
class AdamW {
 public:
  AdamW(Arena& arena, ExecContext& ctx, const ParamGrads& grads);
  AdamW(Arena& arena, ExecContext& ctx, std::int64_t first, std::int64_t count);

  // One step on every trainable parameter: the gradients are multiplied by `grad_scale` (the
  // clipping) as they are read, then
  //   p *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
  //   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
  // with t the step's number (from 1). `params(name)` gives each parameter to update in place.
  void step(ExecContext& ctx, const ParamGrads& grads, const ParamLookup& params, const AdamWSettings& s, double lr,
            double grad_scale);
  // The same on this optimizer's part only, laid out flat: part_grads and master (f32, contiguous,
  // `count` elements each on the context's device) are the gradients and the f32 master weights of
  // elements [first, first + count) of the flat buffer; `copy`, when given, receives the new
  // master weights rounded to its dtype (the bf16 values a mixed-precision model computes with).
  void step_part(ExecContext& ctx, const Tensor& part_grads, const Tensor& master, const Tensor* copy,
                 const AdamWSettings& s, double lr, double grad_scale);
  std::int64_t steps() const { return steps_; }
  void set_steps(std::int64_t steps) { steps_ = steps; }  // a resumed run's
  std::int64_t first() const { return first_; }
  const Tensor& moments() const { return state_; }  // [2, count]: m then v

 private:
  ops::AdamWUpdate next(const AdamWSettings& s, double lr, double grad_scale);  // counts the step

  OwnedTensor state_;
  std::int64_t first_ = 0, steps_ = 0;
};

}  // namespace vinf::train
