// One UNet-family video on this rank's unit (design.md §5): the phases of `vinf generate` (plan,
// text, models, denoise, outputs) for this unit's pipeline stage, with Video-Infinity's clips,
// sliding windows or FIFO-Diffusion. A single run is one call; a job list makes one call per job
// and stage, with the models loaded once.
#pragma once

#include <memory>
#include <string>

#include "job/job.hpp"
#include "pipeline/generate_spec.hpp"
#include "pipeline/outcome.hpp"

namespace vinf::pipeline {

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

class VideoRun;
// One video's run, or this stage's share of it: steps [first, end) of the schedule (the whole
// schedule without a pipeline). `in`: the previous stage's state (stages after the first); the
// first stage starts from the noise or from the newest checkpoint of its output directory. Its
// phases are collective over the job's unit and throw vinf::InputError for bad input (on every
// rank of the unit).
std::unique_ptr<VideoRun> start_unet_video(GenerateSpec& o, job::Job& job, ModelCache& models, const StageState* in);

// Loads the models of `base` into the cache before the first video reaches this unit (a later
// pipeline stage would otherwise load them only when its predecessor hands the first job on).
// Collective over the job's unit. Throws vinf::InputError for a model that cannot be read.
void load_models_ahead(const GenerateSpec& base, job::Job& job, ModelCache& cache);

}  // namespace vinf::pipeline
