// SkyReels-V2's diffusion forcing end to end against diffusers' (tests/fixtures/skyreels-df-tiny):
// from the reference's draws, every row's model input and latents and the final video's latents,
// in the synchronous case, with addnoise_condition, and asynchronous with causal blocks of 2.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "../support.hpp"
#include "io/safetensors.hpp"
#include "model/t5_tokenizer.hpp"
#include "model/wan_transformer.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"
#include "pipeline/df_denoise.hpp"

using namespace vinf;

namespace {

void check_df_case(const std::string& name, std::int64_t frames, pipeline::DfSettings s, double tol,
                   Device device = Device::cpu()) {
  Runtime rt(device);
  const std::string dir = test::fixture("skyreels-df-tiny");
  const model::WanTransformer wan = model::WanTransformer::load(dir + "/transformer", rt, DType::f32, false, nullptr);
  const sampling::FlowScheduler scheduler(sampling::FlowSolver::unipc,
                                          sampling::read_flow_schedule_config(dir + "/scheduler"), 4);
  const io::SafetensorsFile ref(dir + "/ref_" + name + ".safetensors");
  const OwnedTensor prompt = test::upload_f32(rt, ref.tensor("prompt_embeds")),
                    negative = test::upload_f32(rt, ref.tensor("negative_prompt_embeds"));
  pipeline::DfDenoise d{wan, scheduler, prompt, negative, 6.f, nullptr, 0, s, {ref.path(), 0}};
  int rows = 0;
  double worst = 0;
  d.probe = [&](std::size_t k, std::size_t r, const char* what, const Tensor& value) {
    const std::string w = "window" + std::to_string(k) + ".";
    const std::string key = std::string(what) == "latents"       ? w + "latents.row" + std::to_string(r)
                            : std::string(what) == "model_input" ? w + "model_input.row" + std::to_string(r)
                                                                 : "";
    if (key.empty()) return;
    const double diff = test::relative_diff(ref.tensor(key), test::download(rt, value));
    INFO(name << " " << key << ": relative " << diff);
    CHECK(diff < tol);
    worst = std::max(worst, diff);
    rows += std::string(what) == "latents";
  };
  OwnedTensor video = rt.arena().empty(DType::f32, {1, 16, frames, 4, 6});
  pipeline::df_denoise(rt, d, video);
  const double final_diff = test::relative_diff(ref.tensor("latents"), test::download(rt, video));
  INFO(name << ": final latents relative " << final_diff << ", worst row " << worst);
  CHECK(final_diff < tol);
  CHECK(rows > 0);
}

}  // namespace

TEST_CASE("golden: SkyReels-V2 diffusion forcing equals diffusers row by row (sync, addnoise, async)") {
  check_df_case("sync", 7, {4, 2, 1, 0, 0, 24}, 1e-4);
  check_df_case("sync_addnoise", 7, {4, 2, 1, 0, 20, 24}, 1e-4);
  check_df_case("async", 9, {6, 3, 2, 1, 20, 24}, 1e-4);
}

TEST_CASE("golden: SkyReels-V2 diffusion forcing equals diffusers on CUDA") {
  if (!test::gpu_or_skip("diffusion forcing on CUDA")) return;
  check_df_case("async", 9, {6, 3, 2, 1, 20, 24}, 1e-4, Device::cuda(0));
}
