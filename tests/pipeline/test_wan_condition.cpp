// The conditioning of Wan's image-to-video, first-and-last-frame and video-to-video pipelines
// against diffusers' (tests/fixtures/wan-i2v-tiny, wan-flf2v-tiny, wan-v2v-tiny): the pictures as
// read, CLIPImageProcessor's pixels, the CLIP states, the condition channels, the video's posterior
// and start latents, the strength's cut.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../support.hpp"
#include "core/error.hpp"
#include "io/image.hpp"
#include "io/image_resize.hpp"
#include "io/safetensors.hpp"
#include "io/video_reader.hpp"
#include "model/wan_vae.hpp"
#include "ops/runtime.hpp"
#include "pipeline/wan_condition.hpp"

using namespace vinf;

namespace {

bool fixture_bytes_equal(const io::SafetensorsFile& ref, const std::string& key, const std::vector<std::uint8_t>& got) {
  const std::string_view want = ref.raw(key);
  return want.size() == got.size() && std::memcmp(want.data(), got.data(), got.size()) == 0;
}

}  // namespace

TEST_CASE("golden: Wan image-to-video conditioning equals diffusers (pixels, CLIP states, mask and image latents)") {
  const io::SafetensorsFile ref(test::fixture("wan-i2v-tiny/ref_pipeline.safetensors"));
  const io::RgbFrames image = io::read_image(test::fixture("wan-i2v-tiny/image.png"), "--image");
  REQUIRE(image.width == 48);
  REQUIRE(image.height == 32);
  CHECK(fixture_bytes_equal(ref, "image_u8", image.frames[0]));
  Runtime rt(Device::cpu());
  const pipeline::WanImageCondition c =
      pipeline::wan_image_condition(rt, test::fixture("wan-i2v-tiny"), {image}, 9, 32, 48);
  // Pillow's bicubic on the bytes, then float32 arithmetic as transformers': the same numbers.
  CHECK(test::relative_diff(ref.tensor("clip_pixel_values"), c.clip_pixels) < 1e-6);
  CHECK(c.image_tokens == 257);
  CHECK(test::relative_diff(ref.tensor("image_embeds"), c.image_states) < 1e-5);
  CHECK(c.channels == 20);
  CHECK(test::relative_diff(ref.tensor("condition"), c.condition) < 1e-5);
  CHECK(test::relative_diff(ref.tensor("video_image"), pipeline::wan_pixels(image.frames[0].data(), 48, 32, 48, 32)) ==
        0);
}

TEST_CASE("golden: Wan image-to-video conditioning equals diffusers on CUDA") {
  if (!test::gpu_or_skip("Wan image-to-video conditioning on CUDA")) return;
  const io::SafetensorsFile ref(test::fixture("wan-i2v-tiny/ref_pipeline.safetensors"));
  const io::RgbFrames image = io::read_image(test::fixture("wan-i2v-tiny/image.png"), "--image");
  Runtime rt(Device::cuda(0));
  const pipeline::WanImageCondition c =
      pipeline::wan_image_condition(rt, test::fixture("wan-i2v-tiny"), {image}, 9, 32, 48);
  CHECK(test::relative_diff(ref.tensor("image_embeds"), c.image_states) < 1e-4);
  CHECK(test::relative_diff(ref.tensor("condition"), c.condition) < 1e-4);
}

TEST_CASE("golden: Wan first-and-last-frame conditioning equals diffusers (514 image tokens, the last frame's mask)") {
  const io::SafetensorsFile ref(test::fixture("wan-flf2v-tiny/ref_pipeline.safetensors"));
  const io::RgbFrames first = io::read_image(test::fixture("wan-flf2v-tiny/image.png"), "--image");
  const io::RgbFrames last = io::read_image(test::fixture("wan-flf2v-tiny/last_image.png"), "--last-image");
  CHECK(fixture_bytes_equal(ref, "last_image_u8", last.frames[0]));
  Runtime rt(Device::cpu());
  const pipeline::WanImageCondition c =
      pipeline::wan_image_condition(rt, test::fixture("wan-flf2v-tiny"), {first, last}, 9, 32, 48);
  CHECK(test::relative_diff(ref.tensor("clip_pixel_values"), c.clip_pixels) < 1e-6);
  CHECK(c.image_tokens == 514);
  CHECK(test::relative_diff(ref.tensor("image_embeds"), c.image_states) < 1e-5);
  CHECK(test::relative_diff(ref.tensor("condition"), c.condition) < 1e-5);
  // The last latent frame's mask: channel 3 only (pixel frame 8).
  const std::int64_t plane = 4 * 6, lf = 3;
  for (int ch = 0; ch < 4; ++ch)
    CHECK(c.condition[static_cast<std::size_t>((ch * lf + 2) * plane)] == (ch == 3 ? 1.f : 0.f));
}

TEST_CASE(
    "golden: Wan video-to-video start equals diffusers (frames, posterior, sampled and noised latents, the cut)") {
  const io::SafetensorsFile ref(test::fixture("wan-v2v-tiny/ref_v2v.safetensors"));
  const io::RgbFrames video = io::read_frames(test::fixture("wan-v2v-tiny/frames"), "--video");
  REQUIRE(video.frames.size() == 9);
  std::vector<std::uint8_t> all;
  for (const auto& f : video.frames) all.insert(all.end(), f.begin(), f.end());
  CHECK(fixture_bytes_equal(ref, "video_u8", all));
  Runtime rt(Device::cpu());
  const model::WanVae vae = model::WanVae::load(test::fixture("wan-tiny/vae"), rt, DType::f32, model::WanVae::encoder);
  const pipeline::WanPosterior p = pipeline::wan_video_posterior(rt, vae, video, 9, 32, 32);
  CHECK(test::relative_diff(ref.tensor("vae_mean"), p.mean) < 1e-5);
  CHECK(test::relative_diff(ref.tensor("vae_logvar"), p.logvar) < 1e-5);
  const int first = pipeline::wan_strength_first_step(4, 0.7);
  CHECK(first == 2);
  const Tensor sigmas = ref.tensor("sigmas");
  auto values = [&](const char* key) {
    const Tensor t = ref.tensor(key);
    return std::vector<float>(t.ptr<float>(), t.ptr<float>() + t.numel());
  };
  const std::vector<float> start =
      pipeline::wan_video_start(vae.config(), p, values("posterior_eps"), values("noise"), sigmas.ptr<float>()[first]);
  CHECK(test::relative_diff(ref.tensor("latents_start"), start) < 1e-5);
  // From the reference's own posterior the arithmetic is the reference's.
  pipeline::WanPosterior exact = p;
  exact.mean = values("vae_mean");
  exact.logvar = values("vae_logvar");
  CHECK(test::relative_diff(ref.tensor("latents_start"),
                            pipeline::wan_video_start(vae.config(), exact, values("posterior_eps"), values("noise"),
                                                      sigmas.ptr<float>()[first])) < 1e-6);
  CHECK(pipeline::wan_strength_first_step(4, 1.0) == 0);
  CHECK_THROWS_WITH_AS(pipeline::wan_strength_first_step(4, 0.2), doctest::Contains("0 steps"), InputError);
  CHECK_THROWS_WITH_AS(pipeline::wan_strength_first_step(4, 1.5), doctest::Contains("(0, 1]"), InputError);
}

TEST_CASE("image resizing as Pillow: an unchanged size is a copy, a flat picture stays flat, Lanczos keeps a ramp") {
  std::vector<std::uint8_t> flat(20 * 12 * 3, 77);
  for (io::ResizeFilter f : {io::ResizeFilter::bicubic, io::ResizeFilter::lanczos}) {
    const std::vector<std::uint8_t> same = io::resize_rgb8(flat.data(), 20, 12, 20, 12, f);
    CHECK(same == flat);
    for (std::uint8_t v : io::resize_rgb8(flat.data(), 20, 12, 7, 5, f)) CHECK(v == 77);
    for (std::uint8_t v : io::resize_rgb8(flat.data(), 20, 12, 45, 31, f)) CHECK(v == 77);
  }
  // A horizontal ramp halved: each output pixel sits between its two sources, rising left to right.
  std::vector<std::uint8_t> ramp(16 * 2 * 3);
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 16; ++x)
      for (int c = 0; c < 3; ++c)
        ramp[static_cast<std::size_t>((y * 16 + x) * 3 + c)] = static_cast<std::uint8_t>(40 + 10 * x);
  const std::vector<std::uint8_t> half = io::resize_rgb8(ramp.data(), 16, 2, 8, 2, io::ResizeFilter::lanczos);
  for (int x = 2; x < 6; ++x) CHECK(half[static_cast<std::size_t>(x * 3)] == 40 + 10 * (2 * x) + 5);
}

TEST_CASE(
    "PNG files read without ffmpeg: vinf's own PNG back byte for byte, other files left to ffmpeg, damage refused") {
  const test::TempDir dir("png-read");
  std::vector<std::uint8_t> rgb(7 * 5 * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<std::uint8_t>(i * 37 % 251);
  const std::string path = dir.str() + "/a.png";
  io::write_png(path, rgb.data(), 7, 5);
  std::vector<std::uint8_t> back;
  std::int64_t w = 0, h = 0;
  REQUIRE(io::read_png(path, back, w, h));
  CHECK(w == 7);
  CHECK(h == 5);
  CHECK(back == rgb);
  std::ofstream(dir.str() + "/b.png") << "GIF89a not a png";
  CHECK_FALSE(io::read_png(dir.str() + "/b.png", back, w, h));
  // One byte of the pixel data changed: its chunk's CRC no longer holds.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes[bytes.size() - 20] = static_cast<char>(bytes[bytes.size() - 20] ^ 0x55);
  std::ofstream(dir.str() + "/c.png", std::ios::binary) << bytes;
  CHECK_THROWS_WITH_AS(io::read_png(dir.str() + "/c.png", back, w, h), doctest::Contains("CRC"), InputError);
}
