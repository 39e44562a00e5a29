#include "pipeline/step_control.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "pipeline/stop_signals.hpp"

namespace vinf::pipeline {

double test_step_seconds() {
  const char* s = std::getenv("VINF_TEST_STEP_SECONDS");
  return s ? std::max(0.0, std::atof(s)) : 0.0;
}

std::string late_stop_line() {
  if (stop_signal() == 0) return "";
  return std::string("received ") + signal_name(stop_signal()) + " after the last step: the outputs were finished " +
         "(the run is complete; nothing to resume)";
}

StepControl::StepControl(const mpi::Session& agree, int fault_rank, Settings settings)
    : agree_(agree), fault_rank_(fault_rank), settings_(settings), pace_seconds_(test_step_seconds()) {}

void StepControl::pace(Clock::time_point began) const {
  if (pace_seconds_ > 0) std::this_thread::sleep_until(began + std::chrono::duration<double>(pace_seconds_));
}

bool StepControl::fault(int done) const { return step_fault(fault_rank_, done); }

int StepControl::agreed_stop() const { return static_cast<int>(agree_.max(static_cast<double>(stop_signal()))); }

bool StepControl::checkpoint_due(int done, int stopped_by) const {
  const int every = settings_.checkpoint_every;
  return stopped_by != 0 || (settings_.checkpoint_last && done == settings_.total) || (every > 0 && done % every == 0);
}

std::string StepControl::stop_line(int signal, int done, const std::string& checkpoint) const {
  char took[64];
  std::snprintf(took, sizeof took, "%.1f s", agree_.max(seconds_since_stop_signal()));
  return std::string("received ") + signal_name(signal) + ": stopped after " + settings_.unit + " " +
         std::to_string(done) + " of " + std::to_string(settings_.total) + ", checkpoint " + checkpoint + ", " + took +
         " after the signal; run again with --resume auto to continue (exit status " + std::to_string(kExitStopped) +
         ")";
}

std::string StepControl::stopped_by_line(int signal, int done, const std::string& checkpoint) const {
  return std::string("stopped by ") + signal_name(signal) + " after " + settings_.unit + " " + std::to_string(done) +
         " of " + std::to_string(settings_.total) + "; wrote " + checkpoint + " (run again with --resume auto)";
}

}  // namespace vinf::pipeline
