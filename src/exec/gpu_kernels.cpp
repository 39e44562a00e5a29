#include "exec/gpu_kernels.hpp"

#include <cstdlib>

#include "core/error.hpp"

namespace vinf {
namespace {

struct Named {
  const char* name;
  GpuKernel kernel;
};
constexpr Named kNames[] = {{"temporal-attention", GpuKernel::temporal_attention},
                            {"index32", GpuKernel::index32},
                            {"staged-uploads", GpuKernel::staged_uploads},
                            {"flash-attention", GpuKernel::flash_attention},
                            {"gemm-epilogues", GpuKernel::gemm_epilogues},
                            {"qkv-gemm", GpuKernel::qkv_gemm},
                            {"group-norm", GpuKernel::group_norm}};

std::string known_names() {
  std::string s;
  for (const Named& n : kNames) s += std::string(n.name) + ", ";
  return s + "all, none";
}

}  // namespace

unsigned parse_gpu_kernels(std::string_view list) {
  unsigned mask = 0;
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty() || item == "none") continue;
    if (item == "all") {
      mask = kAllGpuKernels;
      continue;
    }
    bool found = false;
    for (const Named& n : kNames) {
      if (item != n.name) continue;
      mask |= static_cast<unsigned>(n.kernel);
      found = true;
    }
    VINF_INPUT_CHECK(found, "VINF_GPU_KERNELS: no kernel is called '", item, "'; the names are ", known_names(),
                     " (a comma-separated list; unset it for the default kernels)");
  }
  return mask;
}

std::string gpu_kernels_text(unsigned mask) {
  std::string s;
  for (const Named& n : kNames)
    if (mask & static_cast<unsigned>(n.kernel)) s += (s.empty() ? "" : ",") + std::string(n.name);
  return s.empty() ? "none" : s;
}

unsigned gpu_kernels_from_environment() {
  const char* env = std::getenv("VINF_GPU_KERNELS");
  return env ? parse_gpu_kernels(env) : 0;
}

}  // namespace vinf
