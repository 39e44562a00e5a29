// The stop signals (SIGTERM, SIGUSR1: Slurm's time-limit warning and preemption) reach a run
// through one thread of their own. Every other thread keeps them blocked, so that no handler runs
// on a thread inside a kernel (oneDNN 2.x's JIT GEMM moves the stack pointer into the heap while it
// runs: a handler's frame there corrupts the heap). Each case runs in a child process, which owns
// its signal mask and the run's stop flag.
#include <doctest/doctest.h>

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "app/stop_signals.hpp"

namespace {

using vinf::app::stop_signal;

bool blocks_stop_signals() {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  return sigismember(&now, SIGTERM) == 1 && sigismember(&now, SIGUSR1) == 1;
}

bool stop_signal_becomes(int sig) {
  for (int i = 0; i < 500; ++i) {
    if (stop_signal() == sig) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Runs `child` in a child process; its exit status (0: every check held; otherwise the number of
// the first that failed).
template <class F>
int in_child(F child) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) _exit(child());
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE_MESSAGE(WIFEXITED(status), "the child ended by signal ", WTERMSIG(status));
  return WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("Stop signals: blocked in the run's threads, taken by a thread of their own") {
  const int failed = in_child([] {
    vinf::app::hold_stop_signals();
    vinf::app::install_stop_signals();
    if (!blocks_stop_signals()) return 1;  // the thread that computes
    bool inherited = false;
    std::thread([&] { inherited = blocks_stop_signals(); }).join();
    if (!inherited) return 2;  // a thread it starts (OpenMP's, MPI's)
    if (stop_signal() != 0) return 3;
    kill(getpid(), SIGUSR1);  // as slurmstepd sends it: to the process
    if (!stop_signal_becomes(SIGUSR1)) return 4;
    kill(getpid(), SIGTERM);  // a second one neither ends the process nor replaces the first
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (stop_signal() != SIGUSR1) return 5;
    return 0;
  });
  CHECK_MESSAGE(failed == 0, "check ", failed, " failed (1, 2: a thread takes the signals; 3-5: the flag)");
}

TEST_CASE("Stop signals: one that comes before the handler waits for it") {
  const int failed = in_child([] {
    vinf::app::hold_stop_signals();
    kill(getpid(), SIGTERM);  // while MPI starts: held, not fatal
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (stop_signal() != 0) return 1;
    vinf::app::install_stop_signals();
    return stop_signal_becomes(SIGTERM) ? 0 : 2;
  });
  CHECK(failed == 0);
}

TEST_CASE("Stop signals: the VINF_FAULT_STEP test hook signals the process") {
  const int failed = in_child([] {
    vinf::app::hold_stop_signals();
    vinf::app::install_stop_signals();
    setenv("VINF_FAULT_STEP", "rank=1,step=3,signal=USR1", 1);
    if (vinf::app::step_fault(0, 3) || vinf::app::step_fault(1, 2)) return 1;  // other ranks and steps
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (stop_signal() != 0) return 2;
    if (vinf::app::step_fault(1, 3)) return 3;  // a signal, not NAN
    return stop_signal_becomes(SIGUSR1) ? 0 : 4;
  });
  CHECK(failed == 0);
}
