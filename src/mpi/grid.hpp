// The process grid of design.md §3: world = cfg_size x clip_size. Rank w has CFG branch
// w / clip_size and clip w % clip_size, so a clip group (same branch, consecutive clips) is a run
// of consecutive ranks: neighbours in the video are neighbours in the job, usually on one node.
// A cfg group holds the ranks of one clip in both branches.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "mpi/communicator.hpp"
#include "mpi/session.hpp"

namespace vinf::mpi {

class ProcessGrid {
 public:
  // Collective over the world. cfg_size is 1 or 2 and divides the world size (the caller checks).
  ProcessGrid(const Session& session, int cfg_size);
  ~ProcessGrid();
  ProcessGrid(const ProcessGrid&) = delete;
  ProcessGrid& operator=(const ProcessGrid&) = delete;

  int cfg_size() const { return cfg_size_; }
  int clip_size() const { return clip_size_; }
  int cfg_index() const { return cfg_index_; }
  int clip_index() const { return clip_index_; }
  MPI_Comm clip_comm() const { return clip_comm_; }
  MPI_Comm cfg_comm() const { return cfg_comm_; }

 private:
  int cfg_size_ = 1, clip_size_ = 1, cfg_index_ = 0, clip_index_ = 0;
  MPI_Comm clip_comm_ = MPI_COMM_NULL, cfg_comm_ = MPI_COMM_NULL;
};

// Which GPU a rank of a group computes on: its host and the device's identity (device_identity()).
struct GpuHolder {
  std::string host, gpu;
};
// The sets of ranks (indices into holders, ascending; sets in order of their first rank) that hold
// the same GPU of the same host; only sets of two or more.
std::vector<std::vector<int>> shared_gpus(const std::vector<GpuHolder>& holders);
// "ranks 0 and 1 share GPU-... (PCI ...) on node-a; ranks 2, 3 and 4 share ..." for messages.
std::string describe_shared_gpus(const std::vector<GpuHolder>& holders, const std::vector<std::vector<int>>& shared);

// Every rank's host and GPU (device_identity()), gathered over comm, in rank order. A rank that
// cannot read its GPU's identity still takes part, and then every rank fails alike. Collective.
std::vector<GpuHolder> gather_gpu_holders(MPI_Comm comm, const Device& device);

}  // namespace vinf::mpi
