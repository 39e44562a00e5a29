// `vinf generate` (design.md §5): the main job. Every rank denoises its clip of the video latent
// (and, with --parallel.cfg 2, one of the two guidance branches); the temporal layers talk over the
// clip group, the guidance branches swap predictions over the cfg group. Rank 0 reports progress
// and writes run.json; latents.h5 is written collectively.
#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "app/commands.hpp"
#include "app/generate_options.hpp"
#include "app/generate_support.hpp"
#include "app/generate_video.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "infinity/context.hpp"
#include "job/job.hpp"
#include "io/atomic_file.hpp"
#include "io/checkpoint.hpp"
#include "model/presets.hpp"
#include "model/unet3d.hpp"
#include "model/vae.hpp"
#include "mpi/check.hpp"
#include "mpi/grid.hpp"
#include "mpi/session.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"
#include "sampling/conditioning.hpp"
#include "sampling/noise.hpp"
#include "sampling/sampler.hpp"

namespace fs = std::filesystem;

namespace vinf::app {

namespace {

using Clock = std::chrono::steady_clock;

// What rank 0 collects from every rank for run.json.
struct RankReport {
  mpi::CommCounters clip, cfg;
  double arena_peak = 0, max_rss = 0;
};

double max_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;  // Linux reports KiB
}

}  // namespace

int generate(const std::vector<std::string>& args) {
  GenerateOptions o;
  if (const int status = parse_generate_options(args, o); status != 0) return status == 1 ? 0 : status;
  job::JobPlan plan;
  plan.device = job::parse_device_choice(o.device);
  plan.dtype = job::parse_dtype_choice(o.dtype);
  plan.tf32 = o.tf32;
  plan.cfg = o.cfg;
  plan.transport = job::parse_transport(o.comm_backend);
  plan.comm_timeout = o.comm_timeout;
  plan.clip_group = o.vi.mode != infinity::Mode::off;
  plan.cfg_group = o.cfg == 2;

  const auto t_start = Clock::now();
  hold_stop_signals();
  const std::unique_ptr<job::Job> job = job::start_job(plan, [&](int world) { check_generate_job(o, world); });
  install_stop_signals();  // after MPI's own set-up, so that these handlers are the ones in place
  mpi::Session& mpi = job->session();
  const mpi::ProcessGrid& grid = job->grid();
  const bool root = job->root();
  auto log = [&](const std::string& line) {
    if (root && !o.quiet) std::cerr << "vinf generate: " << line << "\n" << std::flush;
  };
  auto detail = [&](const std::string& line) {
    if (root && o.verbose) std::cerr << "vinf generate: " << line << "\n" << std::flush;
  };
  const Device device = job->device();
  if (o.verbose)
    for (const std::string& line : mpi.gather_on_root(mpi.placement(device))) detail(line);
  const DType dtype = job->dtype();
  o.dtype = dtype_name(dtype);  // run.json and the checkpoints record the dtype that ran, not "auto"
  const int clips = grid.clip_size(), clip = grid.clip_index();
  if (const std::string note = imported_fields_note(o, o.dtype, clips); !note.empty()) log(note);
  const std::int64_t frames = o.frames, nf = frames / clips, first_frame = clip * nf;
  const std::int64_t lh = o.height / 8, lw = o.width / 8;
  const bool guided = o.guidance > 1.0;

  // The model's shape and the text, all checked before the weights are read.
  std::vector<std::string> warnings;
  model::UNetConfig ucfg;
  model::ModelFiles files;
  if (o.builtin()) {
    ucfg = model::preset_config(o.builtin_preset());
  } else {
    files = model::find_model_files(o.unet.empty() ? o.model : o.unet);
    ucfg = model::load_unet_config(files.config, &warnings);
  }
  check_dump_modules(o, ucfg);
  sampling::NoiseScheduleConfig sched_cfg;
  std::string sched_source = "zeroscope's values (built in)";
  {
    std::string path = o.scheduler_config;
    if (path.empty() && !o.builtin() && fs::exists(o.model + "/scheduler/scheduler_config.json"))
      path = o.model + "/scheduler";
    if (!path.empty()) {
      sched_cfg = sampling::read_scheduler_config(path);
      sched_source = path;
    }
  }
  const sampling::Scheduler scheduler(sampling::parse_scheduler(o.scheduler), sched_cfg, o.steps, o.eta);
  {
    // Before anything is created: a video that cannot fit fails here, naming the options, not in
    // the allocator after its output directory exists. A lower bound only: the latent-sized
    // buffers of the sampler and guidance and the UNet's first activation (conv_in's output).
    const double latent = static_cast<double>(ucfg.in_channels) * static_cast<double>(nf) * static_cast<double>(lh) *
                          static_cast<double>(lw) * 4.0;
    const double batch = guided && o.cfg == 1 ? 2.0 : 1.0;
    const double first_activation = batch * ucfg.block_out_channels.front() * static_cast<double>(nf) *
                                    static_cast<double>(lh) * static_cast<double>(lw) *
                                    static_cast<double>(dtype_size(dtype));
    const double need = (4.0 + 2.0 * batch) * latent + first_activation, have = memory_capacity_bytes(device);
    char figures[128];
    std::snprintf(figures, sizeof figures, "%.3g GiB, more than the %.3g GiB", need / 1073741824.0, have / 1073741824.0);
    VINF_INPUT_CHECK(have <= 0 || need < have, "--video.frames ", frames, " at ", o.width, "x", o.height, " over ", clips,
                     " clip rank(s): each rank needs at least ", figures, " of ", device.name(),
                     " memory this node has; use more ranks, fewer frames or a smaller size");
  }
  const std::string out_dir = choose_out_dir(o, mpi), ckpt_dir = out_dir + "/checkpoints";
  // A finished run (its run.json is written last) is never overwritten without --overwrite: the
  // Slurm scripts pass --resume auto, so resubmitting a finished job finds nothing to do. With
  // --overwrite (and no explicit checkpoint to resume from) the previous run's run.json and
  // checkpoints go once this run's checks have passed, so a later --resume auto cannot pick them.
  const bool finished = decided_by_root(mpi, [&] { return fs::exists(out_dir + "/run.json") ? "1" : ""; }) == "1";
  if (finished && o.resume == "auto" && !o.overwrite) {
    if (root)
      std::cerr << "vinf generate: " << out_dir << " holds a finished run (run.json): nothing to do; "
                << "--overwrite runs it again from the start\n" << std::flush;
    return 0;
  }
  const bool replace_previous = o.overwrite && (o.resume.empty() || o.resume == "auto") &&
                                (finished || o.resume.empty());

  // What identifies this run in its files, and the checkpoint it continues from (if any).
  const json config = {
      {"model", o.model},
      {"model.unet", o.builtin() ? "" : files.dir},
      {"model.seed", o.model_seed},
      {"model.scheduler-config", sched_source},
      {"model.vae", o.vae},
      {"model.text-encoder", o.text_encoder},
      {"model.tokenizer", o.tokenizer},
      {"output", {{"video", o.video}, {"fps", o.output_fps}, {"png", o.png}}},
      {"vae", {{"tile", o.vae_tile}}},
      {"video", {{"frames", frames}, {"height", o.height}, {"width", o.width}, {"fps", o.fps}}},
      {"sampler",
       {{"scheduler", o.scheduler}, {"steps", o.steps}, {"guidance", o.guidance}, {"seed", o.seed},
        {"eta", o.eta}, {"noise", o.noise}}},
      {"prompt", {{"text", o.prompts}, {"negative", o.negative}, {"embeddings", o.embeddings}}},
      {"parallel", {{"cfg", o.cfg}, {"clips", clips}, {"world", mpi.size()}, {"frames-per-clip", nf}}},
      {"checkpoint", {{"every", o.checkpoint_every}, {"keep", o.checkpoint_keep}}},
      {"vi", vi_json(o.vi)},
      {"import-vi-config", o.vi_options.import_file},
      {"device", device.name()},
      {"dtype", o.dtype},
      {"tf32", tf32_in_effect(device, dtype)}};
  io::RunStamp stamp;
  stamp.config_json = config.dump();
  stamp.numerics_json = numerics_json(o, clips).dump();
  stamp.model_fingerprint = o.builtin() ? o.model + " seed " + std::to_string(o.model_seed) : model::model_fingerprint(files);
  stamp.noise_mode = o.noise;
  stamp.scheduler = o.scheduler;
  stamp.seed = o.seed;
  stamp.world_size = mpi.size();
  stamp.cfg_size = o.cfg;
  stamp.clip_size = clips;
  // This rank's frames of the checkpoint come with it, their checksums checked.
  const Shape latent_full{frames, ucfg.in_channels, lh, lw};
  ResumePoint resume;
  if (!replace_previous)
    resume = choose_checkpoint(o, out_dir, mpi, stamp, scheduler.timesteps(), latent_full, first_frame, nf);
  VINF_INPUT_CHECK(!finished || o.resume.empty() || o.resume == "auto" || o.overwrite, "--resume ", o.resume, ": ",
                   out_dir, " holds a finished run (run.json), which resuming would overwrite; choose another --out, ",
                   "or add --overwrite to replace it");
  const io::CheckpointInfo* resumed = resume.info.get();
  const std::string resume_path = resumed ? resumed->path : std::string();
  if (!resumed && replace_previous && !o.resume.empty()) {
    log("--resume auto with --overwrite: " + out_dir + " holds a finished run, which this run replaces from the start");
  } else if (!resumed && !o.resume.empty()) {
    log("--resume auto: no checkpoint in " + ckpt_dir + ", starting from the beginning");
  }

  // The text: cached in the checkpoint when resuming, else from the embeddings file or random.
  const auto t_text = Clock::now();
  sampling::TextEmbeddings text;
  if (resumed) {
    const io::TextCache& c = resumed->text;
    VINF_INPUT_CHECK(c.width == ucfg.cross_attention_dim && (!guided || !c.negative_prompt_embeds.empty()),
                     "checkpoint ", resume_path, " holds text embeddings that do not fit this model and guidance");
    text.tokens = c.tokens;
    text.width = c.width;
    const auto row = static_cast<std::size_t>(c.tokens * c.width);
    for (std::int64_t p = 0; p < c.prompts; ++p)
      text.prompts.emplace_back(c.prompt_embeds.begin() + static_cast<std::ptrdiff_t>(row * static_cast<std::size_t>(p)),
                                c.prompt_embeds.begin() + static_cast<std::ptrdiff_t>(row * static_cast<std::size_t>(p + 1)));
    text.negative = c.negative_prompt_embeds;
    text.source = resume_path + " (cached)";
  } else if (o.embeddings.empty()) {
    text = encode_prompts_on_root(o, ucfg.cross_attention_dim, guided, device, mpi, warnings);
  } else {
    text = sampling::read_text_embeddings(o.embeddings, ucfg.cross_attention_dim, guided);
  }
  const double text_seconds = seconds_since(t_text);
  const int prompts = static_cast<int>(text.prompts.size());
  VINF_INPUT_CHECK(o.prompts.empty() || static_cast<int>(o.prompts.size()) == prompts, "--prompt.text is given ",
                   o.prompts.size(), " times but ", text.source, " holds ", prompts, " prompt embeddings");
  io::TextCache text_cache;
  text_cache.prompts = prompts;
  text_cache.tokens = text.tokens;
  text_cache.width = text.width;
  for (const auto& p : text.prompts) text_cache.prompt_embeds.insert(text_cache.prompt_embeds.end(), p.begin(), p.end());
  text_cache.negative_prompt_embeds = text.negative;

  // Weights.
  const auto t_load = Clock::now();
  Runtime& rt = job->runtime();
  std::unique_ptr<model::WeightFiles> wf;
  const auto params = model::unet_parameters(ucfg);
  model::Weights weights;
  if (o.builtin()) {
    weights = model::Weights::random(params, rt, dtype, static_cast<std::uint64_t>(o.model_seed));
  } else {
    wf = std::make_unique<model::WeightFiles>(files);
    weights = model::Weights(*wf, params, rt, dtype, false, &warnings);
  }
  const model::UNet3D unet(ucfg, std::move(weights));
  // The VAE: a random one for built-in models, --model.vae, or MODEL/vae when there is one.
  std::unique_ptr<model::VaeDecoder> vae;
  std::string vae_source = "none (latents only)";
  if (o.video || o.png) {
    if (o.builtin()) {
      model::VaeConfig vc = model::vae_preset(o.builtin_preset());
      auto vw = model::Weights::random(model::vae_decoder_parameters(vc), rt, dtype,
                                       model::vae_seed(static_cast<std::uint64_t>(o.model_seed)));
      vae = std::make_unique<model::VaeDecoder>(std::move(vc), std::move(vw));
      vae_source = "built-in " + o.builtin_preset() + " (random)";
    } else if (!o.vae.empty() || fs::exists(o.model + "/vae/config.json")) {
      vae_source = o.vae.empty() ? o.model + "/vae" : o.vae;
      vae = std::make_unique<model::VaeDecoder>(model::VaeDecoder::load(vae_source, rt, dtype));
    } else {
      log("no VAE (no --model.vae and no " + o.model + "/vae): writing latents only");
    }
    if (vae)
      VINF_INPUT_CHECK(vae->config().latent_channels == ucfg.out_channels && vae->config().upscale() == 8, "the VAE (",
                       vae_source, ") takes ", vae->config().latent_channels, " latent channels at ",
                       vae->config().upscale(), "x; the UNet makes ", ucfg.out_channels, " channels at 1/8 of the size");
  }
  const double load_seconds = mpi.max(seconds_since(t_load));
  for (const std::string& w : warnings) log("warning: " + w);
  log("model " + (o.builtin() ? o.model + " (seed " + std::to_string(o.model_seed) + ")" : files.dir) + ": " +
      std::to_string(unet.weights().count()) + " parameters as " + dtype_name(dtype) +
      (tf32_in_effect(device, dtype) ? " (TF32 tensor cores)" : "") + " on " + device.name() +
      ", loaded in " + format_duration(load_seconds));
  log(std::to_string(frames) + " frames of " + std::to_string(o.width) + "x" + std::to_string(o.height) + " over " +
      std::to_string(clips) + " clip(s) of " + std::to_string(nf) + (o.cfg == 2 ? " x 2 guidance branches" : "") +
      ", --vi.mode " + infinity::mode_name(o.vi.mode) + ", " + o.scheduler + " " + std::to_string(o.steps) +
      " steps, guidance " + std::to_string(o.guidance).substr(0, 5) + ", noise " + o.noise + " seed " +
      std::to_string(o.seed));
  detail("scheduler config: " + sched_source + "; text embeddings: " + text.source);
  {
    std::string ts;
    for (std::size_t i = 0; i < scheduler.timesteps().size(); ++i)
      ts += (i ? " " : "") + std::to_string(scheduler.timesteps()[i]);
    detail("timesteps: " + ts);
    for (int c = 0; c < clips; ++c) {
      const int p = sampling::prompt_for_clip(c, clips, prompts);
      detail("clip " + std::to_string(c) + " (frames " + std::to_string(c * nf) + "-" + std::to_string((c + 1) * nf - 1) +
             "): prompt " + std::to_string(p) + (o.prompts.empty() ? "" : " '" + o.prompts[static_cast<std::size_t>(p)] + "'"));
    }
  }

  std::string mkdir_error;
  if (root) {
    std::error_code ec;
    fs::create_directories(ckpt_dir, ec);
    if (ec) mkdir_error = ec.message();
  }
  broadcast_string(mkdir_error, mpi.world());
  VINF_INPUT_CHECK(mkdir_error.empty(), "cannot create the output directory ", ckpt_dir, ": ", mkdir_error);
  // The run's files once, before anything is computed or removed.
  io::check_run_files(mpi.world(), ckpt_dir, stamp);
  if (root && replace_previous) {
    // The previous run's marker first: from here on the directory holds an unfinished run.
    std::error_code ec;
    fs::remove(out_dir + "/run.json", ec);
    const std::vector<std::string> old = io::list_checkpoints(ckpt_dir);
    for (const std::string& c : old) fs::remove(c, ec);
    if (finished || !old.empty())
      log("--overwrite: the previous run's run.json and " + std::to_string(old.size()) + " checkpoint(s) in " + out_dir +
          " are removed; its other files are replaced as this run writes them");
  }

  // The clip group's communicator serves the temporal layers, the cfg group's the guidance swap.
  mpi::Communicator* clip_comm = job->clip_comm();
  mpi::Communicator* cfg_comm = job->cfg_comm();
  std::unique_ptr<model::TemporalContext> temporal;
  if (clip_comm)
    temporal = std::make_unique<infinity::Context>(o.vi, *clip_comm, nf);
  else
    temporal = std::make_unique<model::PlainTemporalContext>();

  // This rank's text batch: [negative, prompt], or its branch's one, or the prompt alone.
  ExecContext& ctx = rt.ctx();
  const std::vector<float>& prompt = text.prompts[static_cast<std::size_t>(sampling::prompt_for_clip(clip, clips, prompts))];
  std::vector<const std::vector<float>*> rows;
  if (!guided) rows = {&prompt};
  else if (o.cfg == 2) rows = {grid.cfg_index() == 0 ? &text.negative : &prompt};
  else rows = {&text.negative, &prompt};
  const std::int64_t batch = static_cast<std::int64_t>(rows.size());
  OwnedTensor text_dev = rt.arena().empty(DType::f32, {batch, text.tokens, text.width});
  for (std::int64_t b = 0; b < batch; ++b)
    ops::copy(ctx, Tensor::wrap(const_cast<float*>(rows[static_cast<std::size_t>(b)]->data()), DType::f32, Device::cpu(),
                                {1, text.tokens, text.width}),
              text_dev.slice(0, b, 1));

  // Latents, noise, the UNet's batch and outputs.
  const Shape latent_shape{1, ucfg.in_channels, nf, lh, lw};
  VINF_INPUT_CHECK(ucfg.in_channels == ucfg.out_channels, "the UNet's in_channels (", ucfg.in_channels,
                   ") and out_channels (", ucfg.out_channels, ") differ; it cannot denoise its own latents");
  const io::FramePart part{latent_full, grid.cfg_index() == 0 ? first_frame : 0,
                           grid.cfg_index() == 0 ? nf : 0};  // branch 1 holds the same numbers as branch 0
  sampling::Sampler sampler(scheduler, rt.arena(), latent_shape);
  const sampling::NoiseSource noise(o.noise == "compat" ? sampling::NoiseMode::compat : sampling::NoiseMode::invariant,
                                    static_cast<std::uint64_t>(o.seed), clip, first_frame);
  // Host copies of (1, C, F, H, W) device tensors in the files' frame-major layout, and back.
  OwnedTensor frame_major = rt.arena().empty(DType::f32, {1, nf, ucfg.in_channels, lh, lw});
  auto to_host = [&](const Tensor& t) {
    ops::copy(ctx, t.permute({0, 2, 1, 3, 4}), frame_major);
    std::vector<float> host(static_cast<std::size_t>(frame_major.numel()));
    ops::copy(ctx, frame_major, Tensor::wrap(host.data(), DType::f32, Device::cpu(), frame_major.shape));
    rt.synchronize();
    return host;
  };
  int start_step = 0;
  if (resumed) {
    OwnedTensor prev_dev = rt.arena().empty(DType::f32, frame_major.shape);
    ops::copy(ctx, Tensor::wrap(resume.latents.data(), DType::f32, Device::cpu(), frame_major.shape), frame_major);
    ops::copy(ctx, Tensor::wrap(resume.previous_x0.data(), DType::f32, Device::cpu(), frame_major.shape), prev_dev);
    sampler.restore(ctx, frame_major.permute({0, 2, 1, 3, 4}), prev_dev.permute({0, 2, 1, 3, 4}));
    rt.synchronize();
    resume.latents = {};
    resume.previous_x0 = {};
    start_step = static_cast<int>(resumed->state.step);
    log("resuming from " + resume_path + " (written by " + std::to_string(resumed->stamp.world_size) +
        " rank(s)) after step " + std::to_string(start_step) + " of " + std::to_string(o.steps));
  } else {
    noise.initial(ctx, rt.arena(), sampler.latents());
  }
  const Shape unet_shape{batch, ucfg.in_channels, nf, lh, lw};
  OwnedTensor unet_in = batch > 1 ? rt.arena().empty(DType::f32, unet_shape) : OwnedTensor{};
  OwnedTensor pred = rt.arena().empty(DType::f32, unet_shape);
  OwnedTensor both = o.cfg == 2 ? rt.arena().empty(DType::f32, {2, ucfg.in_channels, nf, lh, lw}) : OwnedTensor{};
  OwnedTensor eps = rt.arena().empty(DType::f32, latent_shape);
  OwnedTensor z = scheduler.stochastic() ? rt.arena().empty(DType::f32, latent_shape) : OwnedTensor{};
  ActivationDump dump(o, batch, nf, first_frame, frames);
  FiniteWatch watch;
  rt.synchronize();

  std::vector<std::string> checkpoints_written;
  double checkpoint_seconds = 0;
  auto write_checkpoint = [&](int completed) {
    const auto t0 = Clock::now();
    const std::string path = ckpt_dir + "/" + io::checkpoint_name(completed);
    io::SolverState state{completed, scheduler.timesteps(), scheduler.sigmas()};
    const std::vector<float> lat = to_host(sampler.latents()), prev = to_host(sampler.previous_x0());
    io::write_checkpoint(mpi.world(), path, stamp, part, lat.data(), prev.data(), state, text_cache);
    if (root) io::prune_checkpoints(ckpt_dir, o.checkpoint_keep);
    checkpoints_written.push_back(path);
    checkpoint_seconds += mpi.max(seconds_since(t0));
    detail("checkpoint " + path + " (" + format_duration(seconds_since(t0)) + ")");
  };

  Progress progress("vinf generate:", o.steps - start_step, static_cast<double>(frames), "frame-steps/s",
                    root && !o.quiet, o.verbose ? 0.0 : 10.0);
  std::vector<double> step_seconds;
  const auto t_denoise = Clock::now();
  int stopped_by = 0;
  const double pace = test_step_seconds();
  for (int i = start_step; i < o.steps; ++i) {
    const auto t0 = Clock::now();
    const std::int64_t t = scheduler.timesteps()[static_cast<std::size_t>(i)];
    const Tensor& x = sampler.latents();
    if (batch > 1) {
      for (std::int64_t b = 0; b < batch; ++b) ops::copy(ctx, x, unet_in.slice(0, b, 1));
    }
    const bool dumping = dump.wanted(i + 1);
    model::UNet3D::Observer observe;
    if (dumping && o.debug) {
      observe = [d = dump.observer(ctx), w = watch.observer(ctx)](const std::string& name, const Tensor& out) {
        d(name, out);
        w(name, out);
      };
    } else if (dumping) {
      observe = dump.observer(ctx);
    } else if (o.debug) {
      observe = watch.observer(ctx);
    }
    unet.forward(ctx, batch > 1 ? unet_in.view() : x, t, o.fps, text_dev, pred, *temporal, observe);
    if (dumping) dump.write_step(mpi.world(), out_dir + "/activations.h5", i + 1);
    if (!guided) {
      ops::copy(ctx, pred, eps);
    } else if (o.cfg == 2) {
      cfg_comm->all_gather(ctx, pred, both);  // [uncond, cond]: cfg index 0 runs the negative prompt
      sampling::guide(ctx, both.slice(0, 0, 1), both.slice(0, 1, 1), static_cast<float>(o.guidance), eps);
    } else {
      sampling::guide(ctx, pred.slice(0, 0, 1), pred.slice(0, 1, 1), static_cast<float>(o.guidance), eps);
    }
    if (scheduler.stochastic()) noise.step(ctx, rt.arena(), i, z);
    sampler.step(ctx, i, eps, z);
    rt.synchronize();
    step_seconds.push_back(seconds_since(t0));
    progress.update(i + 1 - start_step, (start_step > 0 ? "(" + std::to_string(i + 1) + "/" + std::to_string(o.steps) +
                                                           " of the run) " : std::string()) + "t=" + std::to_string(t));
    if (pace > 0) std::this_thread::sleep_until(t0 + std::chrono::duration<double>(pace));
    if (step_fault(mpi.rank(), i + 1)) ops::fill(ctx, sampler.latents().select(2, nf / 2), std::nan(""));
    // A step that made the latents NaN or infinite (f16 overflow, a damaged input) ends the run
    // here, before a checkpoint could keep it; every rank learns which rank saw it first.
    {
      const std::vector<float> now = to_host(sampler.latents());
      std::size_t bad = 0;
      while (bad < now.size() && std::isfinite(now[bad])) ++bad;
      const double first_bad_rank = -mpi.max(bad < now.size() ? -static_cast<double>(mpi.rank()) : -1e9);
      if (first_bad_rank < 1e9) {
        // The frame and, with --debug, the module, from the rank named (the others saw other data).
        std::string where, module = "; run with --debug to name the first UNet module whose output is not finite";
        if (bad < now.size() && mpi.rank() == static_cast<int>(first_bad_rank)) {
          const std::size_t per_frame = now.size() / static_cast<std::size_t>(nf);
          where = " (first in frame " + std::to_string(first_frame + static_cast<std::int64_t>(bad / per_frame)) + ")";
          if (o.debug) {
            module = watch.first_bad().empty()
                         ? "; every UNet module's output was finite on that rank, so the guidance or the "
                           "scheduler step made it"
                         : "; the first UNet module whose output was not finite on that rank: " + watch.first_bad();
          }
        }
        VINF_FAIL("step ", i + 1, " of ", o.steps, " (t=", t, ") made the latents NaN or infinite on rank ",
                  static_cast<int>(first_bad_rank), where, module,
                  "; the run stops here and keeps only the earlier checkpoints. Causes: --dtype f16 overflowing ",
                  "(use bf16 or f32), damaged weights or embeddings, an unusual scheduler config");
      }
    }
    // Every rank learns whether any rank was asked to stop, and they stop together.
    const bool last = i + 1 == o.steps;
    stopped_by = last ? 0 : static_cast<int>(mpi.max(static_cast<double>(stop_signal())));
    if (last || stopped_by != 0 || (o.checkpoint_every > 0 && (i + 1) % o.checkpoint_every == 0))
      write_checkpoint(i + 1);
    if (stopped_by != 0) {
      // The time the slowest rank took from its signal to here (the rest of a step, the
      // checkpoint): what a Slurm grace time or --signal lead must cover, with margin.
      char took[64];
      std::snprintf(took, sizeof took, "%.1f s", mpi.max(seconds_since_stop_signal()));
      log(std::string("received ") + signal_name(stopped_by) + ": stopped after step " + std::to_string(i + 1) + " of " +
          std::to_string(o.steps) + ", checkpoint " + checkpoints_written.back() + ", " + took +
          " after the signal; run again with --resume auto to continue (exit status " + std::to_string(kExitStopped) + ")");
      return kExitStopped;
    }
  }
  const double denoise_seconds = mpi.max(seconds_since(t_denoise));
  std::vector<double> step_max(step_seconds.size());
  VINF_CHECK_MPI(MPI_Allreduce(step_seconds.data(), step_max.data(), static_cast<int>(step_seconds.size()), MPI_DOUBLE,
                               MPI_MAX, mpi.world()));
  dump.finish(mpi.world(), out_dir + "/activations.h5");

  // latents.h5: the clip ranks of branch 0 hold the video (branch 1 holds the same numbers).
  const auto t_write = Clock::now();
  const std::vector<float> host = to_host(sampler.latents());
  bool finite = true;
  for (float v : host) finite = finite && std::isfinite(v);
  VINF_CHECK(mpi.all(finite), "the final latents hold NaN or infinite values (a rank's numbers diverged); ",
             "latents.h5 was not written to ", out_dir);
  io::write_latents(mpi.world(), out_dir + "/latents.h5", stamp, part, host.data());
  const double write_seconds = mpi.max(seconds_since(t_write));
  VideoResult video;
  if (vae) video = write_video_outputs(o, mpi, grid, rt, *vae, sampler.latents(), frames, out_dir);

  // run.json from rank 0, last: its presence marks a finished run.
  RankReport mine;
  if (clip_comm) mine.clip = clip_comm->counters();
  if (cfg_comm) mine.cfg = cfg_comm->counters();
  mine.arena_peak = static_cast<double>(rt.arena().stats().peak_in_use);
  mine.max_rss = max_rss_bytes();
  std::vector<RankReport> reports(root ? static_cast<std::size_t>(mpi.size()) : 1);
  VINF_CHECK_MPI(MPI_Gather(&mine, sizeof mine, MPI_BYTE, reports.data(), sizeof mine, MPI_BYTE, 0, mpi.world()));
  if (root) {
    json ranks = json::array();
    for (int r = 0; r < mpi.size(); ++r) {
      const RankReport& rep = reports[static_cast<std::size_t>(r)];
      ranks.push_back({{"rank", r},
                       {"clip", r % clips},
                       {"cfg_branch", r / clips},
                       {"frames", {r % clips * nf, (r % clips + 1) * nf}},
                       {"bytes_received", {{"clip_group", counters_json(rep.clip)}, {"cfg_group", counters_json(rep.cfg)}}},
                       {"peak_memory_bytes", rep.arena_peak},
                       {"max_rss_bytes", rep.max_rss}});
    }
    json outputs = {"latents.h5"};
    for (const std::string& c : io::list_checkpoints(ckpt_dir)) outputs.push_back(fs::relative(c, out_dir).string());
    if (dump.enabled()) outputs.push_back("activations.h5");
    for (const std::string& f : video.files) outputs.push_back(f);
    const int run_steps = o.steps - start_step;
    json run = {
        {"format", "vinf-run"},
        {"format_version", 1},
        {"vinf_version", VINF_VERSION},
        {"status", "complete"},
        {"out", out_dir},
        {"config", config},
        {"resumed_from", resume_path.empty() ? json(nullptr) : json(resume_path)},
        {"start_step", start_step},
        {"schedule", {{"timesteps", scheduler.timesteps()}, {"sigmas", scheduler.sigmas()}}},
        {"times_s",
         {{"load", load_seconds},
          {"text", text_seconds},
          {"denoise", denoise_seconds},
          {"denoise_per_step", step_max},
          {"checkpoint", checkpoint_seconds},
          {"write", write_seconds},
          {"decode", video.decode_seconds},
          {"video", video.write_seconds},
          {"total", seconds_since(t_start)}}},
        {"frame_steps_per_s", denoise_seconds > 0 ? static_cast<double>(frames) * run_steps / denoise_seconds : 0.0},
        {"ranks", ranks},
        {"outputs", outputs}};
    io::write_file_atomically(out_dir + "/run.json", run.dump(2) + "\n");
    double peak = 0;
    for (const RankReport& r : reports) peak = std::max(peak, r.arena_peak);
    for (int r = 0; r < mpi.size() && o.verbose; ++r) {
      const RankReport& rep = reports[static_cast<std::size_t>(r)];
      detail("rank " + std::to_string(r) + " received: clip group " + rep.clip.summary() +
             (o.cfg == 2 ? "; cfg group " + rep.cfg.summary() : "") + "; peak memory " +
             format_mib(rep.arena_peak));
    }
    log("denoised " + std::to_string(run_steps) + " step(s) in " + format_duration(denoise_seconds) + " (" +
        std::to_string(static_cast<double>(frames) * run_steps / std::max(denoise_seconds, 1e-9)).substr(0, 6) +
        " frame-steps/s); peak memory " + format_mib(peak) + " per rank");
    std::string listed = "latents.h5";
    for (const std::string& f : video.files) listed += ", " + f;
    std::cout << "vinf generate: outputs in " << out_dir << "/ (" << listed << ", run.json)\n" << std::flush;
  }
  return 0;
}

}  // namespace vinf::app
