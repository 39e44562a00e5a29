// Wan2.1's causal video VAE against diffusers' AutoencoderKLWan (tests/fixtures/wan-tiny:
// ref_vae.safetensors, a 9-frame 32x32 video through encode and decode(mean)), its parameter list
// against the weight file, and what it refuses.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "../support.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/wan_vae.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"

using namespace vinf;
namespace fs = std::filesystem;

namespace {

double max_diff(const test::HostTensor& got, const Tensor& want) {
  REQUIRE(want.shape == got.t.shape);
  double worst = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(got.data[static_cast<std::size_t>(i)]) - want.ptr<float>()[i]));
  return worst;
}

// The fixture's tensor `name` on rt's device.
OwnedTensor on_device(Runtime& rt, const io::SafetensorsFile& f, const std::string& name) {
  const Tensor t = f.tensor(name);
  OwnedTensor d = rt.arena().empty(DType::f32, t.shape);
  ops::copy(rt.ctx(), t, d);
  return d;
}

}  // namespace

// Both CPU implementations: oneDNN and vinf's own loops (the reference kernels), which read the
// strided views (frame-major activations, per-pixel channel norms) without oneDNN's reorders.
TEST_CASE("Wan VAE: encode equals diffusers (mean and logvar of 9 frames)") {
  for (CpuImpl impl : {CpuImpl::fast, CpuImpl::reference}) {
    CAPTURE(std::string(impl == CpuImpl::reference ? "CPU reference" : "CPU fast"));
    Runtime rt(Device::cpu(), impl);
    const model::WanVae vae = model::WanVae::load(test::fixture("wan-tiny"), rt, DType::f32, model::WanVae::encoder);
    const io::SafetensorsFile ref(test::fixture("wan-tiny/ref_vae.safetensors"));
    const OwnedTensor video = on_device(rt, ref, "video");
    const Shape ls = ref.tensor("mean").shape;
    OwnedTensor mean = rt.arena().empty(DType::f32, ls), logvar = rt.arena().empty(DType::f32, ls);
    vae.encode(rt.ctx(), video, mean, &logvar);
    test::HostTensor got_mean(ls), got_logvar(ls);
    ops::copy(rt.ctx(), mean, got_mean);
    ops::copy(rt.ctx(), logvar, got_logvar);
    rt.synchronize();
    // Measured on x86-64, f32: mean 1.1e-6, logvar 9.8e-7 (oneDNN); 6.9e-7, 8.5e-7 (reference).
    const double dm = max_diff(got_mean, ref.tensor("mean")), dl = max_diff(got_logvar, ref.tensor("logvar"));
    INFO("max |diff| mean " << dm << ", logvar " << dl);
    CHECK(dm <= 1e-4);
    CHECK(dl <= 1e-4);
  }
}

// The fixture's decode(mean) by the VAE on rt, over tiles of `tile` latent pixels (0: whole frames).
static test::HostTensor decode_fixture(Runtime& rt, std::int64_t tile) {
  const model::WanVae vae = model::WanVae::load(test::fixture("wan-tiny"), rt, DType::f32, model::WanVae::decoder);
  const io::SafetensorsFile ref(test::fixture("wan-tiny/ref_vae.safetensors"));
  const OwnedTensor z = on_device(rt, ref, "mean");
  REQUIRE(z.size(3) == 4);
  const Shape vs = ref.tensor("decoded").shape;
  OwnedTensor out = rt.arena().empty(DType::f32, vs);
  ops::fill(rt.ctx(), out, 7.0);
  vae.decode(rt.ctx(), z, out, tile);
  test::HostTensor got(vs);
  ops::copy(rt.ctx(), out, got);
  rt.synchronize();
  return got;
}

// Whole frames, then tiles of 1, 2 and 3 latent pixels on the fixture's 4x4 latents: every tile
// interior, on an edge, in a corner, and (3) tiles of two sizes. The tiled path runs tile-sized
// convolutions, which need not sum in the whole frame's order: it equals the whole-frame path to
// float rounding, not necessarily bit for bit; both against the reference at the fixture's
// tolerance.
TEST_CASE("Wan VAE: decode equals diffusers (decode(mean) to 9 frames, clamped), whole and tiled") {
  const io::SafetensorsFile ref(test::fixture("wan-tiny/ref_vae.safetensors"));
  const Tensor want = ref.tensor("decoded");
  for (CpuImpl impl : {CpuImpl::fast, CpuImpl::reference}) {
    CAPTURE(std::string(impl == CpuImpl::reference ? "CPU reference" : "CPU fast"));
    Runtime rt(Device::cpu(), impl);
    const test::HostTensor whole = decode_fixture(rt, 0);
    // Measured on x86-64, f32: 6.6e-6 (oneDNN), 3.4e-6 (reference).
    const double d = max_diff(whole, want);
    INFO("max |diff| decoded " << d);
    CHECK(d <= 1e-4);
    for (std::int64_t tile : {1, 2, 3}) {
      CAPTURE(tile);
      const test::HostTensor got = decode_fixture(rt, tile);
      // Measured on x86-64, f32: equal to whole-frame decoding bit for bit in both implementations.
      const double dw = max_diff(got, whole.t), dr = max_diff(got, want);
      INFO("max |diff| from whole frames " << dw << ", from diffusers " << dr);
      CHECK(dw <= 2e-5);
      CHECK(dr <= 1e-4);
    }
  }
  Runtime rt(Device::cpu());
  CHECK_THROWS_WITH_AS(decode_fixture(rt, -1), doctest::Contains("tile must be 0 (off)"), InputError);
}

TEST_CASE("CUDA Wan VAE: whole and tiled decoding equal diffusers") {
  if (!test::gpu_or_skip("the CUDA Wan VAE")) return;
  const io::SafetensorsFile ref(test::fixture("wan-tiny/ref_vae.safetensors"));
  const Tensor want = ref.tensor("decoded");
  Runtime rt(Device::cuda(0));
  for (std::int64_t tile : {0, 3}) {
    CAPTURE(tile);
    // cuDNN may sum the f32 products in another order (no TF32 here): the CPU's tolerance, doubled.
    const double d = max_diff(decode_fixture(rt, tile), want);
    INFO("max |diff| decoded " << d);
    CHECK(d <= 2e-4);
  }
}

TEST_CASE("Wan VAE: the wan-tiny preset is the fixture's config, its parameters the weight file's") {
  const std::string dir = test::fixture("wan-tiny/vae");
  const model::WanVaeConfig file = model::WanVae::read_config(dir), tiny = model::wan_vae_preset("wan-tiny");
  CHECK(file.base_dim == tiny.base_dim);
  CHECK(file.decoder_base_dim == tiny.decoder_base_dim);
  CHECK(file.z_dim == tiny.z_dim);
  CHECK(file.dim_mult == tiny.dim_mult);
  CHECK(file.num_res_blocks == tiny.num_res_blocks);
  CHECK(file.temperal_downsample == tiny.temperal_downsample);
  CHECK(file.latents_mean == tiny.latents_mean);
  CHECK(file.latents_std == tiny.latents_std);
  CHECK(tiny.spatial_ratio() == 8);
  CHECK(tiny.temporal_ratio() == 4);
  CHECK(tiny.latent_frames(9) == 3);
  CHECK(tiny.video_frames(3) == 9);

  const io::SafetensorsFile weights(dir + "/diffusion_pytorch_model.safetensors");
  std::int64_t in_file = 0;
  std::set<std::string> names;
  for (const auto& e : weights.entries()) {
    in_file += e.shape.numel();
    names.insert(e.name);
  }
  const std::vector<model::ParamSpec> params = model::wan_vae_parameters(tiny);
  CHECK(model::parameter_count(params) == in_file);  // 220,107
  std::set<std::string> listed;
  for (const auto& p : params) listed.insert(p.name);
  CHECK(listed == names);

  const model::WanVaeConfig full = model::wan_vae_preset("wan2.1");
  CHECK(full.base_dim == 96);
  CHECK(full.dim_mult == std::vector<int>{1, 2, 4, 4});
  CHECK(full.latents_mean.size() == 16);
  CHECK(full.latents_std.size() == 16);
  // The layout's count; the released Wan2.1 VAE's weights are about 508 MB in f32, i.e. this many.
  CHECK(model::parameter_count(model::wan_vae_parameters(full)) == 126892531);
  CHECK_THROWS_AS(model::wan_vae_preset("wan9"), InputError);
}

TEST_CASE("Wan VAE: a frame count not 1 + 4k and a size not a multiple of 8 are refused") {
  Runtime rt(Device::cpu());
  const model::WanVae vae = model::WanVae::load(test::fixture("wan-tiny"), rt, DType::f32, model::WanVae::encoder);
  OwnedTensor mean = rt.arena().empty(DType::f32, {1, 16, 3, 4, 4});
  OwnedTensor eight = rt.arena().empty(DType::f32, {1, 3, 8, 32, 32});
  ops::fill(rt.ctx(), eight, 0.0);
  CHECK_THROWS_WITH_AS(vae.encode(rt.ctx(), eight, mean, nullptr), doctest::Contains("1 + 4k frames; got 8"),
                       InputError);
  OwnedTensor odd = rt.arena().empty(DType::f32, {1, 3, 9, 30, 32});
  ops::fill(rt.ctx(), odd, 0.0);
  CHECK_THROWS_WITH_AS(vae.encode(rt.ctx(), odd, mean, nullptr), doctest::Contains("multiples of 8"), InputError);
}

TEST_CASE("Wan VAE config: what vinf does not run is refused, naming the key") {
  const fs::path path = fs::temp_directory_path() / ("vinf-wan-vae-config-" + std::to_string(::getpid()) + ".json");
  auto refusal = [&](const std::string& text) -> std::string {
    std::ofstream(path) << text;
    try {
      model::load_wan_vae_config(path.string());
    } catch (const InputError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  CHECK(refusal(R"({"_class_name": "AutoencoderKLWan", "attn_scales": []})") == "(accepted)");
  CHECK(refusal(R"({"attn_scales": [0.5]})").find("config key 'attn_scales' must be empty") != std::string::npos);
  CHECK(refusal(R"({"is_residual": true})").find("config key 'is_residual' must be false") != std::string::npos);
  CHECK(refusal(R"({"is_residual": false, "patch_size": 2})").find("config key 'patch_size'") != std::string::npos);
  CHECK(refusal(R"({"something_new": 1})").find("config key 'something_new' is not supported") != std::string::npos);
  CHECK(refusal(R"({"_class_name": "AutoencoderKL"})").find("is not AutoencoderKLWan") != std::string::npos);
  CHECK(refusal(R"({"temperal_downsample": [true, true]})").find("temperal_downsample has 2 entries") !=
        std::string::npos);
  CHECK(refusal(R"({"dim_mult": [1, 2], "temperal_downsample": [true], "z_dim": 4, "latents_mean": [0, 0, 0, 0],
                  "latents_std": [1, 1, 1, 1]})") == "(accepted)");
  CHECK(refusal(R"({"z_dim": 4})").find("latents_mean and latents_std need z_dim = 4 entries") != std::string::npos);
  CHECK(refusal(R"({"base_dim": 3, "dim_mult": [1], "temperal_downsample": []})").find("is odd") != std::string::npos);
  CHECK(refusal(R"({"scale_factor_spatial": 16})").find("config key 'scale_factor_spatial' must be 8") !=
        std::string::npos);
  CHECK(refusal(R"({"base_dim": "96"})").find("config key 'base_dim' must be an integer") != std::string::npos);
  fs::remove(path);
}

// Each video of a batch starts with empty history: the second copy of the fixture's video
// encodes and decodes like the first.
TEST_CASE("Wan VAE: the videos of a batch are encoded and decoded independently") {
  Runtime rt(Device::cpu());
  const model::WanVae vae = model::WanVae::load(test::fixture("wan-tiny"), rt, DType::f32);
  const io::SafetensorsFile ref(test::fixture("wan-tiny/ref_vae.safetensors"));
  const Tensor video = ref.tensor("video"), mean = ref.tensor("mean"), decoded = ref.tensor("decoded");
  auto twice = [&](const Tensor& t) {
    OwnedTensor two = rt.arena().empty(DType::f32, {2, t.size(1), t.size(2), t.size(3), t.size(4)});
    for (std::int64_t i = 0; i < 2; ++i) ops::copy(rt.ctx(), t, two.slice(0, i, 1));
    return two;
  };
  const OwnedTensor videos = twice(video);
  OwnedTensor means = rt.arena().empty(DType::f32, {2, 16, 3, 4, 4});
  vae.encode(rt.ctx(), videos, means, nullptr);
  const OwnedTensor latents = twice(mean);
  OwnedTensor out = rt.arena().empty(DType::f32, videos.shape);
  vae.decode(rt.ctx(), latents, out);
  for (std::int64_t i = 0; i < 2; ++i) {
    CAPTURE(i);
    test::HostTensor m(mean.shape), d(decoded.shape);
    ops::copy(rt.ctx(), means.slice(0, i, 1), m);
    ops::copy(rt.ctx(), out.slice(0, i, 1), d);
    CHECK(max_diff(m, mean) <= 1e-4);
    CHECK(max_diff(d, decoded) <= 1e-4);
  }
}

// A video decoded in parts, as ranks that each hold some of its latent frames decode it: each
// part on a runtime of its own (as on another rank), given only the causal memory the part before
// left, in bytes. 7 random latent frames split as 1-4 ranks split them, whole frames and tiles of
// 2: the whole video's frames. The decoder works a latent frame at a time, post_quant_conv
// included, so the parts run the same calls on the same shapes in the same order as one decode:
// equal by construction (measured: bit for bit; the test allows 1e-6). Then the fixture's latents
// in two parts against diffusers.
TEST_CASE("Wan VAE: a video decoded in parts with the causal memory handed over equals one decode") {
  Runtime rt(Device::cpu());
  const model::WanVae vae = model::WanVae::load(test::fixture("wan-tiny"), rt, DType::f32, model::WanVae::decoder);
  const std::int64_t lf = 7, frames = vae.config().video_frames(lf);
  OwnedTensor z = rt.arena().empty(DType::f32, {1, 16, lf, 4, 4});
  ops::normal(rt.ctx(), z, 41, 0, 0);
  OwnedTensor whole = rt.arena().empty(DType::f32, {1, 3, frames, 32, 32});
  for (std::int64_t tile : {0, 2}) {
    CAPTURE(tile);
    vae.decode(rt.ctx(), z, whole, tile);
    test::HostTensor want(whole.shape);
    ops::copy(rt.ctx(), whole, want);
    for (int n = 1; n <= 4; ++n) {
      CAPTURE(n);
      test::HostTensor got(whole.shape);
      std::string memory;  // as it travels between ranks
      std::int64_t at = 0;
      for (int k = 0; k < n; ++k) {
        const std::int64_t first = k * lf / n, count = (k + 1) * lf / n - first;
        Runtime part_rt(Device::cpu());
        const model::WanVae part_vae =
            model::WanVae::load(test::fixture("wan-tiny"), part_rt, DType::f32, model::WanVae::decoder);
        OwnedTensor zp = part_rt.arena().empty(DType::f32, {1, 16, count, 4, 4});
        ops::copy(part_rt.ctx(), z.slice(2, first, count), zp);
        const std::int64_t pf = part_vae.part_frames(first, count);
        OwnedTensor out = part_rt.arena().empty(DType::f32, {1, 3, pf, 32, 32});
        model::WanVae::Memory held = first == 0 ? model::WanVae::Memory{} : part_vae.load_memory(part_rt.ctx(), memory);
        part_vae.decode_part(part_rt.ctx(), zp, first, held, out, tile);
        CHECK(!held.frames.empty());
        memory = model::WanVae::save_memory(part_rt.ctx(), held);
        ops::copy(part_rt.ctx(), out, got.t.slice(2, at, pf));
        at += pf;
      }
      CHECK(at == frames);
      const double d = max_diff(got, want.t);
      INFO("max |diff| from one decode " << d);
      CHECK(d <= 1e-6);
    }
  }
  // The fixture's 3 latent frames as [0, 1) and [1, 3): diffusers' decode.
  const io::SafetensorsFile ref(test::fixture("wan-tiny/ref_vae.safetensors"));
  const OwnedTensor mean = on_device(rt, ref, "mean");
  const Tensor decoded = ref.tensor("decoded");
  test::HostTensor got(decoded.shape);
  model::WanVae::Memory memory;  // on one device: kept there between the parts
  for (const auto& [first, count] : {std::pair<std::int64_t, std::int64_t>{0, 1}, {1, 2}}) {
    const std::int64_t pf = vae.part_frames(first, count), at = first == 0 ? 0 : vae.part_frames(0, first);
    OwnedTensor out = rt.arena().empty(DType::f32, {1, 3, pf, 32, 32});
    vae.decode_part(rt.ctx(), mean.slice(2, first, count), first, memory, out);
    ops::copy(rt.ctx(), out, got.t.slice(2, at, pf));
  }
  const double d = max_diff(got, decoded);
  INFO("max |diff| from diffusers " << d);
  CHECK(d <= 1e-4);
  // A later part without the memory of the one before is a programming error, said as such.
  model::WanVae::Memory none;
  OwnedTensor out = rt.arena().empty(DType::f32, {1, 3, 8, 32, 32});
  CHECK_THROWS_WITH(vae.decode_part(rt.ctx(), mean.slice(2, 1, 2), 1, none, out), doctest::Contains("needs the memory"));
}
