// Every case of the backward passes' table against central finite differences of its forward op,
// on the CPU's fast path and on the naive references.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>

#include "ops/backward.hpp"
#include "ops/elementwise.hpp"
#include "ops/grad_cases.hpp"
#include "ops/random.hpp"

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

TEST_CASE("backward passes told to overwrite their input gradient ignore what it held") {
  // The training graph hands a value's first gradient to the op that makes it all (linear's and
  // GEGLU's backward) uninitialised: NaNs there must not reach the result, which equals adding
  // into zeros.
  for (CpuImpl impl : {CpuImpl::fast, CpuImpl::reference}) {
    CAPTURE(impl == CpuImpl::fast ? "fast" : "reference");
    Runtime rt(Device::cpu(), impl);
    ExecContext& ctx = rt.ctx();
    auto random = [&](const Shape& s, std::uint64_t seed) {
      OwnedTensor t = rt.arena().empty(DType::f32, s);
      ops::normal(ctx, t, seed, 0, 0);
      return t;
    };
    auto compare = [&](const Tensor& added, const Tensor& written) {
      const float *a = added.ptr<float>(), *w = written.ptr<float>();  // contiguous, host memory
      for (std::int64_t i = 0; i < added.numel(); ++i) CHECK(w[i] == doctest::Approx(a[i]).epsilon(1e-6).scale(1.0));
    };
    const OwnedTensor x = random({6, 5}, 1), w = random({4, 5}, 2), dy = random({6, 4}, 3);
    OwnedTensor added = rt.arena().empty(DType::f32, x.shape), written = rt.arena().empty(DType::f32, x.shape);
    ops::fill(ctx, added, 0.0);
    ops::fill(ctx, written, std::nan(""));
    ops::linear_backward(ctx, x, w, dy, &added, nullptr, nullptr);
    ops::linear_backward(ctx, x, w, dy, &written, nullptr, nullptr, true);
    compare(added, written);

    const OwnedTensor gx = random({7, 10}, 4), gdy = random({7, 5}, 5);
    OwnedTensor gadded = rt.arena().empty(DType::f32, gx.shape), gwritten = rt.arena().empty(DType::f32, gx.shape);
    ops::fill(ctx, gadded, 0.0);
    ops::fill(ctx, gwritten, std::nan(""));
    ops::geglu_backward(ctx, gx, gdy, gadded);
    ops::geglu_backward(ctx, gx, gdy, gwritten, true);
    compare(gadded, gwritten);
  }
}
