// FIFO-Diffusion against its authors' released code (fixtures/fifo-tiny, made by that code on the
// tiny VideoCrafter2-layout UNet with every random draw stored): the schedule tables (grid, abar,
// sigma, use_scale's scale), the base video, the initial queue, the queue after every iteration
// and the final video, with lookahead on and off and eta 0 and 1. The fixture's README states the
// algorithm; its tolerance: relative to each tensor's largest magnitude, 1e-4 for the base video,
// the initial queue and the video, 5e-4 for the queue snapshots (their tail frames are at high
// noise, where t = 999's x0 = (x - 0.998 eps) / 0.068 magnifies f32 rounding).
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support.hpp"
#include "io/json_file.hpp"
#include "io/safetensors.hpp"
#include "model/presets.hpp"
#include "ops/elementwise.hpp"
#include "pipeline/long_methods.hpp"
#include "sampling/scheduler.hpp"

using namespace vinf;

namespace {

// max |got - want| / max |want|.
double fifo_relative(const std::vector<float>& got, const Tensor& want) {
  REQUIRE(static_cast<std::int64_t>(got.size()) == want.numel());
  double worst = 0, scale = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    const double w = want.ptr<float>()[k];
    worst = std::max(worst, std::fabs(got[k] - w));
    scale = std::max(scale, std::fabs(w));
  }
  return worst / scale;
}

struct FifoCase {
  std::string name;
  int f = 0, n = 0, frames = 0;
  bool lookahead = false;
  double eta = 0, guidance = 0, fps = 0;
};

std::vector<FifoCase> fifo_cases() {
  const nlohmann::json j = io::read_json_file(test::fixture("fifo-tiny/cases.json"), "fifo cases");
  std::vector<FifoCase> out;
  for (const auto& [key, c] : j["cases"].items())
    out.push_back({c["file"].get<std::string>(), c["f"].get<int>(), c["n"].get<int>(), c["frames"].get<int>(),
                   c["lookahead"].get<int>() != 0, c["eta"].get<double>(), c["guidance"].get<double>(),
                   c["fps"].get<double>()});
  return out;
}

}  // namespace

TEST_CASE("FIFO-Diffusion's schedule tables equal the released code's (grid, abar, sigma, use_scale)") {
  for (const FifoCase& c : fifo_cases()) {
    CAPTURE(c.name);
    const io::SafetensorsFile ref(test::fixture("fifo-tiny/" + c.name));
    const int S = c.f * c.n;
    sampling::NoiseScheduleConfig config;  // VideoCrafter2's: scaled_linear 0.00085 .. 0.012, 1000 steps
    config.timestep_spacing = sampling::Spacing::linspace;
    const sampling::Scheduler sched(sampling::SchedulerKind::ddim, config, S, sampling::DdimOptions{c.eta, true, {}});
    const Tensor grid = ref.tensor("timesteps"), abar = ref.tensor("alphas_cumprod");
    for (int k = 0; k < S; ++k)  // the fixture's grid ascends, the schedule's steps descend
      CHECK(sched.timesteps()[static_cast<std::size_t>(S - 1 - k)] == grid.ptr<std::int64_t>()[k]);
    // vinf makes the betas in f32 as diffusers does, LVDM in f64: the cumulative products differ
    // in the last bits (at most 8e-7 relative, near t = 999), far below the runs' tolerance.
    for (int t = 0; t < 1000; ++t)
      CHECK(std::fabs(sched.alphas_cumprod()[static_cast<std::size_t>(t)] - abar.ptr<float>()[t]) <=
            1e-6 * abar.ptr<float>()[t]);
    const Tensor sigmas = ref.tensor("ddim.sigmas"), alphas = ref.tensor("ddim.alphas"),
                 prev = ref.tensor("ddim.alphas_prev"), scale = ref.tensor("base.scale"),
                 scale_prev = ref.tensor("base.scale_prev");
    const sampling::X0Scale vc2;
    for (int k = 0; k < S; ++k) {
      CAPTURE(k);
      const sampling::StepCoefficients q = sched.coefficients(S - 1 - k);
      const double a = alphas.ptr<double>()[k], a_prev = prev.ptr<double>()[k];
      CHECK(q.x0_x == doctest::Approx(1 / std::sqrt(a)).epsilon(1e-6));
      CHECK(q.c_m0 == doctest::Approx(std::sqrt(a_prev)).epsilon(1e-6));
      CHECK(q.c_noise == doctest::Approx(sigmas.ptr<double>()[k]).epsilon(1e-5));
      const std::int64_t t = grid.ptr<std::int64_t>()[k];
      CHECK(vc2.at(t) == doctest::Approx(scale.ptr<double>()[k]).epsilon(1e-7));
      CHECK(vc2.at(k == 0 ? 0 : grid.ptr<std::int64_t>()[k - 1]) ==
            doctest::Approx(scale_prev.ptr<double>()[k]).epsilon(1e-7));
    }
  }
}

TEST_CASE("use_scale divides DDIM's data prediction by s[t] and steps with s[t'] (VideoCrafter's formula)") {
  const sampling::X0Scale vc2;  // s[t] = 1 - 0.3 t / 399 up to 399, then 0.7
  CHECK(vc2.at(0) == doctest::Approx(1.0));
  CHECK(vc2.at(200) == doctest::Approx(1.0 - 0.3 * 200 / 399).epsilon(1e-7));
  CHECK(vc2.at(399) == doctest::Approx(0.7).epsilon(1e-7));
  CHECK(vc2.at(999) == doctest::Approx(0.7).epsilon(1e-7));
  const sampling::NoiseScheduleConfig config;
  for (bool grid : {false, true}) {
    CAPTURE(grid);
    const sampling::Scheduler plain(sampling::SchedulerKind::ddim, config, 10, sampling::DdimOptions{0.5, grid, {}});
    const sampling::Scheduler scaled(sampling::SchedulerKind::ddim, config, 10, sampling::DdimOptions{0.5, grid, vc2});
    for (int i = 0; i < 10; ++i) {
      CAPTURE(i);
      const std::int64_t t = plain.timesteps()[static_cast<std::size_t>(i)];
      const std::int64_t next = grid ? (i + 1 < 10 ? plain.timesteps()[static_cast<std::size_t>(i) + 1] : 0)
                                     : std::max<std::int64_t>(0, t - 100);
      const sampling::StepCoefficients p = plain.coefficients(i), s = scaled.coefficients(i);
      CHECK(s.x0_x == doctest::Approx(p.x0_x / vc2.at(t)));
      CHECK(s.x0_eps == doctest::Approx(p.x0_eps / vc2.at(t)));
      CHECK(s.c_m0 == doctest::Approx(p.c_m0 * vc2.at(next)));
      CHECK(s.c_eps == p.c_eps);  // the noise direction and the noise are not scaled
      CHECK(s.c_noise == p.c_noise);
    }
  }
}

TEST_CASE(
    "FIFO-Diffusion equals the released code on every iteration (fixtures/fifo-tiny, lookahead on and off, eta 0 and "
    "1)") {
  Runtime rt(Device::cpu());
  const model::ModelFiles files = model::find_model_files(test::fixture("tiny-unet3d"));
  const model::UNetConfig uc = model::load_unet_config(files.config, nullptr);
  const model::WeightFiles wf(files);
  const model::UNet3D unet(uc, model::Weights(wf, model::unet_parameters(uc), rt, DType::f32, false, nullptr));
  for (const FifoCase& c : fifo_cases()) {
    CAPTURE(c.name);
    const std::string path = test::fixture("fifo-tiny/" + c.name);
    const io::SafetensorsFile ref(path);
    const sampling::FifoPlan plan(c.f, c.n, c.lookahead);
    sampling::NoiseScheduleConfig config;
    config.timestep_spacing = sampling::Spacing::linspace;
    const sampling::Scheduler sched(sampling::SchedulerKind::ddim, config, plan.steps(),
                                    sampling::DdimOptions{c.eta, true, {}});
    const sampling::Scheduler base(sampling::SchedulerKind::ddim, config, plan.steps(),
                                   sampling::DdimOptions{c.eta, true, sampling::X0Scale{}});
    // The guidance batch [negative, prompt]: the empty prompt's embedding, then the prompt's.
    std::vector<OwnedTensor> texts;
    texts.push_back(rt.arena().empty(DType::f32, {2, 8, 32}));
    ops::copy(rt.ctx(), ref.tensor("uncond"), texts.back().slice(0, 0, 1));
    ops::copy(rt.ctx(), ref.tensor("cond"), texts.back().slice(0, 1, 1));
    const pipeline::GuidedModel model(unet, c.fps, c.guidance, std::move(texts));
    pipeline::check_fifo_draws(path, plan, c.frames, {4, 8, 8}, c.eta > 0);
    const std::unique_ptr<pipeline::FifoDraws> draws = pipeline::file_fifo_draws(path, plan);
    pipeline::FifoQueue fifo(model, nullptr, plan, sched, base, *draws, c.frames, {c.frames});
    const int Q = plan.queue_length();
    OwnedTensor state = rt.arena().empty(DType::f32, {1, 4, c.frames + Q, 8, 8});
    OwnedTensor base_video = rt.arena().empty(DType::f32, {1, 4, c.f, 8, 8});
    fifo.start(rt.ctx(), state, {}, base_video);
    const double base_err = fifo_relative(test::download(rt, base_video), ref.tensor("base.video"));
    const double init_err = fifo_relative(test::download(rt, state.slice(2, c.frames, Q)), ref.tensor("queue.init"));
    CAPTURE(base_err);
    CAPTURE(init_err);
    CHECK(base_err <= 1e-4);
    CHECK(init_err <= 1e-4);
    double worst_queue = 0;
    for (std::int64_t i = 0; i < plan.iterations(c.frames); ++i) {
      fifo.iterate(rt.ctx(), i, state);
      const double e = fifo_relative(test::download(rt, state.slice(2, c.frames, Q)),
                                     ref.tensor("iter" + std::to_string(i) + ".queue_after"));
      worst_queue = std::max(worst_queue, e);
    }
    const double video_err = fifo_relative(test::download(rt, state.slice(2, 0, c.frames)), ref.tensor("video"));
    CAPTURE(worst_queue);
    CAPTURE(video_err);
    CHECK(worst_queue <= 5e-4);
    CHECK(video_err <= 1e-4);
  }
}
