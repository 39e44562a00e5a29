// The one fatal path. Every error that reaches a program's top level goes through here, and when
// other ranks exist they are taken down with MPI_Abort, so no rank is left waiting in a collective.
// Each message is printed once for the job: rank 0 collects what the failing ranks report (for up
// to 2 s) and prints every distinct message once, naming the ranks unless all of them have it; a
// failing rank whose rank 0 does not end the job within 5 s prints its own message with its rank.
// A rank of a multi-rank job that fails before MPI_Init joins the job here to take part, in the
// commands that start MPI (set_starts_mpi).
#pragma once

#include <exception>

namespace vinf::mpi {

[[noreturn]] void fatal(const std::exception& e, int exit_code = 1);
[[noreturn]] void fatal(const char* message, int exit_code = 1);

// Called when a library holds state that MPI_Finalize would crash on (HDF5 1.10 flushes its open
// files from MPI_Finalize, and crashes on one whose writes failed): the fatal path then ends a
// one-rank job without MPI_Finalize.
void mark_finalize_unsafe();

// Called before a command that starts MPI on every rank runs: a rank of a multi-rank job that fails
// before MPI_Init then starts MPI in the fatal path, so that the ranks agree on what is printed.
// Commands that never start MPI leave it off: there a failing rank would wait in MPI_Init for
// ranks that never call it, so each rank prints its own message.
void set_starts_mpi();

}  // namespace vinf::mpi
