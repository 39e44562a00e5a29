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
