// HDF5 status checks: the library returns a negative herr_t / hid_t on failure and keeps an error
// stack; the message carries the innermost entries of that stack.
#pragma once

#include <hdf5.h>

#include <string>

#include "core/error.hpp"

namespace vinf::io {

// The current HDF5 error stack as one line (most specific entry last), then clears it.
std::string hdf5_error_text();
// Whether the current error stack reports a checksum that did not match (a Fletcher-32 filter on
// read: the stored bytes changed after they were written). Leaves the stack as it is.
bool hdf5_checksum_failed();

}  // namespace vinf::io

#define VINF_CHECK_HDF5(stmt) VINF_CHECK_STATUS("HDF5", stmt, #stmt, status_ >= 0, ::vinf::io::hdf5_error_text())
