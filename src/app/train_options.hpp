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

// --device for training: auto or cpu (the optimizer runs in host memory); cuda is refused with the
// reason. --dtype: auto or f32.
job::DeviceChoice check_training_device(const std::string& device);
std::optional<DType> check_training_dtype(const std::string& dtype);

}  // namespace vinf::app
