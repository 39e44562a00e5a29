// Every case of the op table: the CPU fast path against the naive reference, and CUDA (f32, f16,
// bf16) against the reference on the same rounded inputs when a GPU is present.
#include <doctest/doctest.h>

#include "../support.hpp"
#include "ops/verify.hpp"

using namespace vinf;

namespace {

void check_backend(Runtime& rt, DType dtype) {
  Runtime ref(Device::cpu(), CpuImpl::reference);
  int checked = 0;
  for (const auto& c : opcheck::unit_cases()) {
    INFO("case: " << c.name << " on " << rt.device().name() << " " << std::string(dtype_name(dtype)));
    const auto expected = opcheck::run_case(c, ref, DType::f32, dtype);
    const auto got = opcheck::run_case(c, rt, dtype, dtype);
    const auto cmp = opcheck::compare(expected, got, opcheck::tolerance_for(dtype));
    CHECK_MESSAGE(cmp.ok, cmp.mismatches << " mismatches, max |err| " << cmp.max_abs_error << "\n" << cmp.report);
    ++checked;
  }
  CHECK(checked >= 40);
}

}  // namespace

TEST_CASE("op table: CPU fast paths match the naive references") {
  Runtime fast(Device::cpu(), CpuImpl::fast);
  check_backend(fast, DType::f32);
}

TEST_CASE("op table: the reference is deterministic (same case twice, same bits)") {
  Runtime ref(Device::cpu(), CpuImpl::reference);
  for (const auto& c : opcheck::unit_cases()) {
    INFO("case: " << c.name);
    const auto a = opcheck::run_case(c, ref, DType::f32, DType::f32);
    const auto b = opcheck::run_case(c, ref, DType::f32, DType::f32);
    CHECK(a.values == b.values);
  }
}

TEST_CASE("CUDA op table: f32 matches the CPU reference") {
  if (!test::gpu_or_skip("CUDA f32 op table")) return;
  Runtime gpu(Device::cuda(0));
  check_backend(gpu, DType::f32);
}

TEST_CASE("CUDA op table: f16 matches the CPU reference on f16-rounded inputs") {
  if (!test::gpu_or_skip("CUDA f16 op table")) return;
  Runtime gpu(Device::cuda(0));
  check_backend(gpu, DType::f16);
}

TEST_CASE("CUDA op table: bf16 matches the CPU reference on bf16-rounded inputs") {
  if (!test::gpu_or_skip("CUDA bf16 op table")) return;
  Runtime gpu(Device::cuda(0));
  check_backend(gpu, DType::bf16);
}
