// The MPI transport's all-reduce max and min, and its started sums, at this world size (1-4 ranks,
// odd sizes included).
#include <doctest/doctest.h>
#include <mpi.h>

#include "mpi/communicator.hpp"
#include "ops/runtime.hpp"
#include "reductions.hpp"

using namespace vinf;

TEST_CASE("MPI transport: all-reduce max and min of distinct values per rank, in f32, f64 and i64") {
  auto comm = mpi::make_mpi_communicator(MPI_COMM_WORLD);
  Runtime rt(Device::cpu());
  test::check_reductions(comm->rank(), *comm, rt.ctx());
}

TEST_CASE("MPI transport: a started all-reduce and a reduce-scatter of unequal pieces sum exactly") {
  auto comm = mpi::make_mpi_communicator(MPI_COMM_WORLD);
  Runtime rt(Device::cpu());
  test::check_started_sums(comm->rank(), *comm, rt.ctx());
}
