// `vinf train`: its options and help, the checks of how they combine, and the job; the run itself is
// train::run_training (train/trainer), which fine-tunes the UNet on a prepare-data file.
#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/generate_options.hpp"
#include "app/option_values.hpp"
#include "app/train_options.hpp"
#include "core/error.hpp"
#include "job/job.hpp"
#include "pipeline/stop_signals.hpp"
#include "train/trainer.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace vinf::app {

namespace {

using Clock = std::chrono::steady_clock;

// The options: the run's spec, and what the command line decides before the job starts.
struct TrainRunOptions : train::TrainSpec {
  std::string config_file, device = "auto", dtype = "auto", comm_backend = "auto";
  double comm_timeout = 300;
  bool overwrite = false;
  TrainOptimizerOptions optimizer;
};

po::options_description train_option_table(TrainRunOptions& o) {
  po::options_description opts(
      "vinf train: fine-tune the UNet on a prepare-data file (epsilon prediction, AdamW)\n\n"
      "usage: vinf train --config train.ini\n"
      "       vinf train --model PIPELINE --data data.h5 --out RUN_DIR [--train.steps N ...]\n"
      "       mpirun -np N vinf train ...   (data parallel: the ranks share each step's batch)\n\n"
      "Each step draws --train.batch clips in a seeded shuffled order (the same for any number of ranks),\n"
      "a timestep per clip uniformly from the model's noise schedule and Philox noise, and minimises\n"
      "mean((unet(sqrt(abar_t) x0 + sqrt(1 - abar_t) eps, t, text) - eps)^2) with AdamW after clipping\n"
      "the gradients' global norm; the batch runs --train.micro-batch clips at a time, the gradients\n"
      "summed (accumulation). Over N ranks the batch's micro-batches are dealt out in order (rank r\n"
      "takes the r-th N-th of them); the gradients are summed over the ranks in buckets while the\n"
      "backward pass goes on, and --train.zero shards the optimizer's state: the same training as one\n"
      "rank, to rounding. The learning rate warms up linearly over --train.warmup-steps, then\n"
      "follows a cosine down to --train.min-lr times itself (--train.schedule constant: flat).\n"
      "Frozen parameters (--train.params) get no gradient and no optimizer state.\n\n"
      "RUN_DIR gets log.csv (step, loss, learning rate, gradient norm, seconds), loss.png, train.json and\n"
      "the trained model (--export, default RUN_DIR/model): a pipeline directory when --model is one (its\n"
      "other parts copied), else a UNet directory, in diffusers layout for vinf generate --model. With\n"
      "--train.lora it gets lora.safetensors for vinf generate --model.lora instead (and the model with\n"
      "the adapters merged when --export is given).\n"
      "RUN_DIR/checkpoints/step-NNNNNN.h5 (every --checkpoint.every steps and on a stop signal) hold the\n"
      "trained parameters, the optimizer's state and the step; --resume continues from one, on any\n"
      "number of ranks. run.json records the layout, the throughput, the communication and the loss curve.\n"
      "Training runs on the CPU or on CUDA GPUs (one rank per GPU, the gradients summed over NCCL). With\n"
      "--dtype bf16 (the default on CUDA) it is mixed precision: the linear layers multiply in bf16 (f32 sums),\n"
      "the model computes with bf16 copies of the trained parameters, and the optimizer steps f32 master\n"
      "weights (sharded with --train.zero 1 and 2); gradients and their reductions are f32. The CPU runs the\n"
      "same bf16 products on f32 kernels (operands rounded to bf16): the numbers of a GPU run, not its speed.\n\n"
      "Options");
  opts.add_options()("help,h", "show this help")("config", path_value(&o.config_file, PathKind::file),
                                                 kConfigOptionHelp)(
      "model", path_value(&o.model_dir, PathKind::directory),
      "the model to fine-tune: a pipeline directory (unet/, ...) or a UNet directory")(
      "data", path_value(&o.data_path, PathKind::file), "the training data (vinf prepare-data's HDF5 file)")(
      "out", path_value(&o.out_dir, PathKind::out_dir),
      "the run directory (an existing non-empty one is refused unless --overwrite)")(
      "export", path_value(&o.export_dir, PathKind::out_dir), "where the trained model goes (default RUN_DIR/model)")(
      "overwrite", po::bool_switch(&o.overwrite), "write into an existing run directory and export directory")(
      "resume", path_value(&o.resume, PathKind::file, {"auto"}),
      "auto: continue from the newest checkpoint in RUN_DIR/checkpoints that passes its checksums, falling back "
      "to older ones (a fresh start in RUN_DIR when there is none); PATH: from that checkpoint. The settings "
      "that change the numbers must match; the number of ranks, --train.zero and --train.micro-batch may differ")(
      "checkpoint.every", ranged(&o.checkpoint_every, 0, 100000000)->default_value(o.checkpoint_every),
      "write RUN_DIR/checkpoints/step-NNNNNN.h5 every K steps (0: only on a stop signal)")(
      "checkpoint.keep", ranged(&o.checkpoint_keep, 1, 1000)->default_value(o.checkpoint_keep),
      "how many of the newest checkpoints to keep")(
      "comm-timeout", zero_or(&o.comm_timeout, 1, 604800)->default_value(o.comm_timeout),
      "seconds a collective may wait before the job is ended with a message (0: wait forever; at least 1 s "
      "otherwise)")("device", po::value(&o.device)->default_value(o.device),
                    "auto | cpu | cuda (auto: the GPUs when every rank has one, else the CPU)")(
      "dtype", po::value(&o.dtype)->default_value(o.dtype),
      "auto | f32 | bf16: bf16 is mixed precision (bf16 products, f32 master weights and reductions); auto is "
      "bf16 on CUDA and f32 on the CPU. A checkpoint resumes only at its own precision")(
      "comm-backend", po::value(&o.comm_backend)->default_value(o.comm_backend),
      "auto | mpi | nccl: how the gradients and parameters travel between the ranks (auto: NCCL between GPUs, "
      "MPI on the CPU and between ranks that share a GPU)")("quiet,q", po::bool_switch(&o.quiet),
                                                            "print only warnings, errors and the result");
  po::options_description t("[train]");
  t.add_options()("train.steps", ranged(&o.steps, 1, 100000000)->default_value(o.steps), "optimizer steps")(
      "train.batch", ranged(&o.batch, 1, 1000000)->default_value(o.batch), "clips per optimizer step")(
      "train.micro-batch", ranged(&o.micro_batch, 0, 1000000)->default_value(o.micro_batch),
      "clips per forward and backward pass (0: the whole batch over the ranks); the batch must be a multiple of "
      "it, with at least one micro-batch per rank")(
      "train.zero", ranged(&o.zero, 0, 2)->default_value(o.zero),
      "ZeRO stage over the ranks: 0 gradients all-reduced, every rank holds the whole optimizer state; 1 "
      "the optimizer state sharded (1/N per rank), each rank steps its shard and the parameters are "
      "all-gathered; 2 as 1 with the gradients reduce-scattered (half the traffic)")(
      "train.bucket-mb", ranged_above(&o.bucket_mb, 0, 1048576)->default_value(o.bucket_mb),
      "gradients are summed over the ranks in buckets of at least this many MiB, each sent as soon as the "
      "backward pass completes it")("train.warmup-steps", ranged(&o.warmup, 0, 100000000)->default_value(o.warmup),
                                    "steps of linear learning-rate warm-up")(
      "train.schedule", po::value(&o.schedule)->default_value(o.schedule), "cosine | constant (after the warm-up)")(
      "train.min-lr", ranged(&o.min_lr_ratio, 0, 1)->default_value(o.min_lr_ratio),
      "the cosine's final learning rate, as a fraction of --train.lr")(
      "train.params", po::value(&o.params)->default_value(o.params),
      "what is trained: all | temporal (transformer_in and every temp_* module) | comma-separated globs over "
      "parameter names ('*.temp_attentions.*,conv_out.*'); the rest is frozen")(
      "train.seed", ranged(&o.seed, 0, 9007199254740991.0)->default_value(o.seed),
      "seed of the clip order, the timesteps and the noise")(
      "train.fps", ranged_above(&o.fps, 0, 1000)->default_value(o.fps), "the fps conditioning of the training clips")(
      "train.log-every", ranged(&o.log_every, 1, 100000000)->default_value(o.log_every),
      "print the loss every N steps (every step goes to log.csv)")(
      "train.lora", ranged(&o.lora, 0, 4096)->default_value(o.lora),
      "train LoRA adapters of this rank on every attention projection (to_q, to_k, to_v, to_out.0) instead of "
      "the model's parameters; written to RUN_DIR/lora.safetensors (diffusers' layout) for generate --model.lora "
      "(0: off)")("train.lora-alpha", ranged(&o.lora_alpha, 0, 65536)->default_value(o.lora_alpha),
                  "the adapters' alpha: they add alpha / rank * B A (0: alpha = rank)")(
      "train.checkpoint-activations", po::bool_switch(&o.checkpoint_activations),
      "keep only each block's input in the forward pass and run the block again in the backward pass: "
      "less memory (about 40% of it on the tiny model) for one more forward pass of time");
  o.optimizer.add_to(t);
  opts.add(t);
  return opts;
}

// A directory the run may write into: absent, empty, or (with --overwrite) anything.
void check_writable_dir(const std::string& dir, const char* option, bool overwrite) {
  if (!fs::exists(dir)) return;
  VINF_INPUT_CHECK(fs::is_directory(dir), option, " ", dir, " exists and is not a directory");
  VINF_INPUT_CHECK(overwrite || fs::is_empty(dir), option, " ", dir,
                   " already holds files; give a new directory, or --overwrite to replace what this run writes");
}

}  // namespace

int train(const std::vector<std::string>& args) {
  pipeline::hold_stop_signals();  // before any thread starts: they all inherit the block
  TrainRunOptions o;
  const po::options_description opts = train_option_table(o);
  po::variables_map vm;
  parse_options(args, opts, vm, "train");
  if (vm.count("help")) {
    std::cout << opts
              << "\nA SIGTERM or SIGUSR1 (Slurm's time limit or a preemption) ends the run after the current\n"
                 "step with a checkpoint (continue with --resume auto); the model trained so far is\n"
                 "exported, and the exit status is "
              << kExitStopped
              << ". A failure on any rank ends every rank.\n"
                 "Exit status: 0 on success, 2 for bad input (the message names the option or file), 1 for\n"
                 "other failures, 3 when a collective timed out (--comm-timeout), "
              << kExitStopped << " after a stop signal.\n";
    return 0;
  }
  for (const char* required : {"model", "data", "out"})
    VINF_INPUT_CHECK(vm.count(required), "vinf train: --", required, " is required (see vinf train --help)");
  // The single values' ranges are checked as they are read (option_values.hpp); here, how they combine.
  VINF_INPUT_CHECK(o.micro_batch == 0 || o.batch % o.micro_batch == 0, "--train.batch ", o.batch,
                   " must be a multiple of --train.micro-batch ", o.micro_batch);
  VINF_INPUT_CHECK(o.schedule == "cosine" || o.schedule == "constant", "--train.schedule '", o.schedule,
                   "' is not cosine or constant");
  o.adamw = o.optimizer.resolve();
  VINF_INPUT_CHECK(o.lora == 0 || vm["train.params"].defaulted(), "--train.lora trains the adapters alone; ",
                   "--train.params ", o.params, " does not apply with it");
  // With LoRA the run's result is the adapters; the merged model only when --export asks for it.
  o.export_model = o.lora == 0 || !o.export_dir.empty();
  if (o.export_dir.empty()) o.export_dir = o.out_dir + "/model";
  if (!o.resume.empty() && o.resume != "auto") {
    VINF_INPUT_CHECK(fs::is_regular_file(o.resume), "--resume ", o.resume, ": no such checkpoint file (or use ",
                     "--resume auto)");
  }
  // A resumed run writes into its own run directory (and export directory) again.
  const bool resuming = !o.resume.empty();
  check_writable_dir(o.out_dir, "--out", o.overwrite || resuming);
  if (o.export_model) check_writable_dir(o.export_dir, "--export", o.overwrite || resuming);

  job::JobPlan plan;
  plan.device = check_training_device(o.device, true);
  const std::optional<DType> dtype_choice = check_training_dtype(o.dtype, true);
  plan.dtype = DType::f32;  // the runtime's; the products' precision is the graph's (below)
  plan.transport = job::parse_transport(o.comm_backend);
  plan.comm_timeout = o.comm_timeout;
  plan.clip_group = true;  // the gradients' communicator: every rank, on the device
  std::unique_ptr<job::Job> job = job::start_job(plan);
  pipeline::install_stop_signals();  // after MPI's own set-up, so that this handler is the one in place
  return train::run_training(o, *job, training_precision(dtype_choice, job->device()));
}

}  // namespace vinf::app
