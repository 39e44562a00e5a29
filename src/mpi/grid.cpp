#include "mpi/grid.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>

#include "core/error.hpp"
#include "mpi/check.hpp"
#include "ops/runtime.hpp"

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

std::vector<std::vector<int>> shared_gpus(const std::vector<GpuHolder>& holders) {
  std::map<std::pair<std::string, std::string>, std::vector<int>> by_gpu;
  for (std::size_t r = 0; r < holders.size(); ++r)
    by_gpu[{holders[r].host, holders[r].gpu}].push_back(static_cast<int>(r));
  std::vector<std::vector<int>> out;
  for (auto& [gpu, ranks] : by_gpu)
    if (ranks.size() > 1) out.push_back(std::move(ranks));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return out;
}

std::string describe_shared_gpus(const std::vector<GpuHolder>& holders, const std::vector<std::vector<int>>& shared) {
  std::string text;
  for (const std::vector<int>& ranks : shared) {
    if (!text.empty()) text += "; ";
    text += "ranks ";
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (i > 0) text += i + 1 == ranks.size() ? " and " : ", ";
      text += std::to_string(ranks[i]);
    }
    const GpuHolder& h = holders[static_cast<std::size_t>(ranks.front())];
    text += " share " + h.gpu + " on " + h.host;
  }
  return text;
}

namespace {

// Every rank's host and GPU, gathered over comm. A rank that cannot read its GPU's identity still
// takes part (with its error in place of the identity), and then every rank fails alike.
std::vector<GpuHolder> gather_gpu_holders(MPI_Comm comm, const Device& device) {
  constexpr int kField = 160;
  char mine[2 * kField + 1] = {};
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  VINF_CHECK_MPI(MPI_Get_processor_name(host, &len));
  auto put = [&](char* field, const std::string& text) {  // at most kField - 1 bytes, NUL-terminated
    std::memcpy(field, text.data(), std::min(text.size(), static_cast<std::size_t>(kField - 1)));
  };
  put(mine, host);
  std::string identity;
  try {
    identity = device_identity(device);
  } catch (const Error& e) {
    identity = e.what();
    mine[2 * kField] = 1;
  }
  put(mine + kField, identity);
  int size = 1;
  VINF_CHECK_MPI(MPI_Comm_size(comm, &size));
  std::vector<char> all(static_cast<std::size_t>(size) * sizeof mine);
  VINF_CHECK_MPI(MPI_Allgather(mine, sizeof mine, MPI_CHAR, all.data(), sizeof mine, MPI_CHAR, comm));
  std::vector<GpuHolder> holders(static_cast<std::size_t>(size));
  for (std::size_t r = 0; r < holders.size(); ++r) {
    const char* p = all.data() + r * sizeof mine;
    holders[r] = {std::string(p, strnlen(p, kField)), std::string(p + kField, strnlen(p + kField, kField))};
  }
  for (std::size_t r = 0; r < holders.size(); ++r)
    VINF_CHECK(all[r * sizeof mine + 2 * kField] == 0, "rank ", r, " (", holders[r].host,
               ") cannot identify its GPU: ", holders[r].gpu);
  return holders;
}

}  // namespace

std::unique_ptr<Communicator> make_communicator(MPI_Comm comm, const Device& device, const std::string& backend,
                                                const std::string& label) {
  VINF_INPUT_CHECK(backend == "auto" || backend == "mpi" || backend == "nccl",
                   "--comm-backend must be auto, mpi or nccl, got '", backend, "'");
  VINF_INPUT_CHECK(backend != "nccl" || device.is_cuda(), "--comm-backend nccl needs the CUDA device (this run uses ",
                   device.name(), "); use --comm-backend mpi or auto");
  bool nccl = backend == "nccl" || (backend == "auto" && device.is_cuda());
  if (nccl) {
    // NCCL refuses two ranks on one GPU ("Duplicate GPU detected") deep inside its set-up; find
    // them first, from what every rank of the group says it holds.
    const std::vector<GpuHolder> holders = gather_gpu_holders(comm, device);
    const std::vector<std::vector<int>> shared = shared_gpus(holders);
    if (!shared.empty()) {
      const std::string who = describe_shared_gpus(holders, shared);
      VINF_INPUT_CHECK(backend != "nccl", "--comm-backend nccl needs one GPU per rank, but on the ", label, " ", who,
                       " (more ranks than GPUs on a node); launch at most one rank per GPU (srun --gpus-per-task=1, or "
                       "--ntasks-per-node equal to the GPUs per node), or use --comm-backend auto (which then "
                       "uses the MPI transport)");
      int rank = 0;
      VINF_CHECK_MPI(MPI_Comm_rank(comm, &rank));
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
  std::unique_ptr<Communicator> c = nccl ? make_nccl_communicator(comm, device) : make_mpi_communicator(comm);
  c->set_label(label);
  return c;
}

}  // namespace vinf::mpi
