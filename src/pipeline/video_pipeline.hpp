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

// One video's run in its family's phases, which run_video calls in this order on every rank of
// the job's unit (each collective over it). A new family or conditioning implements them.
class VideoRun {
 public:
  virtual ~VideoRun() = default;
  // The spec against the model's configs and the job's layout: the latent shape and its split
  // over the ranks, the schedule, the memory it needs, the numbers a checkpoint must match.
  virtual void plan() = 0;
  // The output directory and the checkpoint the run continues from; false when the directory
  // holds this run finished (nothing to do).
  virtual bool choose_outputs() = 0;
  virtual const std::string& out_dir() const = 0;
  // The prompts through the family's text encoder, or the embeddings given.
  virtual void encode_prompts() = 0;
  // The models (kept from an earlier video where the family can), the initial latents or the
  // checkpoint's, and the solver's state.
  virtual void load() = 0;
  // The steps, through pipeline::denoise_loop: each one's model calls (the predictions with the
  // context-parallel context of the layout), the guidance and the solver's update. The stop
  // signal that ended them early, or 0.
  virtual int denoise() = 0;
  // A pipeline stage whose steps end before the schedule's: its state for the next stage.
  virtual bool hand_on(StageState& /*out*/) { return false; }
  // Decodes the latents and writes the outputs, run.json last.
  virtual void finish() = 0;
};

// One video through its run's phases: plan, outputs, prompts, models, the steps, then the next
// stage's hand-off or the outputs.
VideoOutcome run_video(VideoRun& run);

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
  // One video's run, or this stage's share of it (`in`: the previous stage's state), ready for its
  // phases.
  virtual std::unique_ptr<VideoRun> start(GenerateSpec& o, job::Job& job, const StageState* in) = 0;
  // That run through its phases; collective over the job's unit. Throws vinf::InputError for bad
  // input on every rank of the unit.
  VideoOutcome run(GenerateSpec& o, job::Job& job, const StageState* in) { return run_video(*start(o, job, in)); }
};

// One video of the spec on the family's pipeline: the family's own run, or vinf extend's
// (GenerateSpec::extend: wan_extend.hpp) with the family running the new segment.
VideoOutcome run_spec(VideoPipeline& family, GenerateSpec& o, job::Job& job, const StageState* in);

// The pipeline of the spec's family (GenerateSpec::wan, from model_family when the options were
// read). It keeps the models it loads from one video to the next, in the job's memory: it must go
// before the job does.
std::unique_ptr<VideoPipeline> open_pipeline(const GenerateSpec& o);

}  // namespace vinf::pipeline
