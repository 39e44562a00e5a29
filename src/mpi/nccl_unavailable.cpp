// The NCCL entry points of a build without CUDA (nccl_communicator.cpp in CUDA builds).
#include "core/error.hpp"
#include "mpi/communicator.hpp"

namespace vinf::mpi {

std::string nccl_version() { return ""; }

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, const Device&) {
  VINF_FAIL("NCCL needs a CUDA build of vinf; this one has the CPU path only");
}

}  // namespace vinf::mpi
