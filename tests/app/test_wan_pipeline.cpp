// Wan's denoising loop against diffusers' WanPipeline end to end (tests/fixtures/wan-tiny/
// ref_pipeline.safetensors): from the given initial latents and the reference's prompt embeddings,
// 4 UniPC steps with guidance 5 must land on the reference's final latents.
#include <doctest/doctest.h>

#include <cmath>

#include "../support.hpp"
#include "app/wan_pipeline.hpp"
#include "io/safetensors.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

using namespace vinf;

TEST_CASE("golden: Wan denoising loop equals diffusers' WanPipeline (4 UniPC steps, guidance 5)") {
  Runtime rt(Device::cpu());
  const model::WanTransformer wan =
      model::WanTransformer::load(test::fixture("wan-tiny/transformer"), rt, DType::f32, false, nullptr);
  const sampling::FlowScheduler sched(sampling::FlowSolver::unipc,
                                      sampling::read_flow_schedule_config(test::fixture("wan-tiny/scheduler")), 4);
  const io::SafetensorsFile ref(test::fixture("wan-tiny/ref_pipeline.safetensors"));
  const Tensor init = ref.tensor("latents_init");
  sampling::FlowSampler sampler(sched, rt.arena(), init.shape);
  ops::copy(rt.ctx(), init, sampler.latents());
  OwnedTensor prompt = rt.arena().empty(DType::f32, ref.tensor("prompt_embeds").shape);
  OwnedTensor negative = rt.arena().empty(DType::f32, ref.tensor("negative_prompt_embeds").shape);
  ops::copy(rt.ctx(), ref.tensor("prompt_embeds"), prompt);
  ops::copy(rt.ctx(), ref.tensor("negative_prompt_embeds"), negative);
  int steps_seen = 0;
  app::wan_denoise(rt, {wan, sched, prompt, negative, 5.f, [&](int) { ++steps_seen; }}, sampler);
  CHECK(steps_seen == 4);
  const Tensor want = ref.tensor("latents");
  double worst = 0, scale = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(sampler.latents().ptr<float>()[i]) - want.ptr<float>()[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want.ptr<float>()[i])));
  }
  INFO("final latents: max |diff| " << worst << " (largest |value| " << scale << ")");
  CHECK(worst < 1e-4);
}
