// Command-line flags of the vinf benchmarks that Google Benchmark does not know: takes
// --NAME=VALUE out of argv (so that benchmark::Initialize sees only its own) and returns VALUE.
#pragma once

#include <string>

namespace vinf::bench {

inline std::string take_flag(int& argc, char** argv, const std::string& name, const std::string& fallback) {
  std::string value = fallback;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--" + name + "=", 0) == 0) value = a.substr(name.size() + 3);
    else argv[out++] = argv[i];
  }
  argc = out;
  return value;
}

}  // namespace vinf::bench
