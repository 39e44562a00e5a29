// A program in which one rank fails while the others wait in a collective. Through the fatal path
// the whole job must end with a non-zero status and one clear message, not hang.
#include <mpi.h>

#include <cstdlib>
#include <exception>

#include "core/error.hpp"
#include "mpi/fatal.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  vinf::set_process_rank(rank);
  const int failing = size > 1 ? 1 : 0;
  try {
    VINF_CHECK(rank != failing, "probe failure on purpose");
    MPI_Barrier(MPI_COMM_WORLD);  // the other ranks wait here for the failed one
  } catch (const std::exception& e) {
    vinf::mpi::fatal(e, 3);
  }
  MPI_Finalize();
  return 0;
}
