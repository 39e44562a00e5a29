// model::unet_footprint and model::vae_decode_footprint against what the arena really holds: a
// UNet call and a decoding of the tiny preset on the CPU. The estimates are upper bounds of
// ArenaStats::peak_in_use within 30%, which is what `vinf plan` promises.
#include <doctest/doctest.h>
#include <omp.h>

#include <array>

#include "core/arena.hpp"
#include "model/footprint.hpp"
#include "model/presets.hpp"
#include "model/unet3d.hpp"
#include "model/vae.hpp"
#include "model/weights.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

using namespace vinf;

namespace {

// One UNet call of the tiny preset with weights asked for in `dtype` (bf16 on the CPU: bf16
// matrices, f32 activations), against the estimate. At 2 CPU threads, the count the estimate's
// per-thread terms were calibrated at, whatever the test program took: at 1 thread the arena's
// reuse of cached blocks up to twice a request's size (core/arena.cpp) puts the bf16 call at
// 1, 16, 4 x 4 1.6% above its estimate.
void check_unet_call(DType dtype) {
  const int threads = cpu_threads();
  set_cpu_threads(2);
  struct Restore {
    int n;
    ~Restore() { set_cpu_threads(n); }
  } restore{threads};
  const model::UNetConfig c = model::preset_config("tiny");
  // (batch, frames, height, width): guided and unguided, many frames, a larger latent.
  for (const auto& [b, f, h, w] : {std::array<std::int64_t, 4>{2, 8, 8, 8}, {1, 16, 4, 4}, {2, 2, 16, 16}}) {
    CAPTURE(b);
    CAPTURE(f);
    CAPTURE(h);
    Runtime rt(Device::cpu());
    const model::UNet3D unet(c, model::Weights::random(model::unet_parameters(c), rt, dtype, 1));
    REQUIRE(unet.dtype() == DType::f32);
    OwnedTensor x = rt.arena().empty(DType::f32, {b, c.in_channels, f, h, w});
    OwnedTensor text = rt.arena().empty(DType::f32, {b, 77, c.cross_attention_dim});
    OwnedTensor out = rt.arena().empty(DType::f32, {b, c.out_channels, f, h, w});
    ops::fill(rt.ctx(), x, 0.1);
    ops::fill(rt.ctx(), text, 0.1);
    const double before = static_cast<double>(rt.arena().stats().in_use);
    rt.arena().reset_peak();
    model::PlainTemporalContext plain;
    unet.forward(rt.ctx(), x, 500, 8.0, text, out, plain);
    const double measured = static_cast<double>(rt.arena().stats().peak_in_use) - before;
    const model::ForwardShape shape{b,     f, h, w, 77, 4, 1, false, omp_get_max_threads(), dtype == DType::bf16,
                                    cpu_matmul_scratch()};
    const double estimate = model::unet_footprint(c, shape, model::TemporalCost{}).total();
    CAPTURE(measured);
    CAPTURE(estimate);
    CHECK(estimate >= measured);
    CHECK(estimate <= 1.3 * measured);
  }
}

}  // namespace

TEST_CASE("footprint: a UNet call's estimate bounds the arena's peak within 30%") { check_unet_call(DType::f32); }

// --dtype bf16 on the CPU: bf16 weights, f32 activations, and each product's input copied in bf16.
TEST_CASE("footprint: a UNet call in bf16 on the CPU stays within its estimate") {
  if (!cpu_bf16()) {
    MESSAGE("skipped: this CPU lacks AVX-512 BF16 (" << cpu_model_name() << ")");
    return;
  }
  check_unet_call(DType::bf16);
}

TEST_CASE("footprint: a VAE decoding's estimate bounds the arena's peak within 30%") {
  const model::VaeConfig c = model::vae_preset("tiny");
  for (const auto& [n, h, w, tile] : {std::array<std::int64_t, 4>{4, 8, 8, 0}, {6, 4, 4, 0}, {4, 8, 12, 4}}) {
    CAPTURE(n);
    CAPTURE(tile);
    Runtime rt(Device::cpu());
    const model::VaeDecoder vae(c, model::Weights::random(model::vae_decoder_parameters(c), rt, DType::f32, 1));
    const double before = static_cast<double>(rt.arena().stats().in_use);
    rt.arena().reset_peak();
    // As pipeline/video_files decodes a clip: its latents, then 4 frames a call.
    OwnedTensor z = rt.arena().empty(DType::f32, {n, c.latent_channels, h, w});
    ops::fill(rt.ctx(), z, 0.1);
    for (std::int64_t f0 = 0; f0 < n; f0 += 4) {
      const std::int64_t k = std::min<std::int64_t>(4, n - f0);
      OwnedTensor images = rt.arena().empty(DType::f32, {k, c.out_channels, h * c.upscale(), w * c.upscale()});
      vae.decode(rt.ctx(), z.slice(0, f0, k), images, 4, tile);
    }
    const double measured = static_cast<double>(rt.arena().stats().peak_in_use) - before;
    const double estimate = model::vae_decode_footprint(c, n, h, w, 4, tile, false);
    CAPTURE(measured);
    CAPTURE(estimate);
    CHECK(estimate >= measured);
    CHECK(estimate <= 1.3 * measured);
  }
}

TEST_CASE("footprint: sizes as the arena hands them out") {
  CHECK(model::arena_bytes(0) == 0);
  CHECK(model::arena_bytes(1) == 512);
  CHECK(model::arena_bytes(1.5 * 1048576) == static_cast<double>(Arena::round_size(1572864)));
  CHECK(model::arena_bytes(1048577) == 1048576 + 131072);
}
