// vinf evaluate's measures on frames made here: a still scene, a flicker, a known translation and
// a planted seam, and the boundaries it accepts and refuses.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "evaluate/evaluate.hpp"
#include "core/error.hpp"

using namespace vinf;
using namespace vinf::evaluate;

namespace {

constexpr std::int64_t kFrameW = 64, kFrameH = 48;

// A hashed gray texture, so that every shift of a block looks different.
float texture(std::int64_t x, std::int64_t y) {
  auto h = static_cast<std::uint32_t>((x + 1000) * 374761393u + (y + 1000) * 668265263u);
  h = (h ^ (h >> 13)) * 1274126177u;
  return static_cast<float>((h >> 24) % 200);
}

// The texture moved `shift` pixels right and `brighter` added, as RGB bytes.
std::vector<std::uint8_t> shifted(std::int64_t shift, float brighter = 0) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(kFrameW * kFrameH * 3));
  for (std::int64_t y = 0; y < kFrameH; ++y)
    for (std::int64_t x = 0; x < kFrameW; ++x)
      for (int c = 0; c < 3; ++c)
        rgb[static_cast<std::size_t>((y * kFrameW + x) * 3 + c)] = static_cast<std::uint8_t>(texture(x - shift, y) + brighter);
  return rgb;
}

Series measure(const std::vector<std::vector<std::uint8_t>>& frames) {
  Series s;
  for (std::size_t i = 1; i < frames.size(); ++i) {
    s.frame_difference.push_back(mean_abs_difference(frames[i - 1].data(), frames[i].data(), kFrameW * kFrameH * 3));
    s.motion.push_back(block_motion(gray_from_rgb8(frames[i - 1].data(), kFrameW, kFrameH), gray_from_rgb8(frames[i].data(), kFrameW, kFrameH)));
  }
  return s;
}

}  // namespace

TEST_CASE("evaluate: a still scene has frame difference and motion exactly 0") {
  const Series s = measure({shifted(0), shifted(0), shifted(0)});
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(s.frame_difference[i] == 0.0);
    CHECK(s.motion[i] == 0.0);
  }
}

TEST_CASE("evaluate: a texture moving 2 pixels per frame has motion 2") {
  std::vector<std::vector<std::uint8_t>> frames;
  for (int f = 0; f < 4; ++f) frames.push_back(shifted(2 * f));
  const Series s = measure(frames);
  for (double m : s.motion) CHECK(m == 2.0);
  for (double d : s.frame_difference) CHECK(d > 10);
  // Downscaled by 2 (max_side 32), the same motion in input pixels: 1 pixel there, times 2.
  MotionSettings small;
  small.max_side = 32;
  small.search = 4;
  CHECK(block_motion(gray_from_rgb8(frames[0].data(), kFrameW, kFrameH), gray_from_rgb8(frames[1].data(), kFrameW, kFrameH), small) ==
        2.0);
}

TEST_CASE("evaluate: a flicker alternates the frame difference and lowers the flicker score") {
  std::vector<std::vector<std::uint8_t>> frames;
  for (int f = 0; f < 6; ++f) frames.emplace_back(static_cast<std::size_t>(kFrameW * kFrameH * 3), f % 2 ? 180 : 60);
  const Series s = measure(frames);
  double sum = 0;
  for (double d : s.frame_difference) {
    CHECK(d == 120.0);
    sum += d;
  }
  CHECK(1.0 - sum / 5 / 255 == doctest::Approx(1.0 - 120.0 / 255));
  const std::vector<float> a(12, 0.5f), b(12, -0.25f);
  CHECK(mean_abs_difference(a.data(), b.data(), 12) == 0.75);
}

TEST_CASE("evaluate: a planted seam stands out at its boundary and nowhere else") {
  // Smooth motion (2 px per frame); between frames 4 and 5 a jump of 6 px and 40 levels brighter.
  std::vector<std::vector<std::uint8_t>> frames;
  for (int f = 0; f < 9; ++f) frames.push_back(shifted(2 * f + (f >= 5 ? 4 : 0), f >= 5 ? 40.f : 0.f));
  const Series s = measure(frames);
  const std::vector<std::int64_t> boundaries = {5};
  const SeamValue d = seam_value(s.frame_difference, boundaries, 5), m = seam_value(s.motion, boundaries, 5);
  REQUIRE(d.ratio);
  CHECK(*d.ratio > 1.05);
  REQUIRE(m.ratio);
  CHECK(m.value == 6.0);
  CHECK(*m.inside_mean == 2.0);
  CHECK(*m.ratio == 3.0);
  // A boundary where nothing happens: ratio 1 for the motion, near 1 for the difference.
  const SeamValue calm = seam_value(s.motion, {2, 5}, 2);
  CHECK(*calm.ratio == doctest::Approx(1.0));
  const SeamValue calm_d = seam_value(s.frame_difference, {2, 5}, 2);
  CHECK(*calm_d.ratio == doctest::Approx(1.0).epsilon(0.15));
  // Nothing inside: no mean and no ratio.
  const SeamValue none = seam_value({1.0, 0.0}, {1, 2}, 1);
  CHECK(!none.inside_mean);
  CHECK(!none.ratio);
  const SeamValue zero = seam_value({1.0, 0.0}, {1}, 1);
  CHECK(*zero.inside_mean == 0.0);
  CHECK(!zero.ratio);
}

TEST_CASE("evaluate: boundaries are strictly increasing frame numbers inside the video") {
  CHECK(parse_boundaries("16,32,48", 64) == std::vector<std::int64_t>{16, 32, 48});
  CHECK(parse_boundaries("3", 0) == std::vector<std::int64_t>{3});
  auto refused = [](const std::string& list, std::int64_t frames) {
    try {
      parse_boundaries(list, frames);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(refused("0,8", 16).find("boundary 0 is outside 1..15 (the video has 16 frames") != std::string::npos);
  CHECK(refused("8,16", 16).find("boundary 16 is outside 1..15") != std::string::npos);
  CHECK(refused("8,4", 16).find("boundary 4 does not follow 8") != std::string::npos);
  CHECK(refused("8,8", 0).find("does not follow") != std::string::npos);
  CHECK(refused("a,3", 16).find("'a' is not a frame number") != std::string::npos);
  CHECK(refused("4,,8", 16).find("'' is not a frame number") != std::string::npos);
  CHECK(refused("4.5", 16).find("'4.5' is not a frame number") != std::string::npos);
  CHECK(refused("-2", 0).find("not a frame after the first") != std::string::npos);
}

TEST_CASE("evaluate: the plot has a panel per series and marks the boundaries") {
  Series s;
  s.frame_difference = {1, 2, 9, 2};
  s.motion = {0, 0, 0, 0};
  std::int64_t w = 0, h = 0;
  const std::vector<std::uint8_t> rgb = plot_series(s, "rgb", {3}, w, h);
  CHECK(w == 800);
  CHECK(h == 2 * 190);
  REQUIRE(rgb.size() == static_cast<std::size_t>(w * h * 3));
  // The title strip of a panel: rows 8..17 below its top, from the plot's left edge (x 56).
  auto strip = [&](const std::vector<std::uint8_t>& img, std::int64_t top, std::int64_t r, std::int64_t g,
                   std::int64_t b) {
    std::vector<std::uint8_t> hits;
    for (std::int64_t y = top + 8; y < top + 18; ++y)
      for (std::int64_t x = 56; x < w; ++x) {
        const std::uint8_t* p = img.data() + (y * w + x) * 3;
        hits.push_back(p[0] == r && p[1] == g && p[2] == b);
      }
    return hits;
  };
  auto count = [](const std::vector<std::uint8_t>& hits) { return std::count(hits.begin(), hits.end(), 1); };
  std::int64_t red = 0;
  for (std::size_t i = 0; i < rgb.size(); i += 3) red += rgb[i] == 220 && rgb[i + 1] == 40 && rgb[i + 2] == 40;
  CHECK(red > 2 * 100);  // one vertical line through each panel
  const auto title0 = strip(rgb, 0, 40, 40, 40), title1 = strip(rgb, 190, 40, 40, 40);
  CHECK(count(title0) > 200);  // "frame difference (mean abs, 0-255)" and the legend
  CHECK(count(title1) > 50);   // "motion (px)"
  CHECK(title0 != title1);
  CHECK(count(strip(rgb, 0, 220, 40, 40)) > 10);  // the legend's red tick
  CHECK(count(strip(rgb, 190, 220, 40, 40)) == 0);

  const std::vector<std::uint8_t> latents = plot_series(s, "latents", {}, w, h);
  CHECK(strip(latents, 0, 40, 40, 40) != title0);  // the unit follows the space
  CHECK(strip(latents, 190, 40, 40, 40) != title1);
  CHECK(count(strip(latents, 0, 220, 40, 40)) == 0);  // no boundaries, no legend
}
