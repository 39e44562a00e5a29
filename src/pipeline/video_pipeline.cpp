#include "pipeline/video_pipeline.hpp"

#include "core/error.hpp"
#include "pipeline/unet_support.hpp"
#include "pipeline/unet_video.hpp"
#include "pipeline/wan_extend.hpp"
#include "pipeline/wan_video.hpp"

namespace vinf::pipeline {

namespace {

// The UNet family: Video-Infinity's clips over the clip group, or the windows and FIFO over it;
// the models kept from one video to the next.
class UnetPipeline final : public VideoPipeline {
 public:
  ModelFamily family() const override { return ModelFamily::unet; }
  job::JobPlan job_plan(const GenerateSpec& o) const override {
    job::JobPlan plan = o.job;
    // Windows and FIFO share windows over the group.
    plan.clip_group = o.vi.mode != infinity::Mode::off || !o.long_clips();
    plan.cfg_group = o.cfg() == 2;
    return plan;
  }
  void check_run(GenerateSpec& o, int world) const override { check_unet_job(o, world); }
  void check_job(GenerateSpec& o, int world) const override { check_unet_job(o, world); }
  void load_ahead(const GenerateSpec& o, job::Job& job) override { load_models_ahead(o, job, cache_); }
  std::unique_ptr<VideoRun> start(GenerateSpec& o, job::Job& job, const StageState* in) override {
    return start_unet_video(o, job, cache_, in);
  }

 private:
  ModelCache cache_;
};

// The Wan family: one rank, the guidance branches over two, or the latent frames over the clip
// group in exact mode or with Video-Infinity's windows.
class WanPipeline final : public VideoPipeline {
 public:
  ModelFamily family() const override { return ModelFamily::wan; }
  job::JobPlan job_plan(const GenerateSpec& o) const override {
    job::JobPlan plan = o.job;
    plan.clip_group = o.vi.mode == infinity::Mode::exact || o.vi.mode == infinity::Mode::invariant;
    plan.cfg_group = o.cfg() == 2;
    return plan;
  }
  void check_run(GenerateSpec& o, int world) const override { check_wan_job(o, world); }
  void check_job(GenerateSpec& o, int) const override { check_wan_plan(o); }
  void load_ahead(const GenerateSpec&, job::Job&) override {}  // a Wan video loads its models itself
  std::unique_ptr<VideoRun> start(GenerateSpec& o, job::Job& job, const StageState*) override {
    return start_wan_video(o, job);
  }
};

}  // namespace

VideoOutcome run_video(VideoRun& run) {
  run.plan();
  if (!run.choose_outputs()) return {VideoEnd::finished_before, 0, run.out_dir(), {}};
  run.encode_prompts();
  run.load();
  if (const int stopped = run.denoise(); stopped != 0) return {VideoEnd::stopped, stopped, run.out_dir(), {}};
  VideoOutcome outcome{VideoEnd::handed_on, 0, run.out_dir(), {}};
  if (run.hand_on(outcome.handoff)) return outcome;
  run.finish();
  outcome.end = VideoEnd::complete;
  return outcome;
}

std::unique_ptr<VideoPipeline> open_pipeline(const GenerateSpec& o) {
  if (o.wan) return std::make_unique<WanPipeline>();
  return std::make_unique<UnetPipeline>();
}

VideoOutcome run_spec(VideoPipeline& family, GenerateSpec& o, job::Job& job, const StageState* in) {
  if (o.extend.empty()) return family.run(o, job, in);
  VINF_CHECK(in == nullptr, "run_spec: vinf extend runs in one pipeline stage");
  return extend_video(o, job, family);
}

}  // namespace vinf::pipeline
