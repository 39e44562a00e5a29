#include "ops/verify.hpp"

#include <cmath>
#include <sstream>

#include "core/error.hpp"
#include "ops/elementwise.hpp"

namespace vinf::opcheck {

Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::f16: return {5e-3, 5e-3};   // 11-bit mantissa: ~5e-4 per rounding, a few roundings deep
    case DType::bf16: return {4e-2, 2e-2};  // 8-bit mantissa
    default: return {1e-4, 1e-4};           // f32 against a double-accumulating reference
  }
}

std::string tolerance_problem(const OpCase& c) {
  if (c.tolerance.empty()) return "";
  std::ostringstream why;
  auto problem = [&why]() -> std::ostream& { return why << (why.tellp() > 0 ? "; " : ""); };
  if (c.tolerance_reason.empty()) problem() << "its tolerance is overridden without a reason (tolerance_reason)";
  for (std::size_t i = 0; i < c.tolerance.size(); ++i) {
    const auto& [dt, tol] = c.tolerance[i];
    for (std::size_t j = 0; j < i; ++j)
      if (c.tolerance[j].first == dt) problem() << dtype_name(dt) << " is listed twice";
    if (!(std::isfinite(tol.atol) && std::isfinite(tol.rtol) && tol.atol >= 0 && tol.rtol >= 0))
      problem() << dtype_name(dt) << " has atol " << tol.atol << " and rtol " << tol.rtol
                << " (both must be finite and >= 0)";
  }
  const std::string all = why.str();
  return all.empty() ? "" : "op case '" + c.name + "': " + all;
}

Tolerance tolerance_for(const OpCase& c, DType dtype) {
  const std::string problem = tolerance_problem(c);
  VINF_CHECK(problem.empty(), problem);
  for (const auto& [dt, tol] : c.tolerance)
    if (dt == dtype) return tol;
  return tolerance_for(dtype);
}

std::optional<Tolerance> cpu_bf16_tolerance(const OpCase& c) {
  if (takes_weights(c)) {
    // A case that rounds an intermediate result to bf16 (it states a bf16 bound of its own) has
    // that bound here too; otherwise only the f32 sums' order differs.
    for (const auto& [dt, tol] : c.tolerance)
      if (dt == DType::bf16) return tolerance_for(c, DType::bf16);
    return tolerance_for(c, DType::f32);
  }
  // q, k and v are bf16 values already, so the scores are f32 sums of exact products; each
  // probability is rounded to bf16 (8 bits: 2^-9 relative), so an output moves by at most 2^-9 of
  // the largest |v| (about 4.5 for these N(0, 1) inputs): 0.009.
  if (c.family == "attention") return Tolerance{1e-2, 1e-2};
  return std::nullopt;
}

namespace {
std::uint64_t name_seed(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
}  // namespace

HostOutputs run_case(const OpCase& c, Runtime& rt, DType dtype, DType round_to) {
  CaseEnv env(rt.ctx(), dtype, round_to, name_seed(c.name));
  const auto run = c.setup(env);
  run();
  HostOutputs out;
  for (const Tensor& t : env.outputs()) {
    std::vector<double> host(static_cast<std::size_t>(t.numel()));
    ops::copy(rt.ctx(), t, Tensor::wrap(host.data(), DType::f64, Device::cpu(), t.shape));
    out.shapes.push_back(t.shape);
    out.values.push_back(std::move(host));
  }
  rt.synchronize();
  return out;
}

Comparison compare(const HostOutputs& ref, const HostOutputs& got, Tolerance tol) {
  Comparison r;
  std::ostringstream rep;
  int shown = 0;
  VINF_CHECK(ref.values.size() == got.values.size(), "compare: ", ref.values.size(), " vs ", got.values.size(), " outputs");
  for (std::size_t o = 0; o < ref.values.size(); ++o) {
    VINF_CHECK(ref.shapes[o] == got.shapes[o], "compare: output ", o, " shapes differ");
    for (std::size_t i = 0; i < ref.values[o].size(); ++i) {
      const double a = ref.values[o][i], b = got.values[o][i];
      const double err = std::fabs(a - b);
      const double allowed = tol.atol + tol.rtol * std::fabs(a);
      const bool bad = !(err <= allowed);  // NaN counts as a mismatch
      if (std::isfinite(err)) {
        r.max_abs_error = std::max(r.max_abs_error, err);
        r.worst_ratio = std::max(r.worst_ratio, err / allowed);
      } else {
        r.worst_ratio = INFINITY;
      }
      if (bad) {
        r.ok = false;
        ++r.mismatches;
        if (shown++ < 5)
          rep << "  output " << o << " element " << i << ": expected " << a << ", got " << b << " (|err| " << err
              << " > " << allowed << ")\n";
      }
    }
  }
  r.report = rep.str();
  return r;
}

}  // namespace vinf::opcheck
