// `vinf train-step`: one training step of the UNet on the inputs of a safetensors file, for
// checking the training path against reference numbers (as `vinf forward` checks inference).
// Under mpirun/srun the ranks split the batch: rank r takes samples [r B / N, (r + 1) B / N), the
// gradients are summed over the ranks, and rank 0 writes the whole result.
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/option_values.hpp"
#include "app/train_options.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "io/safetensors.hpp"
#include "job/job.hpp"
#include "model/params.hpp"
#include "model/weights.hpp"
#include "ops/elementwise.hpp"
#include "sampling/scheduler.hpp"
#include "train/adamw.hpp"
#include "train/unet_loss.hpp"

namespace po = boost::program_options;

namespace vinf::app {

namespace {

using Clock = std::chrono::steady_clock;

struct StepOptions {
  std::string config_file, model_dir, inputs_path, out_path, device = "auto", dtype = "auto";
  double timeout = 300;
  bool ignore_unexpected = false;
  TrainOptimizerOptions optimizer;
};

po::options_description step_option_table(StepOptions& o) {
  po::options_description opts(
      "vinf train-step: one training step of the UNet on given inputs, for checking training against\n"
      "reference numbers (epsilon prediction, gradient clipping, one AdamW step)\n\n"
      "usage: vinf train-step --model DIR --inputs IN.safetensors --out OUT.safetensors [options]\n"
      "       mpirun -np N vinf train-step ...   (the ranks split the batch; rank 0 writes all)\n\n"
      "IN holds x0 F32 [B,C,F,H,W] (clean latents), eps F32 (the noise, x0's shape), timesteps I64 [B]\n"
      "(one per sample), encoder_hidden_states F32 [B,L,D] and optionally fps I64 [1] (default 24);\n"
      "other tensors are ignored. The optimizer's settings come from IN's metadata entry `adamw`\n"
      "(JSON: lr, betas, eps, weight_decay, clip_grad_norm) when it has one, else from the [train]\n"
      "options below. OUT gets loss F32 [1] = mean((unet(noisy) - eps)^2), grad.<parameter> for every\n"
      "parameter and grad.x0 (before clipping), grad_norm [1] (their global L2 norm) and\n"
      "adamw.<parameter>, the parameters after clipping and one AdamW step.\n\n"
      "Training computes in f32 on the CPU.\n\nOptions");
  opts.add_options()("help,h", "show this help")("config", path_value(&o.config_file, PathKind::file),
                                                 kConfigOptionHelp)(
      "model", path_value(&o.model_dir, PathKind::directory),
      "UNet directory in diffusers layout, or a pipeline root with unet/")(
      "inputs", path_value(&o.inputs_path, PathKind::file), "input tensors (safetensors)")(
      "out", path_value(&o.out_path, PathKind::new_file),
      "output file (safetensors); written under a temporary name, then renamed")(
      "device", po::value(&o.device)->default_value(o.device), "auto | cpu (training runs on the CPU)")(
      "dtype", po::value(&o.dtype)->default_value(o.dtype), "auto | f32 (training computes in f32)")(
      "comm-timeout", zero_or(&o.timeout, 1, 604800)->default_value(o.timeout),
      "seconds a collective may wait before the job is ended with a message (0: wait forever; at least 1 s "
      "otherwise)")("ignore-unexpected-weights", po::bool_switch(&o.ignore_unexpected),
                    "load a weight file that holds tensors the model does not use (they are listed as a warning)");
  po::options_description train_opts("Optimizer (used when IN has no `adamw` metadata)");
  o.optimizer.add_to(train_opts);
  opts.add(train_opts);
  return opts;
}

// The inputs, checked against the contract and the model.
struct StepInputs {
  Tensor x0, eps, text;
  std::vector<std::int64_t> timesteps;
  double fps = 24;
};

Tensor require_float(const io::SafetensorsFile& f, const char* name, int rank, const char* layout) {
  return io::require_values(f, name, rank, layout,
                            "vinf train-step needs x0 [B,C,F,H,W], eps, timesteps I64 [B] and encoder_hidden_states "
                            "[B,L,D]; see vinf train-step --help");
}

StepInputs read_step_inputs(const io::SafetensorsFile& f, const model::UNetConfig& c, const std::string& config_path) {
  StepInputs in;
  in.x0 = require_float(f, "x0", 5, "[B,C,F,H,W]");
  in.eps = require_float(f, "eps", 5, "[B,C,F,H,W]");
  in.text = require_float(f, "encoder_hidden_states", 3, "[B,L,D]");
  const Shape& s = in.x0.shape;
  VINF_INPUT_CHECK(in.eps.shape == s, f.path(), ": 'eps' ", in.eps.shape.str(), " must have the shape of 'x0' ",
                   s.str());
  VINF_INPUT_CHECK(s[1] == c.in_channels, f.path(), ": 'x0' has ", s[1], " channels but the model (", config_path,
                   ") takes in_channels = ", c.in_channels);
  VINF_INPUT_CHECK(in.text.size(0) == s[0], f.path(), ": 'encoder_hidden_states' has batch ", in.text.size(0),
                   " but 'x0' has batch ", s[0]);
  VINF_INPUT_CHECK(in.text.size(2) == c.cross_attention_dim, f.path(), ": 'encoder_hidden_states' has width ",
                   in.text.size(2), " but the model (", config_path,
                   ") has cross_attention_dim = ", c.cross_attention_dim);
  const auto* te = f.find("timesteps");
  VINF_INPUT_CHECK(te != nullptr, f.path(), " has no tensor 'timesteps' (I64 [B], one per sample)");
  const Tensor ts = f.tensor("timesteps");
  VINF_INPUT_CHECK(ts.dtype == DType::i64 && ts.rank() == 1 && ts.numel() == s[0], f.path(),
                   ": 'timesteps' must be I64 [", s[0], "] (one per sample), got ",
                   io::safetensors_dtype_name(ts.dtype), ts.shape.str());
  for (std::int64_t i = 0; i < ts.numel(); ++i) in.timesteps.push_back(ts.ptr<std::int64_t>()[i]);
  if (f.find("fps") != nullptr) {
    const Tensor fps = f.tensor("fps");
    VINF_INPUT_CHECK(fps.numel() == 1 && (fps.dtype == DType::i64 || fps.dtype == DType::f32), f.path(),
                     ": 'fps' must be I64 [1], got ", io::safetensors_dtype_name(fps.dtype), fps.shape.str());
    in.fps = fps.dtype == DType::i64 ? static_cast<double>(fps.ptr<std::int64_t>()[0]) : fps.ptr<float>()[0];
    VINF_INPUT_CHECK(std::isfinite(in.fps) && in.fps > 0, f.path(), ": 'fps' must be positive, got ", in.fps);
  }
  return in;
}

// The step's results: the loss, the gradients' norm, grad.x0, every gradient as computed and every
// parameter after the AdamW step, with the settings in the metadata.
void write_step_file(const std::string& out_path, const std::string& model_dir, int ranks,
                     const train::AdamWSettings& adamw, double loss, double norm, const Tensor& grad_x0,
                     const train::ParamGrads& grads, const std::vector<float>& grads_host,
                     const std::vector<model::ParamSpec>& specs, const model::Weights& weights) {
  const float loss_f = static_cast<float>(loss), norm_f = static_cast<float>(norm);
  std::vector<io::TensorToWrite> out{{"loss", DType::f32, {1}, &loss_f, {}},
                                     {"grad_norm", DType::f32, {1}, &norm_f, {}},
                                     {"grad.x0", DType::f32, grad_x0.shape, grad_x0.data, {}}};
  std::int64_t at = 0;
  for (const auto& [name, g] : grads.list()) {
    out.push_back({"grad." + name, DType::f32, g.shape, grads_host.data() + at, {}});
    at += g.numel();
  }
  for (const auto& p : specs) out.push_back({"adamw." + p.name, DType::f32, p.shape, weights.get(p.name).data, {}});
  char adamw_json[256];
  std::snprintf(
      adamw_json, sizeof adamw_json,
      "{\"lr\": %.9g, \"betas\": [%.9g, %.9g], \"eps\": %.9g, \"weight_decay\": %.9g, \"clip_grad_norm\": %.9g}",
      adamw.lr, adamw.beta1, adamw.beta2, adamw.eps, adamw.weight_decay, adamw.clip_grad_norm);
  io::write_safetensors(out_path, out,
                        {{"generator", std::string("vinf ") + VINF_VERSION + " train-step"},
                         {"model", model_dir},
                         {"ranks", std::to_string(ranks)},
                         {"adamw", adamw_json},
                         {"loss", "mean((unet(sqrt(abar_t) x0 + sqrt(1 - abar_t) eps, t, text) - eps)^2)"}});
}

}  // namespace

int train_step(const std::vector<std::string>& args) {
  StepOptions o;
  const po::options_description opts = step_option_table(o);
  po::variables_map vm;
  parse_options(args, opts, vm, "train-step");
  if (vm.count("help")) {
    std::cout << opts
              << "\nExit status: 0 on success, 2 for bad input (the message names the file and key), 1 for\n"
                 "other failures, 3 when a collective timed out. Under MPI a failure on any rank ends every rank.\n";
    return 0;
  }
  for (const char* required : {"model", "inputs", "out"})
    VINF_INPUT_CHECK(vm.count(required), "vinf train-step: --", required, " is required (see vinf train-step --help)");
  VINF_INPUT_CHECK(!o.out_path.empty(), "vinf train-step: --out is empty: give the output file");
  VINF_INPUT_CHECK(o.timeout >= 0, "--comm-timeout must be >= 0 seconds, got ", o.timeout);
  const train::AdamWSettings fallback = o.optimizer.resolve();
  job::JobPlan plan;
  plan.device = check_training_device(o.device, false);
  plan.dtype = check_training_dtype(o.dtype, false);
  plan.comm_timeout = o.timeout;
  plan.clip_group = false;

  const auto t_start = Clock::now();
  std::unique_ptr<job::Job> job = job::start_job(plan);
  const Reporter report("vinf train-step:", job->root());
  const model::ModelFiles files = model::find_model_files(o.model_dir);
  std::vector<std::string> warnings;
  const model::UNetConfig config = model::load_unet_config(files.config, &warnings);
  const io::SafetensorsFile in_file(o.inputs_path);
  const StepInputs in = read_step_inputs(in_file, config, files.config);
  train::AdamWSettings adamw = fallback;
  std::string adamw_source = "the [train] options";
  if (const auto it = in_file.metadata().find("adamw"); it != in_file.metadata().end()) {
    adamw = train::parse_adamw_json(it->second, o.inputs_path + ": metadata 'adamw'", fallback);
    adamw_source = o.inputs_path + "'s metadata";
  }
  const std::int64_t batch = in.x0.size(0);
  const int ranks = job->size(), rank = job->rank();
  VINF_INPUT_CHECK(batch >= ranks, o.inputs_path, ": the batch of ", batch, " samples is split over the ranks, so at ",
                   "most ", batch, " ranks can take part; got ", ranks);

  Runtime& rt = job->runtime();
  ExecContext& ctx = rt.ctx();
  const model::WeightFiles weight_files(files);
  const std::vector<model::ParamSpec> specs = model::unet_parameters(config);
  model::Weights weights(weight_files, specs, rt, DType::f32, o.ignore_unexpected, &warnings);
  for (const std::string& w : warnings) report.say("warning: " + w);
  report.say("model " + files.dir + ": " + std::to_string(weights.count()) + " parameters, f32 on " +
             job->device().name() + "; batch " + std::to_string(batch) + " over " + std::to_string(ranks) +
             " rank(s); AdamW lr " + std::to_string(adamw.lr) + " from " + adamw_source);

  // This rank's samples, copied into the runtime's memory.
  const std::int64_t b0 = rank * batch / ranks, nb = (rank + 1) * batch / ranks - b0;
  auto owned_copy = [&](const Tensor& t) {
    OwnedTensor d = rt.arena().empty(DType::f32, t.shape);
    ops::copy(ctx, t, d);
    return d;
  };
  const OwnedTensor x0 = owned_copy(in.x0.slice(0, b0, nb)), eps = owned_copy(in.eps.slice(0, b0, nb)),
                    text = owned_copy(in.text.slice(0, b0, nb));
  train::LossBatch part{x0, eps, text, {}, in.fps};
  part.timesteps.assign(in.timesteps.begin() + b0, in.timesteps.begin() + b0 + nb);

  std::vector<std::pair<std::string, Shape>> trainable;
  for (const auto& p : specs) trainable.emplace_back(p.name, p.shape);
  train::ParamGrads grads(rt.arena(), trainable);
  grads.zero(ctx);
  // The whole batch's grad.x0, this rank's samples filled in: the sum over ranks assembles it.
  OwnedTensor grad_x0 = rt.arena().empty(DType::f32, in.x0.shape);
  ops::fill(ctx, grad_x0, 0.0);
  const Tensor my_grad_x0 = grad_x0.slice(0, b0, nb);
  const auto abar = sampling::make_alphas_cumprod(sampling::NoiseScheduleConfig{});
  const auto lookup = [&weights](const std::string& n) { return weights.find(n); };

  const auto t_step = Clock::now();
  const train::LossResult r =
      train::unet_loss_backward(ctx, config, lookup, grads, abar, part, in.x0.numel(), &my_grad_x0);
  OwnedTensor sums = rt.arena().empty(DType::f64, {1});
  sums.ptr<double>()[0] = r.sum_squares;
  mpi::Communicator& world = job->world();
  world.all_reduce_sum(job->host(), grads.all());
  world.all_reduce_sum(job->host(), grad_x0);
  world.all_reduce_sum(job->host(), sums);
  const double loss = sums.ptr<double>()[0] / static_cast<double>(in.x0.numel());
  const double norm = train::global_norm(ctx, grads);
  const double step_seconds = job->session().max(seconds_since(t_step));
  report.say("loss " + std::to_string(loss) + ", gradient norm " + std::to_string(norm) + " (forward and backward in " +
             format_number(step_seconds) + " s)");

  // The gradients as computed go to the file; the step clips as it reads them.
  std::vector<float> grads_host;
  if (job->root()) {
    grads_host.resize(static_cast<std::size_t>(grads.all().numel()));
    ops::copy(ctx, grads.all(), Tensor::wrap(grads_host.data(), DType::f32, Device::cpu(), grads.all().shape));
  }
  train::AdamW opt(rt.arena(), ctx, grads);
  opt.step(ctx, grads, lookup, adamw, adamw.lr, train::clip_scale(norm, adamw.clip_grad_norm));
  if (job->root()) {
    write_step_file(o.out_path, files.dir, ranks, adamw, loss, norm, grad_x0, grads, grads_host, specs, weights);
    report.say("wrote " + o.out_path + " (" + format_number(seconds_since(t_start), 5) + " s in all)");
  }
  return 0;
}

}  // namespace vinf::app
