// Runs op cases and compares results: tolerance = atol + rtol * |ref| per dtype, a report of the
// first mismatches.
#pragma once

#include <string>
#include <vector>

#include "ops/cases.hpp"
#include "ops/runtime.hpp"

namespace vinf::opcheck {

struct Tolerance {
  double atol = 0, rtol = 0;
};
// For results computed from inputs stored in `dtype` (accumulation in f32 everywhere).
Tolerance tolerance_for(DType dtype);

struct HostOutputs {
  std::vector<Shape> shapes;
  std::vector<std::vector<double>> values;
};

// Sets the case up on `rt` with tensors in `dtype` (inputs rounded through `round_to`), runs it
// once, and brings the outputs to the host.
HostOutputs run_case(const OpCase& c, Runtime& rt, DType dtype, DType round_to);

struct Comparison {
  bool ok = true;
  double max_abs_error = 0;
  double worst_ratio = 0;  // max over elements of |err| / (atol + rtol |ref|); <= 1 passes
  std::int64_t mismatches = 0;
  std::string report;      // the first few mismatches, or empty
};

Comparison compare(const HostOutputs& ref, const HostOutputs& got, Tolerance tol);

}  // namespace vinf::opcheck
