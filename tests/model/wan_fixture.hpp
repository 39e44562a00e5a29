// The Wan reference files (tests/fixtures/wan-tiny, a copy of the shared fixture set) for the text
// side's tests.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support.hpp"
#include "core/tensor.hpp"

namespace vinf::test {

inline std::string wan_tiny() { return fixture("wan-tiny"); }

// prompts.json: the five prompts of ref_text.safetensors.
inline std::vector<std::string> wan_tiny_prompts() {
  std::ifstream in(wan_tiny() + "/prompts.json");
  return nlohmann::json::parse(in).get<std::vector<std::string>>();
}

}  // namespace vinf::test
