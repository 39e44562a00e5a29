// Helpers shared by the vinf benchmarks: command-line flags that Google Benchmark does not know,
// and the nominal peak of the GPU for MFU.
#pragma once

#include <string>

#if VINF_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace vinf::bench {

// Takes --NAME=VALUE out of argv (so that benchmark::Initialize sees only its own flags) and
// returns VALUE, or `fallback` when the flag is absent.
inline std::string take_flag(int& argc, char** argv, const std::string& name, const std::string& fallback) {
  std::string value = fallback;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--" + name + "=", 0) == 0) value = a.substr(name.size() + 3);
    else argv[out++] = argv[i];
  }
  argc = out;
  return value;
}

// Nominal dense 16-bit tensor-core peak of GPU 0, TFLOP/s, and its name in *name; 0 when the model
// is not known (or without CUDA).
inline double gpu_peak_tflops(std::string* name) {
#if VINF_WITH_CUDA
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return 0;
  *name = p.name;
  const std::string n = p.name;
  if (n.find("H100") != std::string::npos && n.find("PCIe") != std::string::npos) return 756;
  if (n.find("H100") != std::string::npos || n.find("H200") != std::string::npos || n.find("H800") != std::string::npos)
    return 989.4;
  if (n.find("A100") != std::string::npos) return 312;
#else
  (void)name;
#endif
  return 0;
}

}  // namespace vinf::bench
