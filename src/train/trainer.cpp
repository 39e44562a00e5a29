#include "train/trainer.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/philox.hpp"
#include "core/progress.hpp"
#include "evaluate/evaluate.hpp"
#include "io/atomic_file.hpp"
#include "io/checkpoint.hpp"
#include "io/image.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/params.hpp"
#include "model/weights.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"
#include "ops/runtime.hpp"
#include "pipeline/run_dir.hpp"
#include "pipeline/step_control.hpp"
#include "pipeline/stop_signals.hpp"
#include "sampling/scheduler.hpp"
#include "train/checkpoint.hpp"
#include "train/data.hpp"
#include "train/data_parallel.hpp"
#include "model/lora.hpp"
#include "train/unet_loss.hpp"

namespace fs = std::filesystem;

namespace vinf::train {

namespace {

using Clock = std::chrono::steady_clock;
using model::LoraAdapters;

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
    VINF_INPUT_CHECK(
        used[i], "--train.params: the glob '", globs[i], "' matches no parameter of the model ",
        "(names as in diffusers, e.g. down_blocks.0.temp_attentions.0.proj_in.weight; vinf inspect lists them)");
  return out;
}

// The learning rate of step s (1-based).
double learning_rate(const TrainSpec& o, double peak, std::int64_t s) {
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
nlohmann::ordered_json settings_json(const TrainSpec& o, const AdamWSettings& a, const DataInfo& d,
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
      diff += (diff.empty() ? "" : "; ") + key + " was " + (was.contains(key) ? was[key].dump() : "absent") + ", now " +
              value.dump();
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

// One training run on this rank: the phases set_up (the layout of the batch over the ranks),
// load (the model, its noise schedule, the data), parameters (what is trained, the gradients'
// buckets, the optimizer's shard), resume, log_plan, open_log, then run's steps and finish's
// outputs. What they share is the Trainer's state.
class Trainer {
 public:
  Trainer(TrainSpec spec, job::Job& job, DType precision)
      : o(std::move(spec)),
        job_(job),
        session_(job.session()),
        rt_(job.runtime()),
        ctx_(rt_.ctx()),
        precision_(precision),
        ranks_(job.size()),
        rank_(job.rank()),
        // The gradients and parameters travel in the device's memory (NCCL between GPUs); the
        // host's world carries the loss and the checks.
        grad_comm_(job.device().is_cuda() ? *job.clip_comm() : job.world()),
        report_("vinf train:", job.root(), o.quiet) {}

  int run() {
    set_up();
    load();
    parameters();
    resume();
    log_plan();
    open_log();
    const int stopped_by = steps();
    return finish(stopped_by);
  }

 private:
  void set_up();
  void load();
  void parameters();
  void resume();
  void log_plan();
  void open_log();
  int steps();
  std::pair<double, double> step(std::int64_t step, double lr);
  void write_checkpoint(std::int64_t completed);
  int finish(int stopped_by);
  struct RankTimes {
    std::vector<double> waits, backwards, later_waits, later_backwards;
  };
  void write_outputs(int stopped_by, const RankTimes& times, const mpi::CommCounters& comm);
  nlohmann::ordered_json summary_json() const;
  nlohmann::ordered_json run_json(nlohmann::ordered_json run, int stopped_by, const RankTimes& times,
                                  const mpi::CommCounters& comm) const;

  const Tensor* model_tensor(const std::string& n) const {
    const Tensor* t = lora_ ? lora_->find(n) : nullptr;
    return t ? t : weights_->find(n);
  }
  const Tensor* trained_tensor(const std::string& n) const {
    const Tensor* t = flat_->find(n);
    return t ? t : model_tensor(n);
  }

  TrainSpec o;
  job::Job& job_;
  mpi::Session& session_;
  Runtime& rt_;
  ExecContext& ctx_;
  DType precision_;
  int ranks_, rank_;
  mpi::Communicator& grad_comm_;
  Reporter report_;
  std::int64_t micro_batches_ = 0;
  // The model: a pipeline root (its UNet in unet/, its noise schedule in scheduler/) or a UNet.
  bool pipeline_ = false;
  model::ModelFiles files_;
  model::UNetConfig config_;
  std::vector<float> abar_;
  std::unique_ptr<TrainData> data_;
  std::vector<model::ParamSpec> specs_;
  std::unique_ptr<model::WeightFiles> weight_files_;
  std::unique_ptr<model::Weights> weights_;
  std::unique_ptr<LoraAdapters> lora_;
  std::vector<std::pair<std::string, Shape>> trainable_;
  std::int64_t trained_count_ = 0, bucket_ = 0;
  std::unique_ptr<ParamGrads> grads_;
  std::unique_ptr<DataParallel> dp_;
  Shard part_;
  std::unique_ptr<FlatParams> flat_;
  std::unique_ptr<AdamW> opt_;
  float lora_scale_ = 1.f;
  nlohmann::ordered_json settings_;
  // Where the run starts, and its record so far.
  std::string ckpt_dir_;
  TrainCheckpoint resumed_;
  std::int64_t first_step_ = 1;
  std::vector<double> losses_;
  std::string log_text_;
  std::ofstream csv_;
  // A micro-batch's buffers, and this rank's micro-batches of every step: [mb0, mb1).
  std::int64_t per_clip_ = 0, text_row_ = 0, mb0_ = 0, mb1_ = 0;
  std::vector<float> host_x0_, host_text_;
  OwnedTensor x0_, eps_, text_;
  std::vector<float> stage_[3];  // host copies of device memory, for the checkpoint writer
  std::vector<std::int64_t> order_;
  std::int64_t order_epoch_ = -1;
  // Times: the same from the second step of this start on (the first also waits for the ranks).
  double forward_seconds_ = 0, backward_seconds_ = 0, later_wait_ = 0, later_backward_ = 0, run_seconds_ = 0;
  std::int64_t done_ = 0;
};

// By default each rank runs its share of the batch in one pass.
void Trainer::set_up() {
  if (o.micro_batch == 0) {
    VINF_INPUT_CHECK(
        o.batch % ranks_ == 0, "--train.batch ", o.batch, " does not divide over the ", ranks_,
        " ranks: give a batch that does, or --train.micro-batch (the ranks then take whole micro-batches)");
    o.micro_batch = o.batch / ranks_;
  }
  micro_batches_ = o.batch / o.micro_batch;
  VINF_INPUT_CHECK(micro_batches_ >= ranks_, "--train.batch ", o.batch, " in micro-batches of ", o.micro_batch, " is ",
                   micro_batches_, " micro-batch(es), fewer than the ", ranks_,
                   " ranks: every rank takes at least one ",
                   "(a larger batch, a smaller --train.micro-batch, or fewer ranks)");
}

void Trainer::load() {
  pipeline_ = fs::exists(o.model_dir + "/unet/config.json");
  const std::string unet_dir = pipeline_ ? o.model_dir + "/unet" : o.model_dir;
  files_ = model::find_model_files(unet_dir);
  std::vector<std::string> warnings;
  config_ = model::load_unet_config(files_.config, &warnings);
  sampling::NoiseScheduleConfig schedule;
  if (pipeline_ && fs::exists(o.model_dir + "/scheduler/scheduler_config.json"))
    schedule = sampling::read_scheduler_config(o.model_dir + "/scheduler");
  abar_ = sampling::make_alphas_cumprod(schedule);

  data_ = std::make_unique<TrainData>(o.data_path);
  const DataInfo& di = data_->info();
  VINF_INPUT_CHECK(di.channels == config_.in_channels, o.data_path, " holds latents of ", di.channels,
                   " channels; the model (", files_.config, ") takes in_channels = ", config_.in_channels);
  VINF_INPUT_CHECK(di.text_width == config_.cross_attention_dim, o.data_path, " holds text embeddings of width ",
                   di.text_width, "; the model takes cross_attention_dim = ", config_.cross_attention_dim,
                   " (prepare the data with this model's pipeline)");
  specs_ = model::unet_parameters(config_);
  weight_files_ = std::make_unique<model::WeightFiles>(files_);
  weights_ = std::make_unique<model::Weights>(*weight_files_, specs_, rt_, DType::f32, false, &warnings);
  for (const std::string& w : warnings) report_.warn(w);
}

// What is trained (adapters, or the parameters --train.params selects), their gradients in
// buckets, the optimizer's part, and the trained values in one buffer (in the precision the model
// computes with) with the f32 master weights of the part this rank's optimizer steps.
void Trainer::parameters() {
  if (o.lora > 0)
    lora_ = std::make_unique<LoraAdapters>(rt_.arena(), ctx_, specs_, static_cast<int>(o.lora),
                                           static_cast<float>(o.lora_alpha > 0 ? o.lora_alpha : o.lora), o.seed);
  trainable_ = lora_ ? lora_->parameters() : trainable_parameters(specs_, o.params);
  for (const auto& [name, shape] : trainable_) trained_count_ += shape.numel();
  grads_ = std::make_unique<ParamGrads>(rt_.arena(), trainable_);
  bucket_ = static_cast<std::int64_t>(std::max(1.0, o.bucket_mb * 1024 * 1024 / 4));
  dp_ = std::make_unique<DataParallel>(rt_.arena(), ctx_, grad_comm_, *grads_, static_cast<int>(o.zero), bucket_,
                                       precision_);
  part_ = dp_->optimizer_part();
  flat_ = std::make_unique<FlatParams>(
      rt_.arena(), ctx_, *grads_, [this](const std::string& n) { return model_tensor(n); }, precision_, part_);
  opt_ = std::make_unique<AdamW>(rt_.arena(), ctx_, part_.first, part_.count);
  lora_scale_ = lora_ ? lora_->scale() : 1.f;
  settings_ = settings_json(o, o.adamw, data_->info(), trained_count_, precision_);
}

// Where the run starts: a checkpoint every rank can read whole (the newest that passes, with
// --resume auto), or step 0. Every rank must have read it; the lowest rank's problem is everyone's.
void Trainer::resume() {
  ckpt_dir_ = o.out_dir + "/checkpoints";
  const std::vector<std::string> candidates = pipeline::checkpoint_candidates(session_, o.resume, ckpt_dir_);
  const pipeline::AgreedCheckpoint agreed =
      pipeline::agree_on_checkpoint(session_, candidates, [&](const std::string& path) -> std::string {
        try {
          TrainCheckpoint c = read_train_checkpoint_info(path);
          const std::string diff = settings_differences(c.settings_json, settings_);
          VINF_INPUT_CHECK(diff.empty(), path, " belongs to a run with other settings: ", diff);
          // Through host memory: every trained value, and this rank's part of the moments.
          std::vector<float> values(static_cast<std::size_t>(trained_count_)),
              moments(static_cast<std::size_t>(2 * part_.count));
          read_train_checkpoint_part(path, {0, trained_count_}, values.data(), nullptr, nullptr);
          read_train_checkpoint_part(path, part_, nullptr, moments.data(), moments.data() + part_.count);
          flat_->set(ctx_, Tensor::wrap(values.data(), DType::f32, Device::cpu(), {trained_count_}));
          ops::copy(ctx_, Tensor::wrap(moments.data(), DType::f32, Device::cpu(), opt_->moments().shape),
                    opt_->moments());
          resumed_ = std::move(c);
        } catch (const InputError& e) {
          resumed_ = {};
          return e.what();
        }
        return "";
      });
  if (agreed.path.empty()) resumed_ = {};  // a rank that read the last one alone does not keep it
  std::string refusals;
  for (const auto& skipped : agreed.skipped) refusals += "\n  " + skipped.second;
  VINF_INPUT_CHECK(candidates.empty() || !agreed.path.empty(), "--resume ", o.resume, ": no usable checkpoint",
                   refusals);
  if (!refusals.empty()) report_.warn("skipped damaged or foreign checkpoints:" + refusals);
  if (!resumed_.path.empty()) {
    // The flat buffer was read over the model's values; stage 0 read every moment.
    opt_->set_steps(resumed_.optimizer_steps);
    VINF_INPUT_CHECK(resumed_.step <= o.steps, resumed_.path, " is at step ", resumed_.step, ", past --train.steps ",
                     o.steps);
  }
  first_step_ = resumed_.step + 1;
}

void Trainer::log_plan() {
  const DataInfo& di = data_->info();
  const std::string what = lora_ ? "LoRA adapters of rank " + std::to_string(o.lora) + " on " +
                                       std::to_string(trainable_.size() / 2) + " attention projections"
                                 : "--train.params " + o.params;
  report_.say("model " + files_.dir + ": " + std::to_string(weights_->count()) + " parameters, " +
              std::to_string(trained_count_) + " trained (" + what + "); data " + o.data_path + ": " +
              std::to_string(di.clips) + " clips of " + std::to_string(di.frames) + " frames " +
              std::to_string(di.height) + "x" + std::to_string(di.width) + " latents");
  report_.say(std::to_string(o.steps) + " steps of " + std::to_string(o.batch) + " clip(s)" +
              (o.micro_batch < o.batch ? " in micro-batches of " + std::to_string(o.micro_batch) : std::string()) +
              ", AdamW lr " + std::to_string(o.adamw.lr) + ", " + o.schedule + " after " + std::to_string(o.warmup) +
              " warm-up steps, clipping at " + std::to_string(o.adamw.clip_grad_norm) +
              (o.checkpoint_activations ? ", activations checkpointed per block" : ""));
  if (ranks_ > 1)
    report_.say(std::to_string(ranks_) + " data-parallel ranks, ZeRO stage " + std::to_string(o.zero) + ", " +
                std::to_string(dp_->buckets()) + " gradient bucket(s); optimizer state " +
                std::to_string(dp_->optimizer_bytes() >> 10) + " KiB per rank");
  if (!resumed_.path.empty())
    report_.say("resuming from " + resumed_.path + " after step " + std::to_string(resumed_.step) + " (written by " +
                std::to_string(resumed_.world_size) + " rank(s), ZeRO " + std::to_string(resumed_.zero) + ")");
}

// log.csv (a resumed run's starts as its checkpoint's, so that it holds each step once), and the
// buffers of a micro-batch.
void Trainer::open_log() {
  losses_ = resumed_.path.empty() ? std::vector<double>{} : losses_of_log(resumed_.log_csv);
  log_text_ = resumed_.path.empty() ? std::string("step,loss,lr,grad_norm,seconds\n") : resumed_.log_csv;
  if (job_.root()) {
    fs::create_directories(o.out_dir);
    csv_.open(o.out_dir + "/log.csv", std::ios::trunc);
    VINF_INPUT_CHECK(csv_.good(), "cannot write ", o.out_dir, "/log.csv");
    csv_ << log_text_ << std::flush;
  }
  VINF_INPUT_CHECK(session_.all(!job_.root() || csv_.good()), "cannot write ", o.out_dir, "/log.csv");
  const DataInfo& di = data_->info();
  per_clip_ = di.channels * di.frames * di.height * di.width;
  text_row_ = di.text_tokens * di.text_width;
  const std::int64_t m = o.micro_batch;
  host_x0_.resize(static_cast<std::size_t>(m * per_clip_));
  host_text_.resize(static_cast<std::size_t>(m * text_row_));
  x0_ = rt_.arena().empty(DType::f32, {m, di.channels, di.frames, di.height, di.width});
  eps_ = rt_.arena().empty(DType::f32, x0_.shape);
  text_ = rt_.arena().empty(DType::f32, {m, di.text_tokens, di.text_width});
  mb0_ = rank_ * micro_batches_ / ranks_;
  mb1_ = (rank_ + 1) * micro_batches_ / ranks_;
}

// Each rank writes its shard; stage 0's optimizer holds every moment, the shard among them. From
// the f32 master weights (the f32 model, or with bf16 the optimizer's part).
void Trainer::write_checkpoint(std::int64_t completed) {
  fs::create_directories(ckpt_dir_);
  TrainCheckpoint c;
  c.step = completed;
  c.optimizer_steps = opt_->steps();
  c.trained = trained_count_;
  c.world_size = ranks_;
  c.zero = o.zero;
  c.settings_json = settings_.dump();
  c.log_csv = log_text_;
  const Shard mine = shard_of(trained_count_, rank_, ranks_);
  const std::int64_t at = mine.first - part_.first;
  const float* values = host_floats(ctx_, flat_->master().slice(0, at, mine.count), stage_[0]);
  const float* m1 = host_floats(ctx_, opt_->moments().reshape({2 * part_.count}).slice(0, at, mine.count), stage_[1]);
  const float* m2 =
      host_floats(ctx_, opt_->moments().reshape({2 * part_.count}).slice(0, part_.count + at, mine.count), stage_[2]);
  write_train_checkpoint(session_.world(), ckpt_dir_ + "/" + io::checkpoint_name(completed), c, mine, values, m1, m2);
  if (job_.root()) io::prune_checkpoints(ckpt_dir_, static_cast<int>(o.checkpoint_keep));
}

// One optimizer step: this rank's micro-batches through the loss and its gradients (summed over
// the ranks in buckets while the backward pass goes on), the global norm, AdamW on this rank's
// part, the parameters gathered. Returns the loss and its gradients' global norm.
std::pair<double, double> Trainer::step(std::int64_t step, double lr) {
  const DataInfo& di = data_->info();
  const std::int64_t m = o.micro_batch;
  const auto timesteps_total = static_cast<std::uint64_t>(abar_.size());
  grads_->zero(ctx_);
  double sums[1] = {0};
  for (std::int64_t mb = mb0_; mb < mb1_; ++mb) {
    dp_->arm(mb + 1 == mb1_);  // the last micro-batch's backward pass sends the gradients
    std::vector<std::int64_t> ts;
    for (std::int64_t j = 0; j < m; ++j) {
      // Sample k of the whole run: clip order[k % N] of epoch k / N.
      const std::int64_t k = (step - 1) * o.batch + mb * m + j, epoch = k / di.clips;
      if (epoch != order_epoch_) order_ = epoch_order(di.clips, o.seed, order_epoch_ = epoch);
      data_->read(order_[static_cast<std::size_t>(k % di.clips)], host_x0_.data() + j * per_clip_,
                  host_text_.data() + j * text_row_);
      const philox::U32x4 r = philox::block(o.seed, (std::uint64_t{1} << 62) + static_cast<std::uint64_t>(k), 0);
      ts.push_back(static_cast<std::int64_t>(r.v[0] % timesteps_total));
      ops::normal(ctx_, eps_.select(0, j), o.seed, static_cast<std::uint64_t>(k), 0);
    }
    ops::copy(ctx_, Tensor::wrap(host_x0_.data(), DType::f32, Device::cpu(), x0_.shape), x0_);
    ops::copy(ctx_, Tensor::wrap(host_text_.data(), DType::f32, Device::cpu(), text_.shape), text_);
    const LossBatch batch{x0_, eps_, text_, ts, o.fps};
    const LossResult r = unet_loss_backward(
        ctx_, config_, [this](const std::string& n) { return trained_tensor(n); }, *grads_, abar_, batch,
        o.batch * per_clip_, nullptr, o.checkpoint_activations, lora_scale_, nullptr, precision_);
    sums[0] += r.sum_squares;
    forward_seconds_ += r.forward_seconds;
    backward_seconds_ += r.backward_seconds;
  }
  dp_->finish_reduction();
  job_.world().all_reduce_sum(job_.host(), Tensor::wrap(sums, DType::f64, Device::cpu(), {1}));
  const double loss = sums[0] / static_cast<double>(o.batch * per_clip_);
  VINF_CHECK(std::isfinite(loss), "the loss is ", loss, " at step ", step,
             " (lower --train.lr, or check the data with vinf inspect)");
  const double norm = dp_->global_norm(ctx_);
  opt_->step_part(ctx_, dp_->part_grads(), flat_->master(), flat_->master_copy(), o.adamw, lr,
                  clip_scale(norm, o.adamw.clip_grad_norm));
  dp_->gather(ctx_, *flat_);
  return {loss, norm};
}

// The steps from the first (after a resumed checkpoint) to --train.steps, with the run control
// after each; the stop signal that ended the run early, or 0.
int Trainer::steps() {
  Progress progress("train", static_cast<int>(o.steps - resumed_.step), static_cast<double>(o.batch), "clips/s",
                    !o.quiet && job_.root(), 10.0);
  const auto t_start = Clock::now();
  const pipeline::StepControl control(
      session_, job_.world_session().rank(),
      {static_cast<int>(o.steps), static_cast<int>(o.checkpoint_every), o.checkpoint_every > 0});
  std::int64_t s = first_step_;
  int stopped_by = 0;
  for (; s <= o.steps; ++s) {
    const auto t_step = Clock::now();
    const double wait_before = dp_->reduce_wait_seconds() + dp_->gather_seconds(), backward_before = backward_seconds_;
    const double lr = learning_rate(o, o.adamw.lr, s);
    const auto [loss, norm] = step(s, lr);
    if (s > first_step_) {
      later_wait_ += dp_->reduce_wait_seconds() + dp_->gather_seconds() - wait_before;
      later_backward_ += backward_seconds_ - backward_before;
    }
    losses_.push_back(loss);
    char line[160];
    std::snprintf(line, sizeof line, "%lld,%.8g,%.6g,%.6g,%.3f\n", static_cast<long long>(s), loss, lr, norm,
                  seconds_since(t_start));
    log_text_ += line;
    if (job_.root()) csv_ << line << std::flush;
    if (s % o.log_every == 0 || s == o.steps) {
      std::snprintf(line, sizeof line, "loss %.5f lr %.3g grad norm %.3g", loss, lr, norm);
      progress.update(static_cast<int>(s - resumed_.step), line);
    }
    control.pace(t_step);
    control.fault(static_cast<int>(s));  // a signal only: training has no latents to spoil
    stopped_by = control.agreed_stop();
    if (control.checkpoint_due(static_cast<int>(s), stopped_by)) write_checkpoint(s);
    if (stopped_by != 0) break;
  }
  done_ = std::min(s, o.steps);
  run_seconds_ = seconds_since(t_start);
  if (stopped_by != 0)
    report_.note(
        control.stopped_by_line(stopped_by, static_cast<int>(done_), ckpt_dir_ + "/" + io::checkpoint_name(done_)));
  return stopped_by;
}

// The trained values back into the model's tensors (the f32 master weights), and on rank 0 the
// outputs. Collective.
int Trainer::finish(int stopped_by) {
  const auto model_lookup = [this](const std::string& n) { return model_tensor(n); };
  if (flat_->dtype() == DType::f32) {
    flat_->copy_to(ctx_, model_lookup);
  } else {
    OwnedTensor master = rt_.arena().empty(DType::f32, {trained_count_});
    dp_->gather_master(ctx_, *flat_, master);
    flat_->copy_to(ctx_, model_lookup, &master);
  }
  // Every rank's waits and backward time for run.json (collective), and rank 0's counters.
  const mpi::CommCounters comm = grad_comm_.counters();
  RankTimes times;
  times.waits = session_.gather_values_on_root(dp_->reduce_wait_seconds() + dp_->gather_seconds());
  times.backwards = session_.gather_values_on_root(backward_seconds_);
  times.later_waits = session_.gather_values_on_root(later_wait_);
  times.later_backwards = session_.gather_values_on_root(later_backward_);
  if (job_.root()) write_outputs(stopped_by, times, comm);
  return stopped_by != 0 ? pipeline::kExitStopped : 0;
}

// train.json: what was trained on what, and the loss it went from and to.
nlohmann::ordered_json Trainer::summary_json() const {
  const double first_loss = losses_.empty() ? 0.0 : losses_.front(), last_loss = losses_.empty() ? 0.0 : losses_.back();
  return {{"generator", std::string("vinf ") + VINF_VERSION + " train"},
          {"model", o.model_dir},
          {"data", o.data_path},
          {"steps_done", done_},
          {"steps", o.steps},
          {"batch", o.batch},
          {"micro_batch", o.micro_batch},
          {"checkpoint_activations", o.checkpoint_activations},
          {"params", o.params},
          {"trained_parameters", trained_count_},
          {"lr", o.adamw.lr},
          {"warmup_steps", o.warmup},
          {"schedule", o.schedule},
          {"seed", o.seed},
          {"first_loss", first_loss},
          {"last_loss", last_loss},
          {"seconds", run_seconds_},
          {"lora_rank", o.lora},
          {"lora_alpha", lora_ ? lora_->alpha() : 0.f},
          {"export", o.export_model ? o.export_dir : std::string()}};
}

// run.json: train.json's record with the layout, the memory per rank, the throughput, the
// communication and the loss curve.
nlohmann::ordered_json Trainer::run_json(nlohmann::ordered_json run, int stopped_by, const RankTimes& times,
                                         const mpi::CommCounters& comm) const {
  const auto most = [](const std::vector<double>& v) {
    return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
  };
  const double samples = static_cast<double>((done_ - resumed_.step) * o.batch);
  run["layout"] = {{"ranks", ranks_},
                   {"zero", o.zero},
                   {"micro_batches_per_step", micro_batches_},
                   {"buckets", dp_->buckets()},
                   {"buckets_started", dp_->buckets_started()},
                   {"buckets_started_in_backward", dp_->buckets_started_in_backward()},
                   {"bucket_elements", bucket_},
                   {"device", job_.device().name()},
                   {"precision", dtype_name(precision_)},
                   {"transport", grad_comm_.backend()}};
  run["memory_per_rank"] = {
      {"optimizer_state_bytes", dp_->optimizer_bytes()},
      {"reduced_gradient_shard_bytes", dp_->shard_grad_bytes()},
      {"gradient_bytes", trained_count_ * 4},
      {"trained_parameter_bytes", trained_count_ * static_cast<std::int64_t>(dtype_size(precision_))},
      {"master_weight_bytes", precision_ == DType::f32 ? trained_count_ * 4 : part_.count * 4}};
  run["throughput"] = {{"steps", done_ - resumed_.step},
                       {"seconds", run_seconds_},
                       {"samples_per_second", run_seconds_ > 0 ? samples / run_seconds_ : 0.0},
                       {"forward_seconds_rank0", forward_seconds_},
                       {"backward_seconds_rank0", backward_seconds_},
                       {"backward_seconds_max", most(times.backwards)},
                       {"communication_wait_seconds", times.waits},
                       {"communication_wait_seconds_max", most(times.waits)},
                       {"after_first_step",
                        {{"communication_wait_seconds_max", most(times.later_waits)},
                         {"backward_seconds_max", most(times.later_backwards)}}}};
  run["communication_rank0"] = pipeline::counters_json(comm);
  run["resumed_from"] = resumed_.path.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(resumed_.path);
  run["stopped_by"] = stopped_by != 0 ? pipeline::signal_name(stopped_by) : "";
  run["loss_curve"] = losses_;
  return run;
}

// Rank 0: loss.png, the adapters, and (unless they are the result alone) the trained model: a
// pipeline (the other parts copied) or a UNet directory; train.json and run.json.
void Trainer::write_outputs(int stopped_by, const RankTimes& times, const mpi::CommCounters& comm) {
  std::int64_t w = 0, h = 0;
  const std::vector<std::uint8_t> png = evaluate::plot_curve("loss per step", losses_, 1, w, h);
  io::write_png(o.out_dir + "/loss.png", png.data(), w, h);
  if (lora_) {
    lora_->save(ctx_, o.out_dir + "/lora.safetensors");
    if (o.export_model) lora_->merge_into(ctx_, *weights_, lora_->scale());
  }
  const std::string unet_out = pipeline_ ? o.export_dir + "/unet" : o.export_dir;
  if (o.export_model) write_unet(ctx_, unet_out, config_, specs_, *weights_);
  if (o.export_model && pipeline_)
    for (const auto& e : fs::directory_iterator(o.model_dir)) {
      const std::string name = e.path().filename().string();
      if (name == "unet") continue;
      fs::copy(e.path(), fs::path(o.export_dir) / name,
               fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    }
  const nlohmann::ordered_json summary = summary_json();
  io::write_file_atomically(o.out_dir + "/train.json", summary.dump(2) + "\n");
  pipeline::write_run_file(o.out_dir, run_json(summary, stopped_by, times, comm));
  report_.note(done_ - resumed_.step, " step(s) in ", format_duration(run_seconds_), " on ", ranks_, " rank(s), loss ",
               summary["first_loss"].get<double>(), " -> ", summary["last_loss"].get<double>(), "; wrote ", o.out_dir,
               " (log.csv, loss.png, train.json, run.json", lora_ ? ", lora.safetensors" : "", ")",
               o.export_model ? " and the model " + o.export_dir : std::string());
}

}  // namespace

int run_training(TrainSpec spec, job::Job& job, DType precision) {
  Trainer trainer(std::move(spec), job, precision);
  return trainer.run();
}

}  // namespace vinf::train
