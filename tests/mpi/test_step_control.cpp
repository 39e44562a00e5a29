// The run control every loop of steps shares (pipeline::StepControl) and the denoising loop
// (pipeline::denoise_loop) at this world size: the checkpoint cadence, the stop every rank agrees
// on, the fault hook on one rank, the hand-off checkpoint of a pipeline stage, the stop line.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "mpi/session.hpp"
#include "pipeline/denoise_loop.hpp"
#include "pipeline/step_control.hpp"
#include "world.hpp"

using namespace vinf;
using pipeline::StepControl;

namespace {

// One session over the test program's world (MPI is already running; it stays until the end).
const mpi::Session& world_session() {
  static mpi::Session session(nullptr, nullptr);
  return session;
}

}  // namespace

TEST_CASE("StepControl: checkpoints on the cadence, after the last step, and on a stop") {
  const StepControl control(world_session(), test::world_rank(), {10, 3, true, "step"});
  std::vector<int> due;
  for (int done = 1; done <= 10; ++done)
    if (control.checkpoint_due(done, 0)) due.push_back(done);
  CHECK(due == std::vector<int>{3, 6, 9, 10});
  CHECK(control.checkpoint_due(4, 15));  // a stop signal: always
  const StepControl no_last(world_session(), test::world_rank(), {10, 4, false, "step"});
  CHECK_FALSE(no_last.checkpoint_due(10, 0));
  CHECK(no_last.checkpoint_due(8, 0));
  CHECK(control.agreed_stop() == 0);  // no signal on any rank
}

TEST_CASE("StepControl: the stop line names the signal, the step, the checkpoint and how to continue") {
  const StepControl control(world_session(), test::world_rank(), {5, 0, true, "iteration"});
  CHECK(control.stop_line(15, 2, "out/checkpoints/step-000002.h5") ==
        "received SIGTERM: stopped after iteration 2 of 5, checkpoint out/checkpoints/step-000002.h5, 0.0 s after "
        "the signal; run again with --resume auto to continue (exit status 75)");
  CHECK(control.stopped_by_line(10, 3, "c.h5") ==
        "stopped by SIGUSR1 after iteration 3 of 5; wrote c.h5 (run again with --resume auto)");
}

TEST_CASE("denoise_loop: every step once, the cadence's checkpoints and the hand-off's, the fault on its rank") {
  const int last_rank = test::world_size() - 1;
  const std::string fault = "rank=" + std::to_string(last_rank) + ",step=2,signal=NAN";
  setenv("VINF_FAULT_STEP", fault.c_str(), 1);
  const StepControl control(world_session(), test::world_rank(), {6, 3, true, "step"});
  std::vector<int> stepped, checked, spoiled;
  pipeline::DenoiseHooks hooks;
  hooks.step = [&](int i) { stepped.push_back(i); };
  hooks.check = [&](int i) { checked.push_back(i); };
  hooks.spoil = [&](int done) { spoiled.push_back(done); };
  hooks.checkpoint = [&](int done) { return "c" + std::to_string(done); };
  // A pipeline stage's steps [1, 4) of 6: a checkpoint on the cadence (3) and one to hand on (4).
  const pipeline::DenoiseEnd end = pipeline::denoise_loop(control, {1, 4, false}, hooks, Reporter());
  unsetenv("VINF_FAULT_STEP");
  CHECK(end.stop_signal == 0);
  CHECK(stepped == std::vector<int>{1, 2, 3});
  CHECK(checked == stepped);
  CHECK(end.step_seconds.size() == 3);
  CHECK(end.checkpoints == std::vector<std::string>{"c3", "c4"});
  CHECK(spoiled == (test::world_rank() == last_rank ? std::vector<int>{2} : std::vector<int>{}));
}
