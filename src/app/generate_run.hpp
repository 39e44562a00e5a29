// A job list and pipeline stages of `vinf generate` (job_runner): each job's options over the
// command line's, each job and stage one call of a family's run (pipeline/unet_video,
// pipeline/wan_video), the models loaded once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "app/generate_options.hpp"
#include "app/job_list.hpp"
#include "io/checkpoint.hpp"
#include "job/job.hpp"
#include "pipeline/outcome.hpp"
#include "pipeline/unet_video.hpp"

namespace vinf::app {

using pipeline::ModelCache;
using pipeline::StageState;
using pipeline::VideoEnd;
using pipeline::VideoOutcome;

// A job list (or, with an empty list, the one video of `base` through a pipeline): the replicas
// take the jobs from the queue, each job runs through the replica's pipeline stages, and
// OUT/jobs.json records every job's status. args: the command line, each job's options win over
// it. Returns the exit status: 0 when every job is done, kExitStopped when a stop signal ended the
// run (after checkpoints), 2 when a job failed on bad input (the others went on). Collective over
// the job's world.
int run_job_list(const std::vector<std::string>& args, const RunPlan& base, const std::vector<JobSpec>& list,
                 job::Job& job);

}  // namespace vinf::app
