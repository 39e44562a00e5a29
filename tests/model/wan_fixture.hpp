// The Wan reference files beside the checkout (../shared/fixtures/wan-tiny): VINF_SHARED_FIXTURES in
// the environment moves them, as it moves the CLIP vocabulary (support.hpp).
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace vinf::test {

inline std::string wan_tiny() {
  const char* dir = std::getenv("VINF_SHARED_FIXTURES");
  return std::string(dir != nullptr && *dir != '\0' ? dir : VINF_SHARED_FIXTURES) + "/wan-tiny";
}

// True when the reference files are there; otherwise prints why the calling test is skipped.
inline bool wan_tiny_or_skip() {
  if (std::filesystem::exists(wan_tiny() + "/ref_text.safetensors")) return true;
  MESSAGE(("skipped: " + wan_tiny() + " is absent (the Wan reference files are not part of the project)"));
  return false;
}

// prompts.json: the five prompts of ref_text.safetensors.
inline std::vector<std::string> wan_tiny_prompts() {
  std::ifstream in(wan_tiny() + "/prompts.json");
  return nlohmann::json::parse(in).get<std::vector<std::string>>();
}

}  // namespace vinf::test
