// One video on this rank's unit (design.md §5): the phases of `vinf generate` (plan, text,
// models, denoise, outputs) for this unit's pipeline stage. A single run is one call; a job list
// (job_runner) makes one call per job and stage, with the models loaded once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "app/generate_options.hpp"
#include "app/job_list.hpp"
#include "io/checkpoint.hpp"
#include "job/job.hpp"
#include "pipeline/outcome.hpp"

namespace vinf::app {

using pipeline::StageState;
using pipeline::VideoEnd;
using pipeline::VideoOutcome;

// The models a process has loaded, kept from one video to the next.
struct LoadedModels;
class ModelCache {
 public:
  ModelCache();
  ~ModelCache();
  LoadedModels* find(const std::string& key);
  LoadedModels& keep(const std::string& key, std::unique_ptr<LoadedModels> models);

 private:
  std::string key_;
  std::unique_ptr<LoadedModels> models_;
};

// Runs one video, or this stage's share of it: steps [first, end) of the schedule (the whole
// schedule without a pipeline). `in`: the previous stage's state (stages after the first); the
// first stage starts from the noise or from the newest checkpoint of its output directory.
// Collective over the job's unit. Throws vinf::InputError for bad input (on every rank of the unit).
VideoOutcome run_video(RunPlan& o, job::Job& job, ModelCache& models, const StageState* in);

// Loads the models of `base` into the cache before the first video reaches this unit (a later
// pipeline stage would otherwise load them only when its predecessor hands the first job on).
// Collective over the job's unit. Throws vinf::InputError for a model that cannot be read.
void load_models_ahead(const RunPlan& base, job::Job& job, ModelCache& cache);

// A job list (or, with an empty list, the one video of `base` through a pipeline): the replicas
// take the jobs from the queue, each job runs through the replica's pipeline stages, and
// OUT/jobs.json records every job's status. args: the command line, each job's options win over
// it. Returns the exit status: 0 when every job is done, kExitStopped when a stop signal ended the
// run (after checkpoints), 2 when a job failed on bad input (the others went on). Collective over
// the job's world.
int run_job_list(const std::vector<std::string>& args, const RunPlan& base, const std::vector<JobSpec>& list,
                 job::Job& job);

}  // namespace vinf::app
