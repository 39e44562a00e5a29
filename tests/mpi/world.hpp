// MPI_COMM_WORLD's rank and size for the MPI test cases (the program runs under mpirun).
#pragma once

#include <mpi.h>

namespace vinf::test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

}  // namespace vinf::test
