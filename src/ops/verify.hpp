// Runs op cases and compares results: tolerance = atol + rtol * |ref| per dtype (or the case's own,
// with its reason), a report of the first mismatches.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ops/cases.hpp"
#include "ops/runtime.hpp"

namespace vinf::opcheck {

// For results computed from inputs stored in `dtype` (accumulation in f32 everywhere).
Tolerance tolerance_for(DType dtype);
// The case's own tolerance for `dtype` when it overrides it, else tolerance_for(dtype). Throws
// vinf::Error when the case's override is malformed (tolerance_problem).
Tolerance tolerance_for(const OpCase& c, DType dtype);
// What is wrong with the case's tolerance override ("" when nothing, or when it has none): an
// override without a reason, a dtype listed twice, a negative or non-finite bound.
std::string tolerance_problem(const OpCase& c);
// What --dtype bf16 on the CPU may change of the case, against the f32 reference on the same
// bf16-rounded inputs: nothing (nullopt) for the ops it leaves in f32; for those with weights
// (bf16 weights, f32 activations) only the order of f32 sums of exact products, so the f32
// tolerance, unless the case stores an intermediate in bf16 (then its own bf16 bound); for the
// attention (bf16 products) the probabilities' rounding as well.
std::optional<Tolerance> cpu_bf16_tolerance(const OpCase& c);

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
