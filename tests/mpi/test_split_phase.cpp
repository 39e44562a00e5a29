// The MPI transport's split collectives at this world size (1-4 ranks, odd sizes included).
#include <doctest/doctest.h>
#include <mpi.h>

#include "mpi/communicator.hpp"
#include "ops/runtime.hpp"
#include "split_phase.hpp"

using namespace vinf;

TEST_CASE("MPI transport: started all-gather and halo rounds finish in any order, and on leaving scope") {
  auto comm = mpi::make_mpi_communicator(MPI_COMM_WORLD);
  Runtime rt(Device::cpu());
  test::check_split_phase(comm->rank(), *comm, rt.ctx());
}
