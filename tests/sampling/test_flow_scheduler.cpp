// The flow-matching UniPC of the Wan family against diffusers' UniPCMultistepScheduler
// (tests/fixtures/wan-tiny/ref_sched_s8 and _s30: flow sigmas, shift 3, order 2, bh2): its
// timesteps, noise levels and a whole trajectory with model_output[i] = 0.1 latents[i] + 0.05 i.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>

#include "../support.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"
#include "sampling/flow_sampler.hpp"

using namespace vinf;

namespace {

void check_trajectory(const char* file, int steps) {
  const io::SafetensorsFile ref(test::fixture(std::string("wan-tiny/") + file));
  const sampling::FlowScheduleConfig c = sampling::read_flow_schedule_config(test::fixture("wan-tiny/scheduler"));
  const sampling::FlowScheduler s(sampling::FlowSolver::unipc, c, steps);
  const Tensor ts = ref.tensor("timesteps"), sig = ref.tensor("sigmas");
  REQUIRE(ts.numel() == steps);
  REQUIRE(sig.numel() == steps + 1);
  // A safetensors file need not align an I64 tensor to 8 bytes: read the values by bytes.
  for (int i = 0; i < steps; ++i) {
    std::int64_t want = 0;
    std::memcpy(&want, static_cast<const char*>(ts.data) + i * sizeof want, sizeof want);
    CHECK(s.timesteps()[static_cast<std::size_t>(i)] == want);
  }
  for (int i = 0; i <= steps; ++i)
    CHECK(std::fabs(s.sigmas()[static_cast<std::size_t>(i)] - sig.ptr<float>()[i]) <= 1e-7);

  const Tensor lat = ref.tensor("latents"), out = ref.tensor("model_output");
  Runtime rt(Device::cpu());
  const Shape one{lat.size(1), lat.size(2), lat.size(3), lat.size(4), lat.size(5)};
  sampling::FlowSampler sampler(s, rt.arena(), one);
  ops::copy(rt.ctx(), lat.select(0, 0), sampler.latents());
  double worst = 0;
  for (int i = 0; i < steps; ++i) {
    sampler.step(rt.ctx(), i, out.select(0, i));
    const Tensor want = lat.select(0, i + 1);
    const float* got = sampler.latents().ptr<float>();
    for (std::int64_t e = 0; e < want.numel(); ++e)
      worst = std::max(worst, std::fabs(static_cast<double>(got[e]) - want.ptr<float>()[e]));
  }
  INFO(std::string(file) << ": worst |diff| over the trajectory " << worst);
  CHECK(worst < 1e-5);
}

}  // namespace

TEST_CASE("golden: flow UniPC equals diffusers over 8 and 30 steps") {
  check_trajectory("ref_sched_s8.safetensors", 8);
  check_trajectory("ref_sched_s30.safetensors", 30);
}

TEST_CASE("flow Euler: x moves by (s_i+1 - s_i) v on the UniPC noise levels") {
  const sampling::FlowScheduler s(sampling::FlowSolver::euler, sampling::FlowScheduleConfig{}, 4);
  Runtime rt(Device::cpu());
  sampling::FlowSampler sampler(s, rt.arena(), {3});
  test::HostTensor v({3}, {1.f, -2.f, 0.5f});
  ops::copy(rt.ctx(), test::HostTensor({3}, {0.f, 1.f, 2.f}), sampler.latents());
  for (int i = 0; i < 4; ++i) sampler.step(rt.ctx(), i, v);
  // The steps telescope: x_4 = x_0 + (s_4 - s_0) v, with s_4 = 0.
  const double total = -static_cast<double>(s.sigmas()[0]);
  CHECK(s.sigmas()[4] == 0.f);
  CHECK(sampler.latents().ptr<float>()[0] == doctest::Approx(total * 1.0).epsilon(1e-6));
  CHECK(sampler.latents().ptr<float>()[1] == doctest::Approx(1.0 + total * -2.0).epsilon(1e-6));
  CHECK(sampler.latents().ptr<float>()[2] == doctest::Approx(2.0 + total * 0.5).epsilon(1e-6));
}

TEST_CASE("flow scheduler: configs vinf cannot follow are refused with the key named") {
  const test::TempDir dir("flow-config");
  auto write = [&](const std::string& body) {
    const std::string path = dir.str() + "/scheduler_config.json";
    std::ofstream(path) << body;
    return path;
  };
  CHECK_THROWS_WITH_AS(sampling::read_flow_schedule_config(write(R"({"prediction_type": "epsilon"})")),
                       doctest::Contains("prediction_type"), InputError);
  CHECK_THROWS_WITH_AS(sampling::read_flow_schedule_config(write(R"({"solver_order": 3})")),
                       doctest::Contains("solver_order"), InputError);
  CHECK_THROWS_WITH_AS(sampling::read_flow_schedule_config(write(R"({"use_karras_sigmas": true})")),
                       doctest::Contains("use_karras_sigmas"), InputError);
  CHECK_THROWS_WITH_AS(sampling::read_flow_schedule_config(write(R"({"solver_type": "midpoint"})")),
                       doctest::Contains("solver_type"), InputError);
  CHECK_THROWS_WITH_AS(sampling::read_flow_schedule_config(write(R"({"flow_shift": -1})")),
                       doctest::Contains("flow_shift"), InputError);
  CHECK(sampling::is_flow_schedule_config(test::fixture("wan-tiny/scheduler")));
  CHECK_THROWS_WITH_AS(sampling::parse_flow_solver("dpmpp"), doctest::Contains("unipc"), InputError);
}
