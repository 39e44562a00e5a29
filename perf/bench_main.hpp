// What the MPI benchmark programs (vinf_bench_step, vinf_bench_wan_step) share around their run:
// the figures' JSON file, and main's exit status (2 for bad input, 1 for a failure, the message
// in one write so that ranks do not interleave).
#pragma once

#include <exception>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"

namespace vinf::bench {

// Writes j to path (when given) and says so.
inline void write_figures(const std::string& path, const nlohmann::ordered_json& j) {
  if (path.empty()) return;
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  VINF_CHECK(f.good(), "cannot write ", path);
  std::cout << "wrote " << path << "\n";
}

// run(argc, argv), its exceptions turned into a message and an exit status.
template <class Run>
int guarded_main(const char* program, Run&& run, int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const InputError& e) {
    std::cerr << std::string(program) + ": error: " + e.what() + "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << std::string(program) + ": error: " + e.what() + "\n";
    return 1;
  }
}

}  // namespace vinf::bench
