// MPI status checks on the common VINF_CHECK_STATUS path. Communicators must return errors
// (MPI_ERRORS_RETURN) for these to see them; the bootstrap sets that on the ones it creates.
#pragma once

#include <mpi.h>

#include <string>

#include "core/error.hpp"

namespace vinf::mpi {

std::string error_text(int code);

}  // namespace vinf::mpi

#define VINF_CHECK_MPI(stmt) VINF_CHECK_STATUS("MPI", stmt, #stmt, status_ == MPI_SUCCESS, ::vinf::mpi::error_text(status_))
