// Every case of the op table: the CPU fast path against the naive reference, and CUDA (f32, f16,
// bf16) against the reference on the same rounded inputs when a GPU is present.
//
// The environment narrows what runs, as `vinf selfcheck` does: VINF_OPS_FILTER (the cases whose
// name or family contains the text, as --filter), VINF_OPS_BACKEND (cpu or cuda) and VINF_OPS_DTYPE
// (f32, f16 or bf16); unset or empty selects everything. A selection that picks no case fails.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "../support.hpp"
#include "core/error.hpp"
#include "cpu/cpu.hpp"
#include "ops/runtime.hpp"
#include "ops/verify.hpp"

using namespace vinf;
using test::contains;

namespace {

struct Selection {
  std::string filter, backend, dtype;
  std::string error;  // why nothing could run; empty when the selection is usable

  // Whether the selection includes runs of `b` ("cpu" or "cuda") in `dt`.
  bool picks(const std::string& b, DType dt) const {
    return (backend.empty() || backend == b) && (dtype.empty() || dtype == dtype_name(dt));
  }
  std::string describe() const {
    return "VINF_OPS_FILTER='" + filter + "' VINF_OPS_BACKEND='" + backend + "' VINF_OPS_DTYPE='" + dtype + "'";
  }
};

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

Selection make_selection(const std::string& filter, const std::string& backend, const std::string& dtype) {
  Selection s{filter, backend, dtype, ""};
  if (!s.backend.empty() && s.backend != "cpu" && s.backend != "cuda") {
    s.error = "VINF_OPS_BACKEND must be cpu or cuda (or unset for both), got '" + s.backend + "'";
  } else if (!s.dtype.empty() && s.dtype != "f32" && s.dtype != "f16" && s.dtype != "bf16") {
    s.error = "VINF_OPS_DTYPE must be f32, f16 or bf16 (or unset for all), got '" + s.dtype + "'";
  } else if (s.backend == "cpu" && s.dtype == "f16") {
    s.error = "VINF_OPS_BACKEND=cpu with VINF_OPS_DTYPE=f16 selects nothing: the CPU computes in f32 and bf16 only";
  } else {
    bool any = false;
    for (const auto& c : opcheck::unit_cases()) any = any || opcheck::matches_filter(c, s.filter);
    if (!any)
      s.error = "VINF_OPS_FILTER='" + s.filter +
                "' matches no case of the op table (the name or family must contain it; vinf selfcheck --list)";
  }
  return s;
}

Selection selection_from_env() {
  return make_selection(env("VINF_OPS_FILTER"), env("VINF_OPS_BACKEND"), env("VINF_OPS_DTYPE"));
}


// The selection for a test of backend `b` in `dt`: fails the test when the selection is unusable,
// false (with a message) when it leaves this test out.
bool selected(const Selection& s, const std::string& b, DType dt) {
  if (!s.error.empty()) FAIL(s.error);
  if (s.picks(b, dt)) return true;
  MESSAGE(("not selected by " + s.describe()));
  return false;
}

void check_backend(const Selection& sel, Runtime& rt, DType dtype) {
  Runtime ref(Device::cpu(), CpuImpl::reference);
  int checked = 0;
  for (const auto& c : opcheck::unit_cases()) {
    if (!opcheck::matches_filter(c, sel.filter)) continue;
    INFO("case: " << c.name << " on " << rt.device().name() << " " << std::string(dtype_name(dtype)));
    const auto expected = opcheck::run_case(c, ref, DType::f32, dtype);
    const auto got = opcheck::run_case(c, rt, dtype, dtype);
    const auto cmp = opcheck::compare(expected, got, opcheck::tolerance_for(c, dtype));
    CHECK_MESSAGE(cmp.ok, cmp.mismatches << " mismatches, max |err| " << cmp.max_abs_error << "\n" << cmp.report);
    ++checked;
  }
  if (sel.filter.empty()) CHECK(checked >= 40);
  else CHECK(checked >= 1);
}

}  // namespace

TEST_CASE("op table: CPU fast paths match the naive references") {
  const Selection sel = selection_from_env();
  if (!selected(sel, "cpu", DType::f32)) return;
  Runtime fast(Device::cpu(), CpuImpl::fast);
  check_backend(sel, fast, DType::f32);
}

// --dtype bf16 on the CPU: the cases with weights (linear, conv2d, temporal_conv), bf16 weights
// and f32 activations, and the attention with bf16 products, against the reference in f32 on the
// same bf16-rounded inputs and weights (opcheck::cpu_bf16_tolerance says what each may differ by).
// The attention must also differ from the f32 kernel's result: it rounds the probabilities, so a
// result equal to f32's would mean the bf16 kernel never ran (every case has rows that see
// several keys, whose probabilities are not all exact in bf16). Head dims of 8 and less on
// AVX-512 run the f32 kernel in bf16 too (cpu::fast::attention_bf16_products): equal there.
TEST_CASE("op table: CPU bf16 matches the reference on bf16-rounded inputs") {
  const Selection sel = selection_from_env();
  if (!selected(sel, "cpu", DType::bf16)) return;
  if (!cpu_bf16()) {
    MESSAGE("skipped: this CPU lacks AVX-512 BF16 (" << cpu_model_name() << "), which --dtype bf16 on the CPU needs");
    return;
  }
  Runtime fast(Device::cpu(), CpuImpl::fast), ref(Device::cpu(), CpuImpl::reference);
  int checked = 0, attention = 0;
  for (const auto& c : opcheck::unit_cases()) {
    const auto tol = opcheck::cpu_bf16_tolerance(c);
    if (!opcheck::matches_filter(c, sel.filter) || !tol) continue;
    INFO("case: " << c.name << " on the CPU in bf16");
    const auto expected = opcheck::run_case(c, ref, DType::f32, DType::bf16);
    const auto got = opcheck::run_case(c, fast, DType::bf16, DType::bf16);
    const auto cmp = opcheck::compare(expected, got, *tol);
    CHECK_MESSAGE(cmp.ok, cmp.mismatches << " mismatches, max |err| " << cmp.max_abs_error << "\n" << cmp.report);
    if (c.family == "attention") {
      const auto f32 = opcheck::run_case(c, fast, DType::f32, DType::bf16);
      const auto same = opcheck::compare(f32, got, opcheck::Tolerance{0, 0});
      if (cpu::fast::attention_bf16_products(c.head_dim, c.value_dim))
        CHECK_MESSAGE(same.max_abs_error > 0, "the bf16 attention equals the f32 kernel's bit for bit");
      else  // head dims of 8 and less on AVX-512: the f32 kernel, whatever the dtype
        CHECK_MESSAGE(same.max_abs_error == 0, "the attention of small heads in bf16 is not the f32 kernel's");
      ++attention;
    }
    ++checked;
  }
  if (sel.filter.empty()) CHECK(checked >= 20);
  if (sel.filter.empty()) CHECK(attention >= 10);
}

TEST_CASE("op table: the reference is deterministic (same case twice, same bits)") {
  const Selection sel = selection_from_env();
  if (!selected(sel, "cpu", DType::f32)) return;
  Runtime ref(Device::cpu(), CpuImpl::reference);
  for (const auto& c : opcheck::unit_cases()) {
    if (!opcheck::matches_filter(c, sel.filter)) continue;
    INFO("case: " << c.name);
    const auto a = opcheck::run_case(c, ref, DType::f32, DType::f32);
    const auto b = opcheck::run_case(c, ref, DType::f32, DType::f32);
    CHECK(a.values == b.values);
  }
}

TEST_CASE("CUDA op table: f32 matches the CPU reference") {
  const Selection sel = selection_from_env();
  if (!selected(sel, "cuda", DType::f32) || !test::gpu_or_skip("CUDA f32 op table")) return;
  Runtime gpu(Device::cuda(0));
  check_backend(sel, gpu, DType::f32);
}

TEST_CASE("CUDA op table: f16 matches the CPU reference on f16-rounded inputs") {
  const Selection sel = selection_from_env();
  if (!selected(sel, "cuda", DType::f16) || !test::gpu_or_skip("CUDA f16 op table")) return;
  Runtime gpu(Device::cuda(0));
  check_backend(sel, gpu, DType::f16);
}

TEST_CASE("CUDA op table: bf16 matches the CPU reference on bf16-rounded inputs") {
  const Selection sel = selection_from_env();
  if (!selected(sel, "cuda", DType::bf16) || !test::gpu_or_skip("CUDA bf16 op table")) return;
  Runtime gpu(Device::cuda(0));
  check_backend(sel, gpu, DType::bf16);
}

TEST_CASE("op table: a filter selects by name or family, as vinf selfcheck --filter does") {
  const auto cases = opcheck::unit_cases();
  auto count = [&](const std::string& filter) {
    int n = 0;
    for (const auto& c : cases) n += opcheck::matches_filter(c, filter) ? 1 : 0;
    return n;
  };
  CHECK(count("") == static_cast<int>(cases.size()));
  CHECK(count("no such op") == 0);
  int conv2d = 0, upsample = 0, upsample_named_otherwise = 0;
  for (const auto& c : cases) {
    INFO("case: " << c.name);
    // "conv2d" picks the conv2d family and not temporal_conv.
    CHECK(opcheck::matches_filter(c, "conv2d") == (c.family == "conv2d"));
    conv2d += c.family == "conv2d" ? 1 : 0;
    // A family picks its cases even when their names do not spell it ("upsample 2x ...").
    CHECK(opcheck::matches_filter(c, "upsample_nearest") == (c.family == "upsample_nearest"));
    upsample += c.family == "upsample_nearest" ? 1 : 0;
    upsample_named_otherwise += c.family == "upsample_nearest" && !contains(c.name, "upsample_nearest") ? 1 : 0;
  }
  CHECK(conv2d >= 2);
  CHECK(upsample >= 1);
  CHECK(upsample_named_otherwise >= 1);
  // Part of one case's name picks that case alone.
  CHECK(count("attention banded clipped ends") == 1);
}

TEST_CASE("op table: the environment's selection is checked, and one that picks nothing is refused with the reason") {
  CHECK(make_selection("", "", "").error.empty());
  const Selection s = make_selection("attention", "cuda", "bf16");
  CHECK(s.error.empty());
  CHECK(s.picks("cuda", DType::bf16));
  CHECK_FALSE(s.picks("cuda", DType::f16));
  CHECK_FALSE(s.picks("cpu", DType::f32));
  CHECK(make_selection("", "cpu", "").picks("cpu", DType::f32));
  CHECK_FALSE(make_selection("", "cpu", "").picks("cuda", DType::f32));

  CHECK(contains(make_selection("no such op", "", "").error, "VINF_OPS_FILTER='no such op' matches no case"));
  CHECK(contains(make_selection("", "gpu", "").error, "VINF_OPS_BACKEND must be cpu or cuda"));
  CHECK(contains(make_selection("", "", "f64").error, "VINF_OPS_DTYPE must be f32, f16 or bf16"));
  CHECK(contains(make_selection("", "cpu", "f16").error, "the CPU computes in f32 and bf16 only"));
  CHECK(make_selection("", "cpu", "bf16").error.empty());
}

TEST_CASE("op table: every tolerance override states its reason") {
  for (const auto& cases : {opcheck::unit_cases(), opcheck::bench_cases()})
    for (const auto& c : cases) {
      const std::string problem = opcheck::tolerance_problem(c);
      CHECK_MESSAGE(problem.empty(), problem);
    }
}

TEST_CASE("op table: a case's tolerance override is used for its dtypes, with a reason, and refused without one") {
  opcheck::OpCase c;
  c.family = "mul";
  c.name = "mul with an override";
  const opcheck::Tolerance f32 = opcheck::tolerance_for(DType::f32), bf16 = opcheck::tolerance_for(DType::bf16);
  // Without an override: the dtype's tolerance.
  CHECK(opcheck::tolerance_for(c, DType::f32).atol == f32.atol);
  CHECK(opcheck::tolerance_for(c, DType::f32).rtol == f32.rtol);

  c.tolerance = {{DType::f32, {0.05, 0.0}}};
  c.tolerance_reason = "a reason";
  CHECK(opcheck::tolerance_problem(c).empty());
  CHECK(opcheck::tolerance_for(c, DType::f32).atol == 0.05);
  CHECK(opcheck::tolerance_for(c, DType::f32).rtol == 0.0);
  CHECK(opcheck::tolerance_for(c, DType::bf16).atol == bf16.atol);  // other dtypes keep theirs
  CHECK(opcheck::tolerance_for(c, DType::bf16).rtol == bf16.rtol);

  // The override decides the comparison: an error of 0.01 at 1.0 fails f32's tolerance, passes 0.05.
  const opcheck::HostOutputs ref{{Shape{2}}, {{1.0, -2.0}}}, got{{Shape{2}}, {{1.01, -2.0}}};
  CHECK_FALSE(opcheck::compare(ref, got, f32).ok);
  CHECK(opcheck::compare(ref, got, opcheck::tolerance_for(c, DType::f32)).ok);

  // No reason: refused wherever the tolerance is asked for, naming the case.
  c.tolerance_reason.clear();
  const std::string problem = opcheck::tolerance_problem(c);
  CHECK(contains(problem, "'mul with an override'"));
  CHECK(contains(problem, "without a reason"));
  std::string thrown;
  try {
    opcheck::tolerance_for(c, DType::f32);
  } catch (const Error& e) {
    thrown = e.what();
  }
  CHECK(contains(thrown, "without a reason"));
  // A dtype twice, or a negative bound, is refused too.
  c.tolerance_reason = "a reason";
  c.tolerance = {{DType::f16, {1e-2, 0}}, {DType::f16, {2e-2, 0}}};
  CHECK(contains(opcheck::tolerance_problem(c), "f16 is listed twice"));
  c.tolerance = {{DType::f32, {-1e-3, 0}}};
  CHECK(contains(opcheck::tolerance_problem(c), "must be finite and >= 0"));
}
