// The one way a vinf job starts: MPI session -> process grid -> the device every rank agrees on
// -> the runtime (streams, handles, arena) -> a communicator per group. Every command that runs
// the model and every benchmark starts with start_job(); the application itself then makes no
// MPI call: data between ranks goes through the communicators (clip, cfg, world), the rest through
// the session's helpers.
#pragma once

#include <functional>
#include <memory>

#include "job/plan.hpp"
#include "mpi/communicator.hpp"
#include "mpi/grid.hpp"
#include "mpi/session.hpp"
#include "ops/runtime.hpp"

namespace vinf::job {

class Job {
 public:
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;
  ~Job();

  // The ranks that run one video together: this rank's unit (one pipeline stage of one replica;
  // the whole job with --parallel.data 1 and --parallel.pipeline 1). rank(), size() and root()
  // are the unit's, and so is every communicator below but world_session()'s and the two links.
  mpi::Session& session() { return *session_; }
  int rank() const { return session_->rank(); }
  int size() const { return session_->size(); }
  bool root() const { return session_->rank() == 0; }
  // Every rank of the job, and where this one is in it (replica, stage).
  mpi::Session& world_session() { return *world_session_; }
  const Layout& layout() const { return layout_; }
  int replica() const { return layout_.replica_of(world_session_->rank()); }
  int stage() const { return layout_.stage_of(world_session_->rank()); }
  // Copies of the world for the pipeline's hand-offs (point to point between the same unit rank of
  // neighbouring stages) and for the job queue, so that neither meets another message.
  MPI_Comm handoff_comm() const { return handoff_comm_; }
  MPI_Comm queue_comm() const { return queue_comm_; }
  const mpi::ProcessGrid& grid() const { return *grid_; }
  const Device& device() const { return device_; }
  DType dtype() const { return dtype_; }
  Runtime& runtime() { return *runtime_; }
  // The clip group's communicator (nullptr unless the plan asked for it), the cfg group's
  // (nullptr without cfg 2), and one over every rank in host memory (MPI), for the
  // application's own traffic: prompts, frames, reports.
  mpi::Communicator* clip_comm() { return clip_.get(); }
  mpi::Communicator* cfg_comm() { return cfg_.get(); }
  // The tensor group's (nullptr with --parallel.tensor 1).
  mpi::Communicator* tensor_comm() { return tensor_.get(); }
  mpi::Communicator& world() { return *world_; }
  // The host context that world()'s buffers live in.
  ExecContext& host() { return host_; }

 private:
  friend std::unique_ptr<Job> start_job(const JobPlan&, const std::function<void(int)>&);
  Job() = default;
  std::unique_ptr<mpi::Session> world_session_, session_;
  Layout layout_;
  MPI_Comm handoff_comm_ = MPI_COMM_NULL, queue_comm_ = MPI_COMM_NULL;
  std::unique_ptr<mpi::ProcessGrid> grid_;
  Device device_{};
  DType dtype_ = DType::f32;
  std::unique_ptr<Runtime> runtime_;
  MPI_Comm world_comm_ = MPI_COMM_NULL;  // the world's copy world_ runs on
  std::unique_ptr<mpi::Communicator> clip_, cfg_, tensor_, world_;
  ExecContext host_{};
};

// Starts the job. check_world, when given, runs right after MPI has started, with the number of
// ranks, before anything else is made: the checks of a plan against the job's size. The world is
// laid out as plan.data replicas x plan.pipeline stages of units (make_layout). Throws
// vinf::InputError (on every rank alike) for a plan the job cannot run.
std::unique_ptr<Job> start_job(const JobPlan& plan, const std::function<void(int world_size)>& check_world = {});

// The transport a group uses: NCCL on CUDA devices unless ranks of the group share a GPU (then
// MPI over staged device buffers, said once), MPI on the CPU; `nccl` where NCCL cannot run is
// refused, naming the option. Collective over comm.
std::unique_ptr<mpi::Communicator> make_group_communicator(MPI_Comm comm, const Device& device, Transport transport,
                                                           const std::string& label);

// The device every rank uses, agreed by all (see mpi::Session::gpu_count_on_every_rank).
Device choose_device(mpi::Session& session, DeviceChoice choice);

}  // namespace vinf::job
