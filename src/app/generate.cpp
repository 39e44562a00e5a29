// `vinf generate` (design.md §5): the options into a GenerateSpec, the family's pipeline
// (pipeline/video_pipeline), the job over the world, then one video, or a job list and pipeline
// stages (job_runner).
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/generate_options.hpp"
#include "app/generate_run.hpp"
#include "core/progress.hpp"
#include "job/job.hpp"
#include "pipeline/stop_signals.hpp"
#include "pipeline/video_pipeline.hpp"

namespace vinf::app {

int generate(const std::vector<std::string>& args) {
  pipeline::hold_stop_signals();  // before any thread starts: they all inherit the block
  RunPlan o;
  if (const int status = parse_generate_options(args, o); status != 0) return status == 1 ? 0 : status;
  // A job list is read (and refused) before MPI starts, on every rank alike.
  const std::vector<JobSpec> list = o.jobs_file.empty() ? std::vector<JobSpec>{} : read_job_list(o.jobs_file);
  const std::unique_ptr<job::Job> job = job::start_job(pipeline::open_pipeline(o)->job_plan(o), [&](int world) {
    if (list.empty())
      pipeline::open_pipeline(o)->check_run(o, world);
    else
      job::make_layout(o.job, world);
  });
  pipeline::install_stop_signals();  // after MPI's own set-up, so that this handler is the one in place
  if (o.verbose) {
    const std::vector<std::string> lines =
        job->world_session().gather_on_root(job->world_session().placement(job->device()));
    const Reporter report("vinf generate:", true, o.quiet);
    for (const std::string& line : lines) report.say(line);
  }
  if (!list.empty() || o.job.pipeline > 1) return run_job_list(args, o, list, *job);
  // Made after the job, so that the models it keeps go before the job's memory does.
  const std::unique_ptr<pipeline::VideoPipeline> family = pipeline::open_pipeline(o);
  const pipeline::VideoOutcome outcome = family->run(o, *job, nullptr);
  return outcome.end == pipeline::VideoEnd::stopped ? kExitStopped : 0;
}

}  // namespace vinf::app
