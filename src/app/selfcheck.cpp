// `vinf selfcheck`: runs every op case on each available backend against the CPU reference and
// prints a table. On a cluster this is the quick "is this node's GPU stack sane" check.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <string>

#include "app/commands.hpp"
#include "app/option_values.hpp"
#include "core/error.hpp"
#include "ops/runtime.hpp"
#include "ops/verify.hpp"

namespace po = boost::program_options;

namespace vinf::app {
namespace {

struct Backend {
  std::string name;
  Device device;
  CpuImpl impl;
  DType dtype;
};

}  // namespace

int selfcheck(const std::vector<std::string>& args) {
  std::string config_file, device = "all", filter;
  bool list = false;
  po::options_description opts(
      "vinf selfcheck: every op on every backend against the CPU reference\n\n"
      "Options come from the command line and from --config FILE (INI: `device = cpu`); the command line\n"
      "wins.\n\nOptions");
  opts.add_options()("help,h", "show this help")("config", path_value(&config_file, PathKind::file), kConfigOptionHelp)(
      "device", po::value(&device)->default_value(device),
      "cpu, cuda or all (cuda is skipped with a message when no GPU is visible)")(
      "filter", po::value(&filter),
      "only the cases whose name or op family contains this text (as --list prints them); a text that matches no "
      "case is refused")("list", po::bool_switch(&list), "list the cases (those --filter selects) and exit");
  po::variables_map vm;
  parse_options(args, opts, vm, "selfcheck");
  if (vm.count("help")) {
    std::cout << opts
              << "\nA result passes when every element is within atol + rtol * |reference| of the CPU reference, with\n"
                 "(atol, rtol) per dtype:";
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      const opcheck::Tolerance t = opcheck::tolerance_for(dt);
      std::cout << " " << dtype_name(dt) << " (" << t.atol << ", " << t.rtol << ")";
    }
    std::cout << "\nunless a case overrides them, giving its reason. The op-table unit test selects cases the same\n"
                 "way, from the environment: VINF_OPS_FILTER (as --filter), VINF_OPS_BACKEND (cpu or cuda) and\n"
                 "VINF_OPS_DTYPE (f32, f16 or bf16).\n"
                 "On CPUs with AVX-512 BF16 the cases with weights and the attention also run as --dtype bf16\n"
                 "computes on the CPU (\"cpu-fast bf16\": bf16 weights, f32 activations, bf16 products in the\n"
                 "attention), on bf16-rounded inputs: the cases with weights in the f32 tolerance, the attention\n"
                 "in (0.01, 0.01) for its probabilities' rounding.\n"
                 "\nExit status: 0 when every result is within tolerance, 1 otherwise, 2 for a bad option.\n";
    return 0;
  }
  VINF_INPUT_CHECK(device == "cpu" || device == "cuda" || device == "all", "--device must be cpu, cuda or all, got '",
                   device, "'");
  std::vector<opcheck::OpCase> cases;
  for (auto& c : opcheck::unit_cases())
    if (opcheck::matches_filter(c, filter)) cases.push_back(std::move(c));
  VINF_INPUT_CHECK(!cases.empty(), "--filter '", filter, "' matches no op case: it selects the cases whose name or ",
                   "family contains it (vinf selfcheck --list shows them)");
  if (list) {
    for (const auto& c : cases) std::cout << c.family << "\t" << c.name << "\n";
    return 0;
  }

  std::vector<Backend> backends;
  if (device != "cuda") {
    backends.push_back({"cpu-fast", Device::cpu(), CpuImpl::fast, DType::f32});
    // --dtype bf16 on the CPU, for the cases it changes (opcheck::cpu_bf16_tolerance).
    if (cpu_bf16()) backends.push_back({"cpu-fast bf16", Device::cpu(), CpuImpl::fast, DType::bf16});
    else std::cout << "cpu bf16: skipped (this CPU lacks AVX-512 BF16)\n";
  }
  if (device != "cpu") {
    const int gpus = cuda_device_count();
    if (gpus == 0) {
      std::cout << "cuda: skipped (" << (built_with_cuda() ? "no GPU visible" : "built without CUDA") << ")\n";
      if (device == "cuda") return 1;
    } else {
      for (DType dt : {DType::f32, DType::f16, DType::bf16})
        backends.push_back({std::string("cuda:0 ") + dtype_name(dt), Device::cuda(0), CpuImpl::fast, dt});
    }
  }
  // The CUDA kernels that are off by default and that this run turns on (VINF_GPU_KERNELS).
  const unsigned kernels = gpu_kernels_from_environment();
  if (device != "cpu") std::cout << "cuda kernels off by default, on here: " << gpu_kernels_text(kernels) << "\n";

  Runtime ref_rt(Device::cpu(), CpuImpl::reference);
  std::unique_ptr<Runtime> cpu_rt, gpu_rt;
  int failed = 0, run = 0;
  std::printf("%-58s %-14s %12s %8s  %s\n", "case", "backend", "max |err|", "err/tol", "result");
  for (const auto& c : cases) {
    for (const Backend& b : backends) {
      const bool cpu_bf16_run = b.device.is_cpu() && b.dtype == DType::bf16;
      const auto cpu_bf16_tol = opcheck::cpu_bf16_tolerance(c);
      if (cpu_bf16_run && !cpu_bf16_tol) continue;
      std::unique_ptr<Runtime>& slot = b.device.is_cpu() ? cpu_rt : gpu_rt;
      if (!slot) slot = std::make_unique<Runtime>(b.device, b.impl);
      ++run;
      try {
        const auto ref = opcheck::run_case(c, ref_rt, DType::f32, b.dtype);
        const auto got = opcheck::run_case(c, *slot, b.dtype, b.dtype);
        const auto cmp = opcheck::compare(ref, got, cpu_bf16_run ? *cpu_bf16_tol : opcheck::tolerance_for(c, b.dtype));
        std::printf("%-58s %-14s %12.3g %8.3f  %s\n", c.name.c_str(), b.name.c_str(), cmp.max_abs_error, cmp.worst_ratio,
                    cmp.ok ? "ok" : "FAIL");
        if (!cmp.ok) {
          ++failed;
          std::printf("%s", cmp.report.c_str());
        }
      } catch (const Error& e) {
        ++failed;
        std::printf("%-58s %-14s %12s %8s  ERROR\n  %s\n", c.name.c_str(), b.name.c_str(), "-", "-", e.what());
      }
    }
  }
  std::printf("\n%d of %d checks passed\n", run - failed, run);
  return failed == 0 ? 0 : 1;
}

}  // namespace vinf::app
