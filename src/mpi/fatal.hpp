// The one fatal path. Every error that reaches a program's top level goes through here: the
// message is printed once with the process label, and when other ranks exist they are taken down
// with MPI_Abort, so no rank is left waiting in a collective.
#pragma once

#include <exception>

namespace vinf::mpi {

[[noreturn]] void fatal(const std::exception& e, int exit_code = 1);
[[noreturn]] void fatal(const char* message, int exit_code = 1);

// Called when a library holds state that MPI_Finalize would crash on (HDF5 1.10 flushes its open
// files from MPI_Finalize, and crashes on one whose writes failed): the fatal path then ends a
// one-rank job without MPI_Finalize.
void mark_finalize_unsafe();

}  // namespace vinf::mpi
