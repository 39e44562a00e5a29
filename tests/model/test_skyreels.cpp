// SkyReels-V2's diffusion-forcing transformer against diffusers' (tests/fixtures/skyreels-df-tiny):
// the rows of its windows as the pipeline fed them (per-frame timesteps, the fps embedding, the
// prefix frames at timestep 0 or the addnoise level, block-causal attention with blocks of 2), both
// guidance branches, and the config's keys.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "../support.hpp"
#include "io/safetensors.hpp"
#include "model/wan_transformer.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

using namespace vinf;

namespace {

// Row `row` of window `window` of a case: both branches within tol of the reference's.
void check_df_row(const std::string& name, int window, int row, std::int64_t block_frames, double tol,
                  Device device = Device::cpu()) {
  Runtime rt(device);
  const model::WanTransformer wan =
      model::WanTransformer::load(test::fixture("skyreels-df-tiny/transformer"), rt, DType::f32, false, nullptr);
  const io::SafetensorsFile ref(test::fixture("skyreels-df-tiny/ref_" + name + ".safetensors"));
  const std::string w = "window" + std::to_string(window) + ".", r = ".row" + std::to_string(row);
  const OwnedTensor x = test::upload_f32(rt, ref.tensor(w + "model_input" + r));
  const Tensor ts = ref.tensor(w + "model_timestep" + r);
  OwnedTensor t = rt.arena().empty(DType::f32, ts.shape);
  ops::copy(rt.ctx(), ts, t);
  OwnedTensor out = rt.arena().empty(DType::f32, x.shape);
  model::WanFrames frames;
  frames.fps = 24;
  frames.block_frames = block_frames;
  for (const auto& [text_key, pred_key] :
       {std::pair{"prompt_embeds", "noise_pred_cond"}, std::pair{"negative_prompt_embeds", "noise_pred_uncond"}}) {
    const OwnedTensor text = test::upload_f32(rt, ref.tensor(text_key));
    wan.forward(rt.ctx(), x, t, text, out, nullptr, frames);
    const double d = test::relative_diff(ref.tensor(w + pred_key + r), test::download(rt, out));
    INFO(name << " " << w << pred_key << r << ": relative " << d);
    CHECK(d < tol);
  }
}

}  // namespace

TEST_CASE("golden: SkyReels-V2 diffusion-forcing transformer equals diffusers on every kind of row") {
  const model::WanTransformerConfig c =
      model::load_wan_transformer_config(test::fixture("skyreels-df-tiny/transformer/config.json"));
  CHECK(c.skyreels);
  CHECK(c.inject_sample_info);
  check_df_row("sync", 0, 0, 1, 1e-5);  // every frame at t = 999
  check_df_row("sync", 0, 1, 1, 1e-5);
  check_df_row("sync", 1, 2, 1, 1e-5);  // the prefix at t = 0
  check_df_row("sync_addnoise", 1, 1, 1, 1e-5);  // the prefix noised, at t = 20
  check_df_row("async", 0, 3, 2, 1e-5);  // a wave of three levels, blocks of 2 frames, causal
  check_df_row("async", 1, 4, 2, 1e-5);
}

TEST_CASE("golden: SkyReels-V2 diffusion-forcing transformer equals diffusers on CUDA") {
  if (!test::gpu_or_skip("SkyReels-V2 transformer on CUDA")) return;
  check_df_row("async", 1, 4, 2, 1e-4, Device::cuda(0));
}
