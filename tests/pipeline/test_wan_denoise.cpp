// Wan's denoising loop and its decoding against diffusers' WanPipeline end to end (tests/fixtures/wan-tiny/
// ref_pipeline.safetensors): from the given initial latents and the reference's prompt embeddings,
// 4 UniPC steps with guidance 5 must land on the reference's final latents.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "../support.hpp"
#include "pipeline/wan_denoise.hpp"
#include "core/error.hpp"
#include "model/wan_vae.hpp"
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
  pipeline::wan_denoise(rt, {wan, sched, prompt, negative, 5.f, [&](int) {
                                                  ++steps_seen;
                                                  return true;
                                                }}, sampler);
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

// The pipeline's last stage: its final latents through latents_std / latents_mean and the causal
// VAE, post-processed as diffusers does (clamp(x / 2 + 0.5, 0, 1)), equal to its video [1, F, 3, H, W].
TEST_CASE("golden: Wan latents to video equal diffusers' WanPipeline") {
  Runtime rt(Device::cpu());
  const model::WanVae vae = model::WanVae::load(test::fixture("wan-tiny/vae"), rt, DType::f32, model::WanVae::decoder);
  const io::SafetensorsFile ref(test::fixture("wan-tiny/ref_pipeline.safetensors"));
  const Tensor latents = ref.tensor("latents"), want = ref.tensor("video");
  OwnedTensor z = rt.arena().empty(DType::f32, latents.shape);
  ops::copy(rt.ctx(), latents, z);
  pipeline::wan_latents_for_vae(rt, vae.config(), z, z);
  const std::int64_t F = want.size(1), C = want.size(2), H = want.size(3), W = want.size(4);
  OwnedTensor video = rt.arena().empty(DType::f32, {1, C, F, H, W});
  vae.decode(rt.ctx(), z, video);
  double worst = 0;
  for (std::int64_t f = 0; f < F; ++f)
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t p = 0; p < H * W; ++p) {
        const double x = video.ptr<float>()[(c * F + f) * H * W + p];
        const double got = std::clamp(x / 2 + 0.5, 0.0, 1.0);
        worst = std::max(worst, std::fabs(got - want.ptr<float>()[(f * C + c) * H * W + p]));
      }
  INFO("video: max |diff| " << worst);
  CHECK(worst < 1e-4);
  // Channels that do not match the VAE's statistics are refused.
  OwnedTensor four = rt.arena().empty(DType::f32, {1, 4, 3, 4, 4});
  CHECK_THROWS_AS(pipeline::wan_latents_for_vae(rt, vae.config(), four, four), InputError);
}
