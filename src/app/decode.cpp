// `vinf decode` (design.md §5): VAE decoding only. With --latents IN.safetensors (`latents` F32
// [N, 4, h, w], decoded exactly as given: no scaling) and --out OUT.safetensors it writes
// `decoded` F32 [N, 3, 8h, 8w], the raw decoder output.
#include <boost/program_options.hpp>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/vae.hpp"
#include "mpi/session.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

namespace po = boost::program_options;

namespace vinf::app {

int decode(const std::vector<std::string>& args) {
  std::string vae_dir, latents_path, out_path, device_opt = "auto", dtype_opt = "f32";
  std::int64_t frames_per_call = 4;
  po::options_description opts(
      "vinf decode: VAE decoding only\n\n"
      "usage: vinf decode --vae DIR --latents IN.safetensors --out OUT.safetensors\n\n"
      "IN holds latents F32 [N, 4, h, w], decoded exactly as given (no division by the scaling factor);\n"
      "OUT gets decoded F32 [N, 3, 8h, 8w], the raw decoder output (no clamp).\n\nOptions");
  opts.add_options()("help,h", "show this help")(
      "vae", po::value(&vae_dir), "VAE directory (config.json + diffusion_pytorch_model.safetensors), or a pipeline "
                                  "root with vae/")("latents", po::value(&latents_path), "input latents (safetensors)")(
      "out", po::value(&out_path), "output file (safetensors); written under a temporary name, then renamed")(
      "device", po::value(&device_opt)->default_value(device_opt), "auto | cpu | cuda")(
      "dtype", po::value(&dtype_opt)->default_value(dtype_opt), "compute dtype: f32 | f16 | bf16 (16-bit on CUDA only)")(
      "frames-per-call", po::value(&frames_per_call)->default_value(frames_per_call),
      "images decoded at once (bounds the memory; the numbers do not depend on it)");
  po::variables_map vm;
  if (!parse_options(args, opts, vm)) return 2;
  if (vm.count("help")) {
    std::cout << opts << "\nExit status: 0 on success, 2 for bad input (the message names the file and key), 1 otherwise.\n";
    return 0;
  }
  for (const char* required : {"vae", "latents", "out"})
    VINF_INPUT_CHECK(vm.count(required), "vinf decode: --", required, " is required (see vinf decode --help)");
  VINF_INPUT_CHECK(frames_per_call >= 1, "--frames-per-call must be >= 1, got ", frames_per_call);
  DType dtype;
  VINF_INPUT_CHECK(parse_dtype(dtype_opt, dtype) && (dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16),
                   "--dtype must be f32, f16 or bf16, got '", dtype_opt, "'");
  mpi::Session mpi(nullptr, nullptr);
  const Device device = mpi.choose_device(device_opt);
  VINF_INPUT_CHECK(device.is_cuda() || dtype == DType::f32, "--dtype ", dtype_opt, " runs on CUDA only");

  const io::SafetensorsFile in(latents_path);
  const auto* e = in.find("latents");
  VINF_INPUT_CHECK(e != nullptr, latents_path, " has no tensor 'latents' [N, 4, h, w]");
  VINF_INPUT_CHECK(e->shape.rank() == 4, latents_path, ": 'latents' must be [N, C, h, w], got ", e->shape.str());
  Runtime rt(device);
  const auto t0 = std::chrono::steady_clock::now();
  const model::VaeDecoder vae = model::VaeDecoder::load(vae_dir, rt, dtype);
  const model::VaeConfig& c = vae.config();
  VINF_INPUT_CHECK(e->shape[1] == c.latent_channels, latents_path, ": 'latents' has ", e->shape[1],
                   " channels but the VAE takes latent_channels = ", c.latent_channels);
  const Tensor latents = in.tensor("latents");
  const Shape out_shape{latents.size(0), c.out_channels, latents.size(2) * c.upscale(), latents.size(3) * c.upscale()};
  OwnedTensor x = rt.arena().empty(DType::f32, latents.shape), y = rt.arena().empty(DType::f32, out_shape);
  ops::copy(rt.ctx(), latents, x);
  vae.decode(rt.ctx(), x, y, frames_per_call);
  std::vector<float> host(static_cast<std::size_t>(y.numel()));
  ops::copy(rt.ctx(), y, Tensor::wrap(host.data(), DType::f32, Device::cpu(), out_shape));
  rt.synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  io::write_safetensors(out_path, {{"decoded", DType::f32, out_shape, host.data(), {}}},
                        {{"generator", std::string("vinf ") + VINF_VERSION + " decode"}, {"vae", vae_dir}});
  std::cerr << "vinf decode: " << latents.size(0) << " frame(s) " << out_shape[3] << "x" << out_shape[2] << " on "
            << device.name() << " in " << seconds << " s; wrote " << out_path << "\n";
  return 0;
}

}  // namespace vinf::app
