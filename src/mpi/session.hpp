// The MPI side of a vinf process: initialise (as a singleton when not launched by mpirun/srun),
// name the rank in every message, pick the device, and finalise. The model code never sees any of
// this; subcommands hold one Session for their lifetime.
#pragma once

#include <mpi.h>

#include <cstring>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.hpp"

namespace vinf::mpi {

// Which of its visible GPUs a rank takes. The ranks of a node that were given the same GPUs (the
// same CUDA_VISIBLE_DEVICES; unset counts as one value) take them in turn, in rank order: under
// --gpus-per-node every rank of the node sees all of them and its turn is its local rank; under a
// per-task binding that hands several ranks one subset (srun --gpu-bind=closest on a two-socket
// node) the ranks sharing the subset share it out, whatever order Slurm placed them in, instead
// of two ranks landing on one GPU. Collective over `node` (the ranks of one node).
struct GpuTurn {
  int turn = 0;     // this rank's place among the ranks that see the same GPUs
  int sharers = 1;  // how many ranks of the node see them
};
GpuTurn gpu_turn(MPI_Comm node, const std::string& visible);

// The first line of the MPI library's own version text ("Open MPI v4.1.2"); callable before MPI
// starts (vinf --version runs without it).
std::string library_version();

class Session {
 public:
  Session(int* argc, char*** argv);
  // A part of `parent`: the ranks of parent that give the same color, in parent's rank order (a
  // pipeline stage of one replica, say). Rank, size, the collectives and world() are the part's;
  // the node facts (local rank, the GPU turn) are the process's. Collective over parent. MPI
  // stays initialised until parent ends.
  Session(const Session& parent, int color);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // among the ranks on this node
  int local_size() const { return local_size_; }
  // The ranks of this session: MPI_COMM_WORLD, or the part's communicator.
  MPI_Comm world() const { return comm_; }

  // The fewest GPUs a rank sees (0 when any rank sees none, or without a CUDA backend). Collective.
  int gpu_count_on_every_rank() const;
  // The GPU of this rank's turn (gpu_turn) among those it sees, modulo their number, made this
  // process's device. The rank must see one.
  Device take_gpu() const;
  // One line on where this rank runs, for the logs: its host, local rank, CUDA_VISIBLE_DEVICES,
  // its turn among the ranks sharing those GPUs, and the device it uses.
  std::string placement(Device device) const;
  // Every rank's `line`, in rank order, on rank 0 (empty elsewhere). Collective.
  std::vector<std::string> gather_on_root(const std::string& line) const;
  // Every rank's value of a plain type (figures, counters), in rank order, on rank 0 (empty
  // elsewhere). Collective.
  template <class T>
  std::vector<T> gather_values_on_root(const T& mine) const {
    static_assert(std::is_trivially_copyable_v<T>);
    std::string bytes(sizeof(T), '\0');
    std::memcpy(bytes.data(), &mine, sizeof(T));
    std::vector<T> all;
    for (const std::string& b : gather_on_root(bytes)) std::memcpy(&all.emplace_back(), b.data(), sizeof(T));
    return all;
  }

  // True on every rank when `ok` holds on every rank.
  bool all(bool ok) const;
  // The maximum of a value over ranks (on every rank).
  double max(double v) const;
  // The element-wise maximum of equally long vectors over ranks (on every rank).
  std::vector<double> max(const std::vector<double>& v) const;
  // The minimum of a value over ranks (on every rank).
  int min(int v) const;
  // root's string, on every rank.
  void broadcast(std::string& s, int root = 0) const;
  // Point to point, in order between a pair of ranks, blocking and without the collectives'
  // watchdog: for streams whose receiver may take long to come to each message (rank 0 writing a
  // video clip by clip while the other clips' ranks wait their turn).
  void send(const void* data, std::size_t bytes, int to) const;
  void receive(void* data, std::size_t bytes, int from) const;

 private:
  MPI_Comm comm_ = MPI_COMM_WORLD;
  bool owns_comm_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string visible_gpus_;  // CUDA_VISIBLE_DEVICES as this rank was started with it
  GpuTurn gpu_turn_;
};

}  // namespace vinf::mpi
