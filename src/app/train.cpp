// `vinf train`: fine-tunes the UNet on a prepare-data file (train/data.hpp) with the
// epsilon-prediction loss, AdamW, a warm-up then cosine learning rate, gradient clipping and
// accumulation, all or some parameters trained; writes a log, a loss curve and the trained model.
#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fnmatch.h>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "app/commands.hpp"
#include "app/option_values.hpp"
#include "evaluate/evaluate.hpp"
#include "app/generate_options.hpp"
#include "app/generate_support.hpp"
#include "app/train_options.hpp"
#include "core/error.hpp"
#include "core/philox.hpp"
#include "core/progress.hpp"
#include "io/atomic_file.hpp"
#include "io/checkpoint.hpp"
#include "io/image.hpp"
#include "io/safetensors.hpp"
#include "job/job.hpp"
#include "model/params.hpp"
#include "model/weights.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"
#include "pipeline/step_control.hpp"
#include "pipeline/stop_signals.hpp"
#include "sampling/scheduler.hpp"
#include "train/adamw.hpp"
#include "train/checkpoint.hpp"
#include "train/data.hpp"
#include "train/data_parallel.hpp"
#include "train/lora.hpp"
#include "train/unet_loss.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace vinf::app {

namespace {

using Clock = std::chrono::steady_clock;

struct TrainRunOptions {
  std::string config_file, model_dir, data_path, out_dir, export_dir, device = "auto", dtype = "auto";
  std::string comm_backend = "auto";
  std::string params = "all", schedule = "cosine", resume;
  std::int64_t steps = 1000, batch = 1, micro_batch = 0, warmup = 0, log_every = 10, lora = 0;
  std::int64_t zero = 2, checkpoint_every = 0, checkpoint_keep = 2;
  double lora_alpha = 0, bucket_mb = 25, comm_timeout = 300;
  std::uint64_t seed = 0;
  double fps = 24, min_lr_ratio = 0;
  bool overwrite = false, quiet = false, checkpoint_activations = false;
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
  opts.add_options()("help,h", "show this help")("config", path_value(&o.config_file, PathKind::file), kConfigOptionHelp)(
      "model", path_value(&o.model_dir, PathKind::directory), "the model to fine-tune: a pipeline directory (unet/, ...) or a UNet directory")(
      "data", path_value(&o.data_path, PathKind::file), "the training data (vinf prepare-data's HDF5 file)")(
      "out", path_value(&o.out_dir, PathKind::out_dir), "the run directory (an existing non-empty one is refused unless --overwrite)")(
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
      "otherwise)")(
      "device", po::value(&o.device)->default_value(o.device),
      "auto | cpu | cuda (auto: the GPUs when every rank has one, else the CPU)")(
      "dtype", po::value(&o.dtype)->default_value(o.dtype),
      "auto | f32 | bf16: bf16 is mixed precision (bf16 products, f32 master weights and reductions); auto is "
      "bf16 on CUDA and f32 on the CPU. A checkpoint resumes only at its own precision")(
      "comm-backend", po::value(&o.comm_backend)->default_value(o.comm_backend),
      "auto | mpi | nccl: how the gradients and parameters travel between the ranks (auto: NCCL between GPUs, "
      "MPI on the CPU and between ranks that share a GPU)")(
      "quiet,q", po::bool_switch(&o.quiet), "print only warnings, errors and the result");
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
      "backward pass completes it")(
      "train.warmup-steps", ranged(&o.warmup, 0, 100000000)->default_value(o.warmup), "steps of linear learning-rate warm-up")(
      "train.schedule", po::value(&o.schedule)->default_value(o.schedule), "cosine | constant (after the warm-up)")(
      "train.min-lr", ranged(&o.min_lr_ratio, 0, 1)->default_value(o.min_lr_ratio),
      "the cosine's final learning rate, as a fraction of --train.lr")(
      "train.params", po::value(&o.params)->default_value(o.params),
      "what is trained: all | temporal (transformer_in and every temp_* module) | comma-separated globs over "
      "parameter names ('*.temp_attentions.*,conv_out.*'); the rest is frozen")(
      "train.seed", ranged(&o.seed, 0, 9007199254740991.0)->default_value(o.seed), "seed of the clip order, the timesteps and the noise")(
      "train.fps", ranged_above(&o.fps, 0, 1000)->default_value(o.fps), "the fps conditioning of the training clips")(
      "train.log-every", ranged(&o.log_every, 1, 100000000)->default_value(o.log_every),
      "print the loss every N steps (every step goes to log.csv)")(
      "train.lora", ranged(&o.lora, 0, 4096)->default_value(o.lora),
      "train LoRA adapters of this rank on every attention projection (to_q, to_k, to_v, to_out.0) instead of "
      "the model's parameters; written to RUN_DIR/lora.safetensors (diffusers' layout) for generate --model.lora "
      "(0: off)")(
      "train.lora-alpha", ranged(&o.lora_alpha, 0, 65536)->default_value(o.lora_alpha),
      "the adapters' alpha: they add alpha / rank * B A (0: alpha = rank)")(
      "train.checkpoint-activations", po::bool_switch(&o.checkpoint_activations),
      "keep only each block's input in the forward pass and run the block again in the backward pass: "
      "less memory (about 40% of it on the tiny model) for one more forward pass of time");
  o.optimizer.add_to(t);
  opts.add(t);
  return opts;
}

// The parameters --train.params selects, in the model's order. Each glob must select something.
std::vector<std::pair<std::string, Shape>> trainable_parameters(const std::vector<model::ParamSpec>& specs,
                                                                const std::string& choice) {
  std::vector<std::pair<std::string, Shape>> out;
  if (choice == "all") {
    for (const auto& p : specs) out.emplace_back(p.name, p.shape);
    return out;
  }
  if (choice == "temporal") {
    for (const auto& p : specs)
      if (p.name.rfind("transformer_in.", 0) == 0 || p.name.find(".temp_") != std::string::npos)
        out.emplace_back(p.name, p.shape);
    return out;
  }
  std::vector<std::string> globs;
  std::stringstream in(choice);
  for (std::string g; std::getline(in, g, ',');)
    if (!g.empty()) globs.push_back(g);
  VINF_INPUT_CHECK(!globs.empty(), "--train.params '", choice, "' is none of all, temporal or a list of globs");
  std::vector<bool> used(globs.size(), false);
  for (const auto& p : specs) {
    bool take = false;
    for (std::size_t i = 0; i < globs.size(); ++i)
      if (fnmatch(globs[i].c_str(), p.name.c_str(), 0) == 0) take = used[i] = true;
    if (take) out.emplace_back(p.name, p.shape);
  }
  for (std::size_t i = 0; i < globs.size(); ++i)
    VINF_INPUT_CHECK(used[i], "--train.params: the glob '", globs[i], "' matches no parameter of the model ",
                     "(names as in diffusers, e.g. down_blocks.0.temp_attentions.0.proj_in.weight; vinf inspect lists them)");
  return out;
}

// A directory the run may write into: absent, empty, or (with --overwrite) anything.
void check_writable_dir(const std::string& dir, const char* option, bool overwrite) {
  if (!fs::exists(dir)) return;
  VINF_INPUT_CHECK(fs::is_directory(dir), option, " ", dir, " exists and is not a directory");
  VINF_INPUT_CHECK(overwrite || fs::is_empty(dir), option, " ", dir,
                   " already holds files; give a new directory, or --overwrite to replace what this run writes");
}

// The learning rate of step s (1-based).
double learning_rate(const TrainRunOptions& o, double peak, std::int64_t s) {
  if (o.warmup > 0 && s <= o.warmup) return peak * static_cast<double>(s) / static_cast<double>(o.warmup);
  if (o.schedule == "constant" || o.steps <= o.warmup) return peak;
  const double progress = static_cast<double>(s - o.warmup) / static_cast<double>(o.steps - o.warmup);
  const double floor = peak * o.min_lr_ratio;
  return floor + (peak - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

// t's f32 elements in host memory: t itself on the CPU, else a copy in `keep`.
const float* host_floats(ExecContext& ctx, const Tensor& t, std::vector<float>& keep) {
  if (t.device.is_cpu()) return t.ptr<float>();
  keep.resize(static_cast<std::size_t>(t.numel()));
  ops::copy(ctx, t, Tensor::wrap(keep.data(), DType::f32, Device::cpu(), t.shape));
  return keep.data();
}

// Writes the UNet (config.json and its weights, from host memory: a copy of each on a GPU) into dir.
void write_unet(ExecContext& ctx, const std::string& dir, const model::UNetConfig& c,
                const std::vector<model::ParamSpec>& specs, const model::Weights& w) {
  fs::create_directories(dir);
  std::vector<io::TensorToWrite> tensors;
  std::vector<std::vector<float>> copies(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const model::ParamSpec& p = specs[i];
    tensors.push_back({p.name, DType::f32, p.shape, host_floats(ctx, w.get(p.name), copies[i]), {}});
  }
  io::write_safetensors(dir + "/diffusion_pytorch_model.safetensors", tensors,
                        {{"format", "pt"}, {"generator", std::string("vinf ") + VINF_VERSION + " train"}});
  io::write_file_atomically(dir + "/config.json", model::unet_config_json(c));
}

// The settings a resumed run must share with its checkpoint: those that change the numbers
// (not the ranks, the ZeRO stage or the micro-batch, which change only their rounding).
nlohmann::ordered_json settings_json(const TrainRunOptions& o, const train::AdamWSettings& a, const train::DataInfo& d,
                                     std::int64_t trained, DType precision) {
  return {{"precision", dtype_name(precision)},
          {"model", fs::weakly_canonical(o.model_dir).string()},
          {"data", fs::weakly_canonical(o.data_path).string()},
          {"clips", d.clips},
          {"steps", o.steps},
          {"batch", o.batch},
          {"seed", o.seed},
          {"params", o.params},
          {"lora", o.lora},
          {"lora_alpha", o.lora_alpha},
          {"trained", trained},
          {"lr", a.lr},
          {"betas", {a.beta1, a.beta2}},
          {"eps", a.eps},
          {"weight_decay", a.weight_decay},
          {"clip_grad_norm", a.clip_grad_norm},
          {"warmup_steps", o.warmup},
          {"schedule", o.schedule},
          {"min_lr", o.min_lr_ratio},
          {"fps", o.fps}};
}

// "" when a checkpoint's settings are this run's, else the differences.
std::string settings_differences(const std::string& stored, const nlohmann::ordered_json& now) {
  nlohmann::json was;
  try {
    was = nlohmann::json::parse(stored);
  } catch (const nlohmann::json::exception&) {
    return "its settings are not JSON";
  }
  std::string diff;
  for (const auto& [key, value] : now.items())
    if (!was.contains(key) || was[key] != nlohmann::json::parse(value.dump()))
      diff += (diff.empty() ? "" : "; ") + key + " was " + (was.contains(key) ? was[key].dump() : "absent") +
              ", now " + value.dump();
  return diff;
}

// The losses of a log.csv text (its second column), for the loss curve of a resumed run.
std::vector<double> losses_of_log(const std::string& csv) {
  std::vector<double> out;
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    const auto a = line.find(','), b = line.find(',', a + 1);
    if (a != std::string::npos && b != std::string::npos) out.push_back(std::stod(line.substr(a + 1, b - a - 1)));
  }
  return out;
}

}  // namespace

int train(const std::vector<std::string>& args) {
  pipeline::hold_stop_signals();  // before any thread starts: they all inherit the block
  TrainRunOptions o;
  const po::options_description opts = train_option_table(o);
  po::variables_map vm;
  parse_options(args, opts, vm, "train");
  if (vm.count("help")) {
    std::cout << opts << "\nA SIGTERM or SIGUSR1 (Slurm's time limit or a preemption) ends the run after the current\n"
                         "step with a checkpoint (continue with --resume auto); the model trained so far is\n"
                         "exported, and the exit status is " << kExitStopped << ". A failure on any rank ends every rank.\n"
                         "Exit status: 0 on success, 2 for bad input (the message names the option or file), 1 for\n"
                         "other failures, 3 when a collective timed out (--comm-timeout), " << kExitStopped << " after a stop signal.\n";
    return 0;
  }
  for (const char* required : {"model", "data", "out"})
    VINF_INPUT_CHECK(vm.count(required), "vinf train: --", required, " is required (see vinf train --help)");
  // The single values' ranges are checked as they are read (option_values.hpp); here, how they combine.
  VINF_INPUT_CHECK(o.micro_batch == 0 || o.batch % o.micro_batch == 0, "--train.batch ", o.batch,
                   " must be a multiple of --train.micro-batch ", o.micro_batch);
  VINF_INPUT_CHECK(o.schedule == "cosine" || o.schedule == "constant", "--train.schedule '", o.schedule,
                   "' is not cosine or constant");
  const train::AdamWSettings adamw = o.optimizer.resolve();
  VINF_INPUT_CHECK(o.lora == 0 || vm["train.params"].defaulted(), "--train.lora trains the adapters alone; ",
                   "--train.params ", o.params, " does not apply with it");
  // With LoRA the run's result is the adapters; the merged model only when --export asks for it.
  const bool export_model = o.lora == 0 || !o.export_dir.empty();
  if (o.export_dir.empty()) o.export_dir = o.out_dir + "/model";
  if (!o.resume.empty() && o.resume != "auto") {
    VINF_INPUT_CHECK(fs::is_regular_file(o.resume), "--resume ", o.resume, ": no such checkpoint file (or use ",
                     "--resume auto)");
  }
  // A resumed run writes into its own run directory (and export directory) again.
  const bool resuming = !o.resume.empty();
  check_writable_dir(o.out_dir, "--out", o.overwrite || resuming);
  if (export_model) check_writable_dir(o.export_dir, "--export", o.overwrite || resuming);

  job::JobPlan plan;
  plan.device = check_training_device(o.device, true);
  const std::optional<DType> dtype_choice = check_training_dtype(o.dtype, true);
  plan.dtype = DType::f32;  // the runtime's; the products' precision is the graph's (below)
  plan.transport = job::parse_transport(o.comm_backend);
  plan.comm_timeout = o.comm_timeout;
  plan.clip_group = true;  // the gradients' communicator: every rank, on the device
  std::unique_ptr<job::Job> job = job::start_job(plan);
  pipeline::install_stop_signals();  // after MPI's own set-up, so that this handler is the one in place
  mpi::Session& session = job->session();
  const int ranks = job->size(), rank = job->rank();
  const DType precision = training_precision(dtype_choice, job->device());
  // The gradients and parameters travel in the device's memory (NCCL between GPUs); the host's
  // world carries the loss and the checks.
  mpi::Communicator& grad_comm = job->device().is_cuda() ? *job->clip_comm() : job->world();
  // By default each rank runs its share of the batch in one pass.
  if (o.micro_batch == 0) {
    VINF_INPUT_CHECK(o.batch % ranks == 0, "--train.batch ", o.batch, " does not divide over the ", ranks,
                     " ranks: give a batch that does, or --train.micro-batch (the ranks then take whole micro-batches)");
    o.micro_batch = o.batch / ranks;
  }
  const std::int64_t micro_batches = o.batch / o.micro_batch;
  VINF_INPUT_CHECK(micro_batches >= ranks, "--train.batch ", o.batch, " in micro-batches of ", o.micro_batch, " is ",
                   micro_batches, " micro-batch(es), fewer than the ", ranks, " ranks: every rank takes at least one ",
                   "(a larger batch, a smaller --train.micro-batch, or fewer ranks)");
  auto say = [&](const std::string& line) {
    if (!o.quiet && job->root()) std::cerr << "vinf train: " << line << "\n" << std::flush;
  };

  // The model: a pipeline root (its UNet in unet/, its noise schedule in scheduler/) or a UNet.
  const bool pipeline = fs::exists(o.model_dir + "/unet/config.json");
  const std::string unet_dir = pipeline ? o.model_dir + "/unet" : o.model_dir;
  const model::ModelFiles files = model::find_model_files(unet_dir);
  std::vector<std::string> warnings;
  const model::UNetConfig config = model::load_unet_config(files.config, &warnings);
  sampling::NoiseScheduleConfig schedule;
  if (pipeline && fs::exists(o.model_dir + "/scheduler/scheduler_config.json"))
    schedule = sampling::read_scheduler_config(o.model_dir + "/scheduler");
  const std::vector<float> abar = sampling::make_alphas_cumprod(schedule);

  const train::TrainData data(o.data_path);
  const train::DataInfo& di = data.info();
  VINF_INPUT_CHECK(di.channels == config.in_channels, o.data_path, " holds latents of ", di.channels,
                   " channels; the model (", files.config, ") takes in_channels = ", config.in_channels);
  VINF_INPUT_CHECK(di.text_width == config.cross_attention_dim, o.data_path, " holds text embeddings of width ",
                   di.text_width, "; the model takes cross_attention_dim = ", config.cross_attention_dim,
                   " (prepare the data with this model's pipeline)");

  Runtime& rt = job->runtime();
  ExecContext& ctx = rt.ctx();
  const std::vector<model::ParamSpec> specs = model::unet_parameters(config);
  const model::WeightFiles weight_files(files);
  model::Weights weights(weight_files, specs, rt, DType::f32, false, &warnings);
  if (job->root())
    for (const std::string& w : warnings) std::cerr << "vinf train: warning: " << w << "\n";
  std::unique_ptr<train::LoraAdapters> lora;
  if (o.lora > 0)
    lora = std::make_unique<train::LoraAdapters>(rt.arena(), ctx, specs, static_cast<int>(o.lora),
                                                 static_cast<float>(o.lora_alpha > 0 ? o.lora_alpha : o.lora), o.seed);
  const auto trainable = lora ? lora->parameters() : trainable_parameters(specs, o.params);
  std::int64_t trained_count = 0;
  for (const auto& [name, shape] : trainable) trained_count += shape.numel();
  train::ParamGrads grads(rt.arena(), trainable);
  // The model's own tensors (the frozen parameters, and where the trained ones go back to).
  const auto model_lookup = [&weights, &lora](const std::string& n) {
    const Tensor* t = lora ? lora->find(n) : nullptr;
    return t ? t : weights.find(n);
  };
  const auto bucket = static_cast<std::int64_t>(std::max(1.0, o.bucket_mb * 1024 * 1024 / 4));
  train::DataParallel dp(rt.arena(), ctx, grad_comm, grads, static_cast<int>(o.zero), bucket, precision);
  const train::Shard part = dp.optimizer_part();
  // The trained parameters in one buffer (in the precision the model computes with), which the
  // ranks all-gather, and the f32 master weights of the part this rank's optimizer steps.
  train::FlatParams flat(rt.arena(), ctx, grads, model_lookup, precision, part);
  const auto lookup = [&flat, &model_lookup](const std::string& n) {
    const Tensor* t = flat.find(n);
    return t ? t : model_lookup(n);
  };
  train::AdamW opt(rt.arena(), ctx, part.first, part.count);
  const float lora_scale = lora ? lora->scale() : 1.f;
  const nlohmann::ordered_json settings = settings_json(o, adamw, di, trained_count, precision);

  // Where the run starts: a checkpoint every rank can read whole (the newest that passes, with
  // --resume auto), or step 0.
  const std::string ckpt_dir = o.out_dir + "/checkpoints";
  std::vector<std::string> candidates;
  if (o.resume == "auto")
    candidates = io::list_checkpoints(ckpt_dir);
  else if (!o.resume.empty())
    candidates = {o.resume};
  train::TrainCheckpoint resumed;
  std::string refusals;
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    std::string problem;
    try {
      train::TrainCheckpoint c = train::read_train_checkpoint_info(*it);
      const std::string diff = settings_differences(c.settings_json, settings);
      VINF_INPUT_CHECK(diff.empty(), *it, " belongs to a run with other settings: ", diff);
      // Through host memory: every trained value, and this rank's part of the moments.
      std::vector<float> values(static_cast<std::size_t>(trained_count)), moments(static_cast<std::size_t>(2 * part.count));
      train::read_train_checkpoint_part(*it, {0, trained_count}, values.data(), nullptr, nullptr);
      train::read_train_checkpoint_part(*it, part, nullptr, moments.data(), moments.data() + part.count);
      flat.set(ctx, Tensor::wrap(values.data(), DType::f32, Device::cpu(), {trained_count}));
      ops::copy(ctx, Tensor::wrap(moments.data(), DType::f32, Device::cpu(), opt.moments().shape), opt.moments());
      resumed = std::move(c);
    } catch (const InputError& e) {
      problem = e.what();
    }
    // Every rank must have read it; the first rank's problem is everyone's message.
    const std::vector<std::string> problems = session.gather_on_root(problem);
    std::string first;
    for (const std::string& p : problems)
      if (first.empty()) first = p;
    session.broadcast(first);
    if (first.empty()) break;
    resumed = {};
    refusals += "\n  " + first;
  }
  VINF_INPUT_CHECK(candidates.empty() || !resumed.path.empty(), "--resume ", o.resume, ": no usable checkpoint",
                   refusals);
  if (!refusals.empty() && job->root())
    std::cerr << "vinf train: warning: skipped damaged or foreign checkpoints:" << refusals << "\n";
  if (!resumed.path.empty()) {
    // The flat buffer was read over the model's values; stage 0 read every moment.
    opt.set_steps(resumed.optimizer_steps);
    VINF_INPUT_CHECK(resumed.step <= o.steps, resumed.path, " is at step ", resumed.step, ", past --train.steps ",
                     o.steps);
  }
  const std::int64_t first_step = resumed.step + 1;

  const std::string what = lora ? "LoRA adapters of rank " + std::to_string(o.lora) + " on " +
                                      std::to_string(trainable.size() / 2) + " attention projections"
                                : "--train.params " + o.params;
  say("model " + files.dir + ": " + std::to_string(weights.count()) + " parameters, " + std::to_string(trained_count) +
      " trained (" + what + "); data " + o.data_path + ": " + std::to_string(di.clips) + " clips of " +
      std::to_string(di.frames) + " frames " + std::to_string(di.height) + "x" + std::to_string(di.width) +
      " latents");
  say(std::to_string(o.steps) + " steps of " + std::to_string(o.batch) + " clip(s)" +
      (o.micro_batch < o.batch ? " in micro-batches of " + std::to_string(o.micro_batch) : std::string()) +
      ", AdamW lr " + std::to_string(adamw.lr) + ", " + o.schedule + " after " + std::to_string(o.warmup) +
      " warm-up steps, clipping at " + std::to_string(adamw.clip_grad_norm) +
      (o.checkpoint_activations ? ", activations checkpointed per block" : ""));
  if (ranks > 1)
    say(std::to_string(ranks) + " data-parallel ranks, ZeRO stage " + std::to_string(o.zero) + ", " +
        std::to_string(dp.buckets()) + " gradient bucket(s); optimizer state " +
        std::to_string(dp.optimizer_bytes() >> 10) + " KiB per rank");
  if (!resumed.path.empty())
    say("resuming from " + resumed.path + " after step " + std::to_string(resumed.step) + " (written by " +
        std::to_string(resumed.world_size) + " rank(s), ZeRO " + std::to_string(resumed.zero) + ")");

  // log.csv: a resumed run's starts as its checkpoint's, so that it holds each step once.
  std::vector<double> losses = resumed.path.empty() ? std::vector<double>{} : losses_of_log(resumed.log_csv);
  std::string log_text = resumed.path.empty() ? std::string("step,loss,lr,grad_norm,seconds\n") : resumed.log_csv;
  std::ofstream csv;
  if (job->root()) {
    fs::create_directories(o.out_dir);
    csv.open(o.out_dir + "/log.csv", std::ios::trunc);
    VINF_INPUT_CHECK(csv.good(), "cannot write ", o.out_dir, "/log.csv");
    csv << log_text << std::flush;
  }
  VINF_INPUT_CHECK(session.all(!job->root() || csv.good()), "cannot write ", o.out_dir, "/log.csv");

  const std::int64_t per_clip = di.channels * di.frames * di.height * di.width;
  const std::int64_t text_row = di.text_tokens * di.text_width;
  const std::int64_t m = o.micro_batch;
  std::vector<float> host_x0(static_cast<std::size_t>(m * per_clip)), host_text(static_cast<std::size_t>(m * text_row));
  OwnedTensor x0 = rt.arena().empty(DType::f32, {m, di.channels, di.frames, di.height, di.width});
  OwnedTensor eps = rt.arena().empty(DType::f32, x0.shape);
  OwnedTensor text = rt.arena().empty(DType::f32, {m, di.text_tokens, di.text_width});
  const auto timesteps_total = static_cast<std::uint64_t>(abar.size());
  // This rank's micro-batches of every step: [mb0, mb1) of the step's micro_batches.
  const std::int64_t mb0 = rank * micro_batches / ranks, mb1 = (rank + 1) * micro_batches / ranks;

  std::vector<float> stage[3];  // host copies of device memory, for the checkpoint writer
  auto write_checkpoint = [&](std::int64_t completed) {
    fs::create_directories(ckpt_dir);
    train::TrainCheckpoint c;
    c.step = completed;
    c.optimizer_steps = opt.steps();
    c.trained = trained_count;
    c.world_size = ranks;
    c.zero = o.zero;
    c.settings_json = settings.dump();
    c.log_csv = log_text;
    // Each rank writes its shard; stage 0's optimizer holds every moment, the shard among them.
    // From the f32 master weights (the f32 model, or with bf16 the optimizer's part).
    const train::Shard mine = train::shard_of(trained_count, rank, ranks);
    const std::int64_t at = mine.first - part.first;
    const float* values = host_floats(ctx, flat.master().slice(0, at, mine.count), stage[0]);
    const float* m1 = host_floats(ctx, opt.moments().reshape({2 * part.count}).slice(0, at, mine.count), stage[1]);
    const float* m2 =
        host_floats(ctx, opt.moments().reshape({2 * part.count}).slice(0, part.count + at, mine.count), stage[2]);
    train::write_train_checkpoint(session.world(), ckpt_dir + "/" + io::checkpoint_name(completed), c, mine, values,
                                  m1, m2);
    if (job->root()) io::prune_checkpoints(ckpt_dir, static_cast<int>(o.checkpoint_keep));
  };

  Progress progress("train", static_cast<int>(o.steps - resumed.step), static_cast<double>(o.batch), "clips/s",
                    !o.quiet && job->root(), 10.0);
  std::vector<std::int64_t> order;
  std::int64_t order_epoch = -1;
  double forward_seconds = 0, backward_seconds = 0;
  // The same from the second step of this start on: the first one also waits for the ranks' start.
  double later_wait = 0, later_backward = 0;
  const auto t_start = Clock::now();
  const pipeline::StepControl control(session, job->world_session().rank(),
                                      {static_cast<int>(o.steps), static_cast<int>(o.checkpoint_every), o.checkpoint_every > 0});
  std::int64_t step = first_step;
  int stopped_by = 0;
  for (; step <= o.steps; ++step) {
    const auto t_step = Clock::now();
    const double wait_before = dp.reduce_wait_seconds() + dp.gather_seconds(), backward_before = backward_seconds;
    const double lr = learning_rate(o, adamw.lr, step);
    grads.zero(ctx);
    double sums[1] = {0};
    for (std::int64_t mb = mb0; mb < mb1; ++mb) {
      dp.arm(mb + 1 == mb1);  // the last micro-batch's backward pass sends the gradients
      std::vector<std::int64_t> ts;
      for (std::int64_t j = 0; j < m; ++j) {
        // Sample k of the whole run: clip order[k % N] of epoch k / N.
        const std::int64_t k = (step - 1) * o.batch + mb * m + j, epoch = k / di.clips;
        if (epoch != order_epoch) order = train::epoch_order(di.clips, o.seed, order_epoch = epoch);
        data.read(order[static_cast<std::size_t>(k % di.clips)], host_x0.data() + j * per_clip,
                  host_text.data() + j * text_row);
        const philox::U32x4 r = philox::block(o.seed, (std::uint64_t{1} << 62) + static_cast<std::uint64_t>(k), 0);
        ts.push_back(static_cast<std::int64_t>(r.v[0] % timesteps_total));
        ops::normal(ctx, eps.select(0, j), o.seed, static_cast<std::uint64_t>(k), 0);
      }
      ops::copy(ctx, Tensor::wrap(host_x0.data(), DType::f32, Device::cpu(), x0.shape), x0);
      ops::copy(ctx, Tensor::wrap(host_text.data(), DType::f32, Device::cpu(), text.shape), text);
      const train::LossBatch batch{x0, eps, text, ts, o.fps};
      const train::LossResult r = train::unet_loss_backward(ctx, config, lookup, grads, abar, batch,
                                                            o.batch * per_clip, nullptr, o.checkpoint_activations,
                                                            lora_scale, nullptr, precision);
      sums[0] += r.sum_squares;
      forward_seconds += r.forward_seconds;
      backward_seconds += r.backward_seconds;
    }
    dp.finish_reduction();
    job->world().all_reduce_sum(job->host(), Tensor::wrap(sums, DType::f64, Device::cpu(), {1}));
    const double loss = sums[0] / static_cast<double>(o.batch * per_clip);
    VINF_CHECK(std::isfinite(loss), "the loss is ", loss, " at step ", step,
               " (lower --train.lr, or check the data with vinf inspect)");
    const double norm = dp.global_norm(ctx);
    opt.step_part(ctx, dp.part_grads(), flat.master(), flat.master_copy(), adamw, lr,
                  train::clip_scale(norm, adamw.clip_grad_norm));
    dp.gather(ctx, flat);
    if (step > first_step) {
      later_wait += dp.reduce_wait_seconds() + dp.gather_seconds() - wait_before;
      later_backward += backward_seconds - backward_before;
    }
    losses.push_back(loss);
    char line[160];
    std::snprintf(line, sizeof line, "%lld,%.8g,%.6g,%.6g,%.3f\n", static_cast<long long>(step), loss, lr, norm,
                  seconds_since(t_start));
    log_text += line;
    if (job->root()) csv << line << std::flush;
    if (step % o.log_every == 0 || step == o.steps) {
      std::snprintf(line, sizeof line, "loss %.5f lr %.3g grad norm %.3g", loss, lr, norm);
      progress.update(static_cast<int>(step - resumed.step), line);
    }
    control.pace(t_step);
    control.fault(static_cast<int>(step));  // a signal only: training has no latents to spoil
    stopped_by = control.agreed_stop();
    if (control.checkpoint_due(static_cast<int>(step), stopped_by)) write_checkpoint(step);
    if (stopped_by != 0) break;
  }
  const std::int64_t done = std::min(step, o.steps);
  const double run_seconds = seconds_since(t_start);
  if (stopped_by != 0 && job->root())
    std::cerr << "vinf train: " << control.stopped_by_line(stopped_by, static_cast<int>(done), ckpt_dir + "/" + io::checkpoint_name(done)) << "\n";

  // The trained values back into the model's tensors, for exporting: the f32 master weights.
  if (flat.dtype() == DType::f32) {
    flat.copy_to(ctx, model_lookup);
  } else {
    OwnedTensor master = rt.arena().empty(DType::f32, {trained_count});
    dp.gather_master(ctx, flat, master);
    flat.copy_to(ctx, model_lookup, &master);
  }
  const double samples = static_cast<double>((done - resumed.step) * o.batch);
  const mpi::CommCounters comm = grad_comm.counters();
  const std::vector<double> waits = session.gather_values_on_root(dp.reduce_wait_seconds() + dp.gather_seconds());
  const std::vector<double> backwards = session.gather_values_on_root(backward_seconds);
  const std::vector<double> later_waits = session.gather_values_on_root(later_wait);
  const std::vector<double> later_backwards = session.gather_values_on_root(later_backward);
  if (!job->root()) return stopped_by != 0 ? kExitStopped : 0;

  std::int64_t w = 0, h = 0;
  const std::vector<std::uint8_t> png = evaluate::plot_curve("loss per step", losses, 1, w, h);
  io::write_png(o.out_dir + "/loss.png", png.data(), w, h);

  // The adapters, and (unless they are the result alone) the trained model: a pipeline (the other
  // parts copied) or a UNet directory.
  if (lora) {
    lora->save(ctx, o.out_dir + "/lora.safetensors");
    if (export_model) lora->merge_into(ctx, weights, lora->scale());
  }
  const std::string unet_out = pipeline ? o.export_dir + "/unet" : o.export_dir;
  if (export_model) write_unet(ctx, unet_out, config, specs, weights);
  if (export_model && pipeline)
    for (const auto& e : fs::directory_iterator(o.model_dir)) {
      const std::string name = e.path().filename().string();
      if (name == "unet") continue;
      fs::copy(e.path(), fs::path(o.export_dir) / name,
               fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    }
  const double first_loss = losses.empty() ? 0.0 : losses.front(), last_loss = losses.empty() ? 0.0 : losses.back();
  nlohmann::ordered_json summary = {{"generator", std::string("vinf ") + VINF_VERSION + " train"},
                                    {"model", o.model_dir},
                                    {"data", o.data_path},
                                    {"steps_done", done},
                                    {"steps", o.steps},
                                    {"batch", o.batch},
                                    {"micro_batch", o.micro_batch},
                                    {"checkpoint_activations", o.checkpoint_activations},
                                    {"params", o.params},
                                    {"trained_parameters", trained_count},
                                    {"lr", adamw.lr},
                                    {"warmup_steps", o.warmup},
                                    {"schedule", o.schedule},
                                    {"seed", o.seed},
                                    {"first_loss", first_loss},
                                    {"last_loss", last_loss},
                                    {"seconds", run_seconds},
                                    {"lora_rank", o.lora},
                                    {"lora_alpha", lora ? lora->alpha() : 0.f},
                                    {"export", export_model ? o.export_dir : std::string()}};
  io::write_file_atomically(o.out_dir + "/train.json", summary.dump(2) + "\n");
  const auto most = [](const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); };
  nlohmann::ordered_json run = summary;
  run["layout"] = {{"ranks", ranks},
                   {"zero", o.zero},
                   {"micro_batches_per_step", micro_batches},
                   {"buckets", dp.buckets()},
                   {"buckets_started", dp.buckets_started()},
                   {"buckets_started_in_backward", dp.buckets_started_in_backward()},
                   {"bucket_elements", bucket},
                   {"device", job->device().name()},
                   {"precision", dtype_name(precision)},
                   {"transport", grad_comm.backend()}};
  run["memory_per_rank"] = {{"optimizer_state_bytes", dp.optimizer_bytes()},
                            {"reduced_gradient_shard_bytes", dp.shard_grad_bytes()},
                            {"gradient_bytes", trained_count * 4},
                            {"trained_parameter_bytes", trained_count * static_cast<std::int64_t>(dtype_size(precision))},
                            {"master_weight_bytes", precision == DType::f32 ? trained_count * 4 : part.count * 4}};
  run["throughput"] = {{"steps", done - resumed.step},
                       {"seconds", run_seconds},
                       {"samples_per_second", run_seconds > 0 ? samples / run_seconds : 0.0},
                       {"forward_seconds_rank0", forward_seconds},
                       {"backward_seconds_rank0", backward_seconds},
                       {"backward_seconds_max", most(backwards)},
                       {"communication_wait_seconds", waits},
                       {"communication_wait_seconds_max", most(waits)},
                       {"after_first_step",
                        {{"communication_wait_seconds_max", most(later_waits)},
                         {"backward_seconds_max", most(later_backwards)}}}};
  run["communication_rank0"] = counters_json(comm);
  run["resumed_from"] = resumed.path.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(resumed.path);
  run["stopped_by"] = stopped_by != 0 ? pipeline::signal_name(stopped_by) : "";
  run["loss_curve"] = losses;
  io::write_file_atomically(o.out_dir + "/run.json", run.dump(2) + "\n");
  std::cerr << "vinf train: " << done - resumed.step << " step(s) in " << format_duration(run_seconds) << " on "
            << ranks << " rank(s), loss " << first_loss << " -> " << last_loss << "; wrote " << o.out_dir
            << " (log.csv, loss.png, train.json, run.json" << (lora ? ", lora.safetensors" : "") << ")"
            << (export_model ? " and the model " + o.export_dir : std::string()) << "\n";
  return stopped_by != 0 ? kExitStopped : 0;
}

}  // namespace vinf::app
