// What one video is to be (design.md §5): the model, the video, the sampler, the prompts, the
// layout, the long-video method, the outputs and the run's control, typed (every choice an enum,
// every derived value derived once). The command line (src/app) fills it from the options, an INI
// file and an imported Video-Infinity config; the layers below the commands read nothing else.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "infinity/config.hpp"
#include "job/plan.hpp"
#include "sampling/flow_scheduler.hpp"
#include "sampling/long_video.hpp"
#include "sampling/noise.hpp"
#include "sampling/scheduler.hpp"

namespace vinf::pipeline {

// --sampler.use-scale: VideoCrafter's use_scale (sampling::X0Scale) on the DDIM steps. automatic:
// as the model's scheduler config says (use_scale, scale_a, scale_b, mid_step); without the key,
// on for FIFO's base video on the released grid (VideoCrafter2's values, as the released FIFO code
// runs it) and off otherwise. on: every DDIM step but FIFO's queue iterations (the released code never scales
// there); off: none.
enum class UseScale { automatic, on, off };
const char* use_scale_name(UseScale u);

struct GenerateSpec {
  std::string config_file;
  // [model] (the top-level `model` is a directory or builtin:<preset>)
  std::string model, unet, vae, text_encoder, tokenizer, scheduler_config;  // resolved from MODEL when not given
  std::int64_t model_seed = 0;
  std::string lora;  // --model.lora: a LoRA file merged into the UNet's weights at load
  double lora_scale = 1;  // times the file's alpha / rank
  // [video]
  std::int64_t frames = 0;  // 0: frames_per_clip per clip
  std::int64_t frames_per_clip = 24;  // --import-vi-config's pipe_configs.num_frames
  std::int64_t height = 320, width = 512;
  double fps = 24;
  // [sampler]
  sampling::SchedulerKind scheduler = sampling::SchedulerKind::dpmpp_sde;
  sampling::NoiseMode noise = sampling::NoiseMode::invariant;  // --sampler.noise auto resolved by --vi.mode
  int steps = 30;
  double guidance = 12, eta = 0;
  UseScale use_scale = UseScale::automatic;
  std::int64_t seed = 123;
  // [prompt]
  std::vector<std::string> prompts;
  std::string prompts_source = "--prompt.text";  // or the --import-vi-config field they came from
  std::string negative, embeddings;
  // [parallel] and the job: device, dtype, TF32, the CFG layout, the transport, the timeout
  job::JobPlan job;
  // [vae]
  std::int64_t vae_tile = 0;  // latent pixels; 0: whole frames
  // [output]
  double output_fps = 8;
  bool video = true, png = false;
  std::string ffmpeg = "ffmpeg";
  // [checkpoint], resume, [dump]
  int checkpoint_every = 10, checkpoint_keep = 2;
  std::string resume;  // "", "auto" or a checkpoint file
  std::string latents_init;  // --latents-init FILE: the initial latents instead of a draw
  // [input] What a Wan video is conditioned on: --image (image-to-video; with --last-image,
  // first-and-last-frame), or --video with --strength (video-to-video: a video file or a folder of
  // frames, the share of the schedule that runs on it).
  std::string image, last_image, input_video;
  double strength = 0.8;
  // vinf extend --video FILE (or generate --continue RUN_DIR): the video this run continues with an
  // image-to-video pipeline from its last frame; OUT/video.mp4 is it joined with the new frames.
  std::string extend;
  bool size_given = false;  // --video.height or --video.width was given (extend: else the input's)
  // [df] SkyReels-V2's diffusion forcing, in video frames as the reference takes them (0: the
  // defaults: one window of the whole video; the model's causal block).
  struct DiffusionForcing {
    std::int64_t base_frames = 0, overlap_history = 0, causal_block_size = 0;
    int ar_step = 0;
    double addnoise_condition = 0;
    // How a window's frames go over the frame ranks (--vi.mode exact): "exact" (Ulysses groups and
    // a ring, any split) or "bands" (whole causal blocks per rank, keys and values forwarded).
    std::string parallel = "exact";
    bool given = false;  // a [df] option was given
  } df;
  bool conditioned() const { return !image.empty() || !input_video.empty(); }
  // The model family: the Wan2.1 pipeline (a directory with transformer/) instead of a UNet.
  bool wan = false;
  sampling::FlowSolver flow_solver = sampling::FlowSolver::unipc;  // Wan's scheduler
  int max_text_length = 512;  // --prompt.max-length: the T5 tokenizer's max_sequence_length (Wan)
  bool vi_given = false;  // a [vi] option was given (a Wan video says it does not use them)
  std::string dump_modules, dump_steps = "1";
  std::vector<std::string> dump_globs;  // parsed from dump_modules
  std::vector<int> dump_step_list;  // parsed from dump_steps
  // output and run
  std::string out, name;
  std::string jobs_file;  // --jobs FILE: many videos in one run
  std::string job_label;  // a job list's job, in the log's lines ("" for a single run)
  bool overwrite = false, quiet = false, verbose = false;
  bool debug = false;  // --debug: check every UNet module's output, to name the first non-finite one
  std::string profile;  // --profile FILE: every model call timed op by op (job/profile_run.hpp)
  std::string vi_import;  // --import-vi-config FILE
  infinity::Config vi;  // off with --long.mode windows or fifo
  // [long]: the method that makes the long video (clips: Video-Infinity)
  sampling::LongVideoConfig long_video;
  bool long_clips() const { return long_video.mode == sampling::LongMode::clips; }
  // --evaluate: vinf evaluate on the outputs at the end, with --evaluate.clip-vision's model
  bool evaluate = false;
  std::string evaluate_clip_vision;
  // One line each for the log: what the long-video method overrides or ignores.
  std::vector<std::string> notes;
  // --import-vi-config FILE: the fields of the file this run does not use (dotted names, with the
  // option that overrides a field), and the file's dtype and GPU count, for one line in the log.
  struct Imported {
    std::vector<std::string> ignored;
    std::string dtype;  // f16, bf16, f32 or "" when the file has none
    int devices = 0;  // 0: the file lists none
  } imported;

  int cfg() const { return job.cfg; }
  bool builtin() const { return model.rfind("builtin:", 0) == 0; }
  std::string builtin_preset() const { return model.substr(8); }
};

// What the prompts are spread over: the clips, the windows, or FIFO's one queue.
struct PromptParts {
  std::int64_t count;
  const char* name;  // "clip", "window", "frame" (FIFO)
};
PromptParts prompt_parts(const GenerateSpec& o, int clips);

// The line that says which fields of --import-vi-config's file this run ignores (given the dtype
// the run computes in and its clip ranks), or "" when there is no file or it uses every field.
std::string imported_fields_note(const GenerateSpec& o, const std::string& run_dtype, int clips);

// The world's size fits the UNet family's video (the clips of the layout; windows and FIFO leave
// no rank without a partition; the prompts fit the clips) and the options combine; sets
// --video.frames from --video.frames-per-clip when it was not given. InputError naming the option.
void check_unet_job(GenerateSpec& o, int world_size);

}  // namespace vinf::pipeline
