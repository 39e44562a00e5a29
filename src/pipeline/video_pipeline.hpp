// The model families behind one interface. A family's pipeline knows the job layout its run needs
// and runs one video (or a pipeline stage's share of it) on the job's unit; open_pipeline picks
// it, and model_family is the one place that tells the families apart by the class names of a
// model's configs (generation, forward, decode and inspect all ask it). A new family or
// conditioning is a new VideoPipeline.
#pragma once

#include <memory>
#include <string>

#include "job/job.hpp"
#include "pipeline/family.hpp"
#include "pipeline/generate_spec.hpp"
#include "pipeline/outcome.hpp"

namespace vinf::pipeline {

class VideoPipeline {
 public:
  virtual ~VideoPipeline() = default;
  virtual ModelFamily family() const = 0;
  // The job this family's run needs: the spec's device, dtype and layout, and which groups.
  virtual job::JobPlan job_plan(const GenerateSpec& o) const = 0;
  // A single video's spec against the world it runs on, before MPI starts its work: the ranks
  // fit the family's layout and the options combine; fills in what the layout decides (the UNet
  // family's frames from the frames per clip). InputError naming the option.
  virtual void check_run(GenerateSpec& o, int world) const = 0;
  // A job of a list, as it is read: the options combine on the `world` the replicas share (the
  // unit's own checks come when it runs the job). InputError naming the option.
  virtual void check_job(GenerateSpec& o, int world) const = 0;
  // Loads the models before the first video reaches this unit (a later pipeline stage's).
  virtual void load_ahead(const GenerateSpec& o, job::Job& job) = 0;
  // One video, or this stage's share of it (`in`: the previous stage's state); collective over the
  // job's unit. Throws vinf::InputError for bad input on every rank of the unit.
  virtual VideoOutcome run(GenerateSpec& o, job::Job& job, const StageState* in) = 0;
};

// The pipeline of the spec's family (GenerateSpec::wan, from model_family when the options were
// read). It keeps the models it loads from one video to the next, in the job's memory: it must go
// before the job does.
std::unique_ptr<VideoPipeline> open_pipeline(const GenerateSpec& o);

}  // namespace vinf::pipeline
