// Shared by the unit tests: GPU detection with one clear skip message, fixture paths, host
// tensors.
#pragma once

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.hpp"
#include "mpi/communicator.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

namespace vinf::test {

// True when a CUDA device can be used; otherwise prints why the calling test is skipped.
inline bool gpu_or_skip(const char* what) {
  if (cuda_device_count() > 0) return true;
  // One string: doctest's MESSAGE prints a bare const char* as a pointer.
  MESSAGE((std::string("skipped ") + what + ": " + (built_with_cuda() ? "no GPU visible" : "built without CUDA")));
  return false;
}

// Runs fn(rank, communicator, context) on n threads of the thread transport, one runtime each (on
// `device`); fails the test with the first error. `counters` receives each rank's afterwards.
// The same with each rank's runtime (for what loads weights).
inline void run_on_threads_rt(int n, const std::function<void(int, mpi::Communicator&, Runtime&)>& fn,
                              std::vector<mpi::CommCounters>* counters = nullptr, Device device = Device::cpu()) {
  auto group = mpi::make_thread_group(n);
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  // The ranks share this thread's CPU threads: n pools as large would run n times the cores.
  const int per_rank = cpu_threads_per_rank(n);
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        set_cpu_threads(per_rank);
        Runtime rt(device);
        fn(r, *group[static_cast<std::size_t>(r)], rt);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) REQUIRE_MESSAGE(e.empty(), e);
  if (counters)
    for (auto& c : group) counters->push_back(c->counters());
}

inline void run_on_threads(int n, const std::function<void(int, mpi::Communicator&, ExecContext&)>& fn,
                           std::vector<mpi::CommCounters>* counters = nullptr, Device device = Device::cpu()) {
  run_on_threads_rt(
      n, [&](int r, mpi::Communicator& comm, Runtime& rt) { fn(r, comm, rt.ctx()); }, counters, device);
}

// VINF_TEST_FIXTURES in the environment points a relocated test binary (scripts/gpu-check --run on
// a machine without the build tree) at the fixtures of the checkout it runs beside.
inline std::string fixture(const std::string& rel) {
  const char* dir = std::getenv("VINF_TEST_FIXTURES");
  return std::string(dir != nullptr && *dir != '\0' ? dir : VINF_TEST_FIXTURES) + "/" + rel;
}

// The CLIP vocabulary stays beside the checkout (../shared), not in the project. VINF_SHARED_FIXTURES
// in the environment moves it for a relocated test binary, as VINF_TEST_FIXTURES does above.
inline const std::string kSharedTokenizer = [] {
  const char* dir = std::getenv("VINF_SHARED_FIXTURES");
  return std::string(dir != nullptr && *dir != '\0' ? dir : VINF_SHARED_FIXTURES) + "/clip-tokenizer";
}();

// True when ../shared has the CLIP tokenizer; otherwise prints why the calling test is skipped.
inline bool shared_tokenizer_or_skip() {
  if (std::filesystem::exists(kSharedTokenizer + "/vocab.json")) return true;
  MESSAGE(("skipped: " + kSharedTokenizer + " is absent (the CLIP vocabulary is not part of the project)"));
  return false;
}

// A scratch directory, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("vinf-test-" + name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path.string(); }
};

// The shared vocabulary with its pad "!" configs (pad id 0, zeroscope's style) in a scratch directory.
struct PadBangTokenizer : TempDir {
  PadBangTokenizer() : TempDir("pad-bang") {
    for (const char* f : {"vocab.json", "merges.txt"})
      std::filesystem::create_symlink(kSharedTokenizer + "/" + f, path / f);
    for (const char* f : {"tokenizer_config.json", "special_tokens_map.json"})
      std::filesystem::copy_file(kSharedTokenizer + "/pad_bang/" + f, path / f);
  }
};

// A contiguous f32 host tensor that owns its storage.
struct HostTensor {
  std::vector<float> data;
  Tensor t;
  explicit HostTensor(const Shape& s) : data(static_cast<std::size_t>(s.numel())) {
    t = Tensor::wrap(data.data(), DType::f32, Device::cpu(), s);
  }
  HostTensor(const Shape& s, std::vector<float> v) : data(std::move(v)) {
    t = Tensor::wrap(data.data(), DType::f32, Device::cpu(), s);
  }
  operator const Tensor&() const { return t; }
};

// A host tensor (a reference file's) as f32 on rt's device.
inline OwnedTensor upload_f32(Runtime& rt, const Tensor& host) {
  OwnedTensor t = rt.arena().empty(DType::f32, host.shape);
  ops::copy(rt.ctx(), host, t);
  return t;
}

// A tensor's values as f32 on the host (any device, any float dtype), once the device has them.
inline std::vector<float> download(Runtime& rt, const Tensor& t) {
  HostTensor h(t.shape);
  ops::copy(rt.ctx(), t, h);
  rt.synchronize();
  return h.data;
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The largest |a[i] - ref[i]| of host values against an f32 host tensor of as many elements.
// The largest |want - got| relative to want's largest magnitude (want f32 on the host).
inline double relative_diff(const Tensor& want, const std::vector<float>& got) {
  REQUIRE(static_cast<std::size_t>(want.numel()) == got.size());
  double worst = 0, scale = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(got[static_cast<std::size_t>(i)]) - want.ptr<float>()[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want.ptr<float>()[i])));
  }
  return worst / std::max(scale, 1e-30);
}

inline double max_abs_diff(const std::vector<float>& a, const Tensor& ref) {
  REQUIRE(static_cast<std::int64_t>(a.size()) == ref.numel());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - ref.ptr<float>()[i]));
  return worst;
}

}  // namespace vinf::test
