// The file system's answers without exceptions, for paths a user gives: a path the file system
// cannot even look up (a name longer than NAME_MAX, a file used as a directory) is as absent as a
// missing one, and the caller reports it so (exit status 2) instead of an escaping
// std::filesystem::filesystem_error (exit status 1).
#pragma once

#include <filesystem>
#include <system_error>

namespace vinf::io {

inline bool path_exists(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::exists(p, ec);
}

inline bool is_directory(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_directory(p, ec);
}

inline bool is_regular_file(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

}  // namespace vinf::io
