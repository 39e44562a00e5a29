#include "app/generate_options.hpp"

#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "app/commands.hpp"
#include "app/option_values.hpp"
#include "core/error.hpp"
#include "core/utf8.hpp"
#include "core/progress.hpp"
#include "io/path_query.hpp"
#include "app/vi_options.hpp"
#include "model/wan_transformer.hpp"
#include "ops/runtime.hpp"
#include "pipeline/family.hpp"
#include "sampling/scheduler.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace vinf::app {

namespace {

constexpr std::int64_t kMaxPixels = 16384;
// Seeds up to 2^53 - 1: run.json and job lists keep them as JSON numbers, exact up to there.
constexpr double kMaxSeed = 9007199254740991.0;
constexpr unsigned kHelpWidth = 100, kHelpColumn = 44;  // wide enough that descriptions stay readable

// The options as the command line and --config spell them, before they become typed values.
struct Spelled {
  std::string device = "auto", dtype = "auto", comm_backend = "auto", scheduler = "dpmpp-sde", noise = "auto";
  std::string continue_dir;  // --continue RUN_DIR
  std::string long_mode = "clips", blend = "linear", fifo_grid = "released", fifo_prompt_frames, use_scale = "auto";
  ViOptions vi;
};

po::options_description run_options(RunPlan& o, Spelled& sp) {
  po::options_description all(
      "vinf generate: a video from text with Video-Infinity, the latent split along time over the ranks\n\n"
      "usage: vinf generate --config FILE [options]\n"
      "       mpirun -np N vinf generate --config FILE      (N clip ranks, or 2 x clips with --parallel.cfg 2)\n\n"
      "Options come from the command line and from --config FILE (INI: a key before any section is a\n"
      "top-level option, `[vi] local-frames = 8` is --vi.local-frames 8); the command line wins.\n"
      "Writes OUT/latents.h5 (the final latents [F, C, H, W] with the config as attributes), OUT/video.mp4\n"
      "and OUT/contact.png (when the model has a VAE), OUT/checkpoints/step-NNNNNN.h5, and last OUT/run.json\n"
      "(config, times per phase and per step, bytes per collective kind, peak memory per rank).\n\n"
      "Run",
      kHelpWidth, kHelpColumn);
  all.add_options()("help,h", "show this help")("config", path_value(&o.config_file, PathKind::file),
                                                kConfigOptionHelp)(
      "model", path_value(&o.model, PathKind::directory, {"builtin:"}),
      "the model: a diffusers pipeline directory (unet/, vae/, text_encoder/, tokenizer/) or a UNet directory, "
      "or builtin:tiny / builtin:small (random weights made in memory from --model.seed, with a random text "
      "encoder over a byte-level tokenizer), or a Wan2.1 pipeline directory (transformer/, vae/, text_encoder/, "
      "tokenizer/, scheduler/; README: A second model family)")(
      "out", path_value(&o.out, PathKind::out_dir),
      "output directory (default outputs/<name>-<Slurm job id, or date-time>); an existing one is refused "
      "unless --overwrite")("name", po::value(&o.name),
                            "run name for the default output directory (default: the config file's name)")(
      "jobs", path_value(&o.jobs_file, PathKind::file),
      "a job list (JSON Lines or CSV, see jobs/README.md): many videos in one run, each with its own options "
      "(the line's win over the command line's, which win over --config's) writing OUT/<out> (or OUT/job-<k>); "
      "the replicas (--parallel.data) take them from a queue; finished jobs are recorded in OUT/jobs.json, and "
      "a run started again skips them and resumes interrupted ones")(
      "overwrite", po::value(&o.overwrite)->default_value(o.overwrite)->implicit_value(true),
      "write into an existing output directory, replacing the files this run makes")(
      "quiet,q", po::value(&o.quiet)->default_value(o.quiet)->implicit_value(true),
      "print only errors and the output location")(
      "verbose,v", po::value(&o.verbose)->default_value(o.verbose)->implicit_value(true),
      "also print each rank's node, local rank, visible GPUs and device, the schedule, the prompts per clip, "
      "every step (not only every 10 s in a log), each checkpoint's time and each rank's bytes per collective "
      "kind")("profile", path_value(&o.profile, PathKind::new_file),
              "time every op of every model call (UNet or Wan transformer; CUDA events on a GPU): at the end the "
              "first rank prints the 20 op kinds and modules that took most and writes all its rows to FILE (JSON)")(
      "debug", po::value(&o.debug)->default_value(o.debug)->implicit_value(true),
              "check the output of every UNet module for NaN or infinity at each step, so that a step whose latents "
              "are not finite names the first module that went wrong (slower: every module's output is read back)")(
      "device", po::value(&sp.device)->default_value(sp.device),
      "auto | cpu | cuda (auto: CUDA when every rank has a GPU)")(
      "dtype", po::value(&sp.dtype)->default_value(sp.dtype), kDtypeOptionHelp)("tf32", po::bool_switch(&o.job.tf32),
                                                                                kTf32OptionHelp)(
      "comm-backend", po::value(&sp.comm_backend)->default_value(sp.comm_backend),
      "auto | mpi | nccl (auto: NCCL on GPUs, MPI on the CPU)")(
      "comm-timeout", zero_or(&o.job.comm_timeout, 1, 604800)->default_value(o.job.comm_timeout),
      "seconds a collective may wait before the job is ended with a message (0: wait forever; at least 1 s "
      "otherwise)");
  return all;
}

po::options_description model_options(RunPlan& o) {
  po::options_description model("[model]", kHelpWidth, kHelpColumn);
  model.add_options()("model.unet", path_value(&o.unet, PathKind::directory),
                      "UNet directory, when it is not MODEL/unet")(
      "model.vae", path_value(&o.vae, PathKind::directory),
      "VAE directory, when it is not MODEL/vae (without a VAE the run writes latents only; builtin: models "
      "have a random one)")(
      "model.text-encoder", path_value(&o.text_encoder, PathKind::directory),
      "text encoder directory (transformers' CLIPTextModel: config.json + model.safetensors), when it is not "
      "MODEL/text_encoder")(
      "model.tokenizer", path_value(&o.tokenizer, PathKind::directory),
      "CLIP tokenizer directory (vocab.json, merges.txt, tokenizer_config.json), when it is not MODEL/tokenizer")(
      "model.scheduler-config", path_value(&o.scheduler_config, PathKind::file_or_dir),
      "diffusers scheduler_config.json (file or directory; default MODEL/scheduler/ when present, else "
      "zeroscope's values)")("model.seed", ranged(&o.model_seed, 0, kMaxSeed)->default_value(o.model_seed),
                             "weights seed of a builtin: model")(
      "model.lora", path_value(&o.lora, PathKind::file),
      "a LoRA file in diffusers' layout (vinf train --train.lora writes one): its adapters of the attention "
      "projections are merged into the UNet's weights when they load")(
      "model.lora-scale", ranged(&o.lora_scale, -100, 100)->default_value(o.lora_scale),
      "the LoRA's strength: W + scale * alpha / rank * B A (0 leaves the model as it is)");
  return model;
}

po::options_description video_options(RunPlan& o) {
  po::options_description video("[video]", kHelpWidth, kHelpColumn);
  video.add_options()("video.frames", ranged(&o.frames, 0, 1000000)->default_value(o.frames),
                      "frames of the whole video, divided evenly over the clip ranks (0: 24 per clip, or "
                      "--import-vi-config's num_frames per clip)")(
      "video.height", ranged(&o.height, 8, kMaxPixels)->default_value(o.height), "pixels, a multiple of 8")(
      "video.width", ranged(&o.width, 8, kMaxPixels)->default_value(o.width), "pixels, a multiple of 8")(
      "video.fps", ranged_above(&o.fps, 0, 1000)->default_value(o.fps),
      "the frame rate the UNet is conditioned on (a model input, as the released code's fps; the frame rate "
      "of video.mp4 is --output.fps)");
  return video;
}

po::options_description sampler_options(RunPlan& o, Spelled& sp) {
  po::options_description sampler("[sampler]", kHelpWidth, kHelpColumn);
  sampler.add_options()(
      "sampler.scheduler", po::value(&sp.scheduler)->default_value(sp.scheduler),
      "dpmpp-sde (DPM-Solver++ SDE, linspace timesteps: what the released code runs), dpmpp-sde-karras, "
      "dpmpp (ODE), ddim; for a Wan2.1 model: unipc (its pipeline's, the default there) or flow-euler, on the "
      "flow sigmas of its scheduler/ (flow_shift)")("sampler.steps", ranged(&o.steps, 1, 1000)->default_value(o.steps),
                                                    "denoising steps")(
      "sampler.guidance", ranged(&o.guidance, 0, 100)->default_value(o.guidance),
      "classifier-free guidance scale (> 1 runs the negative and the positive branch; <= 1 only the positive)")(
      "sampler.seed", ranged(&o.seed, 0, kMaxSeed)->default_value(o.seed), "noise seed")(
      "sampler.eta", ranged(&o.eta, 0, 1)->default_value(o.eta),
      "DDIM's noise scale (ddim only: the other schedulers have none; --long.mode fifo: 1 unless given, as the "
      "released FIFO code)")(
      "sampler.use-scale", po::value(&sp.use_scale)->default_value(sp.use_scale),
      "VideoCrafter's use_scale on DDIM's data prediction (x0 / s[t], then s[t'] towards the next timestep t'; "
      "s = linspace(scale_a, scale_b) over the first mid_step timesteps, then scale_b). auto: as the model's "
      "scheduler config says (its keys use_scale, scale_a, scale_b, mid_step); a config without them: on for "
      "--long.mode fifo's base video on the released grid with VideoCrafter2's values (1, 0.7, 400), as the "
      "released FIFO code, off otherwise (the diffusers port Video-Infinity runs has none). on: every DDIM step (ddim "
      "only) but "
      "FIFO's queue iterations, which the released code never scales. off: none")(
      "sampler.noise", po::value(&sp.noise)->default_value(sp.noise),
      "invariant (keyed by global frame: the same video for any number of ranks), compat (one stream per clip "
      "seeded seed + clip, as the released code), auto (compat in --vi.mode compat, else invariant)");
  return sampler;
}

po::options_description prompt_options(RunPlan& o) {
  po::options_description prompt("[prompt]", kHelpWidth, kHelpColumn);
  prompt.add_options()("prompt.text", po::value(&o.prompts),
                       "prompt (quote one with spaces); repeat the option for a list: clip r of N gets prompt "
                       "int(r / N * P) (as the released code; the video then depends on the number of clips, also in "
                       "invariant mode), so there may be at most as many prompts as clips")(
      "prompt.negative", po::value(&o.negative)->default_value(o.negative),
      "negative prompt (used when --sampler.guidance > 1)")(
      "prompt.embeddings", path_value(&o.embeddings, PathKind::file),
      "safetensors with prompt_embeds [P, L, D] (one row per prompt) and negative_prompt_embeds [1, L, D], "
      "used instead of the text encoder (vinf encode-text --negative writes one)")(
      "prompt.max-length", ranged(&o.max_text_length, 1, 16384)->default_value(o.max_text_length),
      "the Wan family: tokens per prompt (the pipeline's max_sequence_length; the UNet's CLIP takes 77)");
  return prompt;
}

// [parallel], [vae] and [output], added to all.
void add_output_options(po::options_description& all, RunPlan& o) {
  po::options_description parallel("[parallel]", kHelpWidth, kHelpColumn);
  parallel.add_options()("parallel.cfg", ranged(&o.job.cfg, 1, 2)->default_value(o.job.cfg),
                         "1: each rank runs both guidance branches as a batch of 2; 2: rank pairs split them and "
                         "swap predictions every step (ranks = 2 x clips)")(
      "parallel.tensor", ranged(&o.job.tensor, 1, 4096)->default_value(o.job.tensor), kTensorOptionHelp)(
      "parallel.data", ranged(&o.job.data, 1, 65536)->default_value(o.job.data),
      "D: replicas, each a whole cfg x frame ranks x tensor layout (x pipeline stages) that loads the model once "
      "and takes the next job of --jobs from a queue kept by rank 0")(
      "parallel.pipeline", ranged(&o.job.pipeline, 1, 1000)->default_value(o.job.pipeline),
      "P: pipeline stages per replica: stage s runs steps [s S / P, (s + 1) S / P) of every job and hands the "
      "latents and the solver's memory to stage s + 1; with --jobs the pipeline fills (stage 0 starts the next "
      "job while stage 1 runs the previous one); the last stage writes the outputs");

  po::options_description output("[output]", kHelpWidth, kHelpColumn);
  output.add_options()("output.video", po::value(&o.video)->default_value(o.video)->implicit_value(true),
                       "write OUT/video.mp4 (H.264 through ffmpeg) and OUT/contact.png (a grid of 16 thumbnails)")(
      "output.fps", ranged_above(&o.output_fps, 0, 1000)->default_value(o.output_fps),
      "frame rate of video.mp4 (the released code writes 8)")(
      "output.png", po::value(&o.png)->default_value(o.png)->implicit_value(true),
      "also write every frame as OUT/frames/frame-NNNNNN.png")(
      "output.ffmpeg", po::value(&o.ffmpeg)->default_value(o.ffmpeg), "the ffmpeg program (looked up in PATH)");

  po::options_description vae("[vae]", kHelpWidth, kHelpColumn);
  vae.add_options()("vae.tile", zero_or(&o.vae_tile, 1, kMaxPixels / 8)->default_value(o.vae_tile),
                    "run the VAE's convolutions of frames larger than N x N latent pixels over N x N "
                    "tiles (8N x 8N pixels at full size) with whole-frame GroupNorm statistics (a Wan VAE's RMS "
                    "norms are per pixel): the same pixels as whole-frame decoding, with the convolutions' working "
                    "memory bounded by the tile; 0: whole frames; e.g. 16");
  all.add(parallel).add(vae).add(output);
}

po::options_description long_options(RunPlan& o, Spelled& sp) {
  sampling::LongVideoConfig& l = o.long_video;
  po::options_description group("[long] the method that makes a video longer than the model's training length",
                                kHelpWidth, kHelpColumn);
  group.add_options()(
      "long.mode", po::value(&sp.long_mode)->default_value(sp.long_mode),
      "clips: Video-Infinity (one clip per rank, the temporal layers exchange frames: the [vi] options); "
      "windows: sliding windows with blended overlaps (at every step the plain model runs on overlapping "
      "windows of --long.window frames and the predictions are blended where they overlap); fifo: "
      "FIFO-Diffusion (diagonal denoising of a queue of frames at increasing noise levels, one timestep per "
      "frame; the clean frame at the head leaves, fresh noise enters at the tail; as the authors' released code "
      "runs it: its grid (--long.fifo-grid), the base video with --sampler.use-scale, and unless given "
      "--sampler.eta 1, --video.fps 8 and --output.fps 10). windows and fifo run the "
      "plain model on each window (the [vi] options are ignored), spread their windows over the ranks, and "
      "give the same video on any number of ranks")(
      "long.window", ranged(&l.window, 1, 100000)->default_value(l.window),
      "windows: frames per window (the model's training length: 16 for VideoCrafter2)")(
      "long.stride", ranged(&l.stride, 1, 100000)->default_value(l.stride),
      "windows: frames from one window's start to the next (window - stride frames overlap)")(
      "long.blend", po::value(&sp.blend)->default_value(sp.blend),
      "windows: linear (a window's weight ramps across its overlaps) or uniform (the mean of the windows "
      "over a frame)")("long.fifo-window", ranged(&l.fifo_window, 1, 1000)->default_value(l.fifo_window),
                       "fifo: f, frames per partition (the model's training length)")(
      "long.fifo-partitions", ranged(&l.fifo_partitions, 1, 1000)->default_value(l.fifo_partitions),
      "fifo: n, partitions of the queue; the queue and the schedule have f x n levels (--sampler.steps is "
      "overridden); an iteration's n model calls (2n with lookahead) run on up to as many ranks")(
      "long.fifo-lookahead", po::value(&l.fifo_lookahead)->default_value(l.fifo_lookahead)->implicit_value(true),
      "fifo: lookahead denoising (2n windows overlapping by f/2, each keeping its second half, behind f/2 frames "
      "of clean context: twice the model calls); =false: n disjoint partitions")(
      "long.fifo-grid", po::value(&sp.fifo_grid)->default_value(sp.fifo_grid),
      "fifo: the DDIM timesteps of the queue's levels. released: the FIFO-Diffusion code's round(linspace(0, 999, "
      "f x n)), fresh noise entering at t = 999 and the head's last step an identity-like step at t = 0; config: "
      "the model scheduler config's DDIM grid (VideoCrafter's k x (1000 // (f x n)) + 1) and no use_scale, FIFO as "
      "vinf ran it before: kept to continue and reproduce such runs (with --sampler.eta 0 --video.fps 24, the "
      "defaults they had)")(
      "long.fifo-prompt-frames", po::value(&sp.fifo_prompt_frames),
      "fifo with several --prompt.text: the frames of each prompt, comma-separated (L1,L2,...: adding up to "
      "--video.frames), as the released code's multi-prompt lengths; an iteration's windows all take the prompt "
      "of the frame that leaves the queue (the base video and the warm-up the first). Default: frame o takes "
      "prompt int(o / frames x P)");
  return group;
}

po::options_description checkpoint_options(RunPlan& o) {
  po::options_description ckpt("[checkpoint] and resuming", kHelpWidth, kHelpColumn);
  ckpt.add_options()("checkpoint.every", ranged(&o.checkpoint_every, 0, 1000)->default_value(o.checkpoint_every),
                     "write OUT/checkpoints/step-NNNNNN.h5 every K steps (0: only at the end and on a stop signal); "
                     "a diffusion-forcing run counts rows (one model call over a window), its checkpoint holds "
                     "the window and every frame's solver, latents.h5.partial the frames finished before")(
      "checkpoint.keep", ranged(&o.checkpoint_keep, 1, 1000)->default_value(o.checkpoint_keep),
      "how many of the newest checkpoints to keep")(
      "resume", path_value(&o.resume, PathKind::file, {"auto"}),
      "auto: continue from the newest checkpoint in OUT/checkpoints that passes its checksums, falling back to "
      "older ones (a fresh start when there is none; refused when none is usable); PATH: from that checkpoint "
      "(OUT defaults to the run it belongs to). The settings that change the numbers must match; invariant mode "
      "may resume on another number of ranks")(
      "latents-init", path_value(&o.latents_init, PathKind::file),
      "start from the initial latents in FILE.safetensors (key latents_init, F32 [1,C,F,H,W] over the whole "
      "video, as diffusers' pipelines hold latents) instead of drawing them: to compare with a reference "
      "pipeline given the same latents. Each rank takes its frames. With --long.mode fifo: every random draw "
      "of the run instead, under the keys of FIFO-Diffusion's released draws (base.noise, base.eta_noise.step<j>, "
      "queue.noise, iter<i>.eta_noise.window<w>, iter<i>.new_frame; the eta ones when eta > 0); not with windows")(
      "dump.modules", po::value(&o.dump_modules),
      "write these modules' outputs over the whole video to OUT/activations.h5: comma-separated globs over the "
      "UNet's module names (time_embedding, conv_in, transformer_in, down_blocks.<i>, mid_block, up_blocks.<i>, "
      "conv_norm_out, conv_out, and <module>.in / <module>.out of every temporal module, as vinf forward "
      "--dump-temporal writes them), e.g. 'down_blocks.*,mid_block'; a glob that matches no module is refused")(
      "dump.steps", po::value(&o.dump_steps)->default_value(o.dump_steps),
      "the steps (1-based, comma-separated) whose UNet call --dump.modules records")(
      "evaluate", po::value(&o.evaluate)->default_value(o.evaluate)->implicit_value(true),
      "at the end, run vinf evaluate on the outputs (video.mp4, else latents.h5) with the run's clip or window "
      "boundaries: OUT/evaluate.json and OUT/evaluate.png")(
      "evaluate.clip-vision", path_value(&o.evaluate_clip_vision, PathKind::directory),
      "with --evaluate: a CLIPVisionModelWithProjection directory for the feature similarities");
  return ckpt;
}

po::options_description input_options(RunPlan& o, Spelled& sp) {
  po::options_description input("[input] what a Wan video starts from besides the prompt", kHelpWidth, kHelpColumn);
  input.add_options()("image", path_value(&o.image, PathKind::file),
                      "image-to-video: FILE (PNG or JPEG) is the video's first frame; --model is an image-to-video "
                      "pipeline (Wan2.1-I2V: image_encoder/, image_processor/, a transformer with image_dim). The "
                      "image is resized to --video.width x --video.height for the VAE and seen whole by CLIP")(
      "last-image", path_value(&o.last_image, PathKind::file),
      "first-and-last-frame: with --image, FILE is the video's last frame (a Wan2.1-FLF2V pipeline, whose "
      "transformer has pos_embed_seq_len)")(
      "video", path_value(&o.input_video, PathKind::file_or_dir),
      "video-to-video: FILE (an MP4 or anything ffmpeg reads) or DIR (image files in name order): the first "
      "--video.frames frames are encoded and noised to the schedule's cut (--strength), then denoised with the "
      "prompt; on a text-to-video Wan pipeline")(
      "strength", ranged_above(&o.strength, 0, 1)->default_value(o.strength, "0.8"),
      "video-to-video: the share of --sampler.steps that runs (int(steps x strength), from the step where the "
      "noise level is that far up); 1 discards the video's content but its layout, small values keep it")(
      "continue", path_value(&sp.continue_dir, PathKind::directory),
      "RUN_DIR: continue the video of an earlier run (RUN_DIR/video.mp4, a generate or extend run) by "
      "--video.frames frames from its last frame, with an image-to-video --model: vinf extend --video "
      "RUN_DIR/video.mp4 (see vinf extend --help)");
  return input;
}

po::options_description df_options(RunPlan& o) {
  RunPlan::DiffusionForcing& d = o.df;
  po::options_description df(
      "[df] diffusion forcing (a SkyReels-V2 diffusion-forcing pipeline; frames in video frames)", kHelpWidth,
      kHelpColumn);
  df.add_options()("df.base-frames", zero_or(&d.base_frames, 1, 1000000)->default_value(d.base_frames),
                   "frames per window (the model's training length: 97 for SkyReels-V2-DF-1.3B-540P); the video is "
                   "made in windows of this many, each after the first starting from the last "
                   "--df.overlap-history frames of the video so far. 0: one window of --video.frames")(
      "df.overlap-history", zero_or(&d.overlap_history, 1, 1000000)->default_value(d.overlap_history),
      "frames a window shares with the video before it (17 or 37 in the reference's examples); required "
      "when --video.frames is more than --df.base-frames")(
      "df.ar-step", ranged(&d.ar_step, 0, 1000)->default_value(d.ar_step),
      "0: synchronous (every frame of a window at one noise level); A > 0: asynchronous, each causal block A "
      "rows behind the one before (a denoising wave: more rows, the frames near the start clean first)")(
      "df.causal-block-size", zero_or(&d.causal_block_size, 1, 1000)->default_value(d.causal_block_size),
      "latent frames per causal block of the self-attention (a block sees itself and the blocks before); "
      "0: the transformer's num_frame_per_block. The reference uses 5 with --df.ar-step 5")(
      "df.addnoise-condition", ranged(&d.addnoise_condition, 0, 1000)->default_value(d.addnoise_condition),
      "a window's clean prefix enters the model noised to this level (the reference suggests 20 for long "
      "videos: smoother joins); 0: clean")(
      "df.parallel", po::value(&d.parallel)->default_value(d.parallel),
      "with --vi.mode exact over N ranks, how a window's frames are shared: exact (every rank a share of the "
      "frames, each attention over all of them in Ulysses groups and a ring) or bands (every rank whole causal "
      "blocks, its keys and values sent on to the later ranks, one way; needs --df.causal-block-size > 1 and "
      "at least N blocks a window). The same numbers either way; perf/RESULTS.md compares their speed");
  return df;
}

po::options_description describe(RunPlan& o, Spelled& sp) {
  po::options_description all = run_options(o, sp);
  po::options_description vi("[vi] Video-Infinity (flags take =true/=false)", kHelpWidth, kHelpColumn);
  sp.vi.add_to(
      vi,
      "the released code's JSON config (its examples/*.json): pipe_configs.prompts -> --prompt.text, steps -> "
      "--sampler.steps, guidance_scale -> --sampler.guidance, fps -> --video.fps, num_frames (per GPU) x clip "
      "ranks -> --video.frames, height, width -> --video.height, --video.width, export_fps -> --output.fps, seed "
      "-> --sampler.seed, plugin_configs -> the [vi] options; options given on the command line or in --config "
      "win. One line names the fields the run ignores (devices, master_port, base_path, file_name, a dtype "
      "other than the run's, ...)");
  all.add(model_options(o)).add(video_options(o)).add(sampler_options(o, sp)).add(prompt_options(o));
  add_output_options(all, o);
  all.add(input_options(o, sp)).add(df_options(o)).add(checkpoint_options(o)).add(long_options(o, sp)).add(vi);
  return all;
}

using Sources = std::map<std::string, std::string>;

bool given(const po::variables_map& vm, const char* name) { return vm.count(name) > 0 && !vm[name].defaulted(); }

// --import-vi-config FILE: pipe_configs and the seed become the options that are not given on the
// command line or in --config; from_file records which field each option now comes from, so that
// a bad value is reported under the file's name for it.
void import_pipe_configs(RunPlan& o, const po::variables_map& vm, Sources& from_file) {
  const std::string& path = o.vi_import;
  infinity::ReleasedPipe r = infinity::import_released_pipe(path);
  o.imported.ignored = r.unused;
  o.imported.dtype = r.dtype.value_or("");
  o.imported.devices = r.devices.value_or(0);
  auto map = [&](const auto& value, const char* field, const char* option, auto& dst) {
    if (!value) return;
    if (given(vm, option)) {
      o.imported.ignored.push_back(std::string(field) + " (--" + option + " given)");
      return;
    }
    dst = *value;
    from_file[option] = path + ": " + field;
  };
  map(r.steps, "pipe_configs.steps", "sampler.steps", o.steps);
  map(r.guidance_scale, "pipe_configs.guidance_scale", "sampler.guidance", o.guidance);
  map(r.fps, "pipe_configs.fps", "video.fps", o.fps);
  map(r.height, "pipe_configs.height", "video.height", o.height);
  map(r.width, "pipe_configs.width", "video.width", o.width);
  map(r.export_fps, "pipe_configs.export_fps", "output.fps", o.output_fps);
  map(r.seed, "seed", "sampler.seed", o.seed);
  // num_frames is per GPU: the video has num_frames x clip ranks frames, unless --video.frames.
  map(r.num_frames, "pipe_configs.num_frames", "video.frames", o.frames_per_clip);
  if (r.prompts) {
    if (vm.count("prompt.text") || vm.count("prompt.embeddings")) {
      o.imported.ignored.push_back(std::string("pipe_configs.prompts (--prompt.") +
                                   (vm.count("prompt.text") ? "text" : "embeddings") + " given)");
    } else {
      o.prompts = *r.prompts;
      from_file["prompt.text"] = path + ": pipe_configs.prompts";
      o.prompts_source = "--import-vi-config " + from_file["prompt.text"];
    }
  }
}

// An option's name for messages: --NAME, or the --import-vi-config field it came from.
class Labels {
 public:
  explicit Labels(const Sources& from_file) : from_file_(from_file) {}
  std::string operator()(const std::string& option) const {
    const auto it = from_file_.find(option);
    return it == from_file_.end() ? "--" + option : it->second;
  }

 private:
  const Sources& from_file_;
};

// The model: a directory or a built-in one, and the parts given beside it.
void check_model(RunPlan& o) {
  VINF_INPUT_CHECK(!o.model.empty(), "no model: give --model DIR (a diffusers directory) or --model builtin:tiny");
  if (o.builtin()) {
    const std::string p = o.builtin_preset();
    VINF_INPUT_CHECK(p == "tiny" || p == "small", "--model ", o.model, ": the built-in models are builtin:tiny and ",
                     "builtin:small");
    VINF_INPUT_CHECK(o.unet.empty() && o.vae.empty() && o.text_encoder.empty() && o.tokenizer.empty(),
                     "--model.unet, --model.vae, --model.text-encoder and --model.tokenizer cannot be combined with a ",
                     "built-in model");
  } else {
    const std::string dir = o.unet.empty() ? o.model : o.unet;
    VINF_INPUT_CHECK(io::is_directory(dir), "--model", o.unet.empty() ? "" : ".unet", " ", dir,
                     ": no such directory (a diffusers directory with config.json, or builtin:tiny)");
  }
  VINF_INPUT_CHECK(o.model_seed >= 0, "--model.seed must be >= 0, got ", o.model_seed);
  if (!o.vae.empty()) VINF_INPUT_CHECK(io::is_directory(o.vae), "--model.vae ", o.vae, ": no such directory");
}

// The model family from --model: a Wan2.1 pipeline (its transformer/ names WanTransformer3DModel)
// takes the flow schedulers and, where the user gave none, the Wan pipeline's defaults (81 frames
// at 480 x 832, 50 steps, guidance 5); the UNet family refuses the Wan-only settings.
void resolve_family(RunPlan& o, const Spelled& sp, const po::variables_map& vm) {
  const auto given = [&](const char* name) { return vm.count(name) && !vm[name].defaulted(); };
  o.wan = o.unet.empty() && pipeline::model_family(o.model) == pipeline::ModelFamily::wan;
  if (!o.wan) {
    for (const char* name : {"image", "last-image", "video", "strength", "df.base-frames", "df.overlap-history",
                             "df.ar-step", "df.causal-block-size", "df.addnoise-condition"})
      VINF_INPUT_CHECK(!given(name), "--", name, " is for a Wan2.1 pipeline (image-to-video, video-to-video); ",
                       o.model.empty() ? "this" : o.model, " is a UNet model, which generates from text");
    VINF_INPUT_CHECK(!given("prompt.max-length"), "--prompt.max-length is for the Wan family's T5 tokenizer; ", o.model,
                     " is a UNet model, whose CLIP tokenizer takes 77 tokens");
    VINF_INPUT_CHECK(sp.scheduler != "unipc" && sp.scheduler != "flow-euler", "--sampler.scheduler ", sp.scheduler,
                     " is a flow-matching scheduler of the Wan family; ", o.model.empty() ? "this" : o.model,
                     " is a UNet model (dpmpp-sde, dpmpp-sde-karras, dpmpp, ddim)");
    return;
  }
  o.flow_solver = given("sampler.scheduler") ? sampling::parse_flow_solver(sp.scheduler) : sampling::FlowSolver::unipc;
  for (const auto& [name, value] : vm)
    if (name.rfind("vi.", 0) == 0 && name != "vi.mode" && !value.defaulted()) o.vi_given = true;
  o.size_given = given("video.height") || given("video.width");
  for (const auto& [name, value] : vm)
    if (name.rfind("df.", 0) == 0 && !value.defaulted()) o.df.given = true;
  if (!given("video.frames")) o.frames = 81;
  if (!given("video.height")) o.height = 480;
  if (!given("video.width")) o.width = 832;
  if (!given("sampler.steps")) o.steps = 50;
  if (!given("sampler.guidance")) o.guidance = 5;
  VINF_INPUT_CHECK(o.max_text_length >= 1 && o.max_text_length <= 16384,
                   "--prompt.max-length must be in [1, 16384], got ", o.max_text_length);
}

// [video], [sampler] and [output]'s frame rate.
void check_video_and_sampler(const RunPlan& o, const Labels& label) {
  VINF_INPUT_CHECK(o.frames >= 0, "--video.frames must be >= 0 (0: 24 per clip), got ", o.frames);
  for (const auto& [name, v] : {std::pair{"video.height", o.height}, std::pair{"video.width", o.width}}) {
    VINF_INPUT_CHECK(v >= 8 && v <= kMaxPixels, label(name), " must be in [8, ", kMaxPixels, "], got ", v);
    VINF_INPUT_CHECK(v % 8 == 0, label(name), " must be a multiple of 8 (the latent is 1/8 of the size), got ", v,
                     "; use ", v / 8 * 8 == 0 ? 8 : v / 8 * 8, " or ", (v / 8 + 1) * 8);
  }
  VINF_INPUT_CHECK(o.fps > 0 && o.fps <= 1000, label("video.fps"), " must be in (0, 1000], got ", o.fps);
  VINF_INPUT_CHECK(o.output_fps > 0 && o.output_fps <= 1000, label("output.fps"), " must be in (0, 1000], got ",
                   o.output_fps);
  VINF_INPUT_CHECK(o.steps >= 1 && o.steps <= 1000, label("sampler.steps"), " must be in [1, 1000], got ", o.steps);
  VINF_INPUT_CHECK(o.guidance >= 0 && o.guidance <= 100, label("sampler.guidance"), " must be in [0, 100], got ",
                   o.guidance);
  VINF_INPUT_CHECK(o.seed >= 0, label("sampler.seed"), " must be >= 0, got ", o.seed);
  VINF_INPUT_CHECK(o.eta >= 0 && o.eta <= 1, "--sampler.eta must be in [0, 1], got ", o.eta);
}

// The prompts, or the embeddings file, or the text encoder and tokenizer that encode them.
void check_text(RunPlan& o, const Labels& label) {
  VINF_INPUT_CHECK(!o.prompts.empty() || !o.embeddings.empty(),
                   "no prompt: give --prompt.text (repeatable) or --prompt.embeddings FILE");
  for (std::size_t i = 0; i < o.prompts.size(); ++i) {
    const std::size_t bad = first_invalid_utf8(o.prompts[i]);
    VINF_INPUT_CHECK(bad == std::string::npos, label("prompt.text"), " number ", i + 1, " is not valid UTF-8 (byte ",
                     bad, "); save the command line or INI file as UTF-8");
  }
  VINF_INPUT_CHECK(first_invalid_utf8(o.negative) == std::string::npos, "--prompt.negative is not valid UTF-8 (byte ",
                   first_invalid_utf8(o.negative), "); save the command line or INI file as UTF-8");
  if (!o.embeddings.empty() || o.builtin()) return;
  // The text encoder and tokenizer: given, or the pipeline's own.
  for (auto [dir, option, sub] : {std::tuple{&o.text_encoder, "--model.text-encoder", "text_encoder"},
                                  std::tuple{&o.tokenizer, "--model.tokenizer", "tokenizer"}}) {
    if (dir->empty()) {
      VINF_INPUT_CHECK(io::is_directory(o.model + "/" + sub), "--model ", o.model, " has no ", sub, "/: give ", option,
                       " DIR (the real setup takes zeroscope_v2_576w's), or --prompt.embeddings FILE (from vinf ",
                       "encode-text)");
      *dir = o.model + "/" + sub;
    } else {
      VINF_INPUT_CHECK(io::is_directory(*dir), option, " ", *dir, ": no such directory");
    }
  }
}

// The job, the outputs, checkpoints and resuming.
void check_run(const RunPlan& o, const po::variables_map& vm) {
  VINF_INPUT_CHECK(!vm.count("out") || !o.out.empty(), "--out is empty: give a directory, or leave --out out for ",
                   "outputs/<name>-<date-time>");
  VINF_INPUT_CHECK(!vm.count("name") || (!o.name.empty() && o.name != "." && o.name != ".." &&
                                         o.name.find_first_of("/\\") == std::string::npos && o.name.size() <= 200),
                   "--name '", o.name, "' is not a plain name: the run writes outputs/<name>-<id>, so a name may not ",
                   "be empty, . or .., or hold a / (give --out DIR to write elsewhere)");
  // The single values' ranges are checked as they are read (option_values.hpp); here, how they combine.
  VINF_INPUT_CHECK(o.job.data == 1 || !o.jobs_file.empty(), "--parallel.data ", o.job.data,
                   " makes replicas that take jobs from a list: give --jobs FILE (see jobs/README.md)");
  VINF_INPUT_CHECK(o.jobs_file.empty() || o.resume.empty() || o.resume == "auto", "--resume ", o.resume,
                   " with --jobs: every job resumes from its own checkpoints; give --resume auto or leave it out");
  VINF_INPUT_CHECK(o.cfg() == 1 || o.guidance > 1, "--parallel.cfg 2 splits the two guidance branches, but ",
                   "--sampler.guidance ", o.guidance, " <= 1 runs only one; use --parallel.cfg 1");
  VINF_INPUT_CHECK(!(o.quiet && o.verbose), "--quiet and --verbose exclude each other");
  if (!o.evaluate_clip_vision.empty()) {
    VINF_INPUT_CHECK(o.evaluate, "--evaluate.clip-vision is for --evaluate's similarities: add --evaluate");
    for (const char* f : {"config.json", "model.safetensors"})
      VINF_INPUT_CHECK(io::is_regular_file(o.evaluate_clip_vision + "/" + f), "--evaluate.clip-vision ",
                       o.evaluate_clip_vision, " has no ", f,
                       " (a transformers CLIPVisionModelWithProjection directory)");
  }
  if (!o.latents_init.empty())
    VINF_INPUT_CHECK(io::is_regular_file(o.latents_init), "--latents-init ", o.latents_init, ": no such file");
  if (!o.resume.empty() && o.resume != "auto")
    VINF_INPUT_CHECK(io::is_regular_file(o.resume), "--resume ", o.resume, ": no such checkpoint file (or use ",
                     "--resume auto)");
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(',', start), list.size());
    std::string item = list.substr(start, end - start);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) items.push_back(item);
    start = end + 1;
  }
  return items;
}

// A whole number in [lo, hi] written alone ("12"), or none.
std::optional<long long> whole_number(const std::string& item, long long lo, long long hi) {
  std::size_t used = 0;
  long long k = 0;
  try {
    k = std::stoll(item, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != item.size() || k < lo || k > hi) return std::nullopt;
  return k;
}

// --dump.modules and --dump.steps as lists.
void parse_dump(RunPlan& o) {
  o.dump_globs = split_list(o.dump_modules);
  for (const std::string& item : split_list(o.dump_steps)) {
    const std::optional<long long> k = whole_number(item, 1, o.steps);
    VINF_INPUT_CHECK(k, "--dump.steps: '", item, "' is not a step number in [1, ", o.steps, "]");
    o.dump_step_list.push_back(static_cast<int>(*k));
  }
}

// --long.fifo-prompt-frames "30,40,30": the frames of each prompt (none given: empty).
std::vector<std::int64_t> parse_frame_list(const std::string& text) {
  std::vector<std::int64_t> out;
  for (const std::string& item : split_list(text)) {
    const std::optional<long long> k = whole_number(item, 1, 1000000);
    VINF_INPUT_CHECK(k, "--long.fifo-prompt-frames: '", excerpt(item),
                     "' is not a number of frames in [1, 1000000] (give L1,L2,... one per prompt)");
    out.push_back(*k);
  }
  return out;
}

pipeline::UseScale parse_use_scale(const std::string& name) {
  for (pipeline::UseScale u : {pipeline::UseScale::automatic, pipeline::UseScale::on, pipeline::UseScale::off})
    if (name == pipeline::use_scale_name(u)) return u;
  VINF_INPUT_FAIL("--sampler.use-scale must be auto, on or off, got '", excerpt(name), "'");
}

// --long.mode windows and fifo: their settings checked, and what they override or ignore said in
// one line each (o.notes): the [vi] options, and for FIFO the steps and the scheduler.
void resolve_long_video(RunPlan& o, const Spelled& sp, const po::variables_map& vm, const Sources& from_file) {
  sampling::LongVideoConfig& l = o.long_video;
  l.mode = sampling::parse_long_mode(sp.long_mode);
  l.blend = sampling::parse_blend(sp.blend);
  o.use_scale = parse_use_scale(sp.use_scale);
  if (o.long_clips()) return;
  const std::string mode = std::string("--long.mode ") + sampling::long_mode_name(l.mode);
  std::vector<std::string> vi_given;
  for (const auto& [name, value] : vm)
    if (name.rfind("vi.", 0) == 0 && !value.defaulted()) vi_given.push_back("--" + name);
  if (!vi_given.empty() || !o.vi_import.empty()) {
    std::string list = o.vi_import.empty() ? "" : "--import-vi-config's plugin_configs";
    for (const std::string& n : vi_given) list += (list.empty() ? "" : ", ") + n;
    o.notes.push_back(mode + " runs the plain model on each window: the [vi] settings are ignored (" + list + ")");
  }
  o.vi = infinity::Config{};
  o.vi.mode = infinity::Mode::off;
  VINF_INPUT_CHECK(sp.noise != "compat", "--sampler.noise compat is the layout of the released Video-Infinity code's ",
                   "clips; ", mode, " draws its noise keyed by frame (invariant): leave --sampler.noise out");
  VINF_INPUT_CHECK(o.cfg() == 1 && o.job.tensor == 1 && o.job.pipeline == 1, mode,
                   " spreads its windows over the ranks: --parallel.cfg, --parallel.tensor and --parallel.pipeline ",
                   "must be 1 (got ", o.cfg(), ", ", o.job.tensor, ", ", o.job.pipeline, ")");
  VINF_INPUT_CHECK(o.dump_globs.empty(), mode, ": --dump.modules records Video-Infinity's clips; leave it out");
  if (l.mode == sampling::LongMode::windows) {
    VINF_INPUT_CHECK(l.window >= 1, "--long.window must be at least 1 frame, got ", l.window);
    VINF_INPUT_CHECK(l.stride >= 1 && l.stride <= l.window, "--long.stride must be in [1, --long.window = ", l.window,
                     "] (windows must overlap or touch), got ", l.stride);
    return;
  }
  const sampling::FifoPlan plan(l.fifo_window, l.fifo_partitions, l.fifo_lookahead);  // checks f, n
  l.fifo_grid = sampling::parse_fifo_grid(sp.fifo_grid);
  l.fifo_prompt_frames = parse_frame_list(sp.fifo_prompt_frames);
  // The released code's defaults, unless given (on the command line, in --config or the imported file).
  if (!given(vm, "sampler.eta")) o.eta = 1.0;
  if (!given(vm, "video.fps") && !from_file.count("video.fps")) o.fps = 8;
  if (!given(vm, "output.fps") && !from_file.count("output.fps")) o.output_fps = 10;
  if (o.steps != plan.steps())
    o.notes.push_back(mode + " denoises with f x n = " + std::to_string(l.fifo_window) + " x " +
                      std::to_string(l.fifo_partitions) + " = " + std::to_string(plan.steps()) +
                      " steps, one queue level each: --sampler.steps " + std::to_string(o.steps) + " is overridden");
  o.steps = plan.steps();
  if (o.scheduler != sampling::SchedulerKind::ddim)
    o.notes.push_back(mode + " steps every frame with DDIM (eta " + format_number(o.eta, 4) +
                      ", --sampler.eta): --sampler.scheduler " + sp.scheduler + " is not used");
  o.scheduler = sampling::SchedulerKind::ddim;
}

// Options that another option overrides. A conflict is refused (prompts given twice, a noise scale
// for a scheduler without one); a setting that does not apply to this run is said in one line
// (o.notes, printed at the start like the long modes' notices), never dropped without a word.
void check_overridden(RunPlan& o, const po::variables_map& vm) {
  VINF_INPUT_CHECK(o.prompts.empty() || o.embeddings.empty(), "--prompt.text and --prompt.embeddings both give the ",
                   "prompts (the embeddings file holds them encoded): give one of them");
  VINF_INPUT_CHECK(!given(vm, "prompt.negative") || o.embeddings.empty(), "--prompt.negative and --prompt.embeddings ",
                   "both give the negative prompt (the file's negative_prompt_embeds): give one of them (vinf ",
                   "encode-text --negative TEXT writes it into the file)");
  const bool ddim = !o.wan && o.scheduler == sampling::SchedulerKind::ddim;
  VINF_INPUT_CHECK(o.use_scale != pipeline::UseScale::on || ddim, "--sampler.use-scale on scales DDIM's steps, ",
                   "but this run's scheduler is ",
                   o.wan ? "a Wan flow scheduler" : std::string(vm["sampler.scheduler"].as<std::string>()),
                   ": use --sampler.scheduler ddim (or --long.mode fifo), or leave --sampler.use-scale out");
  VINF_INPUT_CHECK(
      !given(vm, "sampler.eta") || ddim, "--sampler.eta is DDIM's noise scale, but this run's scheduler ", "has none (",
      o.wan ? "a Wan flow scheduler" : "--sampler.scheduler " + std::string(vm["sampler.scheduler"].as<std::string>()),
      "): use --sampler.scheduler ddim (or --long.mode fifo, which steps with DDIM), or leave --sampler.eta out");
  const auto note = [&](bool applies, const char* option, const std::string& why) {
    if (given(vm, option) && !applies) o.notes.push_back(std::string("--") + option + " is ignored: " + why);
  };
  const sampling::LongMode mode = o.long_video.mode;
  for (const char* option : {"long.window", "long.stride", "long.blend"})
    note(mode == sampling::LongMode::windows, option, "it applies to --long.mode windows");
  for (const char* option :
       {"long.fifo-window", "long.fifo-partitions", "long.fifo-lookahead", "long.fifo-grid", "long.fifo-prompt-frames"})
    note(mode == sampling::LongMode::fifo, option, "it applies to --long.mode fifo");
  note(o.guidance > 1, "prompt.negative", "--sampler.guidance <= 1 runs the positive branch only");
  note(o.builtin(), "model.seed", "it seeds the weights of a builtin: model, and --model is a directory");
  note(!o.lora.empty(), "model.lora-scale", "it scales --model.lora, which is not given");
  note(!o.dump_modules.empty(), "dump.steps", "it chooses the steps of --dump.modules, which is not given");
  note(o.video, "output.fps", "--output.video=false writes no video.mp4");
}

void print_help(const po::options_description& opts) {
  std::cout << opts << "\n"
            << kRankLayoutHelp
            << "\nExit status: 0 on success, 2 for bad input (the message names the option, file or key), 1 for "
               "other\nfailures, 3 when a collective timed out, "
            << kExitStopped
            << " when a stop signal (SIGTERM, SIGUSR1) ended the run\nafter a checkpoint (run again with "
               "--resume auto). A failure on any rank ends every rank.\nWith --jobs: 2 when a job failed on bad "
               "input (the other jobs ran; OUT/jobs.json says which), "
            << kExitStopped
            << "\nafter a stop signal (run the same command again: finished jobs are skipped, interrupted ones "
               "resume).\n";
}

}  // namespace

void check_extend(const RunPlan& o, const po::variables_map& vm) {
  VINF_INPUT_CHECK(o.wan, "vinf extend continues a video with a Wan2.1 image-to-video pipeline; ", o.model,
                   " is a UNet model");
  for (const char* name : {"image", "last-image", "strength"})
    VINF_INPUT_CHECK(!given(vm, name), "--", name, " does not go with vinf extend (or --continue): the new frames ",
                     "start from the input's last frame");
  VINF_INPUT_CHECK(o.input_video.empty(), "--video is the video to extend (vinf extend --video FILE) or, with ",
                   "vinf generate, video-to-video; not both with --continue");
  VINF_INPUT_CHECK(o.job.pipeline == 1, "vinf extend runs its segment in one pipeline stage: drop --parallel.pipeline");
  VINF_INPUT_CHECK(o.frames >= 5, "vinf extend --frames ", o.frames,
                   ": the new segment's first frame is the input's last, so it needs at least 5 (1 + 4k) frames");
}

// --continue RUN_DIR: extend RUN_DIR's video (vinf extend --video RUN_DIR/video.mp4).
void resolve_extend(RunPlan& o, const Spelled& sp, const po::variables_map& vm) {
  if (sp.continue_dir.empty()) return;
  const std::string video = sp.continue_dir + "/video.mp4";
  VINF_INPUT_CHECK(io::is_regular_file(video), "--continue ", sp.continue_dir, " has no video.mp4 (a run of vinf ",
                   "generate or extend with --output.video writes one)");
  o.extend = video;
  check_extend(o, vm);
}

int parse_generate_options(const std::vector<std::string>& args, RunPlan& o, const std::vector<std::string>* job_args,
                           bool extend) {
  Spelled sp;
  po::options_description opts = describe(o, sp);
  po::variables_map vm;
  parse_options(args, opts, vm, "generate", nullptr, job_args);
  if (vm.count("help")) {
    print_help(opts);
    return 1;
  }
  o.vi_import = sp.vi.import_file;
  Sources from_file;  // option -> the --import-vi-config field it was taken from
  if (!o.vi_import.empty()) import_pipe_configs(o, vm, from_file);
  const Labels label(from_file);
  check_model(o);
  resolve_family(o, sp, vm);
  check_video_and_sampler(o, label);
  if (!o.wan) o.scheduler = sampling::parse_scheduler(sp.scheduler);
  VINF_INPUT_CHECK(sp.noise == "auto" || sp.noise == "invariant" || sp.noise == "compat",
                   "--sampler.noise must be auto, invariant or compat, got '", sp.noise, "'");
  // A job list's own command line may leave the prompts to the jobs: each job's plan checks them.
  if (o.jobs_file.empty() || job_args) check_text(o, label);
  check_run(o, vm);
  // The job's choices, typed: a bad --device, --dtype or --comm-backend stops here, before MPI.
  o.job.device = job::parse_device_choice(sp.device);
  o.job.dtype = job::parse_dtype_choice(sp.dtype);
  o.job.transport = job::parse_transport(sp.comm_backend);
  parse_dump(o);
  o.vi = sp.vi.resolve(vm, o.vi_import.empty() ? nullptr : &o.imported.ignored);
  // A Wan video runs the plain model unless --vi.mode asks for exact mode or the windows.
  if (o.wan && (!vm.count("vi.mode") || vm["vi.mode"].defaulted())) o.vi.mode = infinity::Mode::off;
  resolve_long_video(o, sp, vm, from_file);
  check_overridden(o, vm);
  const bool compat_noise = sp.noise == "compat" || (sp.noise == "auto" && o.vi.mode == infinity::Mode::compat);
  o.noise = compat_noise ? sampling::NoiseMode::compat : sampling::NoiseMode::invariant;
  if (o.name.empty()) o.name = o.config_file.empty() ? "vinf" : fs::path(o.config_file).stem().string();
  if (extend) {
    VINF_INPUT_CHECK(!o.input_video.empty(), "vinf extend: --video FILE is required (the video to continue)");
    VINF_INPUT_CHECK(sp.continue_dir.empty(), "vinf extend: --video names the video to continue; drop --continue");
    o.extend = o.input_video;
    o.input_video.clear();
    check_extend(o, vm);
  }
  resolve_extend(o, sp, vm);
  return 0;
}

// -- vinf plan: generate's options, for a plan of the same run -----------------------------------

namespace {

// The plan's help: its usage and own options, then generate's options without generate's
// description (its text up to the first group, "Run:").
void print_plan_help(const po::options_description& own, const std::string& usage, const po::options_description& gen) {
  std::ostringstream text;
  text << gen;
  const std::string all = text.str();
  const std::size_t run = all.find("\nRun:\n");
  std::cout << usage << "\n\n"
            << own << "\n"
            << (run == std::string::npos ? all : all.substr(run + 1)) << "\n"
            << kRankLayoutHelp;
}

}  // namespace

int parse_plan_options(const std::vector<std::string>& args, RunPlan& o, const po::options_description& own,
                       const std::string& usage) {
  Spelled sp;
  const po::options_description gen = describe(o, sp);
  po::options_description opts;
  opts.add(own).add(gen);
  po::variables_map vm;
  parse_options(args, opts, vm, "plan");
  if (vm.count("help")) {
    print_plan_help(own, usage, gen);
    return 1;
  }
  o.vi_import = sp.vi.import_file;
  Sources from_file;
  if (!o.vi_import.empty()) import_pipe_configs(o, vm, from_file);
  const Labels label(from_file);
  check_model(o);
  VINF_INPUT_CHECK(
      !o.unet.empty() || pipeline::model_family(o.model) == pipeline::ModelFamily::unet, "vinf plan: --model ", o.model,
      " is a Wan2.1 pipeline; plan estimates the UNet family's layouts ",
      "(a Wan video runs on one rank, two with --parallel.cfg 2, or its frames over ranks with --vi.mode exact ",
      "or invariant)");
  check_video_and_sampler(o, label);
  o.scheduler = sampling::parse_scheduler(sp.scheduler);
  // A plan reads no text, and its replicas need no job list: the rest is checked as generate does.
  RunPlan checked = o;
  checked.job.data = 1;
  check_run(checked, vm);
  o.job.device = job::parse_device_choice(sp.device);
  o.job.dtype = job::parse_dtype_choice(sp.dtype);
  o.job.transport = job::parse_transport(sp.comm_backend);
  parse_dump(o);
  o.vi = sp.vi.resolve(vm, o.vi_import.empty() ? nullptr : &o.imported.ignored);
  // A Wan video runs the plain model unless --vi.mode asks for exact mode or the windows.
  if (o.wan && (!vm.count("vi.mode") || vm["vi.mode"].defaulted())) o.vi.mode = infinity::Mode::off;
  resolve_long_video(o, sp, vm, from_file);
  return 0;
}

}  // namespace vinf::app
