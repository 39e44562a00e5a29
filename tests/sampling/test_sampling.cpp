// The sampling pieces: the scheduler tables against model-spec §6.6 and against values computed
// here from the definitions; whole trajectories on a synthetic model (eps = 0.1 x) against an
// independent derivation in the variance-exploding variable x / alpha; guidance; the noise layout
// (a clip's keyed noise is the slice of the whole video's); the prompt-to-clip mapping; the
// scheduler_config.json reader.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "../support.hpp"
#include "core/error.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"
#include "sampling/conditioning.hpp"
#include "sampling/noise.hpp"
#include "sampling/sampler.hpp"
#include "sampling/scheduler.hpp"

using namespace vinf;
using namespace vinf::sampling;
namespace fs = std::filesystem;
using Real = long double;

namespace {

// sqrt((1 - abar_t) / abar_t) for t = 0..999 from the definition, in long double: betas on a
// linear grid in sqrt(beta) between sqrt(0.00085) and sqrt(0.012).
std::vector<Real> sigma_table() {
  std::vector<Real> s(1000);
  const Real a = std::sqrt(0.00085L), b = std::sqrt(0.012L);
  Real abar = 1;
  for (int i = 0; i < 1000; ++i) {
    const Real root = a + (b - a) * i / 999;
    abar *= 1 - root * root;
    s[static_cast<std::size_t>(i)] = std::sqrt((1 - abar) / abar);
  }
  return s;
}

std::vector<Real> abar_table() {
  std::vector<Real> out(1000);
  const std::vector<Real> s = sigma_table();
  for (std::size_t i = 0; i < s.size(); ++i) out[i] = 1 / (1 + s[i] * s[i]);
  return out;
}

// The synthetic run: eps = 0.1 x, noise of step i element e = sin(0.7 e + 1.3 i), start x = cos(e).
constexpr int kElems = 24;
Real start_value(int e) { return std::cos(static_cast<Real>(e)); }
Real noise_value(int i, int e) { return std::sin(0.7L * e + 1.3L * i); }

// Runs the Sampler through every step of `s` with the synthetic model.
std::vector<float> run_sampler(const Scheduler& s) {
  Runtime rt(Device::cpu());
  const Shape shape{1, 2, 3, 2, 2};
  Sampler sampler(s, rt.arena(), shape);
  test::HostTensor x0(shape), eps(shape), z(shape);
  for (int e = 0; e < kElems; ++e) x0.data[static_cast<std::size_t>(e)] = static_cast<float>(start_value(e));
  ops::copy(rt.ctx(), x0, sampler.latents());
  for (int i = 0; i < s.steps(); ++i) {
    ops::scale(rt.ctx(), sampler.latents(), 0.1f, eps);
    for (int e = 0; e < kElems; ++e) z.data[static_cast<std::size_t>(e)] = static_cast<float>(noise_value(i, e));
    sampler.step(rt.ctx(), i, eps, z);
  }
  std::vector<float> out(kElems);
  ops::copy(rt.ctx(), sampler.latents(), Tensor::wrap(out.data(), DType::f32, Device::cpu(), shape));
  return out;
}

// DPM-Solver++ (order 2, midpoint, first order at the first and last steps) written in the
// variance-exploding variable y = x / alpha = x sqrt(s^2 + 1): with r = s_next / s,
//   ODE: y_next = r y + (1 - r) D,   SDE: y_next = r^2 y + (1 - r^2) D + s_next sqrt(1 - r^2) z,
// D = x0 (first order) or x0 + (x0 - x0_prev) / (2 r0), r0 = ln(s_prev / s) / ln(s / s_next).
std::vector<Real> dpm_expected(const std::vector<Real>& sig, bool sde) {
  std::vector<Real> out(kElems);
  const int n = static_cast<int>(sig.size()) - 1;
  for (int e = 0; e < kElems; ++e) {
    Real x = start_value(e), prev_x0 = 0;
    for (int i = 0; i < n; ++i) {
      const Real s = sig[static_cast<std::size_t>(i)], sn = sig[static_cast<std::size_t>(i) + 1];
      const Real y = x * std::sqrt(s * s + 1);
      const Real x0 = y - s * (0.1L * x);
      Real d = x0;
      if (i > 0 && i < n - 1) {
        const Real r0 = std::log(sig[static_cast<std::size_t>(i) - 1] / s) / std::log(s / sn);
        d = x0 + (x0 - prev_x0) / (2 * r0);
      }
      const Real r = sn / s;
      const Real y_next =
          sde ? r * r * y + (1 - r * r) * d + sn * std::sqrt(1 - r * r) * noise_value(i, e) : r * y + (1 - r) * d;
      x = y_next / std::sqrt(sn * sn + 1);
      prev_x0 = x0;
    }
    out[static_cast<std::size_t>(e)] = x;
  }
  return out;
}

// DDIM (Song et al. eq. 12) from the abar table: x_prev = sqrt(a') x0 + sqrt(1 - a' - sd^2) eps + sd z.
std::vector<Real> ddim_expected(const std::vector<std::int64_t>& ts, int ratio, Real eta) {
  const std::vector<Real> abar = abar_table();
  std::vector<Real> out(kElems);
  for (int e = 0; e < kElems; ++e) {
    Real x = start_value(e);
    for (std::size_t i = 0; i < ts.size(); ++i) {
      const Real a = abar[static_cast<std::size_t>(ts[i])];
      const Real ap = ts[i] - ratio >= 0 ? abar[static_cast<std::size_t>(ts[i] - ratio)] : abar[0];
      const Real eps = 0.1L * x;
      const Real x0 = (x - std::sqrt(1 - a) * eps) / std::sqrt(a);
      const Real sd = eta * std::sqrt((1 - ap) / (1 - a) * (1 - a / ap));
      x = std::sqrt(ap) * x0 + std::sqrt(1 - ap - sd * sd) * eps + sd * noise_value(static_cast<int>(i), e);
    }
    out[static_cast<std::size_t>(e)] = x;
  }
  return out;
}

void check_close(const std::vector<float>& got, const std::vector<Real>& want, double rtol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": " << got[i] << " vs " << static_cast<double>(want[i]));
    CHECK(std::fabs(got[i] - static_cast<double>(want[i])) <= rtol * (1 + std::fabs(static_cast<double>(want[i]))));
  }
}

std::vector<Real> sigmas_of(const Scheduler& s) {
  return std::vector<Real>(s.sigmas().begin(), s.sigmas().end());
}

}  // namespace

TEST_CASE("sampling: DPM-Solver++ linspace tables for 30 steps are model-spec 6.6's") {
  const Scheduler s(SchedulerKind::dpmpp_sde, NoiseScheduleConfig{}, 30);
  const std::vector<std::int64_t> ts{999, 966, 932, 899, 866, 832, 799, 766, 733, 699, 666, 633, 599, 566, 533,
                                     499, 466, 433, 400, 366, 333, 300, 266, 233, 200, 166, 133, 100, 67,  33};
  CHECK(s.timesteps() == ts);
  const double sig[] = {14.6147, 12.0178, 9.9172, 8.3028, 7.0089, 5.9347, 5.0878, 4.3919, 3.8155, 3.3211, 2.9183,
                        2.5767,  2.2765,  2.0260, 1.8085, 1.6129, 1.4458, 1.2973, 1.1644, 1.0410, 0.9324, 0.8328,
                        0.7380,  0.6524,  0.5717, 0.4924, 0.4179, 0.3439, 0.2677, 0.1793, 0.0};
  REQUIRE(s.sigmas().size() == 31);
  for (std::size_t i = 0; i < 31; ++i) CHECK(std::fabs(s.sigmas()[i] - sig[i]) <= 6e-5 + 2e-6 * sig[i]);
  // The spec's spot values of the noise schedule.
  CHECK(s.alphas_cumprod().front() == doctest::Approx(0.99915).epsilon(1e-5));
  CHECK(s.alphas_cumprod().back() == doctest::Approx(0.0046601).epsilon(1e-4));
  CHECK(s.stochastic());
}

TEST_CASE("sampling: Karras tables for 30 steps are model-spec 6.6's") {
  const Scheduler s(SchedulerKind::dpmpp_sde_karras, NoiseScheduleConfig{}, 30);
  const std::vector<std::int64_t> ts{999, 975, 949, 923, 894, 863, 830, 795, 757, 716, 672, 624, 572, 517, 458,
                                     397, 334, 273, 214, 162, 117, 80,  53,  33,  20,  11,  6,   3,   1,   0};
  CHECK(s.timesteps() == ts);
  const double sig[] = {14.6147, 12.6606, 10.9349, 9.4149, 8.0797, 6.9103, 5.8890, 4.9999, 4.2284, 3.5614, 2.9866,
                        2.4932,  2.0714,  1.7124,  1.4080, 1.1513, 0.9357, 0.7558, 0.6063, 0.4829, 0.3817, 0.2993,
                        0.2326,  0.1791,  0.1365,  0.1029, 0.0766, 0.0564, 0.0409, 0.0292, 0.0};
  for (std::size_t i = 0; i < 31; ++i) CHECK(std::fabs(s.sigmas()[i] - sig[i]) <= 6e-5);
}

TEST_CASE("sampling: 8-step tables match the definitions") {
  const std::vector<Real> table = sigma_table();
  SUBCASE("linspace: round(k 999 / 8) half to even, reversed") {
    const Scheduler s(SchedulerKind::dpmpp, NoiseScheduleConfig{}, 8);
    CHECK(s.timesteps() == std::vector<std::int64_t>{999, 874, 749, 624, 500, 375, 250, 125});
    for (int i = 0; i < 8; ++i)
      CHECK(s.sigmas()[static_cast<std::size_t>(i)] ==
            doctest::Approx(static_cast<double>(table[static_cast<std::size_t>(s.timesteps()[static_cast<std::size_t>(i)])]))
                .epsilon(2e-6));
    CHECK(s.sigmas()[8] == 0.0);
    CHECK_FALSE(s.stochastic());
  }
  SUBCASE("Karras: rho = 7 between the table's ends; t by log-sigma interpolation") {
    const Scheduler s(SchedulerKind::dpmpp_sde_karras, NoiseScheduleConfig{}, 8);
    const Real lo = std::pow(table.front(), 1 / 7.0L), hi = std::pow(table.back(), 1 / 7.0L);
    for (int i = 0; i < 8; ++i) {
      const Real sigma = std::pow(hi + i / 7.0L * (lo - hi), 7.0L);
      CHECK(s.sigmas()[static_cast<std::size_t>(i)] == doctest::Approx(static_cast<double>(sigma)).epsilon(2e-5));  // f32 table ends
      // The fractional timestep: where ln sigma falls between two table entries.
      Real t = 0;
      for (int j = 0; j + 1 < 1000; ++j) {
        const Real a = std::log(table[static_cast<std::size_t>(j)]), b = std::log(table[static_cast<std::size_t>(j) + 1]);
        if (std::log(sigma) >= a && std::log(sigma) <= b) t = j + (std::log(sigma) - a) / (b - a);
      }
      if (i == 0) t = 999;
      CHECK(s.timesteps()[static_cast<std::size_t>(i)] == std::llround(static_cast<double>(t)));
    }
  }
  SUBCASE("DDIM leading spacing: k (1000 / N) + steps_offset") {
    const Scheduler s30(SchedulerKind::ddim, NoiseScheduleConfig{}, 30);
    for (int k = 0; k < 30; ++k) CHECK(s30.timesteps()[static_cast<std::size_t>(29 - k)] == 33 * k + 1);
    CHECK(s30.timesteps().front() == 958);
    const Scheduler s8(SchedulerKind::ddim, NoiseScheduleConfig{}, 8);
    CHECK(s8.timesteps() == std::vector<std::int64_t>{876, 751, 626, 501, 376, 251, 126, 1});
  }
}

TEST_CASE("sampling: trajectories on eps = 0.1 x match an independent derivation") {
  SUBCASE("DPM-Solver++ SDE, 8 and 30 steps") {
    for (int n : {8, 30}) {
      const Scheduler s(SchedulerKind::dpmpp_sde, NoiseScheduleConfig{}, n);
      check_close(run_sampler(s), dpm_expected(sigmas_of(s), true), 2e-5);
    }
  }
  SUBCASE("DPM-Solver++ SDE with Karras sigmas") {
    const Scheduler s(SchedulerKind::dpmpp_sde_karras, NoiseScheduleConfig{}, 12);
    check_close(run_sampler(s), dpm_expected(sigmas_of(s), true), 2e-5);
  }
  SUBCASE("DPM-Solver++ ODE") {
    const Scheduler s(SchedulerKind::dpmpp, NoiseScheduleConfig{}, 10);
    check_close(run_sampler(s), dpm_expected(sigmas_of(s), false), 2e-5);
  }
  SUBCASE("one step lands on the data prediction") {
    const Scheduler s(SchedulerKind::dpmpp_sde, NoiseScheduleConfig{}, 1);
    const std::vector<float> got = run_sampler(s);
    const Real sig = sigma_table()[999];
    for (int e = 0; e < kElems; ++e) {
      const Real x = start_value(e);
      CHECK(got[static_cast<std::size_t>(e)] == doctest::Approx(static_cast<double>(x * std::sqrt(sig * sig + 1) - sig * 0.1L * x)).epsilon(1e-5));
    }
  }
  SUBCASE("DDIM, eta 0 and 1") {
    for (double eta : {0.0, 1.0}) {
      const Scheduler s(SchedulerKind::ddim, NoiseScheduleConfig{}, 10, eta);
      CHECK(s.stochastic() == (eta > 0));
      check_close(run_sampler(s), ddim_expected(s.timesteps(), 100, static_cast<Real>(eta)), 2e-5);
    }
  }
}

TEST_CASE("sampling: guidance is uncond + g (cond - uncond)") {
  Runtime rt(Device::cpu());
  test::HostTensor u({1, 3}, {1.f, -2.f, 0.5f}), c({1, 3}, {2.f, 0.f, 0.5f}), out({1, 3});
  guide(rt.ctx(), u, c, 12.f, out);
  CHECK(out.data == std::vector<float>{13.f, 22.f, 0.5f});
}

TEST_CASE("sampling: keyed noise of a clip is the slice of the whole video's") {
  Runtime rt(Device::cpu());
  const std::int64_t C = 4, F = 12, H = 3, W = 5;
  OwnedTensor whole = rt.arena().empty(DType::f32, {1, C, F, H, W});
  const NoiseSource all(NoiseMode::invariant, 77, 0, 0);
  for (int draw = -1; draw < 3; ++draw) {
    draw < 0 ? all.initial(rt.ctx(), rt.arena(), whole) : all.step(rt.ctx(), rt.arena(), draw, whole);
    for (int clip = 0; clip < 3; ++clip) {
      OwnedTensor part = rt.arena().empty(DType::f32, {1, C, 4, H, W});
      const NoiseSource mine(NoiseMode::invariant, 77, clip, 4 * clip);
      draw < 0 ? mine.initial(rt.ctx(), rt.arena(), part) : mine.step(rt.ctx(), rt.arena(), draw, part);
      test::HostTensor a({1, C, 4, H, W}), b({1, C, 4, H, W});
      ops::copy(rt.ctx(), part, a);
      ops::copy(rt.ctx(), whole.slice(2, 4 * clip, 4), b);
      CHECK(a.data == b.data);  // bit-identical
    }
  }
  // Element (c, g, p) of the initial latents is value (g C + c) H W + p of stream 0.
  test::HostTensor w({1, C, F, H, W});
  all.initial(rt.ctx(), rt.arena(), whole);
  ops::copy(rt.ctx(), whole, w);
  test::HostTensor ref({F, C, H, W});
  ops::normal(rt.ctx(), ref, 77, 0, 0);
  CHECK(w.data[static_cast<std::size_t>((1 * F + 5) * H * W + 7)] == ref.data[static_cast<std::size_t>((5 * C + 1) * H * W + 7)]);
  // Different steps draw different numbers.
  test::HostTensor s0({1, C, F, H, W}), s1({1, C, F, H, W});
  all.step(rt.ctx(), rt.arena(), 0, whole);
  ops::copy(rt.ctx(), whole, s0);
  all.step(rt.ctx(), rt.arena(), 1, whole);
  ops::copy(rt.ctx(), whole, s1);
  CHECK(s0.data != s1.data);
}

TEST_CASE("sampling: compat noise is one stream per clip seeded seed + clip") {
  Runtime rt(Device::cpu());
  const Shape shape{1, 4, 6, 2, 3};
  test::HostTensor got(shape), want(shape), clip1(shape);
  OwnedTensor t = rt.arena().empty(DType::f32, shape);
  NoiseSource(NoiseMode::compat, 123, 0, 0).initial(rt.ctx(), rt.arena(), t);
  ops::copy(rt.ctx(), t, got);
  ops::normal(rt.ctx(), want, 123, 0, 0);  // (C, F, H, W) order from the stream's start
  CHECK(got.data == want.data);
  NoiseSource(NoiseMode::compat, 122, 1, 6).initial(rt.ctx(), rt.arena(), t);  // clip 1 of seed 122: key 123
  ops::copy(rt.ctx(), t, clip1);
  CHECK(clip1.data == want.data);
  // Step noise continues the stream after the initial draw, frame-major.
  NoiseSource(NoiseMode::compat, 123, 0, 0).step(rt.ctx(), rt.arena(), 0, t);
  ops::copy(rt.ctx(), t, got);
  test::HostTensor fm({6, 4, 2, 3});
  ops::normal(rt.ctx(), fm, 123, 0, static_cast<std::uint64_t>(shape.numel()));
  CHECK(got.data[static_cast<std::size_t>((2 * 6 + 3) * 6 + 1)] == fm.data[static_cast<std::size_t>((3 * 4 + 2) * 6 + 1)]);
}

TEST_CASE("sampling: prompts map to clips as the released code maps them") {
  std::vector<int> got;
  for (int r = 0; r < 8; ++r) got.push_back(prompt_for_clip(r, 8, 3));
  CHECK(got == std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2});
  CHECK(prompt_for_clip(0, 1, 1) == 0);
  CHECK(prompt_for_clip(3, 4, 4) == 3);
  CHECK(prompt_for_clip(1, 3, 5) == 1);  // int(1/3 * 5) = int(1.67)
}

TEST_CASE("sampling: scheduler_config.json") {
  const fs::path dir = fs::temp_directory_path() / ("vinf-sched-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& text) {
    std::ofstream(dir / "scheduler_config.json") << text;
    return dir.string();
  };
  SUBCASE("zeroscope's DDIM config") {
    const NoiseScheduleConfig c = read_scheduler_config(write(
        R"({"_class_name": "DDIMScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear", "beta_start": 0.00085,
            "clip_sample": false, "num_train_timesteps": 1000, "prediction_type": "epsilon", "set_alpha_to_one": false,
            "steps_offset": 1, "thresholding": false, "trained_betas": null})"));
    CHECK(c.num_train_timesteps == 1000);
    CHECK(c.beta_end == 0.012);
    CHECK_FALSE(c.timestep_spacing.has_value());
    CHECK(Scheduler(SchedulerKind::dpmpp_sde, c, 30).timesteps()[5] == 832);
  }
  SUBCASE("trailing spacing") {
    const NoiseScheduleConfig c = read_scheduler_config(write(R"({"timestep_spacing": "trailing"})"));
    CHECK(Scheduler(SchedulerKind::dpmpp, c, 4).timesteps() == std::vector<std::int64_t>{999, 749, 499, 249});
    CHECK(Scheduler(SchedulerKind::ddim, c, 3).timesteps() == std::vector<std::int64_t>{999, 666, 332});
  }
  SUBCASE("leading and linspace spacings for both families") {
    NoiseScheduleConfig c;
    c.timestep_spacing = Spacing::leading;  // DPM: a grid of n + 1 with step 1000 // (n + 1), 0 dropped
    CHECK(Scheduler(SchedulerKind::dpmpp, c, 4).timesteps() == std::vector<std::int64_t>{801, 601, 401, 201});
    c.timestep_spacing = Spacing::linspace;  // DDIM: linspace(0, 999, n)
    CHECK(Scheduler(SchedulerKind::ddim, c, 4).timesteps() == std::vector<std::int64_t>{999, 666, 333, 0});
    CHECK(Scheduler(SchedulerKind::ddim, c, 1).timesteps() == std::vector<std::int64_t>{0});
  }
  SUBCASE("the leading spacing's steps_offset cannot push a timestep past the training timesteps") {
    // DDIM's default: leading with zeroscope's steps_offset 1. At 1000 steps the last timestep
    // would be 999 + 1, one past alphas_cumprod.
    NoiseScheduleConfig c;
    CHECK(Scheduler(SchedulerKind::ddim, c, 999).timesteps().front() == 999);
    CHECK_THROWS_WITH_AS(Scheduler(SchedulerKind::ddim, c, 1000),
                         doctest::Contains("--sampler.steps 1000 with timestep_spacing leading and steps_offset 1 gives "
                                           "timestep 1000, outside the 1000 training timesteps"),
                         InputError);
    c.steps_offset = 5000;
    c.timestep_spacing = Spacing::leading;
    CHECK_THROWS_WITH_AS(Scheduler(SchedulerKind::dpmpp, c, 4), doctest::Contains("gives timestep 5800"), InputError);
  }
  SUBCASE("what vinf cannot use is refused with the key") {
    CHECK_THROWS_WITH_AS(read_scheduler_config(write(R"({"prediction_type": "v_prediction"})")),
                         doctest::Contains("prediction_type"), InputError);
    CHECK_THROWS_WITH_AS(read_scheduler_config(write(R"({"beta_schedule": "squaredcos_cap_v2"})")),
                         doctest::Contains("beta_schedule"), InputError);
    CHECK_THROWS_WITH_AS(read_scheduler_config(write("{not json")), doctest::Contains("not valid JSON"), InputError);
    // beta_end 0.42 (scaled_linear) drives alphas_cumprod to 0 in f32: infinite noise levels.
    CHECK_THROWS_WITH_AS(read_scheduler_config(write(R"({"beta_end": 0.42})")),
                         doctest::Contains("leave no signal from timestep"), InputError);
    // From num_train_timesteps on, no number of steps keeps the leading spacing's timesteps inside.
    CHECK_THROWS_WITH_AS(read_scheduler_config(write(R"({"steps_offset": 1000})")),
                         doctest::Contains("scheduler_config.json: steps_offset must be in [0, 1000) "
                                           "(num_train_timesteps), got 1000"),
                         InputError);
    CHECK_THROWS_AS(read_scheduler_config((dir / "missing.json").string()), InputError);
  }
  fs::remove_all(dir);
  CHECK_THROWS_WITH_AS(Scheduler(SchedulerKind::ddim, NoiseScheduleConfig{}, 0), doctest::Contains("--sampler.steps"),
                       InputError);
  CHECK_THROWS_WITH_AS(parse_scheduler("euler"), doctest::Contains("dpmpp-sde"), InputError);
}
