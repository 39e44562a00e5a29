#include "app/generate_wan.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <thread>
#include <tuple>
#include <nlohmann/json.hpp>

#include "app/commands.hpp"
#include "app/evaluate.hpp"
#include "app/generate_support.hpp"
#include "app/wan_pipeline.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "infinity/wan_exact.hpp"
#include "infinity/wan_windows.hpp"
#include "io/atomic_file.hpp"
#include "io/checkpoint.hpp"
#include "mpi/session.hpp"
#include "io/image.hpp"
#include "io/video.hpp"
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
#include "sampling/noise.hpp"

namespace fs = std::filesystem;

namespace vinf::app {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

}  // namespace

// What this version of the Wan path refuses, with the option named: the layouts that split the
// model, the UNet family's methods and files (the rank counts: check_wan_job).
void check_wan_plan(const RunPlan& o) {
  const std::string what = "--model " + o.model + " is a Wan2.1 pipeline, which ";
  VINF_INPUT_CHECK(o.job.tensor == 1 && o.job.pipeline == 1, what,
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
  VINF_INPUT_CHECK(!o.evaluate || (o.video && io::is_directory(o.model + "/vae")), what,
                   "evaluates its video.mp4 with --evaluate (its latents are not pictures): keep --output.video and the ",
                   "pipeline's vae/");
  VINF_INPUT_CHECK(o.vae.empty(), what, "decodes with its own vae/: drop --model.vae");
  for (const auto& [dir, option, sub] : {std::tuple{&o.text_encoder, "--model.text-encoder", "text_encoder"},
                                         std::tuple{&o.tokenizer, "--model.tokenizer", "tokenizer"}})
    VINF_INPUT_CHECK(dir->empty() || *dir == o.model + "/" + sub, what, "reads its own ", sub, "/: drop ", option);
  VINF_INPUT_CHECK(o.frames >= 1 && (o.frames - 1) % 4 == 0, "--video.frames ", o.frames,
                   ": a Wan video has 1 + 4k frames (the VAE keeps the first frame and packs 4 per latent frame); "
                   "use ", (o.frames - 1) / 4 * 4 + 1, " or ", ((o.frames - 1) / 4 + 1) * 4 + 1);
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
void check_wan_clips(const RunPlan& o, int clips, int world) {
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

void check_wan_job(const RunPlan& o, int world) {
  check_wan_plan(o);
  VINF_INPUT_CHECK(world % o.job.cfg == 0, "--model ", o.model, " is a Wan2.1 pipeline, which takes 2 x N ranks ",
                   "with --parallel.cfg 2 (one guidance branch each), got ", world);
  check_wan_clips(o, world / o.job.cfg, world);
}

VideoOutcome run_wan_video(const RunPlan& o, job::Job& job_ref) {
  check_wan_plan(o);
  job::Job* job = &job_ref;
  const bool root = job->root();
  auto log = [&](const std::string& line) {
    if (root && !o.quiet) std::cerr << "vinf generate: " << line << "\n" << std::flush;
  };
  Runtime& rt = job->runtime();
  ExecContext& ctx = rt.ctx();
  const DType dtype = job->dtype();
  const auto t_start = Clock::now();

  // The shape: latent frames, and the latent's height and width at the VAE's 8x.
  const std::int64_t lf = (o.frames - 1) / 4 + 1, lh = o.height / 8, lw = o.width / 8;
  // --vi.mode exact: the latent frames split over the clip ranks of each guidance branch.
  const int clips = job->grid().clip_size();
  check_wan_clips(o, clips, job->size());  // a job list's jobs come here without check_wan_job
  VINF_INPUT_CHECK(clips == 1 || job->clip_comm() != nullptr, "--model ", o.model, ": --vi.mode ",
                   infinity::mode_name(o.vi.mode), " spreads a Wan video's frames only when the whole run has it: ",
                   "give it on the command line, not per job");
  const bool windows = o.vi.mode == infinity::Mode::invariant;
  const infinity::FrameRange part = infinity::clip_frames(lf, clips, job->grid().clip_index());
  const bool writer = job->grid().cfg_index() == 0;  // branch 0's ranks write the frames they hold
  const std::string dir = o.model;
  const sampling::FlowScheduleConfig sched_config = sampling::read_flow_schedule_config(dir + "/scheduler");
  const sampling::FlowScheduler scheduler(o.flow_solver, sched_config, o.steps);
  std::vector<std::string> warnings;
  const model::T5Tokenizer tokenizer = model::T5Tokenizer::load(dir + "/tokenizer");
  const std::string transformer_config = model::find_wan_transformer_config(dir);
  const model::WanTransformerConfig tc = model::load_wan_transformer_config(transformer_config, &warnings);
  if (!o.latents_init.empty()) {
    const io::SafetensorsFile f(o.latents_init);
    const auto* e = f.find("latents_init");
    VINF_INPUT_CHECK(e != nullptr, "--latents-init ", o.latents_init, " has no tensor 'latents_init' (F32 [1,C,F,H,W])");
    const Shape want{1, tc.in_channels, lf, lh, lw};
    VINF_INPUT_CHECK(e->dtype == DType::f32 && e->shape == want, "--latents-init ", o.latents_init, ": 'latents_init' is ",
                     io::safetensors_dtype_name(e->dtype), e->shape.str(), " but this video's latents are F32",
                     want.str(), " (1, channels, (frames - 1) / 4 + 1, height / 8, width / 8)");
    f.tensor("latents_init");  // a NaN or infinity is refused now, before any output exists
  }
  json config = {{"family", "wan"},
                 {"model", dir},
                 {"latents-init", o.latents_init},
                 {"video", {{"frames", o.frames}, {"latent-frames", lf}, {"height", o.height}, {"width", o.width}}},
                 {"sampler",
                  {{"scheduler", sampling::flow_solver_name(o.flow_solver)}, {"steps", o.steps},
                   {"guidance", o.guidance}, {"seed", o.seed}, {"flow-shift", sched_config.flow_shift}}},
                 {"prompt", {{"text", o.prompts}, {"negative", o.negative}, {"max-length", o.max_text_length}}},
                 {"device", rt.device().name()},
                 {"dtype", dtype_name(dtype)}};
  // Video-Infinity's windows change the numbers (not the ranks they run on).
  if (windows) config["vi"] = vi_json(o.vi);
  io::RunStamp stamp;
  // Not in the numerics: the layout (exact mode, the windows and CFG parallelism compute the same
  // numbers on any ranks, to float rounding), so a run resumes on other ranks.
  stamp.numerics_json = config.dump();
  const char* mode = windows ? "invariant" : clips > 1 ? "exact" : "off";
  config["parallel"] = {{"cfg", o.job.cfg},         {"world", job->session().size()},
                        {"frame-ranks", clips},     {"vi-mode", mode},
                        {"clips", 1},               {"frames-per-clip", o.frames}};
  config["vae"] = {{"tile", o.vae_tile}};  // not in the numerics: a resume may decode otherwise
  stamp.config_json = config.dump();
  stamp.model_fingerprint = model::model_fingerprint(model::find_model_files(fs::path(transformer_config).parent_path().string()));
  stamp.noise_mode = "invariant";
  stamp.scheduler = sampling::flow_solver_name(o.flow_solver);
  stamp.seed = o.seed;
  stamp.world_size = job->session().size();
  stamp.cfg_size = o.job.cfg;
  stamp.clip_size = clips;
  mpi::Session& world = job->session();
  const std::string out_dir = choose_out_dir(o, world), ckpt_dir = out_dir + "/checkpoints";
  // A finished run (its run.json is there) that is asked to resume has nothing left to do.
  if (!o.resume.empty() && decided_by_root(world, [&] { return io::path_exists(out_dir + "/run.json") ? "done" : ""; }) == "done") {
    check_finished_run(out_dir, stamp, world);  // another prompt or seed is refused, not "done"
    log(out_dir + " holds a finished run (run.json); nothing to resume");
    return {VideoEnd::finished_before, 0, out_dir, {}};
  }
  {
    std::string mkdir_error;
    if (root) {
      std::error_code ec;
      fs::create_directories(ckpt_dir, ec);
      if (ec) mkdir_error = ec.message();
      fs::remove(out_dir + "/run.json", ec);  // from here on the directory holds an unfinished run
      if (o.resume.empty()) remove_run_outputs(out_dir);  // --overwrite: nothing of the old run stays
    }
    world.broadcast(mkdir_error);
    VINF_INPUT_CHECK(mkdir_error.empty(), "cannot create the output directory ", ckpt_dir, ": ", mkdir_error);
  }
  io::check_run_files(world.world(), ckpt_dir, stamp);
  for (const std::string& w : warnings) log("warning: " + w);
  if (o.vi_given && !windows)
    log(std::string("note: the [vi] settings but the mode are for Video-Infinity's windows (--vi.mode invariant) and ") +
        "do not change a Wan video in mode " + infinity::mode_name(o.vi.mode));
  if (o.vi_given && windows)
    log("note: [vi] conv-halo, halo and sync-groupnorm are for the UNet family (a Wan transformer has no temporal "
        "convolutions or group norms, and its windows carry keys and values)");

  // Text: the prompt and the negative one, cleaned as the pipeline cleans them, through UMT5; rows
  // past each prompt's tokens zeroed as the pipeline pads them.
  const auto t_text = Clock::now();
  const bool guided = o.guidance > 1.0;  // as the pipeline: guidance 1 or below runs the prompt alone
  std::vector<std::string> texts = {model::wan_prompt_clean(o.prompts[0])};
  if (guided) texts.push_back(model::wan_prompt_clean(o.negative));
  std::vector<float> embeds;
  std::int64_t width = 0;
  {
    const model::Umt5Encoder encoder = model::Umt5Encoder::load(dir + "/text_encoder", rt, DType::f32);
    width = encoder.config().d_model;
    std::vector<model::T5TokenizedText> tokens;
    embeds = model::encode_prompts(rt, tokenizer, encoder, texts, o.max_text_length, &tokens);
    std::vector<std::int64_t> lengths;
    for (const model::T5TokenizedText& t : tokens) {
      lengths.push_back(t.length);
      if (t.truncated()) log("warning: the prompt \"" + texts[lengths.size() - 1].substr(0, 60) + "\" has " +
                             std::to_string(t.length) + " tokens; kept " + std::to_string(o.max_text_length));
    }
    for (std::int64_t& l : lengths) l = std::min<std::int64_t>(l, o.max_text_length);
    model::zero_past_length(embeds, static_cast<std::int64_t>(texts.size()), o.max_text_length, width, lengths);
  }
  VINF_INPUT_CHECK(width == tc.text_dim, "the text encoder of ", dir, " gives ", width, "-wide embeddings but its ",
                   "transformer takes text_dim = ", tc.text_dim);
  const double text_seconds = seconds_since(t_text);

  const auto t_load = Clock::now();
  const model::WanTransformer wan = model::WanTransformer::load(dir, rt, dtype, false, &warnings);
  const double load_seconds = seconds_since(t_load);
  const Shape text_shape{1, o.max_text_length, width};
  OwnedTensor prompt = rt.arena().empty(DType::f32, text_shape), negative = rt.arena().empty(DType::f32, text_shape);
  const std::size_t per = static_cast<std::size_t>(text_shape.numel());
  ops::copy(ctx, Tensor::wrap(embeds.data(), DType::f32, Device::cpu(), text_shape), prompt);
  if (guided) ops::copy(ctx, Tensor::wrap(embeds.data() + per, DType::f32, Device::cpu(), text_shape), negative);

  // The initial latents: given, or the seed's standard normal draw (keyed by frame, as every vinf
  // run draws them).
  // This rank's frames of them.
  const Shape latent_shape{1, tc.in_channels, part.count, lh, lw};
  sampling::FlowSampler sampler(scheduler, rt.arena(), latent_shape);
  if (o.latents_init.empty()) {
    sampling::NoiseSource(sampling::NoiseMode::invariant, static_cast<std::uint64_t>(o.seed), 0, part.first)
        .initial(ctx, rt.arena(), sampler.latents());
  } else {
    ops::copy(ctx, io::SafetensorsFile(o.latents_init).tensor("latents_init").slice(2, part.first, part.count),
              sampler.latents());
  }
  // --resume: the checkpoint's latents and UniPC's memories (frame-major on the host).
  const Shape frame_major{lf, tc.in_channels, lh, lw}, mine_major{part.count, tc.in_channels, lh, lw};
  const std::vector<std::string> memories = {"last_corrected", "second_previous_x0"};
  ResumePoint resume =
      choose_checkpoint(o, out_dir, world, stamp, scheduler.timesteps(), frame_major, part.first, part.count, memories);
  if (resume.info) {
    auto put = [&](std::vector<float>& host) {
      return Tensor::wrap(host.data(), DType::f32, Device::cpu(), mine_major).permute({1, 0, 2, 3}).unsqueeze(0);
    };
    sampler.restore(ctx, static_cast<int>(resume.info->state.step), put(resume.latents), put(resume.memories[0]),
                    put(resume.previous_x0), put(resume.memories[1]));
    rt.synchronize();
    log("resuming from " + resume.info->path + " after step " + std::to_string(resume.info->state.step) + " of " +
        std::to_string(o.steps));
  }
  log("Wan2.1 " + dir + ": " + std::to_string(wan.weights().count()) + " transformer parameters as " +
      model::precision_name(dtype, rt.device()) + " on " + rt.device().name() + "; " + std::to_string(o.frames) +
      " frames (" + std::to_string(lf) + " latent) at " + std::to_string(o.height) + "x" + std::to_string(o.width) +
      ", " + std::to_string(o.steps) + " " + sampling::flow_solver_name(o.flow_solver) + " steps, guidance " +
      std::to_string(o.guidance).substr(0, 5) + (o.latents_init.empty() ? ", seed " + std::to_string(o.seed)
                                                                        : ", latents from " + o.latents_init) +
      (windows ? "; --vi.mode invariant, windows of +-" + std::to_string(o.vi.local_frames) + " latent frames and " +
                     std::to_string(o.vi.global_frames) + " global frame(s)"
               : "") +
      (clips > 1 ? std::string(windows ? "," : "; --vi.mode exact,") + " the latent frames over " +
                       std::to_string(clips) + " ranks"
                 : ""));

  // Denoise.
  const auto t_denoise = Clock::now();
  // This rank's latents or a memory, frame-major on the host.
  auto frames_on_host = [&](const Tensor& t) {
    std::vector<float> h(static_cast<std::size_t>(t.numel()));
    ops::copy(ctx, t.select(0, 0).permute({1, 0, 2, 3}), Tensor::wrap(h.data(), DType::f32, Device::cpu(), mine_major));
    rt.synchronize();
    return h;
  };
  const std::int64_t per_frame = (lh / tc.patch_size[1]) * (lw / tc.patch_size[2]);
  std::unique_ptr<model::WanSelfAttention> attention;
  if (windows) {
    attention = std::make_unique<infinity::WanWindowAttention>(o.vi, clips > 1 ? job->clip_comm() : nullptr,
                                                                infinity::clip_frame_counts(lf, clips), per_frame);
  } else if (clips > 1) {
    std::vector<std::int64_t> tokens = infinity::clip_frame_counts(lf, clips);
    for (std::int64_t& n : tokens) n *= per_frame;
    attention = std::make_unique<infinity::WanExactAttention>(*job->clip_comm(), tokens);
  }
  app::WanDenoise d{wan, scheduler, prompt, negative, static_cast<float>(guided ? o.guidance : 1.0), nullptr,
                    o.job.cfg == 2 ? job->cfg_comm() : nullptr, job->grid().cfg_index(), {part.first, lf}, attention.get()};
  auto t_step = Clock::now();
  io::TextCache text_cache;
  text_cache.prompts = 1;
  text_cache.tokens = o.max_text_length;
  text_cache.width = width;
  text_cache.prompt_embeds.assign(embeds.begin(), embeds.begin() + static_cast<std::ptrdiff_t>(per));
  if (guided) text_cache.negative_prompt_embeds.assign(embeds.begin() + static_cast<std::ptrdiff_t>(per), embeds.end());
  int stopped = 0;
  double checkpoint_seconds = 0;
  std::vector<double> step_seconds;
  std::string last_checkpoint;
  const double pace = test_step_seconds();
  d.after_step = [&](int i) {
    rt.synchronize();
    const int done = i + 1;
    if (pace > 0) std::this_thread::sleep_until(t_step + std::chrono::duration<double>(pace));
    step_seconds.push_back(seconds_since(t_step));
    if (step_fault(world.rank(), done)) ops::fill(ctx, sampler.latents(), std::nan(""));
    const int sig = static_cast<int>(world.max(static_cast<double>(stop_signal())));  // every rank stops alike
    if (sig != 0 || done == o.steps || (o.checkpoint_every > 0 && done % o.checkpoint_every == 0)) {
      const auto t_ckpt = Clock::now();
      std::vector<float> x = frames_on_host(sampler.latents()), m1 = frames_on_host(sampler.previous_x0()),
                         last = frames_on_host(sampler.last_corrected()), m2 = frames_on_host(sampler.second_previous_x0());
      for (float v : x)
        VINF_CHECK(std::isfinite(v), "the Wan latents are no longer finite after step ", done,
                   ": no checkpoint written (the last good one stays)");
      io::SolverState state{done, scheduler.timesteps(),
                            std::vector<double>(scheduler.sigmas().begin(), scheduler.sigmas().end())};
      const std::string path = ckpt_dir + "/" + io::checkpoint_name(done);
      io::write_checkpoint(world.world(), path, stamp, io::FramePart{frame_major, part.first, writer ? part.count : 0}, x.data(), m1.data(),
                           state, text_cache, {{"last_corrected", last.data()}, {"second_previous_x0", m2.data()}});
      if (root) io::prune_checkpoints(ckpt_dir, o.checkpoint_keep);
      checkpoint_seconds += seconds_since(t_ckpt);
      last_checkpoint = path;
    }
    if (sig != 0) {
      // As the UNet's runs say it: what a Slurm grace time or --signal lead must cover.
      stopped = sig;
      char took[64];
      std::snprintf(took, sizeof took, "%.1f s", world.max(seconds_since_stop_signal()));
      log(std::string("received ") + signal_name(sig) + ": stopped after step " + std::to_string(done) + " of " +
          std::to_string(o.steps) + ", checkpoint " + last_checkpoint + ", " + took +
          " after the signal; run again with --resume auto to continue (exit status " + std::to_string(kExitStopped) +
          ")");
      return false;
    }
    if (!o.quiet && (o.verbose || i + 1 == o.steps || (i + 1) % std::max(1, o.steps / 10) == 0))
      log("step " + std::to_string(i + 1) + "/" + std::to_string(o.steps) + " (t=" +
          std::to_string(scheduler.timesteps()[static_cast<std::size_t>(i)]) + "): " +
          std::to_string(step_seconds.back()).substr(0, 6) + " s");
    t_step = Clock::now();
    return true;
  };
  app::wan_denoise(rt, d, sampler);
  rt.synchronize();
  if (stopped != 0) return {VideoEnd::stopped, stopped, out_dir, {}};
  const double denoise_seconds = seconds_since(t_denoise);

  // latents.h5: the latent frames [F, C, H, W].
  std::vector<float> host = frames_on_host(sampler.latents());
  for (float v : host)
    VINF_CHECK(std::isfinite(v), "the Wan latents are no longer finite after ", o.steps, " steps: nothing was written");
  // The guidance branches hold the same latents: the first writes them.
  const auto t_write = Clock::now();
  io::write_latents(job->session().world(), out_dir + "/latents.h5", stamp,
                    io::FramePart{frame_major, part.first, writer ? part.count : 0}, host.data());
  const double write_seconds = seconds_since(t_write);
  // The video, when the pipeline has its VAE and a video or frames are asked for.
  WanVideoFiles video;
  const bool has_vae = io::is_directory(dir + "/vae");
  if (!has_vae) log("note: " + dir + " has no vae/: latents.h5 only");
  // The video: with the frames over ranks, branch 0's frame ranks decode theirs in turn, the VAE's
  // causal memory handed from each to the next, and the first writes the frames.
  if (has_vae && (o.video || o.png) && writer) {
    const model::WanVae vae = model::WanVae::load(dir + "/vae", rt, DType::f32, model::WanVae::decoder);
    WanVideoParts parts;
    if (clips > 1) {
      parts.session = &job->session();
      for (int c = 0; c < clips; ++c) parts.ranks.push_back(job->grid().world_rank(0, c, 0));
      parts.index = job->grid().clip_index();
      parts.total = lf;
    }
    video = wan_write_video(rt, vae, sampler.latents(), out_dir, {o.video, o.png, o.output_fps, o.ffmpeg}, o.vae_tile,
                            parts);
  }
  world.broadcast(video.error);
  if (!video.error.empty()) throw Error(video.error + " (latents.h5 is written and complete)");
  video.seconds = world.max(video.seconds);
  if (has_vae && (o.video || o.png) && clips > 1)
    log("decoded the video over " + std::to_string(clips) + " ranks, each its own latent frames after the VAE's " +
        "causal memory from the rank before, in " + std::to_string(video.seconds).substr(0, 6) + " s");
  // --evaluate: vinf evaluate on the video (one clip: no boundaries). Its failure is said after
  // run.json, as the run itself is complete.
  std::string evaluate_error, evaluate_kind;
  double evaluate_seconds = 0;
  if (o.evaluate) {
    const auto t_eval = Clock::now();
    if (root) {
      log("evaluating video.mp4 into evaluate.json and evaluate.png");
      try {
        evaluate_file(out_dir + "/video.mp4", out_dir, std::vector<std::int64_t>{}, o.evaluate_clip_vision, o.quiet);
        video.files.insert(video.files.end(), {"evaluate.json", "evaluate.png"});
      } catch (const InputError& x) {
        evaluate_error = x.what();
        evaluate_kind = "input";
      } catch (const std::exception& x) {
        evaluate_error = x.what();
      }
    }
    world.broadcast(evaluate_error);
    world.broadcast(evaluate_kind);
    evaluate_seconds = world.max(seconds_since(t_eval));
  }
  // run.json as the UNet family's runs write it (jobs/summarize reads both): the settings, where
  // it resumed, the schedule, the times (the slowest rank's steps), each rank's peak memory.
  const std::vector<double> per_step = world.max(step_seconds);
  const double peak_here = static_cast<double>(rt.arena().stats().peak_in_use);
  const std::vector<double> peaks = world.gather_values_on_root(peak_here);
  const int start_step = resume.info ? static_cast<int>(resume.info->state.step) : 0;
  // Bytes received per group and collective kind, and per step against the analytic count: the
  // attention's per block (exact mode's all-to-alls, the windows' halos and global frames), and
  // --parallel.cfg's all-gather of the other branch's prediction.
  const int steps_run = o.steps - start_step;
  const mpi::CommCounters none;
  const mpi::CommCounters& clip_counted = job->clip_comm() ? job->clip_comm()->counters() : none;
  const mpi::CommCounters& cfg_counted = o.job.cfg == 2 ? job->cfg_comm()->counters() : none;
  const std::int64_t rows = (guided && o.job.cfg == 1 ? 2 : 1) * tc.heads;
  const std::vector<std::int64_t> frame_counts = infinity::clip_frame_counts(lf, clips);
  std::vector<std::int64_t> tokens = frame_counts;
  for (std::int64_t& n : tokens) n *= per_frame;
  const int clip = job->grid().clip_index();
  const std::int64_t attention_elements =
      windows ? infinity::WanWindowAttention::received_elements(o.vi, frame_counts, clip, per_frame, rows, tc.head_dim)
      : clips > 1 ? infinity::WanExactAttention::received_elements(tokens, clip, rows, tc.head_dim)
                  : 0;
  const auto element = static_cast<double>(dtype_size(dtype));
  auto total_bytes = [](const mpi::CommCounters& c) {
    double b = 0;
    for (std::uint64_t x : c.bytes) b += static_cast<double>(x);
    return b;
  };
  const json mine = {
      {"clip_group", counters_json(clip_counted)},
      {"cfg_group", counters_json(cfg_counted)},
      {"per_step",
       {{"clip_group",
         {{"counted", steps_run > 0 ? total_bytes(clip_counted) / steps_run : 0.0},
          {"analytic", static_cast<double>(tc.layers * attention_elements) * element}}},
        {"cfg_group",
         {{"counted", steps_run > 0 ? total_bytes(cfg_counted) / steps_run : 0.0},
          {"analytic", o.job.cfg == 2 ? static_cast<double>(tc.out_channels * part.count * lh * lw) * element : 0.0}}}}}};
  const std::vector<std::string> received = world.gather_on_root(mine.dump());
  json ranks = json::array();
  for (std::size_t k = 0; k < peaks.size(); ++k) {
    const json got = json::parse(received[k]);
    const infinity::FrameRange held = infinity::clip_frames(lf, clips, static_cast<int>(k) % clips);
    ranks.push_back({{"rank", k}, {"cfg_branch", static_cast<int>(k) / clips}, {"clip", static_cast<int>(k) % clips},
                     {"latent_frames", {held.first, held.first + held.count}},
                     {"bytes_received", {{"clip_group", got["clip_group"]}, {"cfg_group", got["cfg_group"]}}},
                     {"bytes_received_per_step", got["per_step"]},
                     {"peak_memory_bytes", peaks[k]}});
  }
  json outputs = {"latents.h5"};
  for (const std::string& c : io::list_checkpoints(ckpt_dir)) outputs.push_back(fs::relative(c, out_dir).string());
  std::string listed = "latents.h5";
  for (const std::string& f : video.files) {
    outputs.push_back(f);
    if (f.find('/') == std::string::npos) listed += ", " + f;
  }
  const double denoised = static_cast<double>(lf) * (o.steps - start_step);
  json run = {{"format", "vinf-run"},
              {"format_version", 1},
              {"vinf_version", VINF_VERSION},
              {"status", "complete"},
              {"out", out_dir},
              {"config", config},
              {"resumed_from", resume.info ? json(resume.info->path) : json(nullptr)},
              {"start_step", start_step},
              {"schedule", {{"timesteps", scheduler.timesteps()}, {"sigmas", scheduler.sigmas()}}},
              {"times_s",
               {{"load", load_seconds},
                {"text", text_seconds},
                {"denoise", denoise_seconds},
                {"denoise_per_step", per_step},
                {"checkpoint", checkpoint_seconds},
                {"write", write_seconds},
                {"decode", video.seconds},
                {"evaluate", evaluate_seconds},
                {"total", seconds_since(t_start)}}},
              {"frame_steps_per_s", denoise_seconds > 0 ? denoised / denoise_seconds : 0.0},
              {"ranks", ranks},
              {"outputs", outputs}};
  const double peak = peaks.empty() ? peak_here : *std::max_element(peaks.begin(), peaks.end());
  if (root) io::write_file_atomically(out_dir + "/run.json", run.dump(2) + "\n");
  log("outputs in " + out_dir + "/ (" + listed + ", run.json); " + std::to_string(denoise_seconds).substr(0, 6) +
      " s denoising (latent frame-steps/s " + std::to_string(denoised / std::max(denoise_seconds, 1e-9)).substr(0, 6) +
      "), peak memory " + format_mib(peak) + (peaks.size() > 1 ? " on the largest rank" : ""));
  if (stop_signal() != 0)
    log(std::string("received ") + signal_name(stop_signal()) + " after the last step: the outputs were finished " +
        "(the run is complete; nothing to resume)");
  if (!evaluate_error.empty()) {
    const std::string why = "--evaluate: " + evaluate_error + " (the run's outputs are complete; vinf evaluate " +
                            out_dir + "/video.mp4 --out " + out_dir + " evaluates them again)";
    if (evaluate_kind == "input") throw InputError(why);
    throw Error(why);
  }
  return {VideoEnd::complete, 0, out_dir, {}};
}

}  // namespace vinf::app
