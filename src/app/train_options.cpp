#include "app/train_options.hpp"

#include "app/option_values.hpp"
#include "core/error.hpp"

namespace po = boost::program_options;

namespace vinf::app {

void TrainOptimizerOptions::add_to(po::options_description& opts) {
  opts.add_options()("train.lr", ranged(&values.lr, 0, 10)->default_value(values.lr),
                     "AdamW learning rate (the peak, after warm-up, for vinf train)")(
      "train.adam-beta1", ranged_below(&values.beta1, 0, 1)->default_value(values.beta1), "AdamW beta1 (first moment decay)")(
      "train.adam-beta2", ranged_below(&values.beta2, 0, 1)->default_value(values.beta2), "AdamW beta2 (second moment decay)")(
      "train.adam-eps", ranged_above(&values.eps, 0, 1)->default_value(values.eps), "AdamW epsilon")(
      "train.weight-decay", ranged(&values.weight_decay, 0, 10)->default_value(values.weight_decay),
      "decoupled weight decay (AdamW)")(
      "train.clip-grad-norm", ranged(&values.clip_grad_norm, 0, 1e6)->default_value(values.clip_grad_norm),
      "clip the gradients' global L2 norm to this (0: no clipping)");
}

train::AdamWSettings TrainOptimizerOptions::resolve() const {
  const std::string problem = train::adamw_problem(values);
  VINF_INPUT_CHECK(problem.empty(), "the [train] optimizer options: ", problem,
                   " (--train.lr, --train.adam-beta1/2, --train.adam-eps, --train.weight-decay, --train.clip-grad-norm)");
  return values;
}

job::DeviceChoice check_training_device(const std::string& device, bool cuda) {
  const job::DeviceChoice d = job::parse_device_choice(device);
  if (cuda) return d;
  VINF_INPUT_CHECK(d != job::DeviceChoice::cuda, "--device cuda: this command checks training against the CPU's ",
                   "numbers and runs on the CPU; use --device cpu or auto (vinf train runs on CUDA)");
  return job::DeviceChoice::cpu;
}

std::optional<DType> check_training_dtype(const std::string& dtype, bool mixed) {
  const std::optional<DType> d = job::parse_dtype_choice(dtype);
  if (mixed) {
    VINF_INPUT_CHECK(!d || *d == DType::f32 || *d == DType::bf16, "--dtype ", dtype,
                     ": training computes in f32, or with bf16 products and f32 master weights (bf16); use auto, f32 ",
                     "or bf16");
    return d;
  }
  VINF_INPUT_CHECK(!d || *d == DType::f32, "--dtype ", dtype, ": this command computes in f32; use --dtype f32 or auto");
  return DType::f32;
}

DType training_precision(std::optional<DType> choice, const Device& device) {
  if (choice) return *choice;
  return device.is_cuda() ? DType::bf16 : DType::f32;
}

}  // namespace vinf::app
