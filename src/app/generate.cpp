// `vinf generate` (design.md §5): the options into a GenerateSpec, the job over the world, then
// one video of either family (pipeline/unet_video, pipeline/wan_video), or a job list and
// pipeline stages (job_runner).
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/generate_options.hpp"
#include "app/generate_run.hpp"
#include "job/job.hpp"
#include "pipeline/stop_signals.hpp"
#include "pipeline/unet_video.hpp"
#include "pipeline/wan_video.hpp"

namespace vinf::app {

namespace {

job::JobPlan job_plan(const RunPlan& o) {
  job::JobPlan plan = o.job;
  // Windows and FIFO share windows; a Wan video splits its frames in exact mode or with
  // Video-Infinity's windows.
  plan.clip_group = o.wan ? (o.vi.mode == infinity::Mode::exact || o.vi.mode == infinity::Mode::invariant)
                          : (o.vi.mode != infinity::Mode::off || !o.long_clips());
  plan.cfg_group = o.cfg() == 2;
  return plan;
}

}  // namespace

int generate(const std::vector<std::string>& args) {
  pipeline::hold_stop_signals();  // before any thread starts: they all inherit the block
  RunPlan o;
  if (const int status = parse_generate_options(args, o); status != 0) return status == 1 ? 0 : status;
  // A job list is read (and refused) before MPI starts, on every rank alike.
  const std::vector<JobSpec> list = o.jobs_file.empty() ? std::vector<JobSpec>{} : read_job_list(o.jobs_file);
  const std::unique_ptr<job::Job> job = job::start_job(job_plan(o), [&](int world) {
    if (list.empty() && o.wan) pipeline::check_wan_job(o, world);
    else if (list.empty()) check_generate_job(o, world);
    else job::make_layout(o.job, world);
  });
  pipeline::install_stop_signals();  // after MPI's own set-up, so that this handler is the one in place
  if (o.verbose) {
    const std::vector<std::string> lines = job->world_session().gather_on_root(job->world_session().placement(job->device()));
    if (!o.quiet)
      for (const std::string& line : lines) std::cerr << "vinf generate: " << line << "\n" << std::flush;
  }
  if (!list.empty() || o.job.pipeline > 1) return run_job_list(args, o, list, *job);
  pipeline::ModelCache cache;
  const pipeline::VideoOutcome outcome =
      o.wan ? pipeline::run_wan_video(o, *job) : pipeline::run_unet_video(o, *job, cache, nullptr);
  return outcome.end == pipeline::VideoEnd::stopped ? kExitStopped : 0;
}

}  // namespace vinf::app
