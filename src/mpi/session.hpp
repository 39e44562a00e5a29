// The MPI side of a vinf process: initialise (as a singleton when not launched by mpirun/srun),
// name the rank in every message, pick the device, and finalise. The model code never sees any of
// this; subcommands hold one Session for their lifetime.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace vinf::mpi {

class Session {
 public:
  Session(int* argc, char*** argv);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // among the ranks on this node
  MPI_Comm world() const { return MPI_COMM_WORLD; }

  // The device every rank uses, agreed by all: "cpu", "cuda" (each rank the GPU local_rank modulo
  // the visible ones; an error naming the rank when one has none) or "auto" (CUDA when every rank
  // sees a GPU, else the CPU on all ranks). Throws vinf::InputError for another value.
  Device choose_device(const std::string& choice) const;

  // True on every rank when `ok` holds on every rank.
  bool all(bool ok) const;
  // The maximum of a value over ranks (on every rank).
  double max(double v) const;

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0;
};

}  // namespace vinf::mpi
