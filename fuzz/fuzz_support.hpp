// What the fuzz targets share: the input as files (the readers under test open paths), split into
// parts at NUL bytes where a reader takes several files or arguments, and the contract every
// target checks: bad input ends in vinf::InputError (exit status 2 in vinf), nothing else. Any
// other exception escapes LLVMFuzzerTestOneInput and libFuzzer reports it as a crash.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace vinf::fuzz {

// A private directory for this process's files, removed at exit.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    path_ = std::string(tmp && *tmp ? tmp : "/tmp") + "/vinf-fuzz-XXXXXX";
    if (!::mkdtemp(path_.data())) {
      std::perror("mkdtemp");
      std::abort();
    }
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline const std::string& scratch_dir() {
  static const ScratchDir dir;
  return dir.path();
}

// Writes bytes to scratch_dir()/name and returns the path.
inline std::string write_file(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

inline void remove_file(const std::string& name) { std::remove((scratch_dir() + "/" + name).c_str()); }

// The input cut at NUL bytes: "a\0b" is {"a", "b"}; at most max_parts parts (the last keeps the rest).
inline std::vector<std::string> split_parts(const std::uint8_t* data, std::size_t size, std::size_t max_parts) {
  std::vector<std::string> parts(1);
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == 0 && parts.size() < max_parts) parts.emplace_back();
    else parts.back().push_back(static_cast<char>(data[i]));
  }
  return parts;
}

// Runs f; a vinf::InputError is the expected outcome for bad input and is swallowed.
template <class F>
void expect_input_errors_only(F&& f) {
  try {
    f();
  } catch (const InputError&) {
  }
}

}  // namespace vinf::fuzz
