#include "pipeline/wan_video.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <tuple>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "evaluate/evaluate.hpp"
#include "core/progress.hpp"
#include "infinity/wan_bands.hpp"
#include "infinity/wan_exact.hpp"
#include "infinity/wan_windows.hpp"
#include "io/atomic_file.hpp"
#include "io/checkpoint.hpp"
#include "mpi/session.hpp"
#include "io/image.hpp"
#include "io/video.hpp"
#include "io/video_reader.hpp"
#include "io/path_query.hpp"
#include "io/safetensors.hpp"
#include "job/job.hpp"
#include "model/t5_tokenizer.hpp"
#include "model/umt5.hpp"
#include "model/wan_vae.hpp"
#include "model/weights.hpp"
#include "model/wan_transformer.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"
#include "pipeline/denoise_loop.hpp"
#include "pipeline/df_denoise.hpp"
#include "pipeline/run_dir.hpp"
#include "pipeline/step_control.hpp"
#include "pipeline/stop_signals.hpp"
#include "pipeline/video_pipeline.hpp"
#include "pipeline/wan_condition.hpp"
#include "pipeline/wan_denoise.hpp"
#include "pipeline/wan_stream.hpp"
#include "sampling/diffusion_forcing.hpp"
#include "sampling/noise.hpp"

namespace fs = std::filesystem;

namespace vinf::pipeline {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

}  // namespace

// What this version of the Wan path refuses, with the option named: the layouts that split the
// model, the UNet family's methods and files (the rank counts: check_wan_job).
void check_wan_plan(const GenerateSpec& o) {
  const std::string what = "--model " + o.model + " is a Wan2.1 pipeline, which ";
  VINF_INPUT_CHECK(
      o.job.tensor == 1 && o.job.pipeline == 1, what,
      "runs a video on one rank, two with --parallel.cfg 2, or its frames over ranks with --vi.mode exact ",
      "or invariant in this version: drop --parallel.tensor and --parallel.pipeline");
  VINF_INPUT_CHECK(o.vi.mode != infinity::Mode::compat, what, "has no --vi.mode compat (it reproduces the released ",
                   "Video-Infinity's UNet); --vi.mode exact spreads its frames over ranks, --vi.mode invariant runs ",
                   "Video-Infinity's windows over them");
  VINF_INPUT_CHECK(o.long_clips(), what, "makes one clip in this version: drop --long.mode");
  VINF_INPUT_CHECK(o.embeddings.empty(), what, "encodes its prompts with its own UMT5: drop --prompt.embeddings");
  VINF_INPUT_CHECK(o.prompts.size() == 1, what, "takes one prompt (--prompt.text once), got ", o.prompts.size());
  VINF_INPUT_CHECK(o.lora.empty() && o.dump_modules.empty() && !o.debug, what,
                   "has no --model.lora, --dump.modules or --debug in this version (they name the UNet's modules)");
  VINF_INPUT_CHECK(
      !o.evaluate || (o.video && io::is_directory(o.model + "/vae")), what,
      "evaluates its video.mp4 with --evaluate (its latents are not pictures): keep --output.video and the ",
      "pipeline's vae/");
  VINF_INPUT_CHECK(o.vae.empty(), what, "decodes with its own vae/: drop --model.vae");
  for (const auto& [dir, option, sub] : {std::tuple{&o.text_encoder, "--model.text-encoder", "text_encoder"},
                                         std::tuple{&o.tokenizer, "--model.tokenizer", "tokenizer"}})
    VINF_INPUT_CHECK(dir->empty() || *dir == o.model + "/" + sub, what, "reads its own ", sub, "/: drop ", option);
  VINF_INPUT_CHECK(o.frames >= 1 && (o.frames - 1) % 4 == 0, "--video.frames ", o.frames,
                   ": a Wan video has 1 + 4k frames (the VAE keeps the first frame and packs 4 per latent frame); "
                   "use ",
                   (o.frames - 1) / 4 * 4 + 1, " or ", ((o.frames - 1) / 4 + 1) * 4 + 1);
  for (const auto& [name, v] : {std::pair{"video.height", o.height}, std::pair{"video.width", o.width}})
    VINF_INPUT_CHECK(v % 16 == 0, "--", name, " ", v, " must be a multiple of 16 for a Wan model (the VAE's 8 times ",
                     "the transformer's patch of 2)");
  for (const char* part : {"transformer", "text_encoder", "tokenizer", "scheduler"})
    VINF_INPUT_CHECK(io::is_directory(o.model + "/" + part), what, "needs its ", part, "/ directory, which is missing");
  // The VAE decodes after the last step: its class, config and weights' shapes are checked now, so
  // that a wrong vae/ (a UNet pipeline's AutoencoderKL) is refused before the denoising, not after.
  const std::string vae_dir = o.model + "/vae";
  if ((o.video || o.png) && io::is_directory(vae_dir)) {
    const model::WanVaeConfig vc = model::load_wan_vae_config(vae_dir + "/config.json");
    model::check_weights(model::WeightFiles(model::find_model_files(vae_dir)), model::wan_vae_decoder_parameters(vc),
                         true, nullptr);
    const model::WanTransformerConfig tc =
        model::load_wan_transformer_config(model::find_wan_transformer_config(o.model), nullptr);
    VINF_INPUT_CHECK(vc.z_dim == tc.out_channels, vae_dir, ": the VAE's z_dim ", vc.z_dim, " is not the transformer's ",
                     tc.out_channels, " latent channels: the two parts are not of one pipeline");
  }
}

namespace {

// The ranks per guidance branch a Wan video runs on: one, or its latent frames over `clips` in
// exact mode or with Video-Infinity's windows (at most one rank per latent frame; the windows'
// halo within every rank's frames).
void check_wan_clips(const GenerateSpec& o, int clips, int world) {
  const std::string what = "--model " + o.model + " is a Wan2.1 pipeline, which ";
  const bool windows = o.vi.mode == infinity::Mode::invariant;
  VINF_INPUT_CHECK(clips == 1 || o.vi.mode == infinity::Mode::exact || windows, what, "runs on ", o.job.cfg,
                   o.job.cfg == 1 ? " rank" : " ranks (--parallel.cfg 2: one per guidance branch)", ", or with ",
                   "--vi.mode exact or invariant its latent frames over more, but ", world,
                   " were started without (more ranks also take jobs from a list: --jobs FILE with --parallel.data)");
  const std::int64_t latent_frames = (o.frames - 1) / 4 + 1;
  VINF_INPUT_CHECK(clips <= latent_frames, what, "has ", latent_frames, " latent frames at --video.frames ", o.frames,
                   ", fewer than the ", clips, " ranks they would be split over; use at most ", latent_frames,
                   " ranks per guidance branch");
  if (windows) infinity::check_wan_windows(o.vi, latent_frames, clips);
}

}  // namespace

void check_wan_job(const GenerateSpec& o, int world) {
  check_wan_plan(o);
  VINF_INPUT_CHECK(world % o.job.cfg == 0, "--model ", o.model, " is a Wan2.1 pipeline, which takes 2 x N ranks ",
                   "with --parallel.cfg 2 (one guidance branch each), got ", world);
  check_wan_clips(o, world / o.job.cfg, world);
}

namespace {

// What the phases of one Wan video share: the spec, the job, the shape and this rank's part of it,
// the schedule, the run's identity in its files, and the times run.json reports. The phases:
// plan (every check before anything is written), outputs (the directory, the checkpoint to resume
// from), text, denoise, outputs written.
struct WanRun {
  const GenerateSpec& o;
  job::Job& job;
  Runtime& rt;
  mpi::Session& world;
  Clock::time_point start = Clock::now();
  bool root = false;
  // The shape: latent frames, and the latent's height and width at the VAE's 8x; --vi.mode exact
  // or invariant: the latent frames split over the clip ranks of each guidance branch.
  std::int64_t lf = 0, lh = 0, lw = 0;
  int clips = 1;
  bool windows = false, writer = false, guided = false;
  infinity::FrameRange part;
  Shape frame_major, mine_major;
  sampling::FlowScheduleConfig sched_config;
  std::unique_ptr<sampling::FlowScheduler> scheduler;
  std::optional<model::T5Tokenizer> tokenizer;
  std::string transformer_config;
  model::WanTransformerConfig tc;
  std::vector<std::string> warnings;
  json config;
  io::RunStamp stamp;
  std::string out_dir, ckpt_dir;
  // The text: the prompt's (and the negative prompt's) embeddings, [texts, max_length, width].
  std::vector<float> embeds;
  std::int64_t width = 0;
  // The conditioning (--image, --last-image; --video): the pictures as read, then image-to-video's
  // CLIP states and condition channels, or video-to-video's start latents [z, lf, lh, lw] and the
  // step the cut schedule starts at.
  std::vector<io::RgbFrames> images;
  io::RgbFrames input_video;
  WanImageCondition image_condition;
  std::vector<float> video_start;
  int first_step = 0;
  // SkyReels-V2's diffusion forcing: its windows and schedule in latent frames, and the video
  // frames where each window's new frames begin (the seams vinf evaluate measures).
  DfSettings df;
  std::vector<std::int64_t> seams, latent_seams;
  int df_rows = 0;  // every window's rows: the run's steps
  // The device arena's peak before the denoising and during it (what stays flat in a diffusion-
  // forcing run however long the video).
  double peak_before_denoise = 0, denoise_peak = 0;
  std::unique_ptr<WanVideoStream> stream;  // the first rank's latents.h5 and video, as windows end
  // What run.json reports.
  double text_seconds = 0, condition_seconds = 0, load_seconds = 0, denoise_seconds = 0, checkpoint_seconds = 0,
         write_seconds = 0;
  std::vector<double> step_seconds;
  int start_step = 0;
  std::string resumed_from;

  Reporter report;

  WanRun(const GenerateSpec& spec, job::Job& j)
      : o(spec),
        job(j),
        rt(j.runtime()),
        world(j.session()),
        root(j.root()),
        report("vinf generate:", root, spec.quiet) {}
};

// -- plan: the shape, the schedule, the model's config and the given latents, before any output -

// The conditioning the model and the options ask for, its files read (every rank reads them: a bad
// file is refused everywhere alike): an image-to-video model's image(s), a video-to-video run's
// frames and the step its cut schedule starts at.
void plan_wan_input(WanRun& r) {
  const GenerateSpec& o = r.o;
  const model::WanTransformerConfig& tc = r.tc;
  const std::string what = "--model " + o.model;
  if (tc.image_conditioned()) {
    VINF_INPUT_CHECK(!o.image.empty(), what, " is an image-to-video pipeline (its transformer has image_dim ",
                     tc.image_dim, "): give the first frame with --image FILE");
    VINF_INPUT_CHECK(o.input_video.empty(), what, " is an image-to-video pipeline; --video is video-to-video, for a ",
                     "text-to-video pipeline (to continue a video, vinf extend --video FILE takes its last frame)");
    VINF_INPUT_CHECK(tc.pos_embed_seq_len == 0 || !o.last_image.empty(), what,
                     " is a first-and-last-frame pipeline (its image embedder has a position table of ",
                     tc.pos_embed_seq_len, " tokens, two images' worth): give --last-image FILE beside --image");
    VINF_INPUT_CHECK(o.last_image.empty() || tc.pos_embed_seq_len > 0, "--last-image needs a first-and-last-frame ",
                     "pipeline (Wan2.1-FLF2V: pos_embed_seq_len in its transformer config); ", o.model,
                     " takes the first frame only");
    for (const char* part : {"image_encoder", "image_processor", "vae"})
      VINF_INPUT_CHECK(io::is_directory(o.model + "/" + part), what, " is an image-to-video pipeline but has no ", part,
                       "/ directory");
    VINF_INPUT_CHECK(tc.condition_channels() == 20, what, ": the transformer takes ", tc.in_channels,
                     " input channels; an image-to-video model takes its ", tc.out_channels,
                     " latent channels, 4 mask channels and 16 image-latent channels (36)");
    r.images.push_back(io::read_image(o.image, "--image", o.ffmpeg));
    if (!o.last_image.empty()) r.images.push_back(io::read_image(o.last_image, "--last-image", o.ffmpeg));
    return;
  }
  VINF_INPUT_CHECK(o.image.empty() && o.last_image.empty(), "--image and --last-image need an image-to-video ",
                   "pipeline (Wan2.1-I2V or -FLF2V: image_encoder/ and a transformer with image_dim); ", o.model,
                   " is text-to-video (--video FILE runs video-to-video on it)");
  if (o.input_video.empty()) return;
  VINF_INPUT_CHECK(io::is_directory(o.model + "/vae"), what, " has no vae/ to encode --video with");
  r.input_video = io::read_frames(o.input_video, "--video", o.frames, o.ffmpeg);
  const auto have = static_cast<std::int64_t>(r.input_video.frames.size());
  VINF_INPUT_CHECK(have >= o.frames, "--video ", o.input_video, " has ", have, " frames, fewer than --video.frames ",
                   o.frames, have >= 1 ? "; use --video.frames " + std::to_string((have - 1) / 4 * 4 + 1) : "");
  r.first_step = wan_strength_first_step(o.steps, o.strength);
  r.scheduler->start_at(r.first_step);
}

// A diffusion-forcing transformer's windows, in latent frames, from the [df] options (in video
// frames, as the reference takes them); refused where they do not fit.
void plan_wan_df(WanRun& r) {
  const GenerateSpec& o = r.o;
  const GenerateSpec::DiffusionForcing& g = o.df;
  VINF_INPUT_CHECK(r.tc.skyreels || !g.given, "the [df] options are for a SkyReels-V2 diffusion-forcing pipeline; ",
                   o.model, " is a Wan2.1 pipeline");
  if (!r.tc.skyreels) return;
  const std::string what = "--model " + o.model + " is a SkyReels-V2 diffusion-forcing pipeline, which ";
  VINF_INPUT_CHECK(!r.windows, what, "runs its windows in exact mode over the ranks (--vi.mode exact), not with ",
                   "Video-Infinity's windows");
  VINF_INPUT_CHECK(!o.conditioned(), what, "generates from text: drop --image and --video");
  const auto latent = [](std::int64_t frames) { return (frames - 1) / 4 + 1; };
  DfSettings& d = r.df;
  d.base = g.base_frames > 0 ? latent(g.base_frames) : r.lf;
  d.overlap = g.overlap_history > 0 ? latent(g.overlap_history) : 0;
  d.block = g.causal_block_size > 0 ? g.causal_block_size : r.tc.num_frame_per_block;
  d.ar_step = g.ar_step;
  d.addnoise = g.addnoise_condition;
  d.fps = static_cast<int>(std::lround(o.fps));
  VINF_INPUT_CHECK(g.parallel == "exact" || g.parallel == "bands", "--df.parallel must be exact or bands, got '",
                   g.parallel, "'");
  d.bands = g.parallel == "bands" && r.clips > 1;
  VINF_INPUT_CHECK(!d.bands || d.block > 1, "--df.parallel bands shares a window's causal blocks over the ranks; ",
                   "with blocks of one frame every frame sees every other: give --df.causal-block-size 2 or more, ",
                   "or --df.parallel exact");
  if (r.lf <= d.base) {
    d.base = r.lf;  // one window: the whole video
    d.overlap = 0;
  }
  VINF_INPUT_CHECK(d.base == r.lf || g.overlap_history > 0, "--video.frames ", o.frames,
                   " is more than --df.base-frames ", g.base_frames,
                   ": the video is made in windows, which overlap by --df.overlap-history frames (give it, ",
                   "e.g. 17)");
  VINF_INPUT_CHECK(d.base == r.lf || d.overlap < d.base, "--df.overlap-history ", g.overlap_history,
                   " must be less than --df.base-frames ", g.base_frames, " (", d.overlap, " and ", d.base,
                   " latent frames)");
  for (const sampling::DfWindow& w : sampling::df_windows(r.lf, d.base, d.overlap, d.block)) {
    if (w.first + w.keep_from > 0) {
      r.seams.push_back(4 * (w.first + w.keep_from) - 3);
      r.latent_seams.push_back(w.first + w.keep_from);
    }
    VINF_INPUT_CHECK(w.frames % d.block == 0, "a window of ", w.frames, " latent frames does not divide into causal ",
                     "blocks of ", d.block, " frames: choose --video.frames, --df.base-frames and ",
                     "--df.overlap-history whose windows are multiples of the block (or --df.causal-block-size 1)");
    VINF_INPUT_CHECK(!d.bands || w.frames / d.block >= r.clips, "a window of ", w.frames / d.block,
                     " causal blocks cannot be shared over ", r.clips, " ranks in bands (--df.parallel bands gives ",
                     "each rank whole blocks): use at most ", w.frames / d.block,
                     " frame ranks, or --df.parallel exact");
    VINF_INPUT_CHECK(w.frames >= r.clips, "a window of ", w.frames, " latent frames cannot be split over ", r.clips,
                     " ranks (--vi.mode exact gives each rank a share of every window's frames): use at most ",
                     w.frames, " frame ranks, or longer windows (--df.base-frames)");
  }
}

void plan_wan(WanRun& r) {
  const GenerateSpec& o = r.o;
  r.lf = (o.frames - 1) / 4 + 1;
  r.lh = o.height / 8;
  r.lw = o.width / 8;
  r.clips = r.job.grid().clip_size();
  check_wan_clips(o, r.clips, r.job.size());  // a job list's jobs come here without check_wan_job
  VINF_INPUT_CHECK(
      r.clips == 1 || r.job.clip_comm() != nullptr, "--model ", o.model, ": --vi.mode ", infinity::mode_name(o.vi.mode),
      " spreads a Wan video's frames only when the whole run has it: ", "give it on the command line, not per job");
  r.windows = o.vi.mode == infinity::Mode::invariant;
  r.part = infinity::clip_frames(r.lf, r.clips, r.job.grid().clip_index());
  r.writer = r.job.grid().cfg_index() == 0;  // branch 0's ranks write the frames they hold
  r.sched_config = sampling::read_flow_schedule_config(o.model + "/scheduler");
  r.scheduler = std::make_unique<sampling::FlowScheduler>(o.flow_solver, r.sched_config, o.steps);
  r.tokenizer.emplace(model::T5Tokenizer::load(o.model + "/tokenizer"));
  r.transformer_config = model::find_wan_transformer_config(o.model);
  r.tc = model::load_wan_transformer_config(r.transformer_config, &r.warnings);
  r.frame_major = {r.lf, r.tc.out_channels, r.lh, r.lw};
  r.mine_major = {r.part.count, r.tc.out_channels, r.lh, r.lw};
  plan_wan_input(r);
  plan_wan_df(r);
  const Shape latent{1, r.tc.out_channels, r.lf, r.lh, r.lw};
  const char* layout = "(1, channels, (frames - 1) / 4 + 1, height / 8, width / 8)";
  if (o.latents_init.empty() || r.tc.skyreels) return;  // diffusion forcing reads its draws per window
  if (o.input_video.empty()) {
    check_latents_init(o.latents_init, latent, layout);
  } else {
    for (const char* key : {"posterior_eps", "noise"}) check_latents_init(o.latents_init, latent, layout, key);
  }
}

// What identifies the run in its files: run.json's config, and the stamp a resumed run must match.
void identify_wan(WanRun& r) {
  const GenerateSpec& o = r.o;
  r.config = {{"family", "wan"},
              {"model", o.model},
              {"latents-init", o.latents_init},
              {"video", {{"frames", o.frames}, {"latent-frames", r.lf}, {"height", o.height}, {"width", o.width}}},
              {"sampler",
               {{"scheduler", sampling::flow_solver_name(o.flow_solver)},
                {"steps", o.steps},
                {"guidance", o.guidance},
                {"seed", o.seed},
                {"flow-shift", r.sched_config.flow_shift}}},
              {"prompt", {{"text", o.prompts}, {"negative", o.negative}, {"max-length", o.max_text_length}}},
              {"device", r.rt.device().name()},
              {"dtype", dtype_name(r.job.dtype())}};
  // What the video starts from is part of its numbers: the files' paths and their pictures' contents.
  if (!r.images.empty()) {
    json input = {{"image", o.image}, {"image-fingerprint", frames_fingerprint(r.images[0])}};
    if (r.images.size() == 2) {
      input["last-image"] = o.last_image;
      input["last-image-fingerprint"] = frames_fingerprint(r.images[1]);
    }
    r.config["input"] = input;
  } else if (!o.input_video.empty()) {
    r.config["input"] = {{"video", o.input_video},
                         {"video-fingerprint", frames_fingerprint(r.input_video)},
                         {"strength", o.strength},
                         {"first-step", r.first_step}};
  }
  // Video-Infinity's windows change the numbers (not the ranks they run on).
  if (r.windows) r.config["vi"] = vi_json(o.vi);
  if (r.tc.skyreels)
    r.config["df"] = {{"base-latent-frames", r.df.base},     {"overlap-latent-frames", r.df.overlap},
                      {"causal-block-size", r.df.block},     {"ar-step", r.df.ar_step},
                      {"addnoise-condition", r.df.addnoise}, {"fps", r.df.fps}};
  io::RunStamp& stamp = r.stamp;
  // Not in the numerics: the layout (exact mode, the windows and CFG parallelism compute the same
  // numbers on any ranks, to float rounding), so a run resumes on other ranks.
  stamp.numerics_json = r.config.dump();
  const char* mode = r.windows ? "invariant" : r.clips > 1 ? "exact" : "off";
  r.config["parallel"] = {{"cfg", o.job.cfg}, {"world", r.world.size()},    {"frame-ranks", r.clips}, {"vi-mode", mode},
                          {"clips", 1},       {"frames-per-clip", o.frames}};
  if (r.tc.skyreels) r.config["parallel"]["df"] = r.df.bands ? "bands" : "exact";
  r.config["vae"] = {{"tile", o.vae_tile}};  // not in the numerics: a resume may decode otherwise
  stamp.config_json = r.config.dump();
  stamp.model_fingerprint =
      model::model_fingerprint(model::find_model_files(fs::path(r.transformer_config).parent_path().string()));
  stamp.noise_mode = "invariant";
  stamp.scheduler = sampling::flow_solver_name(o.flow_solver);
  stamp.seed = o.seed;
  stamp.world_size = r.world.size();
  stamp.cfg_size = o.job.cfg;
  stamp.clip_size = r.clips;
}

// The output directory and its checkpoints folder; false when a finished run there leaves nothing
// to do.
bool prepare_wan_outputs(WanRun& r) {
  const GenerateSpec& o = r.o;
  r.out_dir = choose_out_dir(o, r.world);
  r.ckpt_dir = r.out_dir + "/checkpoints";
  // A finished run (its run.json is there) that is asked to resume has nothing left to do.
  if (!o.resume.empty() &&
      decided_by_root(r.world, [&] { return io::path_exists(r.out_dir + "/run.json") ? "done" : ""; }) == "done") {
    check_finished_run(r.out_dir, r.stamp, r.world);  // another prompt or seed is refused, not "done"
    r.report.say(r.out_dir + " holds a finished run (run.json); nothing to resume");
    return false;
  }
  std::string mkdir_error;
  if (r.root) {
    std::error_code ec;
    fs::create_directories(r.ckpt_dir, ec);
    if (ec) mkdir_error = ec.message();
    fs::remove(r.out_dir + "/run.json", ec);  // from here on the directory holds an unfinished run
    if (o.resume.empty()) remove_run_outputs(r.out_dir);  // --overwrite: nothing of the old run stays
  }
  r.world.broadcast(mkdir_error);
  VINF_INPUT_CHECK(mkdir_error.empty(), "cannot create the output directory ", r.ckpt_dir, ": ", mkdir_error);
  io::check_run_files(r.world.world(), r.ckpt_dir, r.stamp);
  for (const std::string& w : r.warnings) r.report.say("warning: " + w);
  if (r.tc.skyreels && o.df.parallel == "bands" && r.clips == 1)
    r.report.say(
        "note: --df.parallel bands shares a window's causal blocks over frame ranks (--vi.mode exact over "
        "several); this run has one, which holds every frame");
  if (o.vi_given && !r.windows)
    r.report.say(
        std::string("note: the [vi] settings but the mode are for Video-Infinity's windows (--vi.mode invariant) ") +
        "and do not change a Wan video in mode " + infinity::mode_name(o.vi.mode));
  if (o.vi_given && r.windows)
    r.report.say(
        "note: [vi] conv-halo, halo and sync-groupnorm are for the UNet family (a Wan transformer has no temporal "
        "convolutions or group norms, and its windows carry keys and values)");
  return true;
}

// -- text: the prompt and the negative one, cleaned as the pipeline cleans them, through UMT5;
// rows past each prompt's tokens zeroed as the pipeline pads them --------------------------------

void encode_wan_text(WanRun& r) {
  const GenerateSpec& o = r.o;
  const auto t_text = Clock::now();
  r.guided = o.guidance > 1.0;  // as the pipeline: guidance 1 or below runs the prompt alone
  std::vector<std::string> texts = {model::wan_prompt_clean(o.prompts[0])};
  if (r.guided) texts.push_back(model::wan_prompt_clean(o.negative));
  {
    const model::Umt5Encoder encoder = model::Umt5Encoder::load(o.model + "/text_encoder", r.rt, DType::f32);
    r.width = encoder.config().d_model;
    std::vector<model::T5TokenizedText> tokens;
    r.embeds = model::encode_prompts(r.rt, *r.tokenizer, encoder, texts, o.max_text_length, &tokens);
    std::vector<std::int64_t> lengths;
    for (const model::T5TokenizedText& t : tokens) {
      lengths.push_back(t.length);
      if (t.truncated())
        r.report.say("warning: the prompt \"" + texts[lengths.size() - 1].substr(0, 60) + "\" has " +
                     std::to_string(t.length) + " tokens; kept " + std::to_string(o.max_text_length));
    }
    for (std::int64_t& l : lengths) l = std::min<std::int64_t>(l, o.max_text_length);
    model::zero_past_length(r.embeds, static_cast<std::int64_t>(texts.size()), o.max_text_length, r.width, lengths);
  }
  VINF_INPUT_CHECK(r.width == r.tc.text_dim, "the text encoder of ", o.model, " gives ", r.width,
                   "-wide embeddings but its transformer takes text_dim = ", r.tc.text_dim);
  r.text_seconds = seconds_since(t_text);
}

// The conditioning through its encoders, on every rank alike (the whole video's; each rank takes
// its frames at load): image-to-video's CLIP states and condition channels, video-to-video's
// posterior sampled and noised to the cut schedule's first level (the draws given, or the seed's
// keyed by frame: the same on any ranks).
void encode_wan_input(WanRun& r) {
  const GenerateSpec& o = r.o;
  const auto t0 = Clock::now();
  if (!r.images.empty()) {
    r.image_condition = wan_image_condition(r.rt, o.model, r.images, o.frames, o.height, o.width);
    const WanImageCondition& c = r.image_condition;
    VINF_INPUT_CHECK(c.image_dim == r.tc.image_dim, o.model, "/image_encoder gives ", c.image_dim,
                     "-wide states but the transformer's image_dim is ", r.tc.image_dim);
    VINF_INPUT_CHECK(r.tc.pos_embed_seq_len == 0 || c.image_tokens == r.tc.pos_embed_seq_len, o.model, ": ",
                     r.images.size(), " image(s) give ", c.image_tokens,
                     " CLIP tokens but the image embedder's position table has ", r.tc.pos_embed_seq_len);
    VINF_INPUT_CHECK(c.latent_frames == r.lf && c.lh == r.lh && c.lw == r.lw, o.model,
                     "/vae: its latents do not have the transformer's shape (the VAE's ratio is not 8)");
  } else if (!o.input_video.empty()) {
    const model::WanVae vae = model::WanVae::load(o.model + "/vae", r.rt, DType::f32, model::WanVae::encoder);
    const WanPosterior posterior = wan_video_posterior(r.rt, vae, r.input_video, o.frames, o.height, o.width);
    const Shape latent{1, vae.config().z_dim, posterior.latent_frames, posterior.lh, posterior.lw};
    VINF_INPUT_CHECK(latent[1] == r.tc.out_channels && latent[2] == r.lf && latent[3] == r.lh && latent[4] == r.lw,
                     o.model, "/vae: its latents ", latent.str(), " do not have the transformer's shape");
    std::vector<float> eps(static_cast<std::size_t>(latent.numel())), noise(eps.size());
    if (!o.latents_init.empty()) {
      const io::SafetensorsFile f(o.latents_init);
      for (auto [key, out] : {std::pair{"posterior_eps", &eps}, std::pair{"noise", &noise}}) {
        const Tensor t = f.tensor(key);
        std::copy(t.ptr<float>(), t.ptr<float>() + t.numel(), out->begin());
      }
    } else {
      OwnedTensor draw = r.rt.arena().empty(DType::f32, latent);
      const sampling::NoiseSource source(sampling::NoiseMode::invariant, static_cast<std::uint64_t>(o.seed), 0, 0);
      source.initial(r.rt.ctx(), r.rt.arena(), draw);
      ops::copy(r.rt.ctx(), draw, Tensor::wrap(noise.data(), DType::f32, Device::cpu(), latent));
      source.step(r.rt.ctx(), r.rt.arena(), 0, draw);
      ops::copy(r.rt.ctx(), draw, Tensor::wrap(eps.data(), DType::f32, Device::cpu(), latent));
      r.rt.synchronize();
    }
    const float sigma = r.scheduler->sigmas()[static_cast<std::size_t>(r.first_step)];
    r.video_start = wan_video_start(vae.config(), posterior, eps, noise, sigma);
    r.input_video.frames.clear();  // the pictures are no longer needed
  }
  r.condition_seconds = seconds_since(t0);
}

// The text as a checkpoint caches it.
io::TextCache wan_text_cache(const WanRun& r) {
  const auto per = static_cast<std::ptrdiff_t>(r.o.max_text_length * r.width);
  io::TextCache text_cache;
  text_cache.prompts = 1;
  text_cache.tokens = r.o.max_text_length;
  text_cache.width = r.width;
  text_cache.prompt_embeds.assign(r.embeds.begin(), r.embeds.begin() + per);
  if (r.guided) text_cache.negative_prompt_embeds.assign(r.embeds.begin() + per, r.embeds.end());
  return text_cache;
}

// -- denoise -------------------------------------------------------------------------------

// This rank's latents or a solver memory, frame-major on the host.
std::vector<float> frames_on_host(const WanRun& r, const Tensor& t) {
  std::vector<float> h(static_cast<std::size_t>(t.numel()));
  ops::copy(r.rt.ctx(), t.select(0, 0).permute({1, 0, 2, 3}),
            Tensor::wrap(h.data(), DType::f32, Device::cpu(), r.mine_major));
  r.rt.synchronize();
  return h;
}

// The initial latents (given, or the seed's standard normal draw keyed by frame, as every vinf run
// draws them: this rank's frames of them), or --resume's checkpoint with UniPC's memories.
void start_wan_latents(WanRun& r, sampling::FlowSampler& sampler) {
  const GenerateSpec& o = r.o;
  ExecContext& ctx = r.rt.ctx();
  if (!r.video_start.empty()) {
    const Shape whole{1, r.tc.out_channels, r.lf, r.lh, r.lw};
    ops::copy(ctx,
              Tensor::wrap(r.video_start.data(), DType::f32, Device::cpu(), whole).slice(2, r.part.first, r.part.count),
              sampler.latents());
  } else if (o.latents_init.empty()) {
    sampling::NoiseSource(sampling::NoiseMode::invariant, static_cast<std::uint64_t>(o.seed), 0, r.part.first)
        .initial(ctx, r.rt.arena(), sampler.latents());
  } else {
    ops::copy(ctx, io::SafetensorsFile(o.latents_init).tensor("latents_init").slice(2, r.part.first, r.part.count),
              sampler.latents());
  }
  std::vector<std::string> memories;  // the solver's beside previous_x0
  for (const auto& [name, t] : sampler.memories())
    if (name != "previous_x0") memories.push_back(name);
  ResumePoint resume = choose_checkpoint(o, r.out_dir, r.world, r.stamp, r.scheduler->timesteps(), r.frame_major,
                                         r.part.first, r.part.count, memories);
  if (!resume.info) return;
  auto put = [&](std::vector<float>& host) {
    return Tensor::wrap(host.data(), DType::f32, Device::cpu(), r.mine_major).permute({1, 0, 2, 3}).unsqueeze(0);
  };
  sampler.restore(ctx, static_cast<int>(resume.info->state.step), put(resume.latents), put(resume.memories[0]),
                  put(resume.previous_x0), put(resume.memories[1]));
  r.rt.synchronize();
  r.start_step = static_cast<int>(resume.info->state.step);
  r.resumed_from = resume.info->path;
  r.report.say("resuming from " + resume.info->path + " after step " + std::to_string(resume.info->state.step) +
               " of " + std::to_string(o.steps));
}

// Image-to-video's inputs on the device: this rank's frames of the condition channels [1, 20,
// frames, h, w] and the image tokens [1, tokens, image_dim] (every rank's whole).
void upload_wan_input(WanRun& r, OwnedTensor& condition, OwnedTensor& image) {
  if (r.images.empty()) return;
  ExecContext& ctx = r.rt.ctx();
  const WanImageCondition& c = r.image_condition;
  const DType dt = r.job.dtype();
  condition = r.rt.arena().empty(dt, {1, c.channels, r.part.count, r.lh, r.lw});
  ops::copy(ctx,
            Tensor::wrap(const_cast<float*>(c.condition.data()), DType::f32, Device::cpu(),
                         {1, c.channels, c.latent_frames, c.lh, c.lw})
                .slice(2, r.part.first, r.part.count),
            condition);
  image = r.rt.arena().empty(dt, {1, c.image_tokens, c.image_dim});
  ops::copy(ctx, Tensor::wrap(const_cast<float*>(c.image_states.data()), DType::f32, Device::cpu(), image.shape),
            image);
}

void log_wan_plan(const WanRun& r, const model::WanTransformer& wan) {
  const GenerateSpec& o = r.o;
  r.report.say("Wan2.1 " + o.model + ": " + std::to_string(wan.weights().count()) + " transformer parameters as " +
               model::precision_name(r.job.dtype(), r.rt.device()) + " on " + r.rt.device().name() + "; " +
               std::to_string(o.frames) + " frames (" + std::to_string(r.lf) + " latent) at " +
               std::to_string(o.height) + "x" + std::to_string(o.width) + ", " + std::to_string(o.steps) + " " +
               sampling::flow_solver_name(o.flow_solver) + " steps, guidance " + format_number(o.guidance, 5) +
               (o.latents_init.empty() ? ", seed " + std::to_string(o.seed) : ", draws from " + o.latents_init) +
               (r.images.size() == 1 ? "; image-to-video from " + o.image : "") +
               (r.images.size() == 2 ? "; first-and-last-frame from " + o.image + " and " + o.last_image : "") +
               (!o.input_video.empty()
                    ? "; video-to-video from " + o.input_video + " at --strength " + format_number(o.strength, 3) +
                          ": steps " + std::to_string(r.first_step + 1) + "-" + std::to_string(o.steps) + " run"
                    : "") +
               (r.windows ? "; --vi.mode invariant, windows of +-" + std::to_string(o.vi.local_frames) +
                                " latent frames and " + std::to_string(o.vi.global_frames) + " global frame(s)"
                          : "") +
               (r.clips > 1 ? std::string(r.windows ? "," : "; --vi.mode exact,") + " the latent frames over " +
                                  std::to_string(r.clips) + " ranks"
                            : ""));
}

// The self-attention that sees the other ranks' frames: Video-Infinity's windows, exact mode's
// all-to-alls, or none (the plain model's).
std::unique_ptr<model::WanSelfAttention> wan_attention(const WanRun& r) {
  const std::int64_t per_frame = (r.lh / r.tc.patch_size[1]) * (r.lw / r.tc.patch_size[2]);
  if (r.windows)
    return std::make_unique<infinity::WanWindowAttention>(r.o.vi, r.clips > 1 ? r.job.clip_comm() : nullptr,
                                                          infinity::clip_frame_counts(r.lf, r.clips), per_frame);
  if (r.clips == 1) return nullptr;
  std::vector<std::int64_t> tokens = infinity::clip_frame_counts(r.lf, r.clips);
  for (std::int64_t& n : tokens) n *= per_frame;
  return std::make_unique<infinity::WanExactAttention>(*r.job.clip_comm(), tokens);
}

// After step `done`: the latents and the solver's memories, by their names, into a checkpoint
// (refused when the latents are no longer finite: the last good one stays).
std::string write_wan_checkpoint(WanRun& r, const sampling::Solver& solver, const io::TextCache& text, int done) {
  const auto t_ckpt = Clock::now();
  const std::vector<float> x = frames_on_host(r, solver.latents());
  std::vector<std::vector<float>> memories;  // "previous_x0" first
  std::vector<io::StateFrames> extra;
  for (const auto& [name, t] : solver.memories()) memories.push_back(frames_on_host(r, t));
  for (std::size_t k = 1; k < memories.size(); ++k) extra.push_back({solver.memories()[k].first, memories[k].data()});
  for (float v : x)
    VINF_CHECK(std::isfinite(v), "the Wan latents are no longer finite after step ", done,
               ": no checkpoint written (the last good one stays)");
  io::SolverState state{done, r.scheduler->timesteps(),
                        std::vector<double>(r.scheduler->sigmas().begin(), r.scheduler->sigmas().end())};
  const std::string path = r.ckpt_dir + "/" + io::checkpoint_name(done);
  io::write_checkpoint(r.world.world(), path, r.stamp,
                       io::FramePart{r.frame_major, r.part.first, r.writer ? r.part.count : 0}, x.data(),
                       memories[0].data(), state, text, extra);
  if (r.root) io::prune_checkpoints(r.ckpt_dir, r.o.checkpoint_keep);
  r.checkpoint_seconds += seconds_since(t_ckpt);
  return path;
}

// The guided loop through the denoising loop; the stop signal that ended it, or 0.
int denoise_wan(WanRun& r, const model::WanTransformer& wan, const Tensor& prompt, const Tensor& negative,
                const WanInputs& input, sampling::FlowSampler& sampler) {
  const GenerateSpec& o = r.o;
  const auto t_denoise = Clock::now();
  const std::unique_ptr<model::WanSelfAttention> attention = wan_attention(r);
  const WanDenoise d{wan,
                     *r.scheduler,
                     prompt,
                     negative,
                     static_cast<float>(r.guided ? o.guidance : 1.0),
                     nullptr,
                     o.job.cfg == 2 ? r.job.cfg_comm() : nullptr,
                     r.job.grid().cfg_index(),
                     {r.part.first, r.lf},
                     attention.get(),
                     input.condition,
                     input.image};
  const io::TextCache text_cache = wan_text_cache(r);
  WanStepper stepper(r.rt, d, sampler);
  const StepControl control(r.world, r.world.rank(), {o.steps, o.checkpoint_every});
  DenoiseHooks hooks;
  hooks.step = [&](int i) {
    stepper.step(i);
    r.rt.synchronize();
  };
  hooks.progress = [&](int i, double seconds) {
    if (!o.quiet && (o.verbose || i + 1 == o.steps || (i + 1) % std::max(1, o.steps / 10) == 0))
      r.report.say("step " + std::to_string(i + 1) + "/" + std::to_string(o.steps) +
                   " (t=" + std::to_string(r.scheduler->timesteps()[static_cast<std::size_t>(i)]) +
                   "): " + format_number(seconds) + " s");
  };
  hooks.spoil = [&](int) { ops::fill(r.rt.ctx(), sampler.latents(), std::nan("")); };
  hooks.checkpoint = [&](int done) { return write_wan_checkpoint(r, sampler, text_cache, done); };
  // Every rank stops alike, on a signal during the last step too.
  const DenoiseEnd ended = denoise_loop(control, {sampler.steps_done(), o.steps, true}, hooks, r.report);
  r.step_seconds = ended.step_seconds;
  r.rt.synchronize();
  r.denoise_seconds = seconds_since(t_denoise);
  return ended.stop_signal;
}

// Diffusion forcing's state after `done` rows (the window's latents and each frame's solver
// memories, [base, C, h, w] frame-major, zeros past the window's frames) into a checkpoint; the
// ranks hold the same state, the first writes it. The frames finished before are in
// latents.h5.partial already.
std::string write_wan_df_checkpoint(WanRun& r, DfStepper& stepper, const io::TextCache& text, int done) {
  const auto t_ckpt = Clock::now();
  const std::vector<std::pair<std::string, Tensor>> state = stepper.state();
  const Tensor& lat = state.front().second;
  const Shape full{lat.size(2), lat.size(1), lat.size(3), lat.size(4)};
  std::vector<std::vector<float>> host;
  for (const auto& [name, t] : state) {
    host.emplace_back(static_cast<std::size_t>(t.numel()));
    ops::copy(r.rt.ctx(), t.select(0, 0).permute({1, 0, 2, 3}),
              Tensor::wrap(host.back().data(), DType::f32, Device::cpu(), full));
  }
  r.rt.synchronize();
  for (float v : host.front())
    VINF_CHECK(std::isfinite(v), "the diffusion-forcing latents are no longer finite after row ", done,
               ": no checkpoint written (the last good one stays)");
  std::vector<io::StateFrames> extra;
  for (std::size_t k = 2; k < state.size(); ++k) extra.push_back({state[k].first, host[k].data()});
  io::SolverState solver{done, r.scheduler->timesteps(),
                         std::vector<double>(r.scheduler->sigmas().begin(), r.scheduler->sigmas().end())};
  const std::string path = r.ckpt_dir + "/" + io::checkpoint_name(done);
  io::write_checkpoint(r.world.world(), path, r.stamp, io::FramePart{full, 0, r.root ? full[0] : 0}, host[0].data(),
                       host[1].data(), solver, text, extra);
  if (r.root) io::prune_checkpoints(r.ckpt_dir, r.o.checkpoint_keep);
  r.checkpoint_seconds += seconds_since(t_ckpt);
  return path;
}

// --resume: the checkpoint's row and window state into the stepper; the rows done (0 without one).
int resume_wan_df(WanRun& r, DfStepper& stepper) {
  const Shape lat = stepper.state_shape();
  const Shape full{lat[2], lat[1], lat[3], lat[4]};
  const std::vector<std::string> names = DfStepper::state_names();
  const std::vector<std::string> memories(names.begin() + 2, names.end());  // beside previous_x0
  ResumePoint resume =
      choose_checkpoint(r.o, r.out_dir, r.world, r.stamp, r.scheduler->timesteps(), full, 0, full[0], memories);
  if (!resume.info) return 0;
  const auto done = static_cast<int>(resume.info->state.step);
  VINF_INPUT_CHECK(done >= 1 && done <= stepper.rows(), "checkpoint ", resume.info->path, " is after row ", done,
                   " of a run of ", stepper.rows(), " rows");
  std::vector<std::vector<float>*> host{&resume.latents, &resume.previous_x0};
  for (std::vector<float>& m : resume.memories) host.push_back(&m);
  std::vector<OwnedTensor> device;
  std::vector<Tensor> views;
  for (std::vector<float>* h : host) {
    device.push_back(r.rt.arena().empty(DType::f32, lat));
    ops::copy(r.rt.ctx(), Tensor::wrap(h->data(), DType::f32, Device::cpu(), full).permute({1, 0, 2, 3}).unsqueeze(0),
              device.back());
    views.push_back(device.back().view());
  }
  stepper.restore(done, views);
  r.start_step = done;
  r.resumed_from = resume.info->path;
  const std::size_t k = stepper.window_of(done - 1);
  r.report.say("resuming from " + resume.info->path + " after row " + std::to_string(done) + " of " +
               std::to_string(stepper.rows()) + " (window " + std::to_string(k + 1) + "), " +
               std::to_string(stepper.frames_final(done)) + " latent frames final");
  return done;
}

// Diffusion forcing: the windows' rows (a DfStepper) as the denoising loop's steps, so that stop
// signals, the checkpoint cadence (in rows) and --resume apply; each window's new frames into
// latents.h5 and the video as the window ends (the first rank writes), so that no rank holds more
// than a window. A line per window, and per row with --verbose.
int denoise_wan_df(WanRun& r, const model::WanTransformer& wan, const Tensor& prompt, const Tensor& negative) {
  const GenerateSpec& o = r.o;
  const auto t_denoise = Clock::now();
  DfDenoise d{wan,
              *r.scheduler,
              prompt,
              negative,
              static_cast<float>(r.guided ? o.guidance : 1.0),
              o.job.cfg == 2 ? r.job.cfg_comm() : nullptr,
              r.job.grid().cfg_index(),
              r.df,
              {o.latents_init, static_cast<std::uint64_t>(o.seed)}};
  d.clip_group = r.clips > 1 ? r.job.clip_comm() : nullptr;
  DfStepper stepper(r.rt, d, Shape{1, r.tc.out_channels, r.lf, r.lh, r.lw});
  r.df_rows = stepper.rows();
  const int done = resume_wan_df(r, stepper);
  // The first rank writes; a stream it cannot open (a resumed run's latents.h5.partial missing or
  // another run's) stops every rank alike.
  std::string refused;
  if (r.root) {
    WanVideoStream::Settings s{r.out_dir, r.stamp, r.frame_major, "", {o.video, o.png, o.output_fps, o.ffmpeg},
                               o.vae_tile};
    if (io::is_directory(o.model + "/vae")) s.vae_dir = o.model + "/vae";
    try {
      r.stream = std::make_unique<WanVideoStream>(r.rt, s, stepper.frames_final(done));
    } catch (const InputError& e) {
      refused = e.what();
    }
  }
  r.world.broadcast(refused);
  if (!refused.empty()) throw InputError(refused);
  d.emit = [&](std::int64_t first, const Tensor& frames) {
    if (r.stream) r.stream->append(frames, first);
  };
  const std::size_t windows = sampling::df_windows(r.lf, r.df.base, r.df.overlap, r.df.block).size();
  auto t_window = Clock::now();
  d.progress = [&](std::size_t k, std::size_t row, std::size_t rows) {
    if (o.verbose)
      r.report.say("window " + std::to_string(k + 1) + "/" + std::to_string(windows) + ", row " +
                   std::to_string(row + 1) + "/" + std::to_string(rows));
    if (row + 1 < rows) return;
    r.report.say("window " + std::to_string(k + 1) + "/" + std::to_string(windows) + ": " + std::to_string(rows) +
                 " rows in " + format_number(seconds_since(t_window)) + " s");
    t_window = Clock::now();
  };
  const io::TextCache text_cache = wan_text_cache(r);
  const StepControl control(r.world, r.world.rank(), {stepper.rows(), o.checkpoint_every, true, "row"});
  DenoiseHooks hooks;
  hooks.step = [&](int i) { stepper.step(i); };
  hooks.spoil = [&](int) { stepper.spoil(); };
  hooks.checkpoint = [&](int rows_done) { return write_wan_df_checkpoint(r, stepper, text_cache, rows_done); };
  const DenoiseEnd ended = denoise_loop(control, {done, stepper.rows(), true}, hooks, r.report);
  r.step_seconds = ended.step_seconds;
  r.rt.synchronize();
  r.denoise_seconds = seconds_since(t_denoise);
  return ended.stop_signal;
}

// -- outputs -------------------------------------------------------------------------------

// latents.h5: the latent frames [F, C, H, W]; the guidance branches hold the same latents, and the
// first writes them.
void write_wan_latents(WanRun& r, const sampling::FlowSampler& sampler) {
  std::vector<float> host = frames_on_host(r, sampler.latents());
  for (float v : host)
    VINF_CHECK(std::isfinite(v), "the Wan latents are no longer finite after ", r.o.steps,
               " steps: nothing was written");
  const auto t_write = Clock::now();
  io::write_latents(r.world.world(), r.out_dir + "/latents.h5", r.stamp,
                    io::FramePart{r.frame_major, r.part.first, r.writer ? r.part.count : 0}, host.data());
  r.write_seconds = seconds_since(t_write);
}

// The video, when the pipeline has its VAE and a video or frames are asked for. With the frames
// over ranks, branch 0's frame ranks decode theirs in turn, the VAE's causal memory handed from
// each to the next, and the first writes the frames.
WanVideoFiles write_wan_video(WanRun& r, const sampling::FlowSampler& sampler) {
  const GenerateSpec& o = r.o;
  WanVideoFiles video;
  const bool has_vae = io::is_directory(o.model + "/vae");
  if (!has_vae) r.report.say("note: " + o.model + " has no vae/: latents.h5 only");
  if (has_vae && (o.video || o.png) && r.writer) {
    const model::WanVae vae = model::WanVae::load(o.model + "/vae", r.rt, DType::f32, model::WanVae::decoder);
    WanVideoParts parts;
    if (r.clips > 1) {
      parts.session = &r.world;
      for (int c = 0; c < r.clips; ++c) parts.ranks.push_back(r.job.grid().world_rank(0, c, 0));
      parts.index = r.job.grid().clip_index();
      parts.total = r.lf;
    }
    video = wan_write_video(r.rt, vae, sampler.latents(), r.out_dir, {o.video, o.png, o.output_fps, o.ffmpeg},
                            o.vae_tile, parts);
  }
  r.world.broadcast(video.error);
  if (!video.error.empty()) throw Error(video.error + " (latents.h5 is written and complete)");
  video.seconds = r.world.max(video.seconds);
  if (has_vae && (o.video || o.png) && r.clips > 1)
    r.report.say("decoded the video over " + std::to_string(r.clips) +
                 " ranks, each its own latent frames after the VAE's " + "causal memory from the rank before, in " +
                 format_number(video.seconds) + " s");
  return video;
}

// Diffusion forcing's outputs, written as the windows ended: latents.h5 (with the windows' seams)
// and the video files finished on the first rank, its error said on every rank.
WanVideoFiles finish_wan_df(WanRun& r) {
  WanVideoFiles video;
  const auto t0 = Clock::now();
  if (r.stream) {
    try {
      WanVideoStream::Finished f = r.stream->finish(r.latent_seams);
      video.files = std::move(f.files);
      video.error = std::move(f.error);
    } catch (const std::exception& e) {
      video.error = e.what();
    }
    r.write_seconds = r.stream->seconds();
    r.stream.reset();
  }
  r.world.broadcast(video.error);
  VINF_CHECK(video.error.empty(), video.error);
  video.seconds = r.world.max(seconds_since(t0));
  if (!io::is_directory(r.o.model + "/vae")) r.report.say("note: " + r.o.model + " has no vae/: latents.h5 only");
  return video;
}

// --evaluate: vinf evaluate on the video (one clip: no boundaries). Its failure is said after
// run.json, as the run itself is complete: the message and whether it was bad input.
struct WanEvaluation {
  std::string error, kind;
  double seconds = 0;
};

WanEvaluation evaluate_wan_video(const WanRun& r, WanVideoFiles& video) {
  WanEvaluation e;
  if (!r.o.evaluate) return e;
  const auto t_eval = Clock::now();
  if (r.root) {
    r.report.say("evaluating video.mp4 into evaluate.json and evaluate.png");
    try {
      evaluate::evaluate_file(r.out_dir + "/video.mp4", r.out_dir, r.seams, r.o.evaluate_clip_vision, r.o.quiet);
      video.files.insert(video.files.end(), {"evaluate.json", "evaluate.png"});
    } catch (const InputError& x) {
      e.error = x.what();
      e.kind = "input";
    } catch (const std::exception& x) {
      e.error = x.what();
    }
  }
  r.world.broadcast(e.error);
  r.world.broadcast(e.kind);
  e.seconds = r.world.max(seconds_since(t_eval));
  return e;
}

// run.json's ranks: each rank's part, the bytes it received per group and collective kind and per
// step against the analytic count (the attention's per block: exact mode's all-to-alls, the
// windows' halos and global frames; --parallel.cfg's all-gather of the other branch's prediction),
// its peak memory. Collective; the list on rank 0.
// Diffusion forcing's analytic bytes a rank receives per row, averaged over the run's rows: in the
// clip group exact mode's attention of every block over each window's tokens and the all-gather of
// the guided prediction (f32), in the cfg group the other branch's prediction of this rank's frames.
struct DfTraffic {
  double clip = 0, cfg = 0;
};
DfTraffic df_traffic(const WanRun& r, std::int64_t rows, std::int64_t per_frame, double element) {
  DfTraffic t;
  const int clip = r.job.grid().clip_index();
  const std::int64_t frame = r.tc.out_channels * r.lh * r.lw;
  double all_rows = 0;
  for (const sampling::DfWindow& w : sampling::df_windows(r.lf, r.df.base, r.df.overlap, r.df.block)) {
    const auto n = static_cast<double>(
        sampling::df_schedule(w.frames, r.scheduler->timesteps(), w.prefix, r.df.ar_step, r.df.block).rows());
    const std::vector<std::int64_t> counts = df_rank_frames(w.frames, r.clips, r.df.bands ? r.df.block : 0);
    std::vector<std::int64_t> tokens = counts;
    for (std::int64_t& c : tokens) c *= per_frame;
    const std::int64_t mine = counts[static_cast<std::size_t>(clip)];
    const std::int64_t attention =
        r.df.bands ? infinity::WanBandAttention::received_elements(tokens, clip, rows, r.tc.head_dim)
                   : infinity::WanExactAttention::received_elements(tokens, clip, rows, r.tc.head_dim);
    if (r.clips > 1)
      t.clip += n * (static_cast<double>(r.tc.layers * attention) * element +
                     static_cast<double>((w.frames - mine) * frame) * 4.0);
    if (r.o.job.cfg == 2) t.cfg += n * static_cast<double>(mine * frame) * element;
    all_rows += n;
  }
  t.clip /= std::max(1.0, all_rows);
  t.cfg /= std::max(1.0, all_rows);
  return t;
}

json wan_ranks_json(const WanRun& r, std::vector<double>& peaks) {
  const GenerateSpec& o = r.o;
  const int steps_run = r.tc.skyreels ? r.df_rows - r.start_step : o.steps - std::max(r.start_step, r.first_step);
  const mpi::CommCounters none;
  const mpi::CommCounters& clip_counted = r.job.clip_comm() ? r.job.clip_comm()->counters() : none;
  const mpi::CommCounters& cfg_counted = o.job.cfg == 2 ? r.job.cfg_comm()->counters() : none;
  const std::int64_t rows = (r.guided && o.job.cfg == 1 ? 2 : 1) * r.tc.heads;
  const std::int64_t per_frame = (r.lh / r.tc.patch_size[1]) * (r.lw / r.tc.patch_size[2]);
  const std::vector<std::int64_t> frame_counts = infinity::clip_frame_counts(r.lf, r.clips);
  std::vector<std::int64_t> tokens = frame_counts;
  for (std::int64_t& n : tokens) n *= per_frame;
  const int clip = r.job.grid().clip_index();
  const std::int64_t attention_elements =
      r.windows
          ? infinity::WanWindowAttention::received_elements(o.vi, frame_counts, clip, per_frame, rows, r.tc.head_dim)
      : r.clips > 1 ? infinity::WanExactAttention::received_elements(tokens, clip, rows, r.tc.head_dim)
                    : 0;
  const auto element = static_cast<double>(dtype_size(r.job.dtype()));
  auto total_bytes = [](const mpi::CommCounters& c) {
    double b = 0;
    for (std::uint64_t x : c.bytes) b += static_cast<double>(x);
    return b;
  };
  double cfg_analytic =
      o.job.cfg == 2 ? static_cast<double>(r.tc.out_channels * r.part.count * r.lh * r.lw) * element : 0.0;
  double clip_analytic = static_cast<double>(r.tc.layers * attention_elements) * element;
  if (r.tc.skyreels)
    std::tie(clip_analytic, cfg_analytic) = [&] {
      const DfTraffic t = df_traffic(r, rows, per_frame, element);
      return std::pair{t.clip, t.cfg};
    }();
  const json mine = {
      {"denoise_peak", r.denoise_peak},
      {"max_rss", max_rss_bytes()},
      {"clip_group", counters_json(clip_counted)},
      {"cfg_group", counters_json(cfg_counted)},
      {"per_step",
       {{"clip_group",
         {{"counted", steps_run > 0 ? total_bytes(clip_counted) / steps_run : 0.0}, {"analytic", clip_analytic}}},
        {"cfg_group",
         {{"counted", steps_run > 0 ? total_bytes(cfg_counted) / steps_run : 0.0}, {"analytic", cfg_analytic}}}}}};
  const std::vector<std::string> received = r.world.gather_on_root(mine.dump());
  json ranks = json::array();
  for (std::size_t k = 0; k < peaks.size(); ++k) {
    const json got = json::parse(received[k]);
    const infinity::FrameRange held = infinity::clip_frames(r.lf, r.clips, static_cast<int>(k) % r.clips);
    ranks.push_back({{"rank", k},
                     {"cfg_branch", static_cast<int>(k) / r.clips},
                     {"clip", static_cast<int>(k) % r.clips},
                     {"latent_frames", {held.first, held.first + held.count}},
                     {"bytes_received", {{"clip_group", got["clip_group"]}, {"cfg_group", got["cfg_group"]}}},
                     {"bytes_received_per_step", got["per_step"]},
                     {"peak_memory_bytes", peaks[k]},
                     {"denoise_peak_memory_bytes", got["denoise_peak"]},
                     {"max_rss_bytes", got["max_rss"]}});
  }
  return ranks;
}

// run.json as the UNet family's runs write it (jobs/summarize reads both): the settings, where it
// resumed, the schedule, the times (the slowest rank's steps), each rank's peak memory. Written
// last: its presence marks a finished run.
void write_wan_run_json(WanRun& r, const WanVideoFiles& video, const WanEvaluation& evaluation) {
  const GenerateSpec& o = r.o;
  const std::vector<double> per_step = r.world.max(r.step_seconds);
  const double peak_here = std::max(r.peak_before_denoise, static_cast<double>(r.rt.arena().stats().peak_in_use));
  std::vector<double> peaks = r.world.gather_values_on_root(peak_here);
  const json ranks = wan_ranks_json(r, peaks);
  json outputs = {"latents.h5"};
  for (const std::string& c : io::list_checkpoints(r.ckpt_dir)) outputs.push_back(fs::relative(c, r.out_dir).string());
  std::string listed = "latents.h5";
  for (const std::string& f : video.files) {
    outputs.push_back(f);
    if (f.find('/') == std::string::npos) listed += ", " + f;
  }
  // Latent frame-steps: diffusion forcing's every frame takes the steps over its windows' rows.
  const double denoised =
      r.tc.skyreels ? static_cast<double>(r.lf) * o.steps * (r.df_rows - r.start_step) / std::max(1, r.df_rows)
                    : static_cast<double>(r.lf) * (o.steps - std::max(r.start_step, r.first_step));
  RunRecord record;
  record.out_dir = r.out_dir;
  record.config = r.config;
  record.resumed_from = r.resumed_from;
  record.start_step = r.start_step;
  record.schedule = {{"timesteps", r.scheduler->timesteps()}, {"sigmas", r.scheduler->sigmas()}};
  record.times = {{"load", r.load_seconds},           {"text", r.text_seconds},
                  {"condition", r.condition_seconds}, {"denoise", r.denoise_seconds},
                  {"denoise_per_step", per_step},     {"checkpoint", r.checkpoint_seconds},
                  {"write", r.write_seconds},         {"decode", video.seconds},
                  {"evaluate", evaluation.seconds},   {"total", seconds_since(r.start)}};
  record.frame_steps_per_s = r.denoise_seconds > 0 ? denoised / r.denoise_seconds : 0.0;
  if (r.tc.skyreels) record.boundaries = r.seams;  // where the windows join
  record.ranks = ranks;
  record.outputs = outputs;
  const double peak = peaks.empty() ? peak_here : *std::max_element(peaks.begin(), peaks.end());
  if (r.root) write_run_json(record);
  r.report.say("outputs in " + r.out_dir + "/ (" + listed + ", run.json); " + format_number(r.denoise_seconds) +
               " s denoising (latent frame-steps/s " + format_number(denoised / std::max(r.denoise_seconds, 1e-9)) +
               "), peak memory " + format_mib(peak) + (peaks.size() > 1 ? " on the largest rank" : ""));
  if (const std::string late = late_stop_line(); !late.empty()) r.report.say(late);
}

}  // namespace

namespace {

// The Wan family's phases over one WanRun: the transformer on one rank, the guidance branches
// over two, or the latent frames over the clip group.
class WanVideoRun final : public VideoRun {
 public:
  WanVideoRun(const GenerateSpec& o, job::Job& job) : r_(o, job) {}
  void plan() override {
    check_wan_plan(r_.o);
    plan_wan(r_);
    identify_wan(r_);
  }
  bool choose_outputs() override { return prepare_wan_outputs(r_); }
  const std::string& out_dir() const override { return r_.out_dir; }
  void encode_prompts() override {
    encode_wan_text(r_);
    encode_wan_input(r_);
  }
  void load() override {
    const GenerateSpec& o = r_.o;
    ExecContext& ctx = r_.rt.ctx();
    const auto t_load = Clock::now();
    wan_ = std::make_unique<model::WanTransformer>(
        model::WanTransformer::load(o.model, r_.rt, r_.job.dtype(), false, &r_.warnings));
    r_.load_seconds = seconds_since(t_load);
    const Shape text_shape{1, o.max_text_length, r_.width};
    prompt_ = r_.rt.arena().empty(DType::f32, text_shape);
    negative_ = r_.rt.arena().empty(DType::f32, text_shape);
    const auto per = static_cast<std::size_t>(text_shape.numel());
    ops::copy(ctx, Tensor::wrap(r_.embeds.data(), DType::f32, Device::cpu(), text_shape), prompt_);
    if (r_.guided)
      ops::copy(ctx, Tensor::wrap(r_.embeds.data() + per, DType::f32, Device::cpu(), text_shape), negative_);
    upload_wan_input(r_, condition_, image_);
    if (!r_.tc.skyreels) {  // diffusion forcing holds a window at a time (denoise_wan_df)
      sampler_ = std::make_unique<sampling::FlowSampler>(*r_.scheduler, r_.rt.arena(),
                                                         Shape{1, r_.tc.out_channels, r_.part.count, r_.lh, r_.lw});
      start_wan_latents(r_, *sampler_);
    }
    log_wan_plan(r_, *wan_);
  }
  int denoise() override {
    Arena& arena = r_.rt.arena();
    r_.peak_before_denoise = static_cast<double>(arena.stats().peak_in_use);
    arena.reset_peak();
    const Tensor image = image_.view();
    const int stopped = r_.tc.skyreels
                            ? denoise_wan_df(r_, *wan_, prompt_, negative_)
                            : denoise_wan(r_, *wan_, prompt_, negative_,
                                          {condition_.view(), r_.images.empty() ? nullptr : &image}, *sampler_);
    r_.denoise_peak = static_cast<double>(arena.stats().peak_in_use);
    return stopped;
  }
  void finish() override {
    WanVideoFiles video;
    if (r_.tc.skyreels) {
      video = finish_wan_df(r_);
    } else {
      write_wan_latents(r_, *sampler_);
      video = write_wan_video(r_, *sampler_);
    }
    const WanEvaluation evaluation = evaluate_wan_video(r_, video);
    write_wan_run_json(r_, video, evaluation);
    if (evaluation.error.empty()) return;
    const std::string why = "--evaluate: " + evaluation.error + " (the run's outputs are complete; vinf evaluate " +
                            r_.out_dir + "/video.mp4 --out " + r_.out_dir + " evaluates them again)";
    if (evaluation.kind == "input") throw InputError(why);
    throw Error(why);
  }

 private:
  WanRun r_;
  std::unique_ptr<model::WanTransformer> wan_;
  OwnedTensor prompt_, negative_, condition_, image_;
  std::unique_ptr<sampling::FlowSampler> sampler_;
};

}  // namespace

std::unique_ptr<VideoRun> start_wan_video(const GenerateSpec& o, job::Job& job) {
  return std::make_unique<WanVideoRun>(o, job);
}

}  // namespace vinf::pipeline
