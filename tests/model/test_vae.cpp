// VAE tiled decoding (--vae.tile): the tiles, blends and crops of diffusers' tiled_decode, written
// out here on the host from whole-image decodes of each tile; a tile covering the frame is
// whole-frame decoding. The decoder itself is checked against diffusers in cli.decode.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "../support.hpp"
#include "core/error.hpp"
#include "core/philox.hpp"
#include "model/vae.hpp"
#include "ops/elementwise.hpp"

using namespace vinf;

namespace {

struct Image {  // host (N, C, H, W)
  std::int64_t n = 0, c = 0, h = 0, w = 0;
  std::vector<float> v;
  float& at(std::int64_t i, std::int64_t ch, std::int64_t y, std::int64_t x) {
    return v[static_cast<std::size_t>(((i * c + ch) * h + y) * w + x)];
  }
};

Image decode(Runtime& rt, const model::VaeDecoder& vae, const Image& z, std::int64_t tile) {
  const std::int64_t up = vae.config().upscale();
  Image out{z.n, vae.config().out_channels, z.h * up, z.w * up, {}};
  out.v.resize(static_cast<std::size_t>(out.n * out.c * out.h * out.w));
  const Shape zs{z.n, z.c, z.h, z.w}, os{out.n, out.c, out.h, out.w};
  OwnedTensor x = rt.arena().empty(DType::f32, zs), y = rt.arena().empty(DType::f32, os);
  ops::copy(rt.ctx(), Tensor::wrap(const_cast<float*>(z.v.data()), DType::f32, Device::cpu(), zs), x);
  vae.decode(rt.ctx(), x, y, 4, tile);
  ops::copy(rt.ctx(), y, Tensor::wrap(out.v.data(), DType::f32, Device::cpu(), os));
  rt.synchronize();
  return out;
}

Image crop(Image& a, std::int64_t y0, std::int64_t x0, std::int64_t h, std::int64_t w) {
  Image r{a.n, a.c, h, w, std::vector<float>(static_cast<std::size_t>(a.n * a.c * h * w))};
  for (std::int64_t i = 0; i < a.n; ++i)
    for (std::int64_t ch = 0; ch < a.c; ++ch)
      for (std::int64_t y = 0; y < h; ++y)
        for (std::int64_t x = 0; x < w; ++x) r.at(i, ch, y, x) = a.at(i, ch, y0 + y, x0 + x);
  return r;
}

// diffusers' AutoencoderKL.tiled_decode with tile_latent_min_size = tile, overlap factor 0.25.
Image reference_tiled(Runtime& rt, const model::VaeDecoder& vae, Image z, std::int64_t tile) {
  const std::int64_t up = vae.config().upscale(), sample = tile * up;
  const auto overlap = static_cast<std::int64_t>(static_cast<double>(tile) * (1 - 0.25));
  const auto extent = static_cast<std::int64_t>(static_cast<double>(sample) * 0.25), limit = sample - extent;
  std::vector<std::vector<Image>> rows;
  for (std::int64_t i = 0; i < z.h; i += overlap) {
    rows.emplace_back();
    for (std::int64_t j = 0; j < z.w; j += overlap)
      rows.back().push_back(decode(rt, vae, crop(z, i, j, std::min(tile, z.h - i), std::min(tile, z.w - j)), 0));
  }
  Image out{z.n, vae.config().out_channels, z.h * up, z.w * up, {}};
  out.v.assign(static_cast<std::size_t>(out.n * out.c * out.h * out.w), NAN);
  std::int64_t oy = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::int64_t ox = 0, kept_h = 0;
    for (std::size_t j = 0; j < rows[i].size(); ++j) {
      Image& b = rows[i][j];
      if (i > 0) {  // blend_v, in place
        Image& a = rows[i - 1][j];
        const std::int64_t e = std::min({a.h, b.h, extent});
        for (std::int64_t y = 0; y < e; ++y)
          for (std::int64_t n = 0; n < b.n; ++n)
            for (std::int64_t ch = 0; ch < b.c; ++ch)
              for (std::int64_t x = 0; x < b.w; ++x)
                b.at(n, ch, y, x) = a.at(n, ch, a.h - e + y, x) * (1 - static_cast<float>(y) / static_cast<float>(e)) +
                                    b.at(n, ch, y, x) * (static_cast<float>(y) / static_cast<float>(e));
      }
      if (j > 0) {  // blend_h, in place
        Image& a = rows[i][j - 1];
        const std::int64_t e = std::min({a.w, b.w, extent});
        for (std::int64_t x = 0; x < e; ++x)
          for (std::int64_t n = 0; n < b.n; ++n)
            for (std::int64_t ch = 0; ch < b.c; ++ch)
              for (std::int64_t y = 0; y < b.h; ++y)
                b.at(n, ch, y, x) = a.at(n, ch, y, a.w - e + x) * (1 - static_cast<float>(x) / static_cast<float>(e)) +
                                    b.at(n, ch, y, x) * (static_cast<float>(x) / static_cast<float>(e));
      }
      const std::int64_t kh = std::min(limit, b.h), kw = std::min(limit, b.w);
      for (std::int64_t n = 0; n < b.n; ++n)
        for (std::int64_t ch = 0; ch < b.c; ++ch)
          for (std::int64_t y = 0; y < kh; ++y)
            for (std::int64_t x = 0; x < kw; ++x) out.at(n, ch, oy + y, ox + x) = b.at(n, ch, y, x);
      ox += kw;
      kept_h = kh;
    }
    REQUIRE(ox == out.w);
    oy += kept_h;
  }
  REQUIRE(oy == out.h);
  return out;
}

Image latents(std::int64_t n, std::int64_t h, std::int64_t w, bool smooth) {
  Image z{n, 4, h, w, {}};
  z.v.resize(static_cast<std::size_t>(n * 4 * h * w));
  for (std::size_t k = 0; k < z.v.size(); ++k) z.v[k] = philox::normal_at(11, 0, k);
  if (smooth)  // a slowly varying field per channel, like a real image's latents
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t c = 0; c < 4; ++c)
        for (std::int64_t y = 0; y < h; ++y)
          for (std::int64_t x = 0; x < w; ++x)
            z.at(i, c, y, x) = std::sin(0.2f * static_cast<float>(y) + 0.7f * static_cast<float>(c)) +
                               std::cos(0.15f * static_cast<float>(x) - 0.3f * static_cast<float>(c + i));
  return z;
}

}  // namespace

TEST_CASE("VAE tiles: the tiles, blends and crops of diffusers' tiled_decode") {
  Runtime rt(Device::cpu());
  const model::VaeDecoder vae = model::VaeDecoder::load(test::fixture("tiny-unet3d/vae"), rt, DType::f32);
  for (std::int64_t tile : {4, 8}) {
    const Image z = latents(2, 12, 22, false);  // edge tiles of every size, 2 x 4 and 4 x 7 tiles
    const Image got = decode(rt, vae, z, tile), want = reference_tiled(rt, vae, z, tile);
    double worst = 0;
    for (std::size_t k = 0; k < want.v.size(); ++k)
      worst = std::max(worst, std::fabs(static_cast<double>(got.v[k]) - want.v[k]));
    INFO("tile " << tile << ": max |diff| " << worst);
    CHECK(worst < 1e-5);
  }
}

TEST_CASE("VAE tiles: a tile as large as the frame decodes it whole; a tile not a multiple of 4 is refused") {
  Runtime rt(Device::cpu());
  const model::VaeDecoder vae = model::VaeDecoder::load(test::fixture("tiny-unet3d/vae"), rt, DType::f32);
  const Image z = latents(1, 24, 32, true);
  const Image whole = decode(rt, vae, z, 0);
  CHECK(decode(rt, vae, z, 32).v == whole.v);
  // Tiles normalise and attend on their own, so with random weights they are far from whole frames:
  // this reports how far (diffusers' tiling has the same property).
  for (std::int64_t tile : {8, 16}) {
    const Image tiled = decode(rt, vae, z, tile);
    double err = 0, ref = 0;
    for (std::size_t k = 0; k < whole.v.size(); ++k) {
      err += (tiled.v[k] - whole.v[k]) * (tiled.v[k] - whole.v[k]);
      ref += whole.v[k] * whole.v[k];
    }
    MESSAGE("tile " << tile << " on a smooth latent, random weights: rms difference / rms " << std::sqrt(err / ref));
    CHECK(std::isfinite(err));
  }
  CHECK_THROWS_WITH_AS(decode(rt, vae, z, 6), doctest::Contains("a multiple of 4"), InputError);
}
