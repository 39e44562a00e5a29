// Every case of the backward passes' table against central finite differences of its forward op,
// on the CPU's fast path and on the naive references.
#include <doctest/doctest.h>

#include <memory>

#include "ops/backward.hpp"
#include "ops/elementwise.hpp"
#include "ops/grad_cases.hpp"

#include "../support.hpp"

using namespace vinf;

TEST_CASE("grad table: every backward pass matches finite differences of its forward op") {
  const auto cases = opcheck::grad_cases();
  CHECK(cases.size() >= 20);
  for (CpuImpl impl : {CpuImpl::fast, CpuImpl::reference}) {
    Runtime rt(Device::cpu(), impl);
    std::uint64_t seed = 11;
    for (const auto& c : cases) {
      CAPTURE(c.name);
      CAPTURE(impl == CpuImpl::fast ? "fast" : "reference");
      const opcheck::GradCheck r = opcheck::check_gradients(c, rt, seed++);
      INFO(r.report);
      CHECK(r.ok);
      CHECK(r.checked > 0);
    }
  }
}

TEST_CASE("grad table: the check fails a backward pass that is wrong") {
  // The check itself must be able to fail: a linear backward that forgets the bias gradient,
  // and one whose input gradient is scaled by 1.01.
  for (const auto& c : opcheck::grad_cases()) {
    if (c.name != "linear [2,5,6] -> 4 bias") continue;
    Runtime rt(Device::cpu());
    opcheck::GradCase no_bias = c;
    no_bias.backward = [](ExecContext& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& dout,
                          const std::vector<const Tensor*>& d) {
      ops::linear_backward(ctx, in[0], in[1], dout[0], d[0], d[1], nullptr);
    };
    CHECK_FALSE(opcheck::check_gradients(no_bias, rt, 3).ok);
    opcheck::GradCase scaled = c;
    scaled.backward = [&c](ExecContext& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& dout,
                           const std::vector<const Tensor*>& d) {
      c.backward(ctx, in, dout, d);
      ops::scale(ctx, *d[0], 1.01f, *d[0]);
    };
    CHECK_FALSE(opcheck::check_gradients(scaled, rt, 3).ok);
    CHECK(opcheck::check_gradients(c, rt, 3).ok);
    return;
  }
  FAIL("the table has no case 'linear [2,5,6] -> 4 bias'");
}

TEST_CASE("grad table: the CUDA backward passes match the CPU's") {
  // Without a GPU the comparison runs against a second CPU runtime (the naive references for the
  // forward ops some cases call), so that its plumbing runs in every build.
  const bool gpu = test::gpu_or_skip("the CUDA backward passes (compared with a second CPU runtime instead)");
  auto other = gpu ? std::make_unique<Runtime>(Device::cuda(0))
                   : std::make_unique<Runtime>(Device::cpu(), CpuImpl::reference);
  std::uint64_t seed = 31;
  for (const auto& c : opcheck::grad_cases()) {
    CAPTURE(c.name);
    const opcheck::GradCheck r = opcheck::compare_backward(c, *other, seed++);
    INFO(r.report);
    CHECK(r.ok);
    CHECK(r.checked > 0);
  }
}
