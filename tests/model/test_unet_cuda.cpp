// The UNet on CUDA in f32, f16 and bf16 against the CPU f32 result, on the tiny (fixture) and
// small presets, and (VINF_TEST_REAL_SHAPES=1) on the full vc2 preset at VideoCrafter2's shapes.
// Tolerances per dtype, on the relative RMS error of the noise prediction (||gpu - cpu||_2 /
// ||cpu||_2): f32 1e-4, f16 1e-2, bf16 5e-2 (bf16 keeps 8 mantissa bits, and the error of ~100
// layers adds up); f32 also within 1e-3 absolute. Every output must be finite.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "../support.hpp"
#include "model/presets.hpp"
#include "model/unet3d.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"

using namespace vinf;
namespace fs = std::filesystem;

namespace {

struct Errors {
  double relative_rms = 0, max_abs = 0;
  std::int64_t nonfinite = 0;
};

struct Problem {
  std::int64_t batch, frames, height, width, text_tokens;
};

// The model's weights on `rt` as `dtype`: from the files in `dir`, or (dir empty) drawn in memory
// with `seed` as make-model draws them (f32 values rounded to `dtype`, the same on every device).
model::Weights load(const model::UNetConfig& c, const std::string& dir, std::uint64_t seed, Runtime& rt, DType dtype) {
  const auto params = model::unet_parameters(c);
  if (dir.empty()) return model::Weights::random(params, rt, dtype, seed);
  const model::WeightFiles wf(model::find_model_files(dir));
  return model::Weights(wf, params, rt, dtype, false, nullptr);
}

// One UNet call on (seeded) random inputs: the CPU in f32 as reference, then CUDA in each of
// `dtypes` against it.
std::vector<Errors> cuda_vs_cpu(const model::UNetConfig& c, const std::string& dir, std::uint64_t seed,
                                const Problem& pb, const std::vector<DType>& dtypes, unsigned kernels = 0) {
  const Shape sample_shape{pb.batch, c.in_channels, pb.frames, pb.height, pb.width};
  const Shape text_shape{pb.batch, pb.text_tokens, c.cross_attention_dim};
  const Shape out_shape{pb.batch, c.out_channels, pb.frames, pb.height, pb.width};
  std::vector<float> sample(static_cast<std::size_t>(sample_shape.numel())),
      text(static_cast<std::size_t>(text_shape.numel()));
  std::vector<float> ref(static_cast<std::size_t>(out_shape.numel())), got(ref.size());
  model::PlainTemporalContext plain;
  {
    Runtime cpu(Device::cpu());
    ops::normal(cpu.ctx(), Tensor::wrap(sample.data(), DType::f32, Device::cpu(), sample_shape), 11, 0, 0);
    ops::normal(cpu.ctx(), Tensor::wrap(text.data(), DType::f32, Device::cpu(), text_shape), 11, 1, 0);
    const model::UNet3D unet(c, load(c, dir, seed, cpu, DType::f32));
    unet.forward(cpu.ctx(), Tensor::wrap(sample.data(), DType::f32, Device::cpu(), sample_shape), 700, 24,
                 Tensor::wrap(text.data(), DType::f32, Device::cpu(), text_shape),
                 Tensor::wrap(ref.data(), DType::f32, Device::cpu(), out_shape), plain);
  }
  std::vector<Errors> errors;
  for (DType dtype : dtypes) {
    Runtime gpu(Device::cuda(0));
    gpu.ctx().gpu_kernels |= kernels;
    const model::UNet3D unet(c, load(c, dir, seed, gpu, dtype));
    OwnedTensor s = gpu.arena().empty(DType::f32, sample_shape), t = gpu.arena().empty(DType::f32, text_shape),
                o = gpu.arena().empty(DType::f32, out_shape);
    ops::copy(gpu.ctx(), Tensor::wrap(sample.data(), DType::f32, Device::cpu(), sample_shape), s);
    ops::copy(gpu.ctx(), Tensor::wrap(text.data(), DType::f32, Device::cpu(), text_shape), t);
    unet.forward(gpu.ctx(), s, 700, 24, t, o, plain);
    ops::copy(gpu.ctx(), o, Tensor::wrap(got.data(), DType::f32, Device::cpu(), out_shape));
    double diff = 0, norm = 0;
    Errors e;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      if (!std::isfinite(got[i])) {
        ++e.nonfinite;
        continue;
      }
      const double d = static_cast<double>(got[i]) - ref[i];
      diff += d * d;
      norm += static_cast<double>(ref[i]) * ref[i];
      e.max_abs = std::max(e.max_abs, std::fabs(d));
    }
    e.relative_rms = std::sqrt(diff / norm);
    errors.push_back(e);
  }
  return errors;
}

const std::vector<DType> kDtypes{DType::f32, DType::f16, DType::bf16};

double tolerance(DType dt) { return dt == DType::f32 ? 1e-4 : dt == DType::f16 ? 1e-2 : 5e-2; }

}  // namespace

TEST_CASE("CUDA UNet (f32, f16, bf16) matches the CPU f32 result: tiny and small presets") {
  if (!test::gpu_or_skip("the CUDA UNet forward")) return;
  const fs::path small = fs::temp_directory_path() / ("vinf-small-" + std::to_string(::getpid()));
  model::write_random_model(model::preset_config("small"), 5, DType::f32, small.string());
  struct Case {
    std::string dir;
    std::int64_t frames, hw;
  };
  for (const Case& k : {Case{test::fixture("tiny-unet3d"), 16, 8}, Case{small.string(), 8, 16}}) {
    const model::UNetConfig c = model::load_unet_config(model::find_model_files(k.dir).config, nullptr);
    const std::vector<Errors> errors = cuda_vs_cpu(c, k.dir, 0, {2, k.frames, k.hw, k.hw, 8}, kDtypes);
    for (std::size_t d = 0; d < kDtypes.size(); ++d) {
      const DType dt = kDtypes[d];
      const Errors& e = errors[d];
      CAPTURE(k.dir);
      CAPTURE(std::string(dtype_name(dt)));
      MESSAGE(k.dir << " " << std::string(dtype_name(dt)) << ": relative RMS error " << e.relative_rms << ", max |err| "
                    << e.max_abs);
      CHECK(e.nonfinite == 0);
      CHECK(e.relative_rms < tolerance(dt));
      if (dt == DType::f32) CHECK(e.max_abs < 1e-3);
    }
  }
  fs::remove_all(small);
}

// The same with every kernel of VINF_GPU_KERNELS on (exec/gpu_kernels.hpp): flash attention, the
// banded temporal kernel, Q, K and V in one GEMM, the GEMM epilogues and the rest, whole-model,
// at the same tolerances, before any becomes the default.
TEST_CASE("CUDA UNet with VINF_GPU_KERNELS=all (f32, f16, bf16) matches the CPU f32 result: tiny preset") {
  if (!test::gpu_or_skip("the CUDA UNet forward with all kernels")) return;
  const std::string dir = test::fixture("tiny-unet3d");
  const model::UNetConfig c = model::load_unet_config(model::find_model_files(dir).config, nullptr);
  const std::vector<Errors> errors = cuda_vs_cpu(c, dir, 0, {2, 16, 8, 8, 8}, kDtypes, kAllGpuKernels);
  for (std::size_t d = 0; d < kDtypes.size(); ++d) {
    const Errors& e = errors[d];
    MESSAGE(std::string(dtype_name(kDtypes[d]))
            << ": relative RMS error " << e.relative_rms << ", max |err| " << e.max_abs);
    CHECK(e.nonfinite == 0);
    CHECK(e.relative_rms < tolerance(kDtypes[d]));
  }
}

// VideoCrafter2's real shapes: the vc2 preset (random weights drawn in memory), a 320x512 video
// (40x64 latent), 24 frames, batch 2 as classifier-free guidance runs it, 77 text tokens. Spatial
// attention over 2560 tokens takes the GEMM path, whose scores would overflow or lose their
// differences in 16 bits; activations reach ~10^8 elements. The CPU reference takes a long time
// and tens of GB, so this runs only with VINF_TEST_REAL_SHAPES=1. Tolerances are those of the
// small presets with f32's doubled: reductions over up to 11520 terms (1280 channels x 3 x 3)
// add more rounding than the small presets' 2304.
TEST_CASE("CUDA UNet at VideoCrafter2 shapes (vc2, 40x64 latent, 24 frames, batch 2) in f32, f16 and bf16") {
  if (!test::gpu_or_skip("the CUDA UNet at VideoCrafter2 shapes")) return;
  const char* real = std::getenv("VINF_TEST_REAL_SHAPES");
  if (real == nullptr || std::string(real) != "1") {
    MESSAGE("skipped the CUDA UNet at VideoCrafter2 shapes: set VINF_TEST_REAL_SHAPES=1 (a long CPU reference run)");
    return;
  }
  const model::UNetConfig c = model::preset_config("vc2");
  const std::vector<Errors> errors = cuda_vs_cpu(c, "", 5, {2, 24, 40, 64, 77}, kDtypes);
  for (std::size_t d = 0; d < kDtypes.size(); ++d) {
    const DType dt = kDtypes[d];
    const Errors& e = errors[d];
    CAPTURE(std::string(dtype_name(dt)));
    MESSAGE("vc2 " << std::string(dtype_name(dt)) << ": relative RMS error " << e.relative_rms << ", max |err| "
                   << e.max_abs << ", non-finite outputs " << e.nonfinite);
    CHECK(e.nonfinite == 0);
    CHECK(e.relative_rms < (dt == DType::f32 ? 2e-4 : tolerance(dt)));
  }
}
