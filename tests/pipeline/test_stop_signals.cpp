// The stop signals (SIGTERM, SIGUSR1: Slurm's time-limit warning and preemption) reach a run
// through one thread of their own. Every other thread keeps them blocked, so that no handler runs
// on a thread inside a kernel (oneDNN 2.x's JIT GEMM moves the stack pointer into the heap while it
// runs: a handler's frame there corrupts the heap). Each case runs in a child process, which owns
// its signal mask and the run's stop flag.
#include <doctest/doctest.h>

#include <pthread.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "pipeline/stop_signals.hpp"
#include "io/spawn.hpp"

namespace {

using vinf::pipeline::stop_signal;

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
    vinf::pipeline::hold_stop_signals();
    vinf::pipeline::install_stop_signals();
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
    vinf::pipeline::hold_stop_signals();
    kill(getpid(), SIGTERM);  // while MPI starts: held, not fatal
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (stop_signal() != 0) return 1;
    vinf::pipeline::install_stop_signals();
    return stop_signal_becomes(SIGTERM) ? 0 : 2;
  });
  CHECK(failed == 0);
}

TEST_CASE("Stop signals: the VINF_FAULT_STEP test hook signals the process") {
  const int failed = in_child([] {
    vinf::pipeline::hold_stop_signals();
    vinf::pipeline::install_stop_signals();
    setenv("VINF_FAULT_STEP", "rank=1,step=3,signal=USR1", 1);
    if (vinf::pipeline::step_fault(0, 3) || vinf::pipeline::step_fault(1, 2)) return 1;  // other ranks and steps
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (stop_signal() != 0) return 2;
    if (vinf::pipeline::step_fault(1, 3)) return 3;  // a signal, not NAN
    return stop_signal_becomes(SIGUSR1) ? 0 : 4;
  });
  CHECK(failed == 0);
}

// A helper program (ffmpeg) must not inherit the block: a mask survives exec, and the program would
// then not end on the job's SIGTERM.
TEST_CASE("Stop signals: a program vinf starts begins with no signal blocked") {
  const std::string status = "/tmp/vinf-test-spawn-status-" + std::to_string(getpid());
  const int failed = in_child([&] {
    vinf::pipeline::hold_stop_signals();
    vinf::pipeline::install_stop_signals();
    const std::string script = "grep SigBlk /proc/self/status > " + status;
    std::string sh = "sh", c = "-c", cmd = script;
    char* argv[] = {sh.data(), c.data(), cmd.data(), nullptr};
    const vinf::io::SpawnAttributes attributes;
    pid_t pid = -1;
    if (posix_spawnp(&pid, "sh", nullptr, attributes.get(), argv, environ) != 0) return 1;
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 2;
    return 0;
  });
  REQUIRE(failed == 0);
  std::ifstream in(status);
  std::string label, mask;
  in >> label >> mask;
  std::remove(status.c_str());
  CHECK(label == "SigBlk:");
  CHECK(mask.size() == 16);
  CHECK(mask.find_first_not_of('0') == std::string::npos);  // no signal blocked
}
