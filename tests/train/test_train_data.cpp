// The pieces of training data that need no file: a clip's latents (frame order, layout, scaling)
// and the seeded clip order.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../support.hpp"
#include "model/vae.hpp"
#include "ops/elementwise.hpp"
#include "train/data.hpp"

using namespace vinf;

TEST_CASE("training data: a clip's latents are each frame's encoding, (C, F, h, w), times the scaling factor") {
  Runtime rt(Device::cpu());
  const model::VaeEncoder vae = model::VaeEncoder::load(test::fixture("tiny-unet3d/vae"), rt, DType::f32);
  const std::int64_t w = 16, h = 16, frames = 3, c = vae.config().latent_channels, lw = 8, lh = 8;
  // Frame k: a gradient whose colours differ per frame and channel.
  std::vector<std::vector<std::uint8_t>> rgb(frames, std::vector<std::uint8_t>(static_cast<std::size_t>(w * h * 3)));
  for (std::int64_t k = 0; k < frames; ++k)
    for (std::int64_t p = 0; p < w * h; ++p)
      for (std::int64_t ch = 0; ch < 3; ++ch)
        rgb[static_cast<std::size_t>(k)][static_cast<std::size_t>(p * 3 + ch)] =
            static_cast<std::uint8_t>((p * (ch + 1) + 70 * k) % 256);
  std::vector<const std::uint8_t*> ptrs;
  for (const auto& f : rgb) ptrs.push_back(f.data());
  std::vector<float> clip(static_cast<std::size_t>(c * frames * lh * lw));
  train::encode_clip(rt.ctx(), vae, ptrs, w, h, clip.data());
  for (std::int64_t k = 0; k < frames; ++k) {
    // The frame alone, in (1, 3, H, W) floats in [-1, 1], through the encoder directly.
    OwnedTensor img = rt.arena().empty(DType::f32, {1, 3, h, w}), mean = rt.arena().empty(DType::f32, {1, c, lh, lw});
    for (std::int64_t ch = 0; ch < 3; ++ch)
      for (std::int64_t p = 0; p < w * h; ++p)
        img.ptr<float>()[ch * w * h + p] = rgb[static_cast<std::size_t>(k)][static_cast<std::size_t>(p * 3 + ch)] / 127.5f - 1.f;
    vae.encode(rt.ctx(), img, mean, nullptr);
    double worst = 0;
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t p = 0; p < lh * lw; ++p)
        worst = std::max(worst, std::fabs(static_cast<double>(clip[static_cast<std::size_t>((ch * frames + k) * lh * lw + p)]) -
                                          mean.ptr<float>()[ch * lh * lw + p] * vae.config().scaling_factor));
    CAPTURE(k);
    CHECK(worst <= 1e-5);  // per image either way; only the products' blocking may differ
  }
}

TEST_CASE("training data: the clip order is a permutation fixed by seed and epoch") {
  const auto a = train::epoch_order(50, 7, 0);
  CHECK(a == train::epoch_order(50, 7, 0));
  std::vector<std::int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t i = 0; i < 50; ++i) CHECK(sorted[static_cast<std::size_t>(i)] == i);
  CHECK(a != train::epoch_order(50, 7, 1));
  CHECK(a != train::epoch_order(50, 8, 0));
  std::int64_t fixed = 0;  // a shuffle, not the identity
  for (std::int64_t i = 0; i < 50; ++i) fixed += a[static_cast<std::size_t>(i)] == i;
  CHECK(fixed < 10);
  CHECK(train::epoch_order(1, 7, 3) == std::vector<std::int64_t>{0});
}
