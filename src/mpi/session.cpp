#include "mpi/session.hpp"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <exception>

#include "core/error.hpp"
#include "mpi/check.hpp"
#include "ops/runtime.hpp"

namespace vinf::mpi {

namespace {

constexpr const char* kUnset = "(unset)";

// Every rank's string, in rank order, on every rank of `comm`.
std::vector<std::string> all_gather_strings(MPI_Comm comm, const std::string& mine) {
  int size = 0;
  VINF_CHECK_MPI(MPI_Comm_size(comm, &size));
  const int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  VINF_CHECK_MPI(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm));
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[static_cast<std::size_t>(r)] = total;
    total += lengths[static_cast<std::size_t>(r)];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  VINF_CHECK_MPI(MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
                                comm));
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r)
    out.push_back(all.substr(static_cast<std::size_t>(offsets[static_cast<std::size_t>(r)]),
                             static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)])));
  return out;
}

}  // namespace

std::string library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(text, &length);  // allowed before MPI_Init
  const std::string all(text, static_cast<std::size_t>(length));
  return all.substr(0, all.find_first_of("\n,"));
}

GpuTurn gpu_turn(MPI_Comm node, const std::string& visible) {
  int me = 0;
  VINF_CHECK_MPI(MPI_Comm_rank(node, &me));
  const std::vector<std::string> all = all_gather_strings(node, visible);
  GpuTurn t{0, 0};
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    if (all[static_cast<std::size_t>(r)] != visible) continue;
    if (r < me) ++t.turn;
    ++t.sharers;
  }
  return t;
}

Session::Session(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  // MPI_THREAD_MULTIPLE lets the communication watchdog call MPI_Abort from its own thread; with
  // less it ends the process instead (mpirun/srun then end the others).
  int provided = 0;
  if (!initialized) VINF_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  VINF_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  VINF_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  MPI_Comm node;
  VINF_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  VINF_CHECK_MPI(MPI_Comm_rank(node, &local_rank_));
  VINF_CHECK_MPI(MPI_Comm_size(node, &local_size_));
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  visible_gpus_ = visible ? visible : kUnset;
  gpu_turn_ = gpu_turn(node, visible_gpus_);
  MPI_Comm_free(&node);
  set_process_rank(size_ > 1 ? rank_ : -1);
  // OpenMP's default pool is every core this process may run on; ranks sharing a node's cores
  // would together run as many times more threads than cores. Unless OMP_NUM_THREADS says how
  // many, each takes its share (a rank bound to its own core already sees one).
  if (local_size_ > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) set_cpu_threads(cpu_threads_per_rank(local_size_));
}

Session::Session(const Session& parent, int color) : visible_gpus_(parent.visible_gpus_), gpu_turn_(parent.gpu_turn_) {
  VINF_CHECK_MPI(MPI_Comm_split(parent.comm_, color, parent.rank_, &comm_));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  owns_comm_ = true;
  VINF_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
  VINF_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  local_rank_ = parent.local_rank_;
  local_size_ = parent.local_size_;
}

Session::~Session() {
  if (owns_comm_) {
    // A part of a job: its communicator goes, MPI stays for the session it was split from.
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && std::uncaught_exceptions() == 0) MPI_Comm_free(&comm_);
    return;
  }
  // Unwinding from an error: leave MPI to the fatal path, which aborts every rank. Finalising
  // here would wait for ranks that are still inside a collective.
  if (std::uncaught_exceptions() > 0) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

bool Session::all(bool ok) const {
  int mine = ok ? 1 : 0, every = 0;
  VINF_CHECK_MPI(MPI_Allreduce(&mine, &every, 1, MPI_INT, MPI_MIN, comm_));
  return every == 1;
}

double Session::max(double v) const {
  double out = v;
  VINF_CHECK_MPI(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, comm_));
  return out;
}

std::vector<double> Session::max(const std::vector<double>& v) const {
  std::vector<double> out(v.size());
  VINF_CHECK_MPI(MPI_Allreduce(v.data(), out.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_MAX, comm_));
  return out;
}

int Session::min(int v) const {
  int out = v;
  VINF_CHECK_MPI(MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_MIN, comm_));
  return out;
}

void Session::broadcast(std::string& s, int root) const {
  int n = static_cast<int>(s.size());
  VINF_CHECK_MPI(MPI_Bcast(&n, 1, MPI_INT, root, comm_));
  s.resize(static_cast<std::size_t>(n));
  VINF_CHECK_MPI(MPI_Bcast(s.data(), n, MPI_CHAR, root, comm_));
}

namespace {
constexpr int kStreamTag = 7101;  // Session::send / receive
}  // namespace

void Session::send(const void* data, std::size_t bytes, int to) const {
  VINF_CHECK(bytes <= static_cast<std::size_t>(INT_MAX), "a message of ", bytes, " bytes is over MPI's count limit");
  VINF_CHECK_MPI(MPI_Send(data, static_cast<int>(bytes), MPI_BYTE, to, kStreamTag, comm_));
}

void Session::receive(void* data, std::size_t bytes, int from) const {
  VINF_CHECK(bytes <= static_cast<std::size_t>(INT_MAX), "a message of ", bytes, " bytes is over MPI's count limit");
  VINF_CHECK_MPI(MPI_Recv(data, static_cast<int>(bytes), MPI_BYTE, from, kStreamTag, comm_, MPI_STATUS_IGNORE));
}

int Session::gpu_count_on_every_rank() const {
  const int count = cuda_device_count();
  int least = count;
  VINF_CHECK_MPI(MPI_Allreduce(&count, &least, 1, MPI_INT, MPI_MIN, comm_));
  return least;
}

Device Session::take_gpu() const {
  const int count = cuda_device_count();
  VINF_CHECK(count > 0, "rank ", rank_, " sees no GPU to take");
  const Device d = Device::cuda(gpu_turn_.turn % count);
  set_process_device(d.name());
  return d;
}

std::string Session::placement(Device device) const {
  char host[256] = {'?', '\0'};
  if (gethostname(host, sizeof host - 1) != 0) host[1] = '\0';
  host[sizeof host - 1] = '\0';
  std::string line = "rank " + std::to_string(rank_) + " on " + host + ": local rank " + std::to_string(local_rank_) +
                     " of " + std::to_string(local_size_) + ", CUDA_VISIBLE_DEVICES=" + visible_gpus_ +
                     " (GPU turn " + std::to_string(gpu_turn_.turn) + " of the " + std::to_string(gpu_turn_.sharers) +
                     " local rank(s) given these GPUs): " + device.name();
  if (device.is_cuda()) line += " of " + std::to_string(cuda_device_count()) + " visible";
  return line;
}

std::vector<std::string> Session::gather_on_root(const std::string& line) const {
  std::vector<std::string> all = all_gather_strings(comm_, line);
  if (rank_ != 0) all.clear();
  return all;
}

}  // namespace vinf::mpi
