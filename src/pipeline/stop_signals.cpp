#include "pipeline/stop_signals.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>

namespace vinf::pipeline {

namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<std::int64_t> g_stop_signal_ns{0};  // CLOCK_MONOTONIC when the first one arrived

std::int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void note_stop_signal(int sig) {
  int none = 0;
  if (g_stop_signal.compare_exchange_strong(none, sig)) g_stop_signal_ns.store(monotonic_ns());
}

extern "C" void on_stop_signal(int sig) { note_stop_signal(sig); }

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}

}  // namespace

void hold_stop_signals() {
  const sigset_t set = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void install_stop_signals() {
  // The signals stay blocked in this thread and in every thread it starts (OpenMP's, MPI's, the
  // watchdog's): one thread of their own takes them with sigwait. A handler must not run on a
  // computing thread: oneDNN's JIT GEMM kernels (libdnnl 2.x) point rsp at a heap buffer while they
  // run, and the kernel would write the handler's frame over the heap.
  const sigset_t set = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A thread that a library started before hold_stop_signals may still take one: it only sets the
  // flag there (such a thread runs no kernels).
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  static std::once_flag started;
  std::call_once(started, [] {
    std::thread([] {
      const sigset_t wanted = stop_signal_set();
      for (;;) {
        int sig = 0;
        if (sigwait(&wanted, &sig) == 0) note_stop_signal(sig);
      }
    }).detach();
  });
  std::signal(SIGXFSZ, SIG_IGN);
}

int stop_signal() { return g_stop_signal.load(); }

double seconds_since_stop_signal() {
  const std::int64_t at = g_stop_signal_ns.load();  // 0 for an instant after the flag is set
  if (g_stop_signal.load() == 0 || at == 0) return 0.0;
  return static_cast<double>(monotonic_ns() - at) * 1e-9;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

bool step_fault(int world_rank, int completed_steps) {
  const char* spec = std::getenv("VINF_FAULT_STEP");
  if (!spec) return false;
  int rank = -1, step = -1;
  char sig[16] = {};
  if (std::sscanf(spec, "rank=%d,step=%d,signal=%15s", &rank, &step, sig) != 3) return false;
  if (rank != world_rank || step != completed_steps) return false;
  const std::string s = sig;
  if (s == "NAN") return true;
  // To the process, as Slurm sends it (raise would send it to this thread, which blocks it); then
  // wait for the signals' thread to take it, so that the run sees it after step K, as the tests
  // expect, not a step later.
  kill(getpid(), s == "KILL" ? SIGKILL : s == "USR1" ? SIGUSR1 : SIGTERM);
  for (int i = 0; i < 1000 && stop_signal() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return false;
}

}  // namespace vinf::pipeline
