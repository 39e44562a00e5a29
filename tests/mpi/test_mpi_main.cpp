// doctest under MPI: every rank runs the tests, only rank 0 prints, and the verdict is reduced
// over all ranks so that they pass or fail together.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  doctest::Context ctx(argc, argv);
  if (rank != 0) ctx.setOption("out", "/dev/null");
  const int local = ctx.run();
  int any = 0;
  const int failed = local != 0 ? 1 : 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
