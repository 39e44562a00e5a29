// `vinf train`: fine-tunes the UNet on a prepare-data file (train/data.hpp) with the
// epsilon-prediction loss, AdamW, a warm-up then cosine learning rate, gradient clipping and
// accumulation, all or some parameters trained; writes a log, a loss curve and the trained model.
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fnmatch.h>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/evaluate.hpp"
#include "app/generate_options.hpp"
#include "app/train_options.hpp"
#include "core/error.hpp"
#include "core/philox.hpp"
#include "core/progress.hpp"
#include "io/atomic_file.hpp"
#include "io/image.hpp"
#include "io/safetensors.hpp"
#include "job/job.hpp"
#include "model/params.hpp"
#include "model/weights.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"
#include "sampling/scheduler.hpp"
#include "train/adamw.hpp"
#include "train/data.hpp"
#include "train/lora.hpp"
#include "train/unet_loss.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace vinf::app {

namespace {

using Clock = std::chrono::steady_clock;

struct TrainRunOptions {
  std::string config_file, model_dir, data_path, out_dir, export_dir, device = "auto", dtype = "auto";
  std::string params = "all", schedule = "cosine";
  std::int64_t steps = 1000, batch = 1, micro_batch = 0, warmup = 0, log_every = 10, lora = 0;
  double lora_alpha = 0;
  std::uint64_t seed = 0;
  double fps = 24, min_lr_ratio = 0;
  bool overwrite = false, quiet = false, checkpoint_activations = false;
  TrainOptimizerOptions optimizer;
};

po::options_description train_option_table(TrainRunOptions& o) {
  po::options_description opts(
      "vinf train: fine-tune the UNet on a prepare-data file (epsilon prediction, AdamW)\n\n"
      "usage: vinf train --config train.ini\n"
      "       vinf train --model PIPELINE --data data.h5 --out RUN_DIR [--train.steps N ...]\n\n"
      "Each step draws --train.batch clips in a seeded shuffled order (the same for any number of ranks),\n"
      "a timestep per clip uniformly from the model's noise schedule and Philox noise, and minimises\n"
      "mean((unet(sqrt(abar_t) x0 + sqrt(1 - abar_t) eps, t, text) - eps)^2) with AdamW after clipping\n"
      "the gradients' global norm; the batch runs --train.micro-batch clips at a time, the gradients\n"
      "summed (accumulation). The learning rate warms up linearly over --train.warmup-steps, then\n"
      "follows a cosine down to --train.min-lr times itself (--train.schedule constant: flat).\n"
      "Frozen parameters (--train.params) get no gradient and no optimizer state.\n\n"
      "RUN_DIR gets log.csv (step, loss, learning rate, gradient norm, seconds), loss.png, train.json and\n"
      "the trained model (--export, default RUN_DIR/model): a pipeline directory when --model is one (its\n"
      "other parts copied), else a UNet directory, in diffusers layout for vinf generate --model. With\n"
      "--train.lora it gets lora.safetensors for vinf generate --model.lora instead (and the model with\n"
      "the adapters merged when --export is given).\n"
      "Training runs in f32 on the CPU, in one process.\n\nOptions");
  opts.add_options()("help,h", "show this help")("config", po::value(&o.config_file), kConfigOptionHelp)(
      "model", po::value(&o.model_dir), "the model to fine-tune: a pipeline directory (unet/, ...) or a UNet directory")(
      "data", po::value(&o.data_path), "the training data (vinf prepare-data's HDF5 file)")(
      "out", po::value(&o.out_dir), "the run directory (an existing non-empty one is refused unless --overwrite)")(
      "export", po::value(&o.export_dir), "where the trained model goes (default RUN_DIR/model)")(
      "overwrite", po::bool_switch(&o.overwrite), "write into an existing run directory and export directory")(
      "device", po::value(&o.device)->default_value(o.device), "auto | cpu (training runs on the CPU)")(
      "dtype", po::value(&o.dtype)->default_value(o.dtype), "auto | f32 (training computes in f32)")(
      "quiet,q", po::bool_switch(&o.quiet), "print only warnings, errors and the result");
  po::options_description t("[train]");
  t.add_options()("train.steps", po::value(&o.steps)->default_value(o.steps), "optimizer steps")(
      "train.batch", po::value(&o.batch)->default_value(o.batch), "clips per optimizer step")(
      "train.micro-batch", po::value(&o.micro_batch)->default_value(o.micro_batch),
      "clips per forward and backward pass (0: the whole batch); the batch must be a multiple of it")(
      "train.warmup-steps", po::value(&o.warmup)->default_value(o.warmup), "steps of linear learning-rate warm-up")(
      "train.schedule", po::value(&o.schedule)->default_value(o.schedule), "cosine | constant (after the warm-up)")(
      "train.min-lr", po::value(&o.min_lr_ratio)->default_value(o.min_lr_ratio),
      "the cosine's final learning rate, as a fraction of --train.lr")(
      "train.params", po::value(&o.params)->default_value(o.params),
      "what is trained: all | temporal (transformer_in and every temp_* module) | comma-separated globs over "
      "parameter names ('*.temp_attentions.*,conv_out.*'); the rest is frozen")(
      "train.seed", po::value(&o.seed)->default_value(o.seed), "seed of the clip order, the timesteps and the noise")(
      "train.fps", po::value(&o.fps)->default_value(o.fps), "the fps conditioning of the training clips")(
      "train.log-every", po::value(&o.log_every)->default_value(o.log_every),
      "print the loss every N steps (every step goes to log.csv)")(
      "train.lora", po::value(&o.lora)->default_value(o.lora),
      "train LoRA adapters of this rank on every attention projection (to_q, to_k, to_v, to_out.0) instead of "
      "the model's parameters; written to RUN_DIR/lora.safetensors (diffusers' layout) for generate --model.lora "
      "(0: off)")(
      "train.lora-alpha", po::value(&o.lora_alpha)->default_value(o.lora_alpha),
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

// Writes the UNet (config.json and its weights) into dir.
void write_unet(const std::string& dir, const model::UNetConfig& c, const std::vector<model::ParamSpec>& specs,
                const model::Weights& w) {
  fs::create_directories(dir);
  std::vector<io::TensorToWrite> tensors;
  for (const auto& p : specs) tensors.push_back({p.name, DType::f32, p.shape, w.get(p.name).data, {}});
  io::write_safetensors(dir + "/diffusion_pytorch_model.safetensors", tensors,
                        {{"format", "pt"}, {"generator", std::string("vinf ") + VINF_VERSION + " train"}});
  io::write_file_atomically(dir + "/config.json", model::unet_config_json(c));
}

volatile std::sig_atomic_t g_stop = 0;
void on_stop(int) { g_stop = 1; }

}  // namespace

int train(const std::vector<std::string>& args) {
  TrainRunOptions o;
  const po::options_description opts = train_option_table(o);
  po::variables_map vm;
  parse_options(args, opts, vm, "train");
  if (vm.count("help")) {
    std::cout << opts << "\nA SIGTERM or SIGINT (Slurm's time limit, Ctrl-C) ends the run after the current step; the\n"
                         "model trained so far is exported, and the exit status is " << kExitStopped << ".\n"
                         "Exit status: 0 on success, 2 for bad input (the message names the option or file), 1 for\n"
                         "other failures.\n";
    return 0;
  }
  for (const char* required : {"model", "data", "out"})
    VINF_INPUT_CHECK(vm.count(required), "vinf train: --", required, " is required (see vinf train --help)");
  VINF_INPUT_CHECK(o.steps >= 1, "--train.steps must be >= 1, got ", o.steps);
  VINF_INPUT_CHECK(o.batch >= 1, "--train.batch must be >= 1, got ", o.batch);
  if (o.micro_batch == 0) o.micro_batch = o.batch;
  VINF_INPUT_CHECK(o.micro_batch >= 1 && o.batch % o.micro_batch == 0, "--train.batch ", o.batch,
                   " must be a multiple of --train.micro-batch ", o.micro_batch);
  VINF_INPUT_CHECK(o.warmup >= 0 && o.log_every >= 1, "--train.warmup-steps must be >= 0 and --train.log-every >= 1");
  VINF_INPUT_CHECK(o.schedule == "cosine" || o.schedule == "constant", "--train.schedule '", o.schedule,
                   "' is not cosine or constant");
  VINF_INPUT_CHECK(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1, "--train.min-lr must be in [0, 1], got ", o.min_lr_ratio);
  VINF_INPUT_CHECK(std::isfinite(o.fps) && o.fps > 0, "--train.fps must be positive, got ", o.fps);
  const train::AdamWSettings adamw = o.optimizer.resolve();
  VINF_INPUT_CHECK(o.lora >= 0 && o.lora_alpha >= 0, "--train.lora and --train.lora-alpha must be >= 0");
  VINF_INPUT_CHECK(o.lora == 0 || vm["train.params"].defaulted(), "--train.lora trains the adapters alone; ",
                   "--train.params ", o.params, " does not apply with it");
  // With LoRA the run's result is the adapters; the merged model only when --export asks for it.
  const bool export_model = o.lora == 0 || !o.export_dir.empty();
  if (o.export_dir.empty()) o.export_dir = o.out_dir + "/model";
  check_writable_dir(o.out_dir, "--out", o.overwrite);
  if (export_model) check_writable_dir(o.export_dir, "--export", o.overwrite);

  job::JobPlan plan;
  plan.device = check_training_device(o.device);
  plan.dtype = check_training_dtype(o.dtype);
  plan.clip_group = false;
  std::unique_ptr<job::Job> job = job::start_job(plan);
  VINF_INPUT_CHECK(job->size() == 1, "vinf train runs in one process for now; launch it without mpirun (got ",
                   job->size(), " ranks; vinf train-step splits a batch over ranks)");
  auto say = [&](const std::string& line) {
    if (!o.quiet) std::cerr << "vinf train: " << line << "\n" << std::flush;
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
  for (const std::string& w : warnings) std::cerr << "vinf train: warning: " << w << "\n";
  std::unique_ptr<train::LoraAdapters> lora;
  if (o.lora > 0)
    lora = std::make_unique<train::LoraAdapters>(rt.arena(), ctx, specs, static_cast<int>(o.lora),
                                                 static_cast<float>(o.lora_alpha > 0 ? o.lora_alpha : o.lora), o.seed);
  const auto trainable = lora ? lora->parameters() : trainable_parameters(specs, o.params);
  std::int64_t trained_count = 0;
  for (const auto& [name, shape] : trainable) trained_count += shape.numel();
  train::ParamGrads grads(rt.arena(), trainable);
  train::AdamW opt(rt.arena(), ctx, grads);
  const auto lookup = [&weights, &lora](const std::string& n) {
    const Tensor* t = lora ? lora->find(n) : nullptr;
    return t ? t : weights.find(n);
  };
  const float lora_scale = lora ? lora->scale() : 1.f;
  const std::string what = lora ? "LoRA adapters of rank " + std::to_string(o.lora) + " on " +
                                      std::to_string(trainable.size() / 2) + " attention projections"
                                : "--train.params " + o.params;
  say("model " + files.dir + ": " + std::to_string(weights.count()) + " parameters, " + std::to_string(trained_count) +
      " trained (" + what + "); data " + o.data_path + ": " + std::to_string(di.clips) +
      " clips of " + std::to_string(di.frames) + " frames " + std::to_string(di.height) + "x" +
      std::to_string(di.width) + " latents");
  say(std::to_string(o.steps) + " steps of " + std::to_string(o.batch) + " clip(s)" +
      (o.micro_batch < o.batch ? " in micro-batches of " + std::to_string(o.micro_batch) : std::string()) +
      ", AdamW lr " + std::to_string(adamw.lr) + ", " + o.schedule + " after " + std::to_string(o.warmup) +
      " warm-up steps, clipping at " + std::to_string(adamw.clip_grad_norm) +
      (o.checkpoint_activations ? ", activations checkpointed per block" : ""));

  fs::create_directories(o.out_dir);
  std::ofstream csv(o.out_dir + "/log.csv");
  VINF_INPUT_CHECK(csv.good(), "cannot write ", o.out_dir, "/log.csv");
  csv << "step,loss,lr,grad_norm,seconds\n";

  const std::int64_t per_clip = di.channels * di.frames * di.height * di.width;
  const std::int64_t text_row = di.text_tokens * di.text_width;
  const std::int64_t m = o.micro_batch;
  std::vector<float> host_x0(static_cast<std::size_t>(m * per_clip)), host_text(static_cast<std::size_t>(m * text_row));
  OwnedTensor x0 = rt.arena().empty(DType::f32, {m, di.channels, di.frames, di.height, di.width});
  OwnedTensor eps = rt.arena().empty(DType::f32, x0.shape);
  OwnedTensor text = rt.arena().empty(DType::f32, {m, di.text_tokens, di.text_width});
  const auto timesteps_total = static_cast<std::uint64_t>(abar.size());

  std::signal(SIGTERM, on_stop);
  std::signal(SIGINT, on_stop);
  Progress progress("train", static_cast<int>(o.steps), static_cast<double>(o.batch), "clips/s", !o.quiet, 10.0);
  std::vector<double> losses;
  std::vector<std::int64_t> order;
  std::int64_t order_epoch = -1;
  const auto t_start = Clock::now();
  std::int64_t step = 0;
  for (step = 1; step <= o.steps && !g_stop; ++step) {
    const double lr = learning_rate(o, adamw.lr, step);
    grads.zero(ctx);
    double sum_squares = 0;
    for (std::int64_t mb = 0; mb < o.batch; mb += m) {
      std::vector<std::int64_t> ts;
      for (std::int64_t j = 0; j < m; ++j) {
        // Sample k of the whole run: clip order[k % N] of epoch k / N.
        const std::int64_t k = (step - 1) * o.batch + mb + j, epoch = k / di.clips;
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
      sum_squares += train::unet_loss_backward(ctx, config, lookup, grads, abar, batch, o.batch * per_clip, nullptr,
                                               o.checkpoint_activations, lora_scale)
                         .sum_squares;
    }
    const double loss = sum_squares / static_cast<double>(o.batch * per_clip);
    VINF_CHECK(std::isfinite(loss), "the loss is ", loss, " at step ", step,
               " (lower --train.lr, or check the data with vinf inspect)");
    const double norm = train::global_norm(ctx, grads);
    opt.step(ctx, grads, lookup, adamw, lr, train::clip_scale(norm, adamw.clip_grad_norm));
    losses.push_back(loss);
    char line[160];
    std::snprintf(line, sizeof line, "%lld,%.8g,%.6g,%.6g,%.3f\n", static_cast<long long>(step), loss, lr, norm,
                  seconds_since(t_start));
    csv << line << std::flush;
    if (step % o.log_every == 0 || step == o.steps) {
      std::snprintf(line, sizeof line, "loss %.5f lr %.3g grad norm %.3g", loss, lr, norm);
      progress.update(static_cast<int>(step), line);
    }
  }
  const std::int64_t done = step - 1;
  if (g_stop) std::cerr << "vinf train: stopped by a signal after step " << done << " of " << o.steps << "\n";

  std::int64_t w = 0, h = 0;
  const std::vector<std::uint8_t> png = plot_curve("loss per step", losses, 1, w, h);
  io::write_png(o.out_dir + "/loss.png", png.data(), w, h);

  // The adapters, and (unless they are the result alone) the trained model: a pipeline (the other
  // parts copied) or a UNet directory.
  if (lora) {
    lora->save(ctx, o.out_dir + "/lora.safetensors");
    if (export_model) lora->merge_into(ctx, weights, lora->scale());
  }
  const std::string unet_out = pipeline ? o.export_dir + "/unet" : o.export_dir;
  if (export_model) write_unet(unet_out, config, specs, weights);
  if (export_model && pipeline)
    for (const auto& e : fs::directory_iterator(o.model_dir)) {
      const std::string name = e.path().filename().string();
      if (name == "unet") continue;
      fs::copy(e.path(), fs::path(o.export_dir) / name,
               fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    }
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
                                    {"first_loss", losses.empty() ? 0.0 : losses.front()},
                                    {"last_loss", losses.empty() ? 0.0 : losses.back()},
                                    {"seconds", seconds_since(t_start)},
                                    {"lora_rank", o.lora},
                                    {"lora_alpha", lora ? lora->alpha() : 0.f},
                                    {"export", export_model ? o.export_dir : std::string()}};
  io::write_file_atomically(o.out_dir + "/train.json", summary.dump(2) + "\n");
  std::cerr << "vinf train: " << done << " step(s) in " << format_duration(seconds_since(t_start)) << ", loss "
            << (losses.empty() ? 0.0 : losses.front()) << " -> " << (losses.empty() ? 0.0 : losses.back())
            << "; wrote " << o.out_dir << " (log.csv, loss.png, train.json" << (lora ? ", lora.safetensors" : "") << ")"
            << (export_model ? " and the model " + o.export_dir : std::string()) << "\n";
  return g_stop ? kExitStopped : 0;
}

}  // namespace vinf::app
