// VAE tiled decoding (--vae.tile): every convolution over tiles, GroupNorm with whole-image
// statistics, so the result is whole-image decoding to float rounding; on CUDA too. The decoder
// itself is checked against diffusers in cli.decode.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support.hpp"
#include "core/error.hpp"
#include "core/philox.hpp"
#include "io/safetensors.hpp"
#include "model/vae.hpp"
#include "ops/elementwise.hpp"

using namespace vinf;
namespace fs = std::filesystem;

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

double max_abs(const Image& a) {
  double m = 0;
  for (float v : a.v) m = std::max(m, static_cast<double>(std::fabs(v)));
  return m;
}

double max_diff(const Image& a, const Image& b) {
  REQUIRE(a.v.size() == b.v.size());
  double m = 0;
  for (std::size_t k = 0; k < a.v.size(); ++k) m = std::max(m, std::fabs(static_cast<double>(a.v[k]) - b.v[k]));
  return m;
}

}  // namespace

TEST_CASE("VAE config: a float out of range and layouts beyond any VAE are refused by key") {
  const fs::path path = fs::temp_directory_path() / ("vinf-vae-config-" + std::to_string(::getpid()) + ".json");
  auto refusal = [&](const std::string& text) -> std::string {
    std::ofstream(path) << text;
    try {
      model::load_vae_config(path.string());
    } catch (const InputError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  CHECK(refusal(R"({"scaling_factor": 1e300})").find("config key 'scaling_factor' must be a number within float range") !=
        std::string::npos);
  // 35 blocks would upscale by 2^34, past an int.
  std::string many = R"({"norm_num_groups": 32, "block_out_channels": [32)";
  for (int i = 1; i < 35; ++i) many += ", 32";
  CHECK(refusal(many + "]}").find("block_out_channels has 35 blocks; vinf reads VAEs of 1 to 8 blocks") !=
        std::string::npos);
  CHECK(refusal(R"({"layers_per_block": 1000000000})").find("layers_per_block 1000000000 is more than 64") !=
        std::string::npos);
  CHECK(refusal(R"({"norm_num_groups": 1, "block_out_channels": [2000000000]})")
            .find("block_out_channels 2000000000 is not in [1, 1048575]") != std::string::npos);
  CHECK(refusal(R"({"norm_num_groups": 8, "block_out_channels": [32, 64], "layers_per_block": 1})") == "(accepted)");
  fs::remove(path);
}

TEST_CASE("VAE tiles: tiled decoding equals whole-image decoding, for tiles of every size and edge") {
  Runtime rt(Device::cpu());
  const model::VaeDecoder vae = model::VaeDecoder::load(test::fixture("tiny-unet3d/vae"), rt, DType::f32);
  for (bool smooth : {false, true}) {
    const Image z = latents(2, 12, 22, smooth);
    const Image whole = decode(rt, vae, z, 0);
    const double scale = max_abs(whole);
    REQUIRE(scale > 0.1);
    // 1: single pixels; 3, 5: edge tiles of every remainder; 8: 2 x 3 tiles; 12: one tile row.
    for (std::int64_t tile : {1, 3, 5, 8, 12}) {
      const double worst = max_diff(decode(rt, vae, z, tile), whole);
      INFO((smooth ? "smooth" : "random") << " latents, tile " << tile << ": max |diff| " << worst << " of max |x| "
                                          << scale);
      CHECK(worst <= 1e-5 * scale);
    }
  }
}

TEST_CASE("VAE tiles: a tile as large as the frame decodes it whole, a negative tile is refused") {
  Runtime rt(Device::cpu());
  const model::VaeDecoder vae = model::VaeDecoder::load(test::fixture("tiny-unet3d/vae"), rt, DType::f32);
  const Image z = latents(1, 6, 10, true);
  const Image whole = decode(rt, vae, z, 0);
  CHECK(decode(rt, vae, z, 10).v == whole.v);
  CHECK(decode(rt, vae, z, 64).v == whole.v);
  CHECK_THROWS_WITH_AS(decode(rt, vae, z, -4), doctest::Contains("0 (off) or a positive number"), InputError);
}

TEST_CASE("CUDA VAE: whole and tiled decoding match the CPU f32 result") {
  if (!test::gpu_or_skip("the CUDA VAE decoder")) return;
  Runtime cpu(Device::cpu()), gpu(Device::cuda(0));
  const std::string dir = test::fixture("tiny-unet3d/vae");
  const model::VaeDecoder on_cpu = model::VaeDecoder::load(dir, cpu, DType::f32);
  const model::VaeDecoder on_gpu = model::VaeDecoder::load(dir, gpu, DType::f32);
  const Image z = latents(2, 12, 22, false);
  const Image want = decode(cpu, on_cpu, z, 0);
  const double scale = max_abs(want);
  for (std::int64_t tile : {0, 5, 8}) {
    const double worst = max_diff(decode(gpu, on_gpu, z, tile), want);
    INFO("tile " << tile << ": max |diff| " << worst << " of max |x| " << scale);
    CHECK(worst <= 1e-4 * scale);
  }
}

TEST_CASE("VAE encoder: the mean and log-variance of diffusers' encode on the tiny VAE") {
  Runtime rt(Device::cpu());
  const model::VaeEncoder enc = model::VaeEncoder::load(test::fixture("tiny-unet3d/vae"), rt, DType::f32);
  const io::SafetensorsFile ref(test::fixture("tiny-unet3d/vae/ref_encode.safetensors"));
  const Tensor images = ref.tensor("images"), ref_mean = ref.tensor("mean"), ref_logvar = ref.tensor("logvar");
  auto check = [&](std::int64_t per_call) {
    OwnedTensor mean = rt.arena().empty(DType::f32, ref_mean.shape), logvar = rt.arena().empty(DType::f32, ref_mean.shape);
    enc.encode(rt.ctx(), images, mean, &logvar, per_call);
    double dm = 0, dl = 0;
    for (std::int64_t i = 0; i < mean.numel(); ++i) {
      dm = std::max(dm, std::fabs(static_cast<double>(mean.ptr<float>()[i]) - ref_mean.ptr<float>()[i]));
      dl = std::max(dl, std::fabs(static_cast<double>(logvar.ptr<float>()[i]) - ref_logvar.ptr<float>()[i]));
    }
    CAPTURE(per_call);
    CHECK(dm <= 1e-4);
    CHECK(dl <= 1e-4);
  };
  check(4);  // all three images in one call
  check(2);  // in two calls: the same numbers, image by image
  // Images whose size is not a multiple of the VAE's 2x downscale are refused by name.
  OwnedTensor odd = rt.arena().empty(DType::f32, {1, 3, 15, 16}), m = rt.arena().empty(DType::f32, {1, 4, 8, 8});
  CHECK_THROWS_WITH_AS(enc.encode(rt.ctx(), odd, m, nullptr), doctest::Contains("multiples of 2"), InputError);
}

TEST_CASE("VAE encoder: the parameter list is the file's encoder and quant_conv, every one") {
  const model::ModelFiles files = model::find_model_files(test::fixture("tiny-unet3d/vae"));
  const model::VaeConfig c = model::load_vae_config(files.config);
  const model::WeightFiles wf(files);
  std::size_t in_file = 0;
  for (const auto& [name, found] : wf.all())
    if (name.rfind("encoder.", 0) == 0 || name.rfind("quant_conv.", 0) == 0) ++in_file;
  const auto params = model::vae_encoder_parameters(c);
  CHECK(params.size() == in_file);
  std::vector<std::string> warnings;
  CHECK_NOTHROW(model::check_weights(wf, params, true, &warnings));
}
