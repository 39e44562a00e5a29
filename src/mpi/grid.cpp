#include "mpi/grid.hpp"

#include "core/error.hpp"
#include "mpi/check.hpp"

namespace vinf::mpi {

ProcessGrid::ProcessGrid(const Session& session, int cfg_size) {
  VINF_INPUT_CHECK(cfg_size == 1 || cfg_size == 2, "--parallel.cfg must be 1 (both CFG branches in one batch) or 2 ",
                   "(rank pairs split the branches), got ", cfg_size);
  VINF_INPUT_CHECK(session.size() % cfg_size == 0, "--parallel.cfg 2 needs an even number of ranks, got ",
                   session.size(), "; launch 2 x (number of clips) ranks");
  cfg_size_ = cfg_size;
  clip_size_ = session.size() / cfg_size;
  cfg_index_ = session.rank() / clip_size_;
  clip_index_ = session.rank() % clip_size_;
  VINF_CHECK_MPI(MPI_Comm_split(session.world(), cfg_index_, clip_index_, &clip_comm_));
  VINF_CHECK_MPI(MPI_Comm_split(session.world(), clip_index_, cfg_index_, &cfg_comm_));
  MPI_Comm_set_errhandler(clip_comm_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(cfg_comm_, MPI_ERRORS_RETURN);
}

ProcessGrid::~ProcessGrid() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (clip_comm_ != MPI_COMM_NULL) MPI_Comm_free(&clip_comm_);
  if (cfg_comm_ != MPI_COMM_NULL) MPI_Comm_free(&cfg_comm_);
}

std::unique_ptr<Communicator> make_communicator(MPI_Comm comm, const Device& device, const std::string& backend,
                                                const std::string& label) {
  VINF_INPUT_CHECK(backend == "auto" || backend == "mpi" || backend == "nccl",
                   "--comm-backend must be auto, mpi or nccl, got '", backend, "'");
  VINF_INPUT_CHECK(backend != "nccl" || device.is_cuda(), "--comm-backend nccl needs the CUDA device (this run uses ",
                   device.name(), "); use --comm-backend mpi or auto");
  std::unique_ptr<Communicator> c = backend == "nccl" || (backend == "auto" && device.is_cuda())
                                        ? make_nccl_communicator(comm, device)
                                        : make_mpi_communicator(comm);
  c->set_label(label);
  return c;
}

}  // namespace vinf::mpi
