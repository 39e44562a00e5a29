// The UNet's parameter names and shapes, generated from the config by diffusers' naming grammar
// (model-spec §3). The loader checks a weight file against this list; make-model writes it;
// inspect and the tests count it without allocating anything.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "model/config.hpp"

namespace vinf::model {

struct ParamSpec {
  std::string name;
  Shape shape;
  // Older names a weight file may use for this parameter (the loader takes the first present).
  // A 2-D parameter may also be stored as [out, in, 1, 1] (a 1x1 conv in the original layout).
  std::vector<std::string> aliases = {};
};

// ".3": the index part of a module name.
inline std::string dot_index(std::size_t j) {
  std::string s(".");
  s += std::to_string(j);
  return s;
}

std::vector<ParamSpec> unet_parameters(const UNetConfig& c);
std::int64_t parameter_count(const std::vector<ParamSpec>& params);

// How random-weight models draw a parameter: value = shift + scale * N(0, 1). Linear and conv
// weights scale 1/sqrt(fan_in); norm scales 1 + 0.1 N; biases 0.1 N.
struct RandomInit {
  float scale = 0.1f;
  float shift = 0.f;
};
RandomInit random_init(const ParamSpec& p);
// The top-level module a parameter belongs to: "conv_in", "time_embedding", "down_blocks.1", ...
std::string parameter_group(const std::string& name);

}  // namespace vinf::model
