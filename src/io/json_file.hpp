// JSON files a user supplies (model and scheduler configs): a missing file or invalid JSON is a
// vinf::InputError that names the file. Header-only; the includer links nlohmann-json.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"

namespace vinf::io {

inline nlohmann::json read_json_file(const std::string& path, const char* what) {
  std::ifstream in(path);
  VINF_INPUT_CHECK(in.good(), "cannot read the ", what, " ", path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    VINF_INPUT_FAIL(path, " is not valid JSON: ", e.what());
  }
}

// dst = j[key] when the key is present and not null (a wrong type throws nlohmann's type error).
template <class T>
void read_optional(const nlohmann::json& j, const char* key, T& dst) {
  if (j.contains(key) && !j[key].is_null()) dst = j[key].get<T>();
}

}  // namespace vinf::io
