// The UNet on CUDA in f32, f16 and bf16 against the CPU f32 result, on the tiny (fixture) and
// small presets. Tolerances per dtype, on the relative RMS error of the noise prediction
// (||gpu - cpu||_2 / ||cpu||_2): f32 1e-4, f16 1e-2, bf16 5e-2 (bf16 keeps 8 mantissa bits,
// and the error of ~100 layers adds up); f32 also within 1e-3 absolute.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
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
};

// Runs the model in `dir` on (seeded) random inputs on the CPU in f32 and on CUDA in `dtype`.
Errors cuda_vs_cpu(const std::string& dir, DType dtype, std::int64_t frames, std::int64_t hw) {
  const auto files = model::find_model_files(dir);
  const model::UNetConfig c = model::load_unet_config(files.config, nullptr);
  const model::WeightFiles wf(files);
  const auto params = model::unet_parameters(c);
  const Shape sample_shape{2, c.in_channels, frames, hw, hw}, text_shape{2, 8, c.cross_attention_dim};
  const Shape out_shape{2, c.out_channels, frames, hw, hw};
  std::vector<float> sample(static_cast<std::size_t>(sample_shape.numel())), text(static_cast<std::size_t>(text_shape.numel()));
  std::vector<float> ref(static_cast<std::size_t>(out_shape.numel())), got(ref.size());
  Runtime cpu(Device::cpu());
  ops::normal(cpu.ctx(), Tensor::wrap(sample.data(), DType::f32, Device::cpu(), sample_shape), 11, 0, 0);
  ops::normal(cpu.ctx(), Tensor::wrap(text.data(), DType::f32, Device::cpu(), text_shape), 11, 1, 0);
  model::PlainTemporalContext plain;
  {
    const model::UNet3D unet(c, model::Weights(wf, params, cpu, DType::f32, false, nullptr));
    unet.forward(cpu.ctx(), Tensor::wrap(sample.data(), DType::f32, Device::cpu(), sample_shape), 700, 24,
                 Tensor::wrap(text.data(), DType::f32, Device::cpu(), text_shape),
                 Tensor::wrap(ref.data(), DType::f32, Device::cpu(), out_shape), plain);
  }
  Runtime gpu(Device::cuda(0));
  const model::UNet3D unet(c, model::Weights(wf, params, gpu, dtype, false, nullptr));
  OwnedTensor s = gpu.arena().empty(DType::f32, sample_shape), t = gpu.arena().empty(DType::f32, text_shape),
              o = gpu.arena().empty(DType::f32, out_shape);
  ops::copy(gpu.ctx(), Tensor::wrap(sample.data(), DType::f32, Device::cpu(), sample_shape), s);
  ops::copy(gpu.ctx(), Tensor::wrap(text.data(), DType::f32, Device::cpu(), text_shape), t);
  unet.forward(gpu.ctx(), s, 700, 24, t, o, plain);
  ops::copy(gpu.ctx(), o, Tensor::wrap(got.data(), DType::f32, Device::cpu(), out_shape));
  double diff = 0, norm = 0;
  Errors e;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    diff += d * d;
    norm += static_cast<double>(ref[i]) * ref[i];
    e.max_abs = std::max(e.max_abs, std::fabs(d));
  }
  e.relative_rms = std::sqrt(diff / norm);
  return e;
}

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
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      const Errors e = cuda_vs_cpu(k.dir, dt, k.frames, k.hw);
      CAPTURE(k.dir);
      CAPTURE(dtype_name(dt));
      MESSAGE(k.dir << " " << dtype_name(dt) << ": relative RMS error " << e.relative_rms << ", max |err| " << e.max_abs);
      CHECK(e.relative_rms < tolerance(dt));
      if (dt == DType::f32) CHECK(e.max_abs < 1e-3);
    }
  }
  fs::remove_all(small);
}
