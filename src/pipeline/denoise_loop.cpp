#include "pipeline/denoise_loop.hpp"

#include <chrono>

namespace vinf::pipeline {

DenoiseEnd denoise_loop(const StepControl& control, DenoiseRange range, const DenoiseHooks& hooks,
                        const Reporter& report) {
  using Clock = std::chrono::steady_clock;
  const int total = control.settings().total;
  DenoiseEnd out;
  for (int i = range.start; i < range.end; ++i) {
    const auto t0 = Clock::now();
    hooks.step(i);
    out.step_seconds.push_back(seconds_since(t0));
    if (hooks.progress) hooks.progress(i, out.step_seconds.back());
    const int done = i + 1;
    control.pace(t0);
    if (control.fault(done)) hooks.spoil(done);
    if (hooks.check) hooks.check(i);
    // Every rank learns whether any rank was asked to stop, and they stop together. The end of
    // the run, or of this pipeline stage's steps (the next stage starts from there, so a stop
    // before it has run loses nothing).
    const bool last = done == total, handing_on = done == range.end && !last;
    const int stopped_by = last && !range.stop_after_last ? 0 : control.agreed_stop();
    if (handing_on || control.checkpoint_due(done, stopped_by)) out.checkpoints.push_back(hooks.checkpoint(done));
    if (stopped_by != 0) {
      report.say(control.stop_line(stopped_by, done, out.checkpoints.back()));
      out.stop_signal = stopped_by;
      return out;
    }
  }
  return out;
}

}  // namespace vinf::pipeline
