#include "io/hdf5_check.hpp"

#include <cstring>

namespace vinf::io {
namespace {

// The innermost entries say what went wrong; the outer ones only repeat that a call failed.
constexpr unsigned kEntries = 3;

herr_t collect(unsigned n, const H5E_error2_t* e, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (n >= kEntries) return 0;
  if (n > 0) *out += "; ";
  *out += e->func_name ? e->func_name : "?";
  *out += ": ";
  *out += e->desc ? e->desc : "?";
  return 0;
}

herr_t find_checksum(unsigned, const H5E_error2_t* e, void* data) {
  if (e->desc && std::strstr(e->desc, "checksum")) *static_cast<bool*>(data) = true;
  return 0;
}

}  // namespace

bool hdf5_checksum_failed() {
  bool found = false;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, find_checksum, &found);
  return found;
}

std::string hdf5_error_text() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect, &text);
  H5Eclear2(H5E_DEFAULT);
  return text.empty() ? "no details on the HDF5 error stack" : text;
}

}  // namespace vinf::io
