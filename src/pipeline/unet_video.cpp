// `vinf generate` (design.md §5): the main job. Every rank denoises its clip of the video latent
// (and, with --parallel.cfg 2, one of the two guidance branches); the temporal layers talk over the
// clip group, the guidance branches swap predictions over the cfg group. Rank 0 reports progress
// and writes run.json; latents.h5 is written collectively.
//
// The run reads as its phases: plan (every check of the inputs, the output directory, the
// checkpoint to resume from), text, models, denoise, outputs. Each phase is a function below;
// what they share is a Run; UnetVideoRun (the end of the file) is the family's VideoRun over them.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "evaluate/evaluate.hpp"
#include "pipeline/denoise_loop.hpp"
#include "pipeline/guidance.hpp"
#include "pipeline/long_methods.hpp"
#include "pipeline/plan_estimate.hpp"
#include "pipeline/run_dir.hpp"
#include "pipeline/unet_support.hpp"
#include "pipeline/unet_video.hpp"
#include "pipeline/video_files.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "infinity/context.hpp"
#include "infinity/tensor_group.hpp"
#include "io/atomic_file.hpp"
#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "job/job.hpp"
#include "model/presets.hpp"
#include "model/unet3d.hpp"
#include "model/vae.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"
#include "pipeline/step_control.hpp"
#include "pipeline/stop_signals.hpp"
#include "pipeline/video_pipeline.hpp"
#include "sampling/conditioning.hpp"
#include "sampling/long_video.hpp"
#include "sampling/noise.hpp"
#include "sampling/sampler.hpp"
#include "model/lora.hpp"

namespace fs = std::filesystem;

namespace vinf::pipeline {

namespace {

using Clock = std::chrono::steady_clock;

// The scale between pixels and latents when the run has no VAE to say it (latents only): the
// Stable Diffusion family's VAEs, which every model vinf runs shares.
constexpr std::int64_t kLatentScaleWithoutVae = 8;

// What every phase of a run shares: the options, the job, the model's shape, this rank's part of
// the video, and the run's identity in its files.
struct Run {
  Run(GenerateSpec& spec, job::Job& j, Clock::time_point t0) : o(spec), job(j), start(t0) {}
  GenerateSpec& o;
  job::Job& job;
  Clock::time_point start;
  bool root = false;
  // This unit's pipeline stage: its steps, and the previous stage's state (none on the first).
  job::StepRange steps;
  const StageState* in = nullptr;
  bool last_stage() const { return steps.end == total_steps(); }
  // The partition: frames in all, this rank's clip of nf frames from first_frame (clips differ by
  // at most a frame: infinity::clip_frames).
  int clips = 1, clip = 0;
  std::int64_t frames = 0, nf = 0, first_frame = 0, lh = 0, lw = 0;
  bool guided = false;
  // --long.mode windows and fifo: every rank holds the whole state, nf frames from 0: the video
  // (windows), or the video's frames so far and then the FIFO queue; their ranks share the windows
  // (clips = ranks, clip = this rank's share of the decoding).
  bool long_method = false;
  std::unique_ptr<sampling::FifoPlan> fifo;
  // The loop's steps: the schedule's, or FIFO's iterations.
  int total_steps() const { return fifo ? static_cast<int>(fifo->iterations(frames)) : o.steps; }
  // "step 3 of 30 (t=901)", or FIFO's "iteration 3 of 88 (frame 0 of 40 leaves)".
  std::string step_words(int i) const {
    if (!fifo)
      return "step " + std::to_string(i + 1) + " of " + std::to_string(o.steps) +
             " (t=" + std::to_string(scheduler->timesteps()[static_cast<std::size_t>(i)]) + ")";
    const std::int64_t out = fifo->output_frame(i);
    return "iteration " + std::to_string(i + 1) + " of " + std::to_string(total_steps()) +
           (out >= 0 ? " (frame " + std::to_string(out + 1) + " of " + std::to_string(frames) + " done)"
                     : " (warm-up)");
  }
  // The model's shape (before any weight is read) and the schedule.
  model::UNetConfig ucfg;
  model::ModelFiles files;
  std::optional<model::VaeConfig> vae_config;  // none: latents only
  std::string vae_source = "none (latents only)";
  std::unique_ptr<sampling::Scheduler> scheduler;
  std::unique_ptr<sampling::Scheduler> base_scheduler;  // FIFO's base video: the grid, with use_scale
  std::string sched_source = "zeroscope's values (built in)";
  std::vector<std::string> warnings;
  // Where the outputs go and what this run continues from.
  std::string out_dir, ckpt_dir;
  bool finished = false, replace_previous = false;
  json config;
  io::RunStamp stamp;
  ResumePoint resume;
  std::string resume_path;

  // "vinf generate:", or with the job and the pipeline stage: "vinf generate [kite, stage 2/4]:".
  std::string prefix() const {
    std::string where = o.job_label;
    if (job.layout().pipeline > 1)
      where += (where.empty() ? "" : ", ") + std::string("stage ") + std::to_string(job.stage() + 1) + "/" +
               std::to_string(job.layout().pipeline);
    return where.empty() ? "vinf generate:" : "vinf generate [" + where + "]:";
  }
  Reporter report;  // the run's voice, with prefix()
  const io::CheckpointInfo* resumed() const { return resume.info.get(); }
  // This rank's frames in the files: branch 1 and tensor ranks other than the first hold the same
  // numbers as the first of branch 0 and write none.
  io::FramePart part() const {
    const bool writes = job.grid().cfg_index() == 0 && job.grid().tensor_index() == 0;
    if (long_method) {
      const bool first = writes && job.grid().clip_index() == 0;  // every rank holds the same numbers
      return {Shape{nf, ucfg.in_channels, lh, lw}, 0, first ? nf : 0};
    }
    return {Shape{frames, ucfg.in_channels, lh, lw}, writes ? first_frame : 0, writes ? nf : 0};
  }
  // latents.h5's part: the video's frames (a FIFO state holds the queue after them).
  io::FramePart video_part() const {
    io::FramePart p = part();
    if (long_method) {
      p.full[0] = frames;
      p.count = std::min(p.count, frames);
    }
    return p;
  }
  // The step this unit starts from, and the one this job's run started from.
  int start_step() const {
    if (in) return in->step;
    return resumed() ? static_cast<int>(resumed()->state.step) : 0;
  }
  int first_step() const { return in ? in->first_step : start_step(); }
};

// -- plan: every check of the inputs, before anything heavy runs ---------------------------------

// --sampler.use-scale against the model's scheduler config (GenerateSpec's UseScale): the scale of
// DDIM's steps, for FIFO's base video (fifo_base) or the run's schedule.
std::optional<sampling::X0Scale> x0_scale_for(const GenerateSpec& o, const sampling::NoiseScheduleConfig& c,
                                              bool fifo_base) {
  if (o.use_scale == UseScale::off || (o.use_scale == UseScale::automatic && c.x0_scale_off)) return std::nullopt;
  // auto without the key: VideoCrafter2's values on FIFO's base video as released (the config grid
  // is the earlier FIFO, which had none).
  const bool released_base = fifo_base && o.long_video.fifo_grid == sampling::FifoGrid::released;
  if (o.use_scale == UseScale::on || c.x0_scale || released_base) return c.x0_scale.value_or(sampling::X0Scale{});
  return std::nullopt;
}

// The run's schedule; FIFO's on its grid (--long.fifo-grid), with the base video's beside it.
void make_schedulers(Run& r, sampling::NoiseScheduleConfig c) {
  const GenerateSpec& o = r.o;
  const bool ddim = o.scheduler == sampling::SchedulerKind::ddim;
  if (o.long_video.mode != sampling::LongMode::fifo) {
    const sampling::DdimOptions ddim_options{o.eta, false, ddim ? x0_scale_for(o, c, false) : std::nullopt};
    r.scheduler = std::make_unique<sampling::Scheduler>(o.scheduler, c, o.steps, ddim_options);
    return;
  }
  sampling::DdimOptions options{o.eta, false, std::nullopt};
  if (o.long_video.fifo_grid == sampling::FifoGrid::released) {
    c.timestep_spacing = sampling::Spacing::linspace;
    options.to_next_on_grid = true;
  }
  r.scheduler = std::make_unique<sampling::Scheduler>(o.scheduler, c, o.steps, options);
  options.x0_scale = x0_scale_for(o, c, true);
  r.base_scheduler = std::make_unique<sampling::Scheduler>(o.scheduler, c, o.steps, options);
}

// The UNet's config, the VAE's (which gives the latent scale), the scheduler.
void read_model_shape(Run& r) {
  const GenerateSpec& o = r.o;
  if (o.builtin()) {
    r.ucfg = model::preset_config(o.builtin_preset());
  } else {
    r.files = model::find_model_files(o.unet.empty() ? o.model : o.unet);
    r.ucfg = model::load_unet_config(r.files.config, &r.warnings);
  }
  VINF_INPUT_CHECK(r.ucfg.in_channels == r.ucfg.out_channels, "the UNet's in_channels (", r.ucfg.in_channels,
                   ") and out_channels (", r.ucfg.out_channels, ") differ; it cannot denoise its own latents");
  model::check_tensor_split(r.ucfg, o.job.tensor, o.builtin() ? o.model : r.files.config);
  check_dump_modules(o, r.ucfg);
  if (o.video || o.png) {
    if (o.builtin()) {
      r.vae_config = model::vae_preset(o.builtin_preset());
      r.vae_source = "built-in " + o.builtin_preset() + " (random)";
    } else if (!o.vae.empty() || fs::exists(o.model + "/vae/config.json")) {
      r.vae_source = o.vae.empty() ? o.model + "/vae" : o.vae;
      r.vae_config = model::VaeDecoder::read_config(r.vae_source);
    }
    if (r.vae_config)
      VINF_INPUT_CHECK(r.vae_config->latent_channels == r.ucfg.out_channels, "the VAE (", r.vae_source, ") takes ",
                       r.vae_config->latent_channels, " latent channels at ", r.vae_config->upscale(),
                       "x; the UNet makes ", r.ucfg.out_channels, " channels");
  }
  std::string path = o.scheduler_config;
  if (path.empty() && !o.builtin() && fs::exists(o.model + "/scheduler/scheduler_config.json"))
    path = o.model + "/scheduler";
  sampling::NoiseScheduleConfig sched_cfg;
  if (!path.empty()) {
    sched_cfg = sampling::read_scheduler_config(path);
    r.sched_source = path;
  }
  make_schedulers(r, sched_cfg);
}

// The partition of the video over the clip ranks, and the latent's size.
void partition(Run& r) {
  const mpi::ProcessGrid& grid = r.job.grid();
  r.clips = grid.clip_size();
  r.clip = grid.clip_index();
  r.frames = r.o.frames;
  const infinity::FrameRange mine = infinity::clip_frames(r.frames, r.clips, r.clip);
  r.nf = mine.count;
  r.first_frame = mine.first;
  r.long_method = !r.o.long_clips();
  if (r.long_method) {
    r.first_frame = 0;
    r.nf = r.frames;
    if (r.o.long_video.mode == sampling::LongMode::fifo) {
      const sampling::LongVideoConfig& l = r.o.long_video;
      r.fifo = std::make_unique<sampling::FifoPlan>(l.fifo_window, l.fifo_partitions, l.fifo_lookahead);
      r.nf += r.fifo->queue_length();
    }
  }
  const std::int64_t scale = r.vae_config ? r.vae_config->upscale() : kLatentScaleWithoutVae;
  VINF_INPUT_CHECK(r.o.height % scale == 0 && r.o.width % scale == 0, "--video.width ", r.o.width,
                   " and --video.height ", r.o.height, " must be multiples of ", scale, ", the VAE's scale (",
                   r.vae_source, ")");
  r.lh = r.o.height / scale;
  r.lw = r.o.width / scale;
  r.guided = r.o.guidance > 1.0;
  if (!r.o.latents_init.empty() && r.fifo) {
    check_fifo_draws(r.o.latents_init, *r.fifo, r.frames, Shape{r.ucfg.in_channels, r.lh, r.lw},
                     r.scheduler->stochastic());
  } else if (!r.o.latents_init.empty()) {
    VINF_INPUT_CHECK(!r.long_method, "--latents-init gives the clips method's latents or FIFO's draws; --long.mode ",
                     sampling::long_mode_name(r.o.long_video.mode), " draws its own (leave one of them out)");
    check_latents_init(
        r.o.latents_init, Shape{1, r.ucfg.in_channels, r.frames, r.lh, r.lw},
        "(1, channels, frames, height / " + std::to_string(scale) + ", width / " + std::to_string(scale) + ")");
  }
}

// A video that cannot fit fails here, with what would fit, not in the allocator after its output
// directory exists: `vinf plan`'s estimate of every rank's memory (an upper bound), against the
// GPU's memory, or the host's shared by the node's ranks.
void check_memory(const Run& r) {
  const Device& device = r.job.device();
  const PlanEstimate e = estimate_plan(r.o, r.ucfg, r.vae_config, r.job.layout(), r.job.dtype(), device);
  const int node_ranks = std::max(1, r.job.world_session().local_size());
  double capacity = memory_capacity_bytes(device);
  if (!device.is_cuda()) capacity /= node_ranks;
  check_plan_fits(e, capacity,
                  device.is_cuda()
                      ? device.name()
                      : "the host's memory shared by the " + std::to_string(node_ranks) + " rank(s) of a node");
}

// What identifies this run in its files: the config recorded in run.json and the checkpoints, and
// the stamp a resumed run must match.
void identify(Run& r) {
  const GenerateSpec& o = r.o;
  const Device& device = r.job.device();
  const DType dtype = r.job.dtype();
  r.config = {{"model", o.model},
              {"model.unet", o.builtin() ? "" : r.files.dir},
              {"model.seed", o.model_seed},
              {"model.scheduler-config", r.sched_source},
              {"model.vae", o.vae},
              {"model.text-encoder", o.text_encoder},
              {"model.tokenizer", o.tokenizer},
              {"latents-init", o.latents_init},
              {"output", {{"video", o.video}, {"fps", o.output_fps}, {"png", o.png}}},
              {"vae", {{"tile", o.vae_tile}}},
              {"video", {{"frames", r.frames}, {"height", o.height}, {"width", o.width}, {"fps", o.fps}}},
              {"sampler", sampler_json(o)},
              {"prompt", {{"text", o.prompts}, {"negative", o.negative}, {"embeddings", o.embeddings}}},
              {"parallel",
               {{"cfg", o.cfg()},
                {"clips", r.clips},
                {"tensor", o.job.tensor},
                {"world", r.job.size()},
                {"frames-per-clip", r.nf},
                {"data", o.job.data},
                {"pipeline", o.job.pipeline},
                {"threads", cpu_threads()}}},
              {"checkpoint", {{"every", o.checkpoint_every}, {"keep", o.checkpoint_keep}}},
              {"vi", vi_json(o.vi)},
              {"long", long_json(o.long_video)},
              {"import-vi-config", o.vi_import},
              {"device", device.name()},
              {"dtype", dtype_name(dtype)},
              {"tf32", tf32_in_effect(device, dtype)}};
  // Only when one is given, so that the stamps of runs without a LoRA stay what they were.
  if (!o.lora.empty()) r.config["model.lora"] = {{"file", o.lora}, {"scale", o.lora_scale}};
  r.stamp.config_json = r.config.dump();
  r.stamp.numerics_json = numerics_json(o, r.clips, dtype, device).dump();
  r.stamp.model_fingerprint =
      o.builtin() ? o.model + " seed " + std::to_string(o.model_seed) : model::model_fingerprint(r.files);
  r.stamp.noise_mode = sampling::noise_mode_name(o.noise);
  r.stamp.scheduler = sampling::scheduler_name(o.scheduler);
  r.stamp.seed = o.seed;
  r.stamp.world_size = r.job.size();
  r.stamp.cfg_size = o.cfg();
  r.stamp.clip_size = r.clips;
}

// The output directory, whether a finished run is there, and the checkpoint this run continues
// from (this rank's frames read, their checksums checked). False: nothing to do.
bool choose_outputs(Run& r) {
  const GenerateSpec& o = r.o;
  mpi::Session& mpi = r.job.session();
  if (r.in) {
    // A later pipeline stage: the first stage chose the directory and the state to start from.
    r.out_dir = r.in->out_dir;
    r.ckpt_dir = r.out_dir + "/checkpoints";
    identify(r);
    r.resume_path = r.in->resumed_from;
    return true;
  }
  r.out_dir = choose_out_dir(o, mpi);
  r.ckpt_dir = r.out_dir + "/checkpoints";
  // A finished run (its run.json is written last) is never overwritten without --overwrite: the
  // Slurm scripts pass --resume auto, so resubmitting a finished job finds nothing to do. With
  // --overwrite (and no explicit checkpoint to resume from) the previous run's run.json and
  // checkpoints go once this run's checks have passed, so a later --resume auto cannot pick them.
  r.finished = decided_by_root(mpi, [&] { return fs::exists(r.out_dir + "/run.json") ? "1" : ""; }) == "1";
  if (r.finished && o.resume == "auto" && !o.overwrite) {
    identify(r);
    check_finished_run(r.out_dir, r.stamp, mpi);  // another prompt or seed is refused, not "done"
    r.report.note(r.out_dir,
                  " holds a finished run (run.json): nothing to do; --overwrite runs it again from the start");
    return false;
  }
  r.replace_previous = o.overwrite && (o.resume.empty() || o.resume == "auto") && (r.finished || o.resume.empty());
  identify(r);
  const Shape latent_full = r.part().full;
  if (!r.replace_previous)
    r.resume =
        choose_checkpoint(o, r.out_dir, mpi, r.stamp, r.scheduler->timesteps(), latent_full, r.first_frame, r.nf);
  VINF_INPUT_CHECK(!r.finished || o.resume.empty() || o.resume == "auto" || o.overwrite, "--resume ", o.resume, ": ",
                   r.out_dir,
                   " holds a finished run (run.json), which resuming would overwrite; choose another --out, ",
                   "or add --overwrite to replace it");
  r.resume_path = r.resumed() ? r.resumed()->path : std::string();
  VINF_INPUT_CHECK(!r.resumed() || r.resumed()->state.step <= r.total_steps(), "checkpoint ", r.resume_path,
                   " is after step ", r.resumed() ? r.resumed()->state.step : 0, " of a run of ", r.total_steps(),
                   r.fifo ? " iterations" : " steps", "; resume it with the settings it was written with");
  if (!r.resumed() && r.replace_previous && !o.resume.empty()) {
    r.report.say("--resume auto with --overwrite: " + r.out_dir +
                 " holds a finished run, which this run replaces from the start");
  } else if (!r.resumed() && !o.resume.empty()) {
    r.report.say("--resume auto: no checkpoint in " + r.ckpt_dir + ", starting from the beginning");
  }
  return true;
}

// -- text ------------------------------------------------------------------------------------

// The prompt embeddings: cached in the checkpoint when resuming, else from the embeddings file or
// the text encoder.
sampling::TextEmbeddings prepare_text(Run& r) {
  const GenerateSpec& o = r.o;
  sampling::TextEmbeddings text;
  if (r.in) {
    text = r.in->text;
    text.source = "the previous pipeline stage";
  } else if (r.resumed()) {
    text = r.resumed()->text;
    VINF_INPUT_CHECK(text.width == r.ucfg.cross_attention_dim && (!r.guided || !text.negative_prompt_embeds.empty()),
                     "checkpoint ", r.resume_path, " holds text embeddings that do not fit this model and guidance");
    text.source = r.resume_path + " (cached)";
  } else if (o.embeddings.empty()) {
    text = encode_prompts_on_root(o, r.ucfg.cross_attention_dim, r.guided, r.job, r.warnings);
  } else {
    text = sampling::read_text_embeddings(o.embeddings, r.ucfg.cross_attention_dim, r.guided);
  }
  VINF_INPUT_CHECK(o.prompts.empty() || static_cast<std::int64_t>(o.prompts.size()) == text.prompts,
                   "--prompt.text is given ", o.prompts.size(), " times but ", text.source, " holds ", text.prompts,
                   " prompt embeddings");
  const PromptParts parts = prompt_parts(o, r.clips);
  sampling::check_prompts_used(text.prompts, parts.count, parts.name, text.source);
  return text;
}

// Prompt p's text batch on the device: [negative, prompt], or this rank's branch's one, or the
// prompt.
OwnedTensor text_on_device(Run& r, const sampling::TextEmbeddings& text, int p) {
  Runtime& rt = r.job.runtime();
  std::vector<const float*> rows;
  if (!r.guided)
    rows = {text.prompt(p)};
  else if (r.o.cfg() == 2)
    rows = {r.job.grid().cfg_index() == 0 ? text.negative_prompt_embeds.data() : text.prompt(p)};
  else
    rows = {text.negative_prompt_embeds.data(), text.prompt(p)};
  const auto batch = static_cast<std::int64_t>(rows.size());
  OwnedTensor dev = rt.arena().empty(DType::f32, {batch, text.tokens, text.width});
  for (std::int64_t b = 0; b < batch; ++b)
    ops::copy(rt.ctx(),
              Tensor::wrap(const_cast<float*>(rows[static_cast<std::size_t>(b)]), DType::f32, Device::cpu(),
                           {1, text.tokens, text.width}),
              dev.slice(0, b, 1));
  return dev;
}

// -- models ----------------------------------------------------------------------------------

}  // namespace

struct LoadedModels {
  std::unique_ptr<model::WeightFiles> files;
  std::unique_ptr<infinity::CommTensorGroup> tensor_group;  // with --parallel.tensor T > 1
  std::unique_ptr<model::UNet3D> unet;
  std::unique_ptr<model::VaeDecoder> vae;  // none: latents only
  std::string vae_key;  // which VAE `vae` is ("" for none)
  double load_seconds = 0;
  bool kept = false;  // loaded before this video: for an earlier one, or ahead of the first
  int videos = 0;  // the videos that have used them so far, this one included
  double ahead_seconds = 0;  // the load ahead of the first video (a later pipeline stage's)
};

ModelCache::ModelCache() = default;
ModelCache::~ModelCache() = default;

LoadedModels* ModelCache::find(const std::string& key) { return models_ && key == key_ ? models_.get() : nullptr; }

LoadedModels& ModelCache::keep(const std::string& key, std::unique_ptr<LoadedModels> models) {
  models_.reset();  // the old weights go before the new ones are kept
  key_ = key;
  models_ = std::move(models);
  return *models_;
}

namespace {

using Models = LoadedModels;

// What the UNet is: a video whose UNet is the same reuses it (its VAE may differ).
std::string unet_key(const Run& r) {
  const GenerateSpec& o = r.o;
  return json{o.model, o.unet, o.model_seed, dtype_name(r.job.dtype()), o.job.tensor, o.lora, o.lora_scale}.dump();
}

void read_unet(Run& r, Models& m) {
  const GenerateSpec& o = r.o;
  Runtime& rt = r.job.runtime();
  const auto params = model::unet_parameters(r.ucfg);
  const mpi::ProcessGrid& grid = r.job.grid();
  const model::TensorShard shard{grid.tensor_index(), grid.tensor_size()};
  model::Weights weights;
  if (o.builtin()) {
    weights = model::Weights::random(params, rt, r.job.dtype(), static_cast<std::uint64_t>(o.model_seed), shard);
  } else {
    m.files = std::make_unique<model::WeightFiles>(r.files);
    weights = model::Weights(*m.files, params, rt, r.job.dtype(), false, &r.warnings, shard);
  }
  if (!o.lora.empty()) {
    VINF_INPUT_CHECK(shard.size == 1, "--model.lora with --parallel.tensor ", shard.size,
                     ": a LoRA merges into whole weights; run it without tensor parallelism");
    VINF_INPUT_CHECK(std::isfinite(o.lora_scale), "--model.lora-scale must be a number, got ", o.lora_scale);
    const model::LoraAdapters lora = model::LoraAdapters::load(rt.arena(), rt.ctx(), o.lora, params);
    lora.merge_into(rt.ctx(), weights, lora.scale() * static_cast<float>(o.lora_scale));
  }
  m.unet = std::make_unique<model::UNet3D>(r.ucfg, std::move(weights));
  if (r.job.tensor_comm()) {
    m.tensor_group = std::make_unique<infinity::CommTensorGroup>(*r.job.tensor_comm());
    m.unet->set_tensor_group(m.tensor_group.get());
  }
}

// The VAE this video decodes with: a random one for built-in models, --model.vae, or MODEL/vae
// when there is one; none when it writes latents only.
void read_vae(Run& r, Models& m) {
  const GenerateSpec& o = r.o;
  Runtime& rt = r.job.runtime();
  m.vae.reset();
  m.vae_key = r.vae_config ? r.vae_source : "";
  if (r.vae_config && o.builtin()) {
    auto vw = model::Weights::random(model::vae_decoder_parameters(*r.vae_config), rt, r.job.dtype(),
                                     model::vae_seed(static_cast<std::uint64_t>(o.model_seed)));
    m.vae = std::make_unique<model::VaeDecoder>(*r.vae_config, std::move(vw));
  } else if (r.vae_config) {
    m.vae = std::make_unique<model::VaeDecoder>(model::VaeDecoder::load(r.vae_source, rt, r.job.dtype()));
  }
}

// The models, loaded once per process: a later video with the same UNet reuses it, and its VAE
// when that is the same too.
Models& load_models(Run& r, ModelCache& cache, bool ahead = false) {
  const auto t_load = Clock::now();
  const std::string key = unet_key(r);
  Models* m = cache.find(key);
  const bool kept = m != nullptr;
  if (!m) {
    m = &cache.keep(key, std::make_unique<Models>());
    read_unet(r, *m);
  }
  if (!kept || m->vae_key != (r.vae_config ? r.vae_source : "")) read_vae(r, *m);
  if (!r.vae_config && (r.o.video || r.o.png))
    r.report.say("no VAE (no --model.vae and no " + r.o.model + "/vae): writing latents only");
  m->kept = kept;
  m->load_seconds = r.job.session().max(seconds_since(t_load));
  if (ahead)
    m->ahead_seconds = m->load_seconds;
  else
    ++m->videos;
  return *m;
}

// "8", or "5-6" when the frames do not divide evenly over the clips.
std::string clip_sizes(const Run& r) {
  const std::int64_t fewest = r.frames / r.clips;
  return std::to_string(fewest) + (r.frames % r.clips ? "-" + std::to_string(fewest + 1) : "");
}

// The long-video method in words, for the log.
std::string long_method_summary(const Run& r) {
  const sampling::LongVideoConfig& l = r.o.long_video;
  if (r.fifo)
    return "--long.mode fifo: a queue of " + std::to_string(r.fifo->queue_length()) + " frames, " +
           std::to_string(r.fifo->windows().size()) + " model calls of " + std::to_string(l.fifo_window) +
           " frames per iteration (" + (l.fifo_lookahead ? "lookahead" : "no lookahead") + "), " +
           std::to_string(r.total_steps()) + " iterations after a base video of " + std::to_string(r.o.steps) +
           " steps";
  const auto windows = sampling::sliding_windows(r.frames, l.window, l.stride);
  return "--long.mode windows: " + std::to_string(windows.size()) + " window(s) of " +
         std::to_string(windows.front().count) + " frames every " + std::to_string(l.stride) + ", " +
         sampling::blend_name(l.blend) + " blend";
}

// What the run is about to do, once the models are loaded.
void log_plan(const Run& r, const Models& m, const sampling::TextEmbeddings& text) {
  const GenerateSpec& o = r.o;
  const Device& device = r.job.device();
  const DType dtype = r.job.dtype();
  for (const std::string& w : r.warnings) r.report.say("warning: " + w);
  r.report.say(
      "model " + (o.builtin() ? o.model + " (seed " + std::to_string(o.model_seed) + ")" : r.files.dir) + ": " +
      std::to_string(m.unet->weights().count()) + " parameters as " + model::precision_name(dtype, device) +
      (tf32_in_effect(device, dtype) ? " (TF32 tensor cores)" : "") + " on " + device.name() +
      gpu_kernels_note(r.job.runtime().ctx()) +
      (o.lora.empty() ? std::string() : ", LoRA " + o.lora + " merged at scale " + std::to_string(o.lora_scale)) +
      (m.videos > 1 ? ", kept from an earlier video"
       : m.kept     ? ", loaded in " + format_duration(m.ahead_seconds) + " before the first video"
                    : ", loaded in " + format_duration(m.load_seconds)));
  const std::string size =
      std::to_string(r.frames) + " frames of " + std::to_string(o.width) + "x" + std::to_string(o.height);
  const std::string sampler = sampling::scheduler_name(o.scheduler) + std::string(" ") + std::to_string(o.steps) +
                              " steps, guidance " + format_number(o.guidance, 5) + ", noise " +
                              sampling::noise_mode_name(o.noise) + " seed " + std::to_string(o.seed);
  if (r.long_method)
    r.report.say(size + ", " + long_method_summary(r) + ", over " + std::to_string(r.clips) + " rank(s); " + sampler);
  else
    r.report.say(size + " over " + std::to_string(r.clips) + " clip(s) of " + clip_sizes(r) +
                 (o.cfg() == 2 ? " x 2 guidance branches" : "") +
                 (o.job.tensor > 1 ? " x " + std::to_string(o.job.tensor) + " tensor ranks" : "") + ", --vi.mode " +
                 infinity::mode_name(o.vi.mode) + ", " + sampler);
  r.report.detail("scheduler config: " + r.sched_source + "; text embeddings: " + text.source);
  std::string ts;
  for (std::size_t i = 0; i < r.scheduler->timesteps().size(); ++i)
    ts += (i ? " " : "") + std::to_string(r.scheduler->timesteps()[i]);
  r.report.detail("timesteps: " + ts);
  for (int c = 0; c < (r.long_method ? 0 : r.clips); ++c) {
    const int p = sampling::prompt_for_clip(c, r.clips, static_cast<int>(text.prompts));
    const infinity::FrameRange range = infinity::clip_frames(r.frames, r.clips, c);
    r.report.detail("clip " + std::to_string(c) + " (frames " + std::to_string(range.first) + "-" +
                    std::to_string(range.first + range.count - 1) + "): prompt " + std::to_string(p) +
                    (o.prompts.empty() ? "" : " '" + o.prompts[static_cast<std::size_t>(p)] + "'"));
  }
}

// The output directory and its checkpoints folder, checked once before anything is computed or
// removed; with --overwrite the previous run's marker and checkpoints go.
void prepare_out_dir(const Run& r) {
  if (r.in) return;  // the first pipeline stage prepared it
  mpi::Session& mpi = r.job.session();
  std::string mkdir_error;
  if (r.root) {
    std::error_code ec;
    fs::create_directories(r.ckpt_dir, ec);
    if (ec) mkdir_error = ec.message();
  }
  mpi.broadcast(mkdir_error);
  VINF_INPUT_CHECK(mkdir_error.empty(), "cannot create the output directory ", r.ckpt_dir, ": ", mkdir_error);
  io::check_run_files(mpi.world(), r.ckpt_dir, r.stamp);
  if (r.root && r.replace_previous) {
    const std::vector<std::string> removed = remove_run_outputs(r.out_dir);
    if (!removed.empty()) {
      std::string list;
      for (const std::string& name : removed) list += (list.empty() ? "" : ", ") + name;
      r.report.say("--overwrite: removed the previous run's outputs in " + r.out_dir + ": " + list);
    }
  }
}

// -- denoise ---------------------------------------------------------------------------------

// The denoising loop of one rank: its latents, the UNet's batch, the guidance, the scheduler's
// steps, the checkpoints, and the stop on a signal or on latents that are no longer finite.
class Denoiser {
 public:
  Denoiser(Run& r, const Models& m, const sampling::TextEmbeddings& text);
  // Runs the steps from the start (or the resumed step) to the end; the stop signal that ended
  // the run early, or 0.
  int run();

  const Tensor& latents() const { return sampler_.latents(); }
  // This rank's latents in the files' frame-major layout, on the host.
  std::vector<float> host_latents() { return to_host(sampler_.latents()); }
  std::vector<float> host_previous_x0() { return to_host(sampler_.previous_x0()); }
  const io::TextCache& text() const { return text_cache_; }
  ActivationDump& dump() { return dump_; }
  double denoise_seconds = 0, checkpoint_seconds = 0;
  double base_seconds = 0;  // FIFO's base video (within denoise_seconds)
  std::vector<double> step_max;  // every step's slowest rank
  std::vector<std::string> checkpoints_written;

 private:
  std::vector<float> to_host(const Tensor& t);
  // Frames [first, nf) of the latents on the host, frame-major.
  std::vector<float> host_frames(std::int64_t first);
  void restore_or_draw();
  void step(int i);
  void long_method_step(int i);
  void start_long_method(const sampling::TextEmbeddings& text);
  void stop_if_not_finite(int i);
  void progress_line(Progress& progress, int i, int start) const;
  void write_checkpoint(int completed);
  model::UNet3D::Observer observer(bool dumping);

  Run& r_;
  const Models& m_;
  Runtime& rt_;
  ExecContext& ctx_;
  std::unique_ptr<model::TemporalContext> temporal_;
  // --long.mode windows and fifo (sampling/long_video): the model over windows, on every rank.
  std::unique_ptr<GuidedModel> guided_;
  std::unique_ptr<SlidingWindows> windows_;
  std::unique_ptr<FifoDraws> fifo_draws_;
  std::unique_ptr<FifoQueue> fifo_;
  OwnedTensor text_;
  std::int64_t batch_;
  io::FramePart part_;
  sampling::Sampler sampler_;
  sampling::NoiseSource noise_;
  OwnedTensor frame_major_, unet_in_, pred_, both_, eps_, z_;
  ActivationDump dump_;
  FiniteWatch watch_;
  io::TextCache text_cache_;
};

Denoiser::Denoiser(Run& r, const Models& m, const sampling::TextEmbeddings& text)
    : r_(r),
      m_(m),
      rt_(r.job.runtime()),
      ctx_(rt_.ctx()),
      text_(text_on_device(r, text, sampling::prompt_for_clip(r.clip, r.clips, static_cast<int>(text.prompts)))),
      batch_(text_.size(0)),
      part_(r.part()),
      sampler_(*r.scheduler, rt_.arena(), Shape{1, r.ucfg.in_channels, r.nf, r.lh, r.lw}),
      noise_(r.o.noise, static_cast<std::uint64_t>(r.o.seed), r.long_method ? 0 : r.clip, r.first_frame),
      dump_(r.o, batch_, r.nf, r.first_frame, r.frames),
      text_cache_(text) {
  const std::int64_t c = r.ucfg.in_channels;
  const Shape latent_shape{1, c, r.nf, r.lh, r.lw}, unet_shape{batch_, c, r.nf, r.lh, r.lw};
  frame_major_ = rt_.arena().empty(DType::f32, {1, r.nf, c, r.lh, r.lw});
  if (r.long_method) {
    start_long_method(text);
    rt_.synchronize();
    return;
  }
  if (mpi::Communicator* clip_comm = r.job.clip_comm())
    temporal_ = std::make_unique<infinity::Context>(r.o.vi, *clip_comm, infinity::clip_frame_counts(r.frames, r.clips));
  else
    temporal_ = std::make_unique<model::PlainTemporalContext>();
  restore_or_draw();
  if (batch_ > 1) unet_in_ = rt_.arena().empty(DType::f32, unet_shape);
  pred_ = rt_.arena().empty(DType::f32, unet_shape);
  if (r.o.cfg() == 2) both_ = rt_.arena().empty(DType::f32, {2, c, r.nf, r.lh, r.lw});
  eps_ = rt_.arena().empty(DType::f32, latent_shape);
  if (r.scheduler->stochastic()) z_ = rt_.arena().empty(DType::f32, latent_shape);
  rt_.synchronize();
}

// Windows or FIFO: every prompt's text, the model over windows, and the state: the checkpoint's,
// or for windows the noise, for FIFO the base video and the queue made from it.
void Denoiser::start_long_method(const sampling::TextEmbeddings& text) {
  std::vector<OwnedTensor> texts;
  for (int p = 0; p < static_cast<int>(text.prompts); ++p) texts.push_back(text_on_device(r_, text, p));
  guided_ = std::make_unique<GuidedModel>(*m_.unet, r_.o.fps, r_.o.guidance, std::move(texts));
  if (r_.o.debug) guided_->observe(watch_.observer(ctx_));
  mpi::Communicator* group = r_.job.clip_comm();
  const Shape latent_shape{1, r_.ucfg.in_channels, r_.nf, r_.lh, r_.lw};
  if (!r_.fifo) {
    windows_ = std::make_unique<SlidingWindows>(*guided_, group, r_.o.long_video, r_.frames);
    eps_ = rt_.arena().empty(DType::f32, latent_shape);
    if (r_.scheduler->stochastic()) z_ = rt_.arena().empty(DType::f32, latent_shape);
    restore_or_draw();
    return;
  }
  fifo_draws_ =
      r_.o.latents_init.empty() ? seeded_fifo_draws(noise_, *r_.fifo) : file_fifo_draws(r_.o.latents_init, *r_.fifo);
  fifo_ = std::make_unique<FifoQueue>(
      *guided_, group, *r_.fifo, *r_.scheduler, *r_.base_scheduler, *fifo_draws_, r_.frames,
      sampling::fifo_prompt_ends(r_.frames, static_cast<int>(text.prompts), r_.o.long_video.fifo_prompt_frames));
  ops::fill(ctx_, sampler_.previous_x0(), 0.0);  // no solver memory: checkpoints keep zeros there
  if (r_.in || r_.resumed()) {
    restore_or_draw();
    return;
  }
  const int steps = r_.fifo->steps();
  const auto t0 = Clock::now();
  Progress progress(r_.prefix() + " base video", steps, static_cast<double>(r_.fifo->window()), "frame-steps/s",
                    r_.root && !r_.o.quiet, r_.o.verbose ? 0.0 : 10.0);
  fifo_->start(ctx_, sampler_.latents(), [&](int k) {
    rt_.synchronize();
    progress.update(k, "(the first " + std::to_string(r_.fifo->window()) + " frames, from which the queue starts)");
  });
  base_seconds = r_.job.session().max(seconds_since(t0));
}

// Host copies of (1, C, F, H, W) device tensors in the files' frame-major layout.
std::vector<float> Denoiser::to_host(const Tensor& t) {
  ops::copy(ctx_, t.permute({0, 2, 1, 3, 4}), frame_major_);
  std::vector<float> host(static_cast<std::size_t>(frame_major_.numel()));
  ops::copy(ctx_, frame_major_, Tensor::wrap(host.data(), DType::f32, Device::cpu(), frame_major_.shape));
  rt_.synchronize();
  return host;
}

std::vector<float> Denoiser::host_frames(std::int64_t first) {
  if (first == 0) return host_latents();
  const std::int64_t count = r_.nf - first;
  const Tensor dst = frame_major_.slice(1, 0, count);
  ops::copy(ctx_, sampler_.latents().slice(2, first, count).permute({0, 2, 1, 3, 4}), dst);
  std::vector<float> host(static_cast<std::size_t>(dst.numel()));
  ops::copy(ctx_, dst, Tensor::wrap(host.data(), DType::f32, Device::cpu(), dst.shape));
  rt_.synchronize();
  return host;
}

// The previous pipeline stage's latents and solver memory, the checkpoint's, or the initial noise.
void Denoiser::restore_or_draw() {
  ResumePoint& resume = r_.resume;
  if (!r_.in && !r_.resumed()) {
    if (r_.o.latents_init.empty()) {
      noise_.initial(ctx_, rt_.arena(), sampler_.latents());
      return;
    }
    // This rank's frames of the given initial latents.
    const io::SafetensorsFile f(r_.o.latents_init);
    ops::copy(ctx_, f.tensor("latents_init").slice(2, r_.first_frame, r_.nf), sampler_.latents());
    rt_.synchronize();
    return;
  }
  const float* latents = r_.in ? r_.in->latents.data() : resume.latents.data();
  const float* previous = r_.in ? r_.in->previous_x0.data() : resume.previous_x0.data();
  OwnedTensor prev_dev = rt_.arena().empty(DType::f32, frame_major_.shape);
  ops::copy(ctx_, Tensor::wrap(const_cast<float*>(latents), DType::f32, Device::cpu(), frame_major_.shape),
            frame_major_);
  ops::copy(ctx_, Tensor::wrap(const_cast<float*>(previous), DType::f32, Device::cpu(), frame_major_.shape), prev_dev);
  sampler_.restore(ctx_, frame_major_.permute({0, 2, 1, 3, 4}), prev_dev.permute({0, 2, 1, 3, 4}));
  rt_.synchronize();
  if (r_.in) return;
  resume.latents = {};
  resume.previous_x0 = {};
  r_.report.say("resuming from " + r_.resume_path + " (written by " + std::to_string(r_.resumed()->stamp.world_size) +
                " rank(s)) after " + (r_.fifo ? "iteration " : "step ") + std::to_string(r_.start_step()) + " of " +
                std::to_string(r_.total_steps()));
}

model::UNet3D::Observer Denoiser::observer(bool dumping) {
  const bool debug = r_.o.debug;
  if (dumping && debug)
    return [d = dump_.observer(ctx_), w = watch_.observer(ctx_)](const std::string& name, const Tensor& out) {
      d(name, out);
      w(name, out);
    };
  if (dumping) return dump_.observer(ctx_);
  if (debug) return watch_.observer(ctx_);
  return {};
}

// Windows: the blended prediction over the whole video and the scheduler's update; FIFO: one
// iteration of the queue.
void Denoiser::long_method_step(int i) {
  if (fifo_) {
    fifo_->iterate(ctx_, i, sampler_.latents());
  } else {
    windows_->eps(ctx_, sampler_.latents(), r_.scheduler->timesteps()[static_cast<std::size_t>(i)], eps_);
    if (r_.scheduler->stochastic()) noise_.step(ctx_, rt_.arena(), i, z_);
    sampler_.step(ctx_, i, eps_, z_);
  }
  rt_.synchronize();
}

// One UNet call over the batch, the guidance and the scheduler's update.
void Denoiser::step(int i) {
  if (r_.long_method) {
    long_method_step(i);
    return;
  }
  const GenerateSpec& o = r_.o;
  const std::int64_t t = r_.scheduler->timesteps()[static_cast<std::size_t>(i)];
  const Tensor& x = sampler_.latents();
  if (batch_ > 1)
    for (std::int64_t b = 0; b < batch_; ++b) ops::copy(ctx_, x, unet_in_.slice(0, b, 1));
  const bool dumping = dump_.wanted(i + 1);
  m_.unet->forward(ctx_, batch_ > 1 ? unet_in_.view() : x, t, o.fps, text_, pred_, *temporal_, observer(dumping));
  if (dumping) dump_.write_step(r_.job.session(), r_.out_dir + "/activations.h5", i + 1);
  Guidance::of(r_.guided, static_cast<float>(o.guidance), o.cfg() == 2 ? r_.job.cfg_comm() : nullptr)
      .combine(ctx_, pred_, both_, eps_);
  if (r_.scheduler->stochastic()) noise_.step(ctx_, rt_.arena(), i, z_);
  sampler_.step(ctx_, i, eps_, z_);
  rt_.synchronize();
}

// A step that made the latents NaN or infinite (f16 overflow, a damaged input) ends the run here,
// before a checkpoint could keep it; every rank learns which rank saw it first.
void Denoiser::stop_if_not_finite(int i) {
  mpi::Session& mpi = r_.job.session();
  // FIFO: the queue and the frame that just left it (the video's earlier frames were checked).
  std::int64_t first = 0;
  if (r_.fifo) first = std::clamp<std::int64_t>(r_.fifo->output_frame(i), 0, r_.frames);
  const std::vector<float> now = host_frames(first);
  std::size_t bad = 0;
  while (bad < now.size() && std::isfinite(now[bad])) ++bad;
  const double first_bad_rank = -mpi.max(bad < now.size() ? -static_cast<double>(mpi.rank()) : -1e9);
  if (first_bad_rank >= 1e9) return;
  // The frame and, with --debug, the module, from the rank named (the others saw other data).
  std::string where, module = "; run with --debug to name the first UNet module whose output is not finite";
  if (bad < now.size() && mpi.rank() == static_cast<int>(first_bad_rank)) {
    const std::size_t per_frame = now.size() / static_cast<std::size_t>(r_.nf - first);
    const std::int64_t at = first + static_cast<std::int64_t>(bad / per_frame);
    where = at < r_.frames ? " (first in frame " + std::to_string(r_.first_frame + at) + ")"
                           : " (first at FIFO queue position " + std::to_string(at - r_.frames) + ")";
    if (r_.o.debug) {
      module = watch_.first_bad().empty()
                   ? "; every UNet module's output was finite on that rank, so the guidance or the scheduler step "
                     "made it"
                   : "; the first UNet module whose output was not finite on that rank: " + watch_.first_bad();
    }
  }
  VINF_FAIL(r_.step_words(i), " made the latents NaN or infinite on rank ", static_cast<int>(first_bad_rank), where,
            module, "; the run stops here and keeps only the earlier checkpoints. Causes: --dtype f16 overflowing ",
            "(use bf16 or f32), damaged weights or embeddings, an unusual scheduler config");
}

void Denoiser::write_checkpoint(int completed) {
  mpi::Session& mpi = r_.job.session();
  const auto t0 = Clock::now();
  const std::string path = r_.ckpt_dir + "/" + io::checkpoint_name(completed);
  io::SolverState state{completed, r_.scheduler->timesteps(), r_.scheduler->sigmas()};
  const std::vector<float> lat = to_host(sampler_.latents()), prev = to_host(sampler_.previous_x0());
  io::write_checkpoint(mpi.world(), path, r_.stamp, part_, lat.data(), prev.data(), state, text_cache_);
  if (r_.root) io::prune_checkpoints(r_.ckpt_dir, r_.o.checkpoint_keep);
  checkpoints_written.push_back(path);
  checkpoint_seconds += mpi.max(seconds_since(t0));
  r_.report.detail("checkpoint " + path + " (" + format_duration(seconds_since(t0)) + ")");
}

// The progress line after step i: the frames through FIFO's queue, or the step's timestep.
void Denoiser::progress_line(Progress& progress, int i, int start) const {
  if (r_.fifo) {
    const std::int64_t done = std::clamp<std::int64_t>(r_.fifo->output_frame(i) + 1, 0, r_.frames);
    progress.update(i + 1 - start, "frames " + std::to_string(done) + "/" + std::to_string(r_.frames) +
                                       (done == 0 ? " (warm-up: the base video's copies leave first)" : ""));
    return;
  }
  progress.update(
      i + 1 - start,
      (start > 0 ? "(" + std::to_string(i + 1) + "/" + std::to_string(r_.o.steps) + " of the run) " : std::string()) +
          "t=" + std::to_string(r_.scheduler->timesteps()[static_cast<std::size_t>(i)]));
}

int Denoiser::run() {
  const GenerateSpec& o = r_.o;
  mpi::Session& mpi = r_.job.session();
  const int start = r_.start_step(), end = std::max(start, r_.steps.end), total = r_.total_steps();
  // A FIFO iteration steps every position of the queue once.
  const double work = r_.fifo ? static_cast<double>(r_.fifo->steps()) : static_cast<double>(r_.frames);
  Progress progress(r_.prefix(), end - start, work, "frame-steps/s", r_.root && !o.quiet, o.verbose ? 0.0 : 10.0);
  const auto t_denoise = Clock::now();
  const StepControl control(mpi, r_.job.world_session().rank(),
                            {total, o.checkpoint_every, true, r_.fifo ? "iteration" : "step"});
  DenoiseHooks hooks;
  hooks.step = [this](int i) { step(i); };
  hooks.progress = [&](int i, double) { progress_line(progress, i, start); };
  hooks.spoil = [this](int) { ops::fill(ctx_, sampler_.latents().select(2, r_.nf / 2), std::nan("")); };
  hooks.check = [this](int i) { stop_if_not_finite(i); };
  hooks.checkpoint = [this](int done) {
    write_checkpoint(done);
    return checkpoints_written.back();
  };
  const DenoiseEnd ended = denoise_loop(control, {start, end, false}, hooks, r_.report);
  if (ended.stop_signal != 0) return ended.stop_signal;
  denoise_seconds = mpi.max(seconds_since(t_denoise)) + base_seconds;
  step_max = mpi.max(ended.step_seconds);
  dump_.finish(mpi, r_.out_dir + "/activations.h5");
  return 0;
}

// -- outputs ---------------------------------------------------------------------------------

// Where the video's parts meet (the frame each part after the first starts at): the clips' starts,
// the windows' (windows), none (FIFO: every frame went through the same queue).
std::vector<std::int64_t> video_boundaries(const Run& r) {
  std::vector<std::int64_t> b;
  if (r.fifo) return b;
  if (r.long_method) {
    const sampling::LongVideoConfig& l = r.o.long_video;
    for (const sampling::FrameSpan& w : sampling::sliding_windows(r.frames, l.window, l.stride))
      if (w.first > 0) b.push_back(w.first);
    return b;
  }
  for (int c = 1; c < r.clips; ++c) b.push_back(infinity::clip_frames(r.frames, r.clips, c).first);
  return b;
}

// What rank 0 learns from every rank for run.json: bytes per collective kind, peak memory.
json rank_report(Run& r) {
  job::Job& job = r.job;
  const mpi::CommCounters none;
  json mine = {
      {"clip_group", counters_json(job.clip_comm() ? job.clip_comm()->counters() : none)},
      {"cfg_group", counters_json(job.cfg_comm() ? job.cfg_comm()->counters() : none)},
      {"tensor_group", counters_json(job.tensor_comm() ? job.tensor_comm()->counters() : none)},
      {"tensor_summary", (job.tensor_comm() ? job.tensor_comm()->counters() : none).summary()},
      {"clip_summary", job.clip_comm() ? job.clip_comm()->counters().summary() : mpi::CommCounters{}.summary()},
      {"cfg_summary", job.cfg_comm() ? job.cfg_comm()->counters().summary() : mpi::CommCounters{}.summary()},
      {"arena_peak", static_cast<double>(job.runtime().arena().stats().peak_in_use)},
      {"max_rss", max_rss_bytes()}};
  json all = json::array();
  for (const std::string& line : job.session().gather_on_root(mine.dump())) all.push_back(json::parse(line));
  return all;
}

struct Timings {
  double text = 0, write = 0, evaluate = 0;
};

// Clip c's frames as run.json lists them: [first, end).
json frame_span(const Run& r, int c) {
  const infinity::FrameRange range = infinity::clip_frames(r.frames, r.clips, c);
  return {range.first, range.first + range.count};
}

// run.json's ranks: each rank's place, bytes received per group and peak memory; `peak` gets the
// largest.
json ranks_json(const Run& r, const json& reports, double& peak) {
  const GenerateSpec& o = r.o;
  json ranks = json::array();
  peak = 0;
  for (int k = 0; k < r.job.size(); ++k) {
    const json& rep = reports[static_cast<std::size_t>(k)];
    const int tensor = r.job.grid().tensor_size(), clip = k / tensor % r.clips;
    ranks.push_back(
        {{"rank", k},
         {"clip", clip},
         {"cfg_branch", k / tensor / r.clips},
         {"tensor_rank", k % tensor},
         {"frames", frame_span(r, clip)},
         {"bytes_received",
          {{"clip_group", rep["clip_group"]}, {"cfg_group", rep["cfg_group"]}, {"tensor_group", rep["tensor_group"]}}},
         {"peak_memory_bytes", rep["arena_peak"]},
         {"max_rss_bytes", rep["max_rss"]}});
    peak = std::max(peak, rep["arena_peak"].get<double>());
    r.report.detail("rank " + std::to_string(k) + " received: clip group " + rep["clip_summary"].get<std::string>() +
                    (o.cfg() == 2 ? "; cfg group " + rep["cfg_summary"].get<std::string>() : "") +
                    (o.job.tensor > 1 ? "; tensor group " + rep["tensor_summary"].get<std::string>() : "") +
                    "; peak memory " + format_mib(rep["arena_peak"].get<double>()));
  }
  return ranks;
}

void write_unet_run_json(Run& r, const Models& m, Denoiser& d, const VideoResult& video, const Timings& times,
                         bool evaluated) {
  const json reports = rank_report(r);
  if (!r.root) return;
  double peak = 0;
  const json ranks = ranks_json(r, reports, peak);
  json outputs = {"latents.h5"};
  for (const std::string& c : io::list_checkpoints(r.ckpt_dir)) outputs.push_back(fs::relative(c, r.out_dir).string());
  if (d.dump().enabled()) outputs.push_back("activations.h5");
  for (const std::string& f : video.files) outputs.push_back(f);
  if (evaluated) outputs.insert(outputs.end(), {"evaluate.json", "evaluate.png"});
  // With a pipeline, the earlier stages' steps and times came with the hand-off.
  const int run_steps = r.total_steps() - r.first_step();
  std::vector<double> per_step = r.in ? r.in->step_seconds : std::vector<double>{};
  per_step.insert(per_step.end(), d.step_max.begin(), d.step_max.end());
  const double denoise = d.denoise_seconds + (r.in ? r.in->denoise_seconds : 0.0);
  const double checkpoints = d.checkpoint_seconds + (r.in ? r.in->checkpoint_seconds : 0.0);
  // Frame-steps: a step of every frame, or a FIFO iteration's step of every queue level.
  const double work = r.fifo ? static_cast<double>(r.fifo->steps()) : static_cast<double>(r.frames);
  // (FIFO's base video, when this run made it: f frames through the schedule.)
  const double base = d.base_seconds > 0 ? static_cast<double>(r.fifo->window() * r.fifo->steps()) : 0.0;
  const double rate = (work * run_steps + base) / std::max(denoise, 1e-9);
  RunRecord record;
  record.out_dir = r.out_dir;
  record.config = r.config;
  record.resumed_from = r.resume_path;
  record.start_step = r.first_step();
  record.boundaries = video_boundaries(r);
  record.schedule = {{"timesteps", r.scheduler->timesteps()}, {"sigmas", r.scheduler->sigmas()}};
  record.times = {{"load", m.load_seconds},
                  {"text", times.text},
                  {"denoise", denoise},
                  {"denoise_per_step", per_step},
                  {"checkpoint", checkpoints},
                  {"write", times.write},
                  {"decode", video.decode_seconds},
                  {"video", video.write_seconds},
                  {"evaluate", times.evaluate},
                  {"base_video", d.base_seconds},
                  {"total", seconds_since(r.start)}};
  record.frame_steps_per_s = denoise > 0 ? rate : 0.0;
  record.ranks = ranks;
  record.outputs = outputs;
  pipeline::write_run_json(record);
  r.report.say("denoised " + std::to_string(run_steps) + (r.fifo ? " iteration(s) in " : " step(s) in ") +
               format_duration(denoise) + " (" + format_number(rate) + " frame-steps/s); peak memory " +
               format_mib(peak) + " per rank");
  std::string listed = "latents.h5";
  for (const std::string& f : video.files) listed += ", " + f;
  if (evaluated) listed += ", evaluate.json, evaluate.png";
  std::cout << "vinf generate: outputs in " << r.out_dir << "/ (" << listed << ", run.json)\n" << std::flush;
  // A stop signal after the last step (while the latents, the video or run.json were written) does
  // not cut the outputs short: they are finished, and the run says so instead of saying nothing.
  if (const std::string late = late_stop_line(); !late.empty()) r.report.say(late);
}

// --evaluate: vinf evaluate on rank 0 over the video (latents.h5 without one) with the run's
// boundaries. What went wrong reaches every rank.
struct Evaluated {
  bool wanted = false, bad_input = false;
  std::string error, command;  // command: the one that evaluates the run again
  bool done() const { return wanted && error.empty(); }
};

Evaluated evaluate_outputs(const Run& r, const VideoResult& video, Timings& times) {
  Evaluated e;
  e.wanted = r.o.evaluate;
  if (!e.wanted) return e;
  const auto t0 = Clock::now();
  const bool mp4 = std::find(video.files.begin(), video.files.end(), "video.mp4") != video.files.end();
  const std::string input = r.out_dir + (mp4 ? "/video.mp4" : "/latents.h5");
  const std::vector<std::int64_t> boundaries = video_boundaries(r);
  std::string list;
  for (std::int64_t b : boundaries) list += (list.empty() ? "" : ",") + std::to_string(b);
  e.command = "vinf evaluate " + input + (list.empty() ? "" : " --boundaries " + list) + " --out " + r.out_dir +
              (r.o.evaluate_clip_vision.empty() ? "" : " --clip-vision " + r.o.evaluate_clip_vision);
  std::string kind;
  if (r.root) {
    r.report.say("evaluating " + std::string(mp4 ? "video.mp4" : "latents.h5") +
                 " into evaluate.json and evaluate.png");
    try {
      evaluate::evaluate_file(input, r.out_dir, boundaries, r.o.evaluate_clip_vision, r.o.quiet);
    } catch (const InputError& x) {
      e.error = x.what();
      kind = "input";
    } catch (const std::exception& x) {
      e.error = x.what();
    }
  }
  mpi::Session& mpi = r.job.session();
  mpi.broadcast(e.error);
  mpi.broadcast(kind);
  e.bad_input = kind == "input";
  times.evaluate = mpi.max(seconds_since(t0));
  return e;
}

// latents.h5 (the clip ranks of branch 0 hold the video; branch 1 holds the same numbers), the
// video, and run.json last: its presence marks a finished run.
void write_outputs(Run& r, const Models& m, Denoiser& d, Timings times) {
  mpi::Session& mpi = r.job.session();
  const auto t_write = Clock::now();
  std::vector<float> host = d.host_latents();
  if (r.long_method) host.resize(static_cast<std::size_t>(r.video_part().count * r.ucfg.in_channels * r.lh * r.lw));
  bool finite = true;
  for (float v : host) finite = finite && std::isfinite(v);
  VINF_CHECK(mpi.all(finite), "the final latents hold NaN or infinite values (a rank's numbers diverged); ",
             "latents.h5 was not written to ", r.out_dir);
  io::write_latents(mpi.world(), r.out_dir + "/latents.h5", r.stamp, r.video_part(), host.data(), video_boundaries(r));
  times.write = mpi.max(seconds_since(t_write));
  VideoResult video;
  // Windows and FIFO: every rank holds the video; each decodes the share a clip rank would.
  const infinity::FrameRange share = infinity::clip_frames(r.frames, r.clips, r.clip);
  const Tensor mine = r.long_method ? d.latents().slice(2, share.first, share.count) : d.latents();
  if (m.vae) video = write_video_outputs(r.o, r.job, *m.vae, mine, r.frames, r.out_dir);
  const Evaluated evaluated = evaluate_outputs(r, video, times);
  write_unet_run_json(r, m, d, video, times, evaluated.done());
  // The run is complete (run.json is written); what its evaluation could not do is an error all the
  // same, with the command that evaluates it again.
  if (evaluated.error.empty()) return;
  const std::string why = "--evaluate: " + evaluated.error + " (the run's outputs are complete; " + evaluated.command +
                          " evaluates them again)";
  if (evaluated.bad_input) throw InputError(why);
  throw Error(why);
}

// This stage's state after its steps, for the next stage.
StageState hand_on(const Run& r, Denoiser& d) {
  StageState out;
  out.out_dir = r.out_dir;
  out.step = std::max(r.start_step(), r.steps.end);
  out.first_step = r.first_step();
  out.latents = d.host_latents();
  out.previous_x0 = d.host_previous_x0();
  out.text = d.text();
  out.step_seconds = r.in ? r.in->step_seconds : std::vector<double>{};
  out.step_seconds.insert(out.step_seconds.end(), d.step_max.begin(), d.step_max.end());
  out.denoise_seconds = d.denoise_seconds + (r.in ? r.in->denoise_seconds : 0.0);
  out.checkpoint_seconds = d.checkpoint_seconds + (r.in ? r.in->checkpoint_seconds : 0.0);
  out.resumed_from = r.resume_path;
  return out;
}

}  // namespace

void load_models_ahead(const GenerateSpec& base, job::Job& job, ModelCache& cache) {
  if (base.wan) return;  // a Wan video loads its models itself
  GenerateSpec o = base;
  Run r{o, job, Clock::now()};
  r.root = job.root();
  r.report = Reporter(r.prefix(), r.root, o.quiet, o.verbose);
  read_model_shape(r);
  load_models(r, cache, true);
  for (const std::string& w : r.warnings) r.report.say("warning: " + w);
}

namespace {

// The UNet family's phases over one Run: Video-Infinity's clips, the windows or FIFO.
class UnetVideoRun final : public VideoRun {
 public:
  UnetVideoRun(GenerateSpec& o, job::Job& job, ModelCache& cache, const StageState* in)
      : r_{o, job, Clock::now()}, cache_(cache) {
    r_.root = job.root();
    r_.report = Reporter(r_.prefix(), r_.root, o.quiet, o.verbose);
    r_.in = in;
    r_.steps = job::stage_steps(o.steps, job.layout().pipeline, job.stage());
  }
  void plan() override {
    const GenerateSpec& o = r_.o;
    if (const std::string note = imported_fields_note(o, dtype_name(r_.job.dtype()), r_.job.grid().clip_size());
        !note.empty())
      r_.report.say(note);
    for (const std::string& note : o.notes) r_.report.say(note);
    read_model_shape(r_);
    partition(r_);
    if (r_.fifo) r_.steps = {0, r_.total_steps()};  // its iterations (a pipeline is refused with it)
    check_memory(r_);
  }
  bool choose_outputs() override { return pipeline::choose_outputs(r_); }
  const std::string& out_dir() const override { return r_.out_dir; }
  void encode_prompts() override {
    const auto t0 = Clock::now();
    text_ = prepare_text(r_);
    times_.text = seconds_since(t0);
  }
  void load() override {
    models_ = &load_models(r_, cache_);
    log_plan(r_, *models_, text_);
    prepare_out_dir(r_);
    denoiser_ = std::make_unique<Denoiser>(r_, *models_, text_);
  }
  int denoise() override { return denoiser_->run(); }
  bool hand_on(StageState& out) override {
    if (r_.last_stage()) return false;
    out = pipeline::hand_on(r_, *denoiser_);
    return true;
  }
  void finish() override { write_outputs(r_, *models_, *denoiser_, times_); }

 private:
  Run r_;
  ModelCache& cache_;
  sampling::TextEmbeddings text_;
  Timings times_;
  const Models* models_ = nullptr;
  std::unique_ptr<Denoiser> denoiser_;
};

}  // namespace

std::unique_ptr<VideoRun> start_unet_video(GenerateSpec& o, job::Job& job, ModelCache& cache, const StageState* in) {
  return std::make_unique<UnetVideoRun>(o, job, cache, in);
}

}  // namespace vinf::pipeline
