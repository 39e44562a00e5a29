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

ProcessGrid::ProcessGrid(const Session& session, int cfg_size, int tensor_size) {
  VINF_CHECK((cfg_size == 1 || cfg_size == 2) && tensor_size >= 1 && session.size() % (cfg_size * tensor_size) == 0,
             "a process grid of ", cfg_size, " guidance branch(es) x ", tensor_size,
             " tensor rank(s) cannot be laid over ", session.size(), " rank(s)");
  cfg_size_ = cfg_size;
  tensor_size_ = tensor_size;
  clip_size_ = session.size() / (cfg_size * tensor_size);
  const int w = session.rank();
  tensor_index_ = w % tensor_size;
  clip_index_ = w / tensor_size % clip_size_;
  cfg_index_ = w / (tensor_size * clip_size_);
  VINF_CHECK_MPI(MPI_Comm_split(session.world(), cfg_index_ * tensor_size + tensor_index_, clip_index_, &clip_comm_));
  VINF_CHECK_MPI(MPI_Comm_split(session.world(), clip_index_ * tensor_size + tensor_index_, cfg_index_, &cfg_comm_));
  VINF_CHECK_MPI(MPI_Comm_split(session.world(), w / tensor_size, tensor_index_, &tensor_comm_));
  for (MPI_Comm c : {clip_comm_, cfg_comm_, tensor_comm_}) MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
}

ProcessGrid::~ProcessGrid() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (clip_comm_ != MPI_COMM_NULL) MPI_Comm_free(&clip_comm_);
  if (cfg_comm_ != MPI_COMM_NULL) MPI_Comm_free(&cfg_comm_);
  if (tensor_comm_ != MPI_COMM_NULL) MPI_Comm_free(&tensor_comm_);
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

}  // namespace vinf::mpi
