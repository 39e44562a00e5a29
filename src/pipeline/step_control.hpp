// Run control, written once for every loop of steps (the denoising loops of both model families and
// training): the test pacing, the fault hook, the stop signal every rank agrees on, the checkpoint
// cadence and the line that says where a stopped run can continue from.
#pragma once

#include <chrono>
#include <string>

#include "mpi/session.hpp"
#include "pipeline/stop_signals.hpp"

namespace vinf::pipeline {

// Test hook: VINF_TEST_STEP_SECONDS=S makes every step last at least S seconds, so that a test of a
// Slurm time limit or preemption knows the run is still going when Slurm acts, however fast the
// machine is at the moment. 0 when unset.
double test_step_seconds();

// The line of a run whose stop signal came after its last step, while its outputs were written:
// they are finished, and the run says so instead of saying nothing; "" without a signal.
std::string late_stop_line();

class StepControl {
 public:
  using Clock = std::chrono::steady_clock;
  struct Settings {
    int total = 0;  // the run's steps (or FIFO's iterations)
    int checkpoint_every = 0;  // a checkpoint after every K-th step (0: none on a cadence)
    bool checkpoint_last = true;  // and one after the last step
    const char* unit = "step";  // what a step is called in the stop line ("iteration")
  };
  // `agree`: the ranks that stop together; `fault_rank`: this rank's number in VINF_FAULT_STEP.
  StepControl(const mpi::Session& agree, int fault_rank, Settings settings);

  // Sleeps until the step begun at `began` has lasted VINF_TEST_STEP_SECONDS (no wait without it).
  void pace(Clock::time_point began) const;
  // The fault hook after step `done` (1-based): sends this rank the signal VINF_FAULT_STEP names, or
  // returns true when this rank is to spoil its numbers (NAN).
  bool fault(int done) const;
  // Collective: the stop signal any rank received (0: none), the same on every rank.
  int agreed_stop() const;
  // Whether a checkpoint is due after step `done`, given the agreed stop signal.
  bool checkpoint_due(int done, int stopped_by) const;
  // Collective: the line of a run that stopped on `signal` after step `done`, with the checkpoint it
  // wrote and how long the slowest rank took from its signal to here (the rest of a step, the
  // checkpoint: what a Slurm grace time or --signal lead must cover, with margin).
  // "received SIGTERM: stopped after step 3 of 10, checkpoint P, 0.2 s after the signal; run again
  // with --resume auto to continue (exit status 75)"
  std::string stop_line(int signal, int done, const std::string& checkpoint) const;

  // The shorter line training prints (not collective): "stopped by SIGUSR1 after step 3 of 6; wrote
  // P (run again with --resume auto)".
  std::string stopped_by_line(int signal, int done, const std::string& checkpoint) const;

  const Settings& settings() const { return settings_; }

 private:
  const mpi::Session& agree_;
  int fault_rank_;
  Settings settings_;
  double pace_seconds_;
};

}  // namespace vinf::pipeline
