#include "core/error.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace vinf {
namespace {

int rank_from_environment() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* v = std::getenv(name); v && *v) return std::atoi(v);
  }
  return -1;
}

ProcessLabel& label() {
  static ProcessLabel l = [] {
    ProcessLabel p;
    char host[256] = {'?'};
    if (gethostname(host, sizeof host - 1) != 0) host[1] = '\0';
    p.host.assign(host, strnlen(host, sizeof host));
    p.rank = rank_from_environment();
    return p;
  }();
  return l;
}

std::mutex& label_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

const ProcessLabel& process_label() { return label(); }

void set_process_rank(int rank) {
  std::lock_guard lock(label_mutex());
  label().rank = rank;
}

void set_process_device(const std::string& device) {
  std::lock_guard lock(label_mutex());
  label().device = device;
}

std::string process_label_text() {
  std::lock_guard lock(label_mutex());
  const ProcessLabel& l = label();
  std::string s = "host " + l.host;
  if (l.rank >= 0) s += ", rank " + std::to_string(l.rank);
  s += ", device " + l.device;
  return s;
}

namespace detail {

[[noreturn]] void raise(const char* file, int line, const std::string& what, const std::string& detail) {
  // Paths are printed relative to the source tree: "src/ops/conv.cpp:42".
  std::string path = file;
  if (auto pos = path.rfind("/src/"); pos != std::string::npos) path = path.substr(pos + 1);
  else if (auto t = path.rfind("/tests/"); t != std::string::npos) path = path.substr(t + 1);
  std::string msg = what;
  msg += " (";
  if (!detail.empty()) msg += detail + " at ";
  msg += path + ":" + std::to_string(line) + ", " + process_label_text() + ")";
  throw Error(msg);
}

[[noreturn]] void raise_input(const std::string& what) {
  // No rank here: the same bad input usually fails on every rank, and the fatal path (mpi/fatal.hpp)
  // prints it once for the job, naming the ranks only when they are not all of them.
  throw InputError(what);
}

}  // namespace detail
}  // namespace vinf
