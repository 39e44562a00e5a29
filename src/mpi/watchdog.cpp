// The watchdog: one thread per process that ends the job, with a message naming the call, when a
// communicator call outlives the timeout; and the fault hook (VINF_FAULT) that the tests use to
// make a rank die or hang inside a collective.
#include "mpi/watchdog.hpp"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "mpi/communicator.hpp"

namespace vinf::mpi {

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void end_job(const std::string& message, int code) {
  std::fprintf(stderr, "vinf: error: %s\n", message.c_str());
  std::fflush(stderr);
  int initialized = 0, finalized = 0, size = 1, level = MPI_THREAD_SINGLE;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Query_thread(&level);
    // MPI_Abort from the watchdog's thread needs MPI_THREAD_MULTIPLE; without it, leaving the
    // process without MPI_Finalize makes mpirun/srun end the other ranks just the same.
    if (size > 1 && level == MPI_THREAD_MULTIPLE) MPI_Abort(MPI_COMM_WORLD, code);
  }
  std::_Exit(code);
}

// Communicator calls in flight in this process, watched by one thread that ends the job when one
// of them outlives the timeout. Never destroyed: the thread may outlive static destructors.
class Watchdog {
 public:
  static Watchdog& get() {
    static Watchdog* w = new Watchdog;
    return *w;
  }
  std::uint64_t arm(std::string what, std::function<std::string()> probe) {
    std::lock_guard lock(m_);
    if (!started_ && timeout_ > 0) {
      started_ = true;
      std::thread([this] { loop(); }).detach();
    }
    const std::uint64_t id = next_++;
    active_.emplace(id, Active{Clock::now(), std::move(what), std::move(probe), nullptr});
    return id;
  }
  void disarm(std::uint64_t id) {
    std::lock_guard lock(m_);
    active_.erase(id);
  }
  void until(std::uint64_t id, std::function<bool()> ended) {
    std::lock_guard lock(m_);
    const auto it = active_.find(id);
    if (it != active_.end()) it->second.ended = std::move(ended);
  }
  std::size_t watched() {
    std::lock_guard lock(m_);
    return active_.size();
  }
  void set_timeout(double s, std::string setting) {
    std::lock_guard lock(m_);
    timeout_ = s;
    setting_ = std::move(setting);
  }
  double timeout() {
    std::lock_guard lock(m_);
    return timeout_;
  }

 private:
  struct Active {
    Clock::time_point start;
    std::string what;
    std::function<std::string()> probe;
    std::function<bool()> ended;  // set for a call that finish() left running
  };
  void loop() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::string message;
      {
        std::lock_guard lock(m_);
        if (timeout_ <= 0) continue;
        for (const auto& [id, a] : active_) {
          // The probe runs under the lock: disarming the call waits for it, so it never outlives
          // what it looks at.
          if (a.probe) {
            const std::string failed = a.probe();
            if (!failed.empty()) {
              message = a.what + ": " + failed + "; ending the job";
              break;
            }
          }
          if (a.ended && a.ended()) continue;
          const double waited = std::chrono::duration<double>(Clock::now() - a.start).count();
          if (waited > timeout_) {
            char secs[32];
            std::snprintf(secs, sizeof secs, "%.1f", waited);
            message = a.what + " has waited " + secs + " s, longer than the communication timeout (" +
                      (setting_.empty() ? "" : setting_ + " ") + std::to_string(static_cast<long long>(timeout_)) +
                      " s): another rank of the group has died or hangs (see its log); ending the job";
            break;
          }
        }
      }
      if (!message.empty()) end_job(message, 3);
    }
  }
  std::mutex m_;
  std::map<std::uint64_t, Active> active_;
  std::uint64_t next_ = 0;
  double timeout_ = 300;
  std::string setting_;  // how the user changes the timeout, for the message
  bool started_ = false;
};

struct FaultPlan {
  int rank = -1;
  long call = -1;
  bool hang = false;
};

FaultPlan fault_plan() {
  FaultPlan f;
  const char* env = std::getenv("VINF_FAULT");
  if (!env) return f;
  char action[16] = {};
  if (std::sscanf(env, "rank=%d,call=%ld,action=%15s", &f.rank, &f.call, action) != 3) {
    std::fprintf(stderr, "vinf: warning: ignoring VINF_FAULT='%s' (want rank=R,call=K,action=abort|hang)\n", env);
    return {};
  }
  f.hang = std::strcmp(action, "hang") == 0;
  return f;
}

std::atomic<long> g_calls{0};

}  // namespace

int world_rank_or_minus_one() {
  int initialized = 0, finalized = 0, rank = -1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

std::uint64_t watch_call(std::string what, std::function<std::string()> probe) {
  return Watchdog::get().arm(std::move(what), std::move(probe));
}
void unwatch_call(std::uint64_t id) { Watchdog::get().disarm(id); }
void watch_until(std::uint64_t id, std::function<bool()> ended) { Watchdog::get().until(id, std::move(ended)); }
std::size_t watched_calls() { return Watchdog::get().watched(); }

void set_comm_timeout(double seconds, std::string setting) { Watchdog::get().set_timeout(seconds, std::move(setting)); }
double comm_timeout() { return Watchdog::get().timeout(); }

void check_fault_injection(int world_rank) {
  static const FaultPlan plan = fault_plan();
  if (plan.rank < 0 || plan.rank != world_rank) return;
  if (g_calls.fetch_add(1) + 1 != plan.call) return;
  std::fprintf(stderr, "vinf: rank %d: fault injection (VINF_FAULT): %s at communicator call %ld\n", world_rank,
               plan.hang ? "stops answering" : "aborts", plan.call);
  std::fflush(stderr);
  if (!plan.hang) std::abort();
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
}

}  // namespace vinf::mpi
