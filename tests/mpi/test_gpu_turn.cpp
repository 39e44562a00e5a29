// Which visible GPU each rank of a node takes (mpi::gpu_turn), at this world size; every rank
// runs on this one node, as mpiexec starts them here.
#include <doctest/doctest.h>
#include <mpi.h>

#include <string>

#include "mpi/session.hpp"

using namespace vinf;

namespace {
int world(int* size = nullptr) {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  if (size) MPI_Comm_size(MPI_COMM_WORLD, size);
  return r;
}
}  // namespace

TEST_CASE("every rank given all of the node's GPUs (--gpus-per-node) takes the one of its local rank") {
  int size = 0;
  const int rank = world(&size);
  const mpi::GpuTurn t = mpi::gpu_turn(MPI_COMM_WORLD, "0,1,2,3");
  CHECK(t.turn == rank);
  CHECK(t.sharers == size);
  // Unset is one value too: the same turns.
  CHECK(mpi::gpu_turn(MPI_COMM_WORLD, "(unset)").turn == rank);
}

TEST_CASE("ranks given one subset of the GPUs share it out, whatever order Slurm placed them in") {
  // As --gpu-bind=closest with the tasks dealt over two sockets in turn: even ranks see the first
  // socket's GPUs, odd ranks the second's. Rank r is the (r / 2)-th of its socket, so it takes
  // that socket's GPU r / 2 (by local rank alone, ranks 0 and 2 would both take GPU 0 or 2).
  int size = 0;
  const int rank = world(&size);
  const mpi::GpuTurn t = mpi::gpu_turn(MPI_COMM_WORLD, rank % 2 == 0 ? "0,1" : "2,3");
  CHECK(t.turn == rank / 2);
  CHECK(t.sharers == (size + (rank % 2 == 0 ? 1 : 0)) / 2);
}

TEST_CASE("a rank given GPUs of its own (--gpus-per-task) takes the first") {
  const int rank = world();
  const mpi::GpuTurn t = mpi::gpu_turn(MPI_COMM_WORLD, std::to_string(rank));
  CHECK(t.turn == 0);
  CHECK(t.sharers == 1);
}
