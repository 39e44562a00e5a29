// The denoising loop, written once: every family and every long-video method runs its steps
// through it. A step is the family's (the model calls over the method's windows, the guidance,
// the solver's update); around it the loop keeps the time, reports progress and applies the run
// control (pipeline::StepControl): the test pacing and fault hook, the check of the latents, the
// checkpoint cadence and the stop every rank agrees on.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/progress.hpp"
#include "pipeline/step_control.hpp"

namespace vinf::pipeline {

struct DenoiseHooks {
  std::function<void(int i)> step;  // step i (0-based): model, guidance, solver
  std::function<void(int i, double seconds)> progress;  // after step i (optional)
  std::function<void(int done)> spoil;  // the fault hook's NAN on this rank's latents
  std::function<void(int i)> check;  // after step i: the latents' check (optional)
  std::function<std::string(int done)> checkpoint;  // write one after step `done`; its path
};

struct DenoiseRange {
  int start = 0, end = 0;  // the steps this call runs: [start, end), of the run's control.settings().total
  bool stop_after_last = false;  // also stop (with a checkpoint) on a signal during the run's last step
};

struct DenoiseEnd {
  int stop_signal = 0;  // the signal every rank stopped on, or 0
  std::vector<double> step_seconds;  // this rank's time of each step run
  std::vector<std::string> checkpoints;
};

// Runs the steps; collective over the ranks StepControl agrees over. A checkpoint is written after
// the range's last step when it hands on to a later pipeline stage (end before the run's total).
DenoiseEnd denoise_loop(const StepControl& control, DenoiseRange range, const DenoiseHooks& hooks,
                        const Reporter& report);

}  // namespace vinf::pipeline
