#include "mpi/fatal.hpp"

#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "core/error.hpp"
#include "mpi/check.hpp"

namespace vinf::mpi {

std::string error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(len)) + " (code " + std::to_string(code) + ")";
}

namespace {
std::atomic<bool> g_finalize_unsafe{false};
}  // namespace

void mark_finalize_unsafe() { g_finalize_unsafe = true; }

[[noreturn]] void fatal(const char* message, int exit_code) {
  std::fprintf(stderr, "vinf: error: %s\n", message);
  std::fflush(stderr);
  int initialized = 0, finalized = 0, size = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, exit_code);
    if (g_finalize_unsafe) {
      std::fflush(stdout);
      std::_Exit(exit_code);
    }
    MPI_Finalize();
  }
  std::exit(exit_code);
}

[[noreturn]] void fatal(const std::exception& e, int exit_code) {
  if (dynamic_cast<const Error*>(&e)) {
    fatal(e.what(), exit_code);
  }
  // Not one of ours (std::bad_alloc, a library exception): add the process label.
  const std::string msg = std::string(e.what()) + " (" + process_label_text() + ")";
  fatal(msg.c_str(), exit_code);
}

}  // namespace vinf::mpi
