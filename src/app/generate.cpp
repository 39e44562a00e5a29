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
#include "core/error.hpp"
#include "core/progress.hpp"
#include "job/job.hpp"
#include "job/profile_run.hpp"
#include "pipeline/stop_signals.hpp"
#include "pipeline/video_pipeline.hpp"

namespace vinf::app {

namespace {

// generate and extend: the options, the job over the world, then the video, the job list or the
// pipeline stages.
int run_generate(const std::vector<std::string>& args, bool extend) {
  pipeline::hold_stop_signals();  // before any thread starts: they all inherit the block
  RunPlan o;
  if (const int status = parse_generate_options(args, o, nullptr, extend); status != 0) return status == 1 ? 0 : status;
  VINF_INPUT_CHECK(o.extend.empty() || o.jobs_file.empty(), extend ? "vinf extend" : "--continue",
                   " continues one video; a job list's jobs name their own `continue` (run with one replica, the "
                   "list's links run in order)");
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
  job::RunProfile profile(*job, o.profile);
  if (!list.empty() || o.job.pipeline > 1) {
    const int status = run_job_list(args, o, list, *job);
    profile.finish(std::cout);
    return status;
  }
  // Made after the job, so that the models it keeps go before the job's memory does.
  const std::unique_ptr<pipeline::VideoPipeline> family = pipeline::open_pipeline(o);
  const pipeline::VideoOutcome outcome = pipeline::run_spec(*family, o, *job, nullptr);
  profile.finish(std::cout);
  return outcome.end == pipeline::VideoEnd::stopped ? kExitStopped : 0;
}

}  // namespace

int generate(const std::vector<std::string>& args) { return run_generate(args, false); }

int extend(const std::vector<std::string>& args) {
  std::vector<std::string> a;
  bool help = false;
  for (const std::string& arg : args) {
    help = help || arg == "--help" || arg == "-h";
    if (arg == "--frames")
      a.push_back("--video.frames");
    else if (arg.rfind("--frames=", 0) == 0)
      a.push_back("--video.frames=" + arg.substr(9));
    else
      a.push_back(arg);
  }
  if (help)
    std::cout << "vinf extend: continue a video with a Wan2.1 image-to-video pipeline from its last frame\n\n"
                 "usage: [mpirun -np N] vinf extend --model I2V_DIR --video FILE|DIR --frames N --prompt.text TEXT\n"
                 "                      --out DIR [generate's options]\n\n"
                 "The new segment (N = 1 + 4k frames, its first the input's last frame) is an image-to-video run in\n"
                 "DIR/segment (latents.h5, checkpoints, run.json: --resume auto continues a stopped link there);\n"
                 "DIR/video.mp4 is the input's frames, then the segment's after its first; DIR/last-frame.png the\n"
                 "picture the segment starts from; DIR/extend.json where the seam is. --evaluate measures the\n"
                 "seam (vinf evaluate DIR/video.mp4 --boundaries K does it later). The size is the input's unless\n"
                 "--video.height/--video.width are given. A chain: each link's --video is the last link's\n"
                 "DIR/video.mp4 (vinf generate --continue DIR does the same; slurm/extend-chain.sbatch runs a\n"
                 "chain as a job array). --frames is --video.frames; every generate option below applies.\n\n";
  return run_generate(a, true);
}

}  // namespace vinf::app
