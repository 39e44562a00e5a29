// The process grid of design.md §3: world = cfg_size x clip_size x tensor_size. Rank w has
// tensor rank w % T, clip (w / T) % clip_size and CFG branch w / (T clip_size): a tensor group
// (the T ranks that split one clip's transformer weights, which talk most) is a run of
// consecutive ranks, on one node; so is a clip group when T = 1 (neighbours in the video are
// neighbours in the job). A clip group holds the ranks of one branch and tensor rank, a cfg group
// the ranks of one clip and tensor rank in both branches.
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
  // Collective over the world. cfg_size is 1 or 2, cfg_size x tensor_size divides the world size
  // (the caller checks).
  ProcessGrid(const Session& session, int cfg_size, int tensor_size = 1);
  ~ProcessGrid();
  ProcessGrid(const ProcessGrid&) = delete;
  ProcessGrid& operator=(const ProcessGrid&) = delete;

  int cfg_size() const { return cfg_size_; }
  int clip_size() const { return clip_size_; }
  int cfg_index() const { return cfg_index_; }
  int clip_index() const { return clip_index_; }
  int tensor_size() const { return tensor_size_; }
  int tensor_index() const { return tensor_index_; }
  // The world rank of (branch, clip, tensor rank).
  int world_rank(int cfg_index, int clip_index, int tensor_index) const {
    return (cfg_index * clip_size_ + clip_index) * tensor_size_ + tensor_index;
  }
  MPI_Comm clip_comm() const { return clip_comm_; }
  MPI_Comm cfg_comm() const { return cfg_comm_; }
  MPI_Comm tensor_comm() const { return tensor_comm_; }

 private:
  int cfg_size_ = 1, clip_size_ = 1, tensor_size_ = 1, cfg_index_ = 0, clip_index_ = 0, tensor_index_ = 0;
  MPI_Comm clip_comm_ = MPI_COMM_NULL, cfg_comm_ = MPI_COMM_NULL, tensor_comm_ = MPI_COMM_NULL;
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
