// The [train] options the training commands share, and what training runs on.
#pragma once

#include <boost/program_options.hpp>
#include <optional>
#include <string>

#include "core/dtype.hpp"
#include "job/plan.hpp"
#include "train/adamw.hpp"

namespace vinf::app {

// --train.lr, --train.adam-beta1, --train.adam-beta2, --train.adam-eps, --train.weight-decay,
// --train.clip-grad-norm (INI: [train] lr = 1e-5).
struct TrainOptimizerOptions {
  train::AdamWSettings values;
  void add_to(boost::program_options::options_description& opts);
  // The settings, checked: a bad value is a vinf::InputError naming the option.
  train::AdamWSettings resolve() const;
};

// --device for a training command: auto, cpu, or cuda where `cuda` (vinf train; train-step checks
// against the CPU's numbers and runs on the CPU only, refusing cuda with the reason).
job::DeviceChoice check_training_device(const std::string& device, bool cuda);
// --dtype for a training command: auto (nullopt), f32, or bf16 where `mixed` (mixed precision:
// vinf train); anything else is refused with the reason.
std::optional<DType> check_training_dtype(const std::string& dtype, bool mixed);
// The precision vinf train computes in: --dtype's choice, or with auto bf16 on CUDA and f32 on the
// CPU.
DType training_precision(std::optional<DType> choice, const Device& device);

}  // namespace vinf::app
