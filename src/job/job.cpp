#include "job/job.hpp"

#include <cstdio>

#include "core/error.hpp"
#include "mpi/check.hpp"
#include "mpi/communicator.hpp"

namespace vinf::job {

Job::~Job() {
  // Communicators before the runtime whose streams they use, the grid's groups before MPI ends.
  clip_.reset();
  cfg_.reset();
  tensor_.reset();
  world_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  for (MPI_Comm* c : {&world_comm_, &handoff_comm_, &queue_comm_})
    if (*c != MPI_COMM_NULL && !finalized) MPI_Comm_free(c);
  runtime_.reset();
  grid_.reset();
  session_.reset();
  world_session_.reset();
}

namespace {

// --dtype bf16 on the CPU needs AVX-512 BF16 on this rank's CPU, and oneDNN's kernels for it.
void check_cpu_bf16(DType dtype, const Device& device) {
  if (!device.is_cpu() || dtype != DType::bf16 || cpu_bf16()) return;
  VINF_INPUT_CHECK(!cpu_has_bf16_hardware(), "--dtype bf16 on the CPU needs AVX-512 BF16, which this CPU (",
                   cpu_model_name(), ") has but the environment hides (VINF_CPU_LEVEL below v4 or ONEDNN_MAX_CPU_ISA ",
                   "below avx512_core_bf16): unset them, or use --dtype f32 or auto");
  VINF_INPUT_FAIL("--dtype bf16 on the CPU needs AVX-512 BF16 (avx512_bf16: Intel Cooper Lake, Sapphire Rapids and ",
                  "later, AMD Zen 4 and later), and this CPU (", cpu_model_name(),
                  ") lacks it: use --dtype f32 or auto (f32 on the CPU), or run on a node that has it");
}

}  // namespace

Device choose_device(mpi::Session& session, DeviceChoice choice) {
  if (choice == DeviceChoice::cpu) return Device::cpu();
  const int count = cuda_device_count();
  const bool every_rank_has_gpu = session.gpu_count_on_every_rank() > 0;
  if (choice == DeviceChoice::automatic && !every_rank_has_gpu) return Device::cpu();
  if (!every_rank_has_gpu) {
    VINF_INPUT_CHECK(count > 0, "--device cuda: this rank sees no usable GPU (",
                     built_with_cuda() ? "no device visible; check CUDA_VISIBLE_DEVICES and the allocation"
                                       : "this build has no CUDA backend",
                     "); use --device cpu or auto");
    VINF_INPUT_FAIL("--device cuda: another rank sees no usable GPU");
  }
  return session.take_gpu();
}

std::unique_ptr<mpi::Communicator> make_group_communicator(MPI_Comm comm, const Device& device, Transport transport,
                                                           const std::string& label) {
  VINF_INPUT_CHECK(transport != Transport::nccl || device.is_cuda(),
                   "--comm-backend nccl needs the CUDA device (this run uses ", device.name(),
                   "); use --comm-backend mpi or auto");
  bool nccl = transport == Transport::nccl || (transport == Transport::automatic && device.is_cuda());
  if (nccl) {
    // NCCL refuses two ranks on one GPU ("Duplicate GPU detected") deep inside its set-up; find
    // them first, from what every rank of the group says it holds.
    const std::vector<mpi::GpuHolder> holders = mpi::gather_gpu_holders(comm, device);
    const std::vector<std::vector<int>> shared = mpi::shared_gpus(holders);
    if (!shared.empty()) {
      const std::string who = mpi::describe_shared_gpus(holders, shared);
      VINF_INPUT_CHECK(transport != Transport::nccl, "--comm-backend nccl needs one GPU per rank, but on the ", label,
                       " ", who,
                       " (more ranks than GPUs on a node); launch at most one rank per GPU (srun --gpus-per-task=1, or "
                       "--ntasks-per-node equal to the GPUs per node), or use --comm-backend auto (which then "
                       "uses the MPI transport)");
      int rank = 0;
      MPI_Comm_rank(comm, &rank);
      if (rank == 0) {
        std::fprintf(stderr,
                     "vinf: %s: %s; NCCL needs one GPU per rank, so this group is using the MPI transport (device "
                     "buffers staged through pinned host memory)\n",
                     label.c_str(), who.c_str());
        std::fflush(stderr);
      }
      nccl = false;
    }
  }
  std::unique_ptr<mpi::Communicator> c = nccl ? mpi::make_nccl_communicator(comm, device) : mpi::make_mpi_communicator(comm);
  c->set_label(label);
  return c;
}

std::unique_ptr<Job> start_job(const JobPlan& plan, const std::function<void(int)>& check_world) {
  check_cfg_layout(plan.cfg, 2);  // the values alone, before MPI starts
  VINF_INPUT_CHECK(plan.tensor >= 1, "--parallel.tensor must be >= 1, got ", plan.tensor);
  mpi::set_comm_timeout(plan.comm_timeout, "--comm-timeout");
  std::unique_ptr<Job> job(new Job());
  job->world_session_ = std::make_unique<mpi::Session>(nullptr, nullptr);
  mpi::Session& everyone = *job->world_session_;
  if (check_world) check_world(everyone.size());
  job->layout_ = make_layout(plan, everyone.size());
  const int w = everyone.rank();
  job->session_ = std::make_unique<mpi::Session>(everyone, w / job->layout_.unit());
  mpi::Session& session = *job->session_;
  for (MPI_Comm* c : {&job->handoff_comm_, &job->queue_comm_}) {
    VINF_CHECK_MPI(MPI_Comm_dup(everyone.world(), c));
    MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
  }
  job->grid_ = std::make_unique<mpi::ProcessGrid>(session, plan.cfg, plan.tensor);
  job->device_ = choose_device(everyone, plan.device);
  job->dtype_ = resolve_dtype(plan.dtype, job->device_);
  check_cpu_bf16(job->dtype_, job->device_);
  set_allow_tf32(plan.tf32);
  job->runtime_ = std::make_unique<Runtime>(job->device_);
  // The application's own traffic gets a copy of the world, so that it never meets another
  // message on MPI_COMM_WORLD.
  VINF_CHECK_MPI(MPI_Comm_dup(session.world(), &job->world_comm_));
  MPI_Comm_set_errhandler(job->world_comm_, MPI_ERRORS_RETURN);
  job->world_ = mpi::make_mpi_communicator(job->world_comm_);
  job->world_->set_label("job");
  if (plan.clip_group)
    job->clip_ = make_group_communicator(job->grid_->clip_comm(), job->device_, plan.transport, "clip group");
  if (plan.cfg_group && plan.cfg == 2)
    job->cfg_ = make_group_communicator(job->grid_->cfg_comm(), job->device_, plan.transport, "cfg group");
  if (plan.tensor > 1)
    job->tensor_ = make_group_communicator(job->grid_->tensor_comm(), job->device_, plan.transport, "tensor group");
  return job;
}

}  // namespace vinf::job
