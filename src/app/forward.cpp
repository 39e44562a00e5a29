// `vinf forward`: one UNet call per timestep on the inputs of a safetensors file (design.md §5).
// Under mpirun/srun rank r takes frames [r F / N, (r + 1) F / N) of the sample and rank 0 writes
// the whole result.
#include <boost/program_options.hpp>
#include <chrono>
#include <climits>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <map>
#include <memory>
#include <thread>

#include "app/commands.hpp"
#include "app/option_values.hpp"
#include "app/forward_wan.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "app/vi_options.hpp"
#include "infinity/context.hpp"
#include "infinity/tensor_group.hpp"
#include "io/safetensors.hpp"
#include "model/unet3d.hpp"
#include "model/wan_transformer.hpp"
#include "job/job.hpp"
#include "job/profile_run.hpp"
#include "mpi/session.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"
#include "pipeline/family.hpp"

namespace po = boost::program_options;

namespace vinf::app {

namespace {

using Clock = std::chrono::steady_clock;

// The inputs file, checked against the contract and the model before any work starts.
struct ForwardInputs {
  Tensor sample, text;
  std::vector<std::int64_t> timesteps;
  double fps = 24;
  bool fps_given = false;
};

Tensor require_tensor(const io::SafetensorsFile& f, const char* name, int rank, const char* layout) {
  return io::require_tensor(f, name, rank, layout,
                            "vinf forward needs sample [B,C,F,H,W], encoder_hidden_states [B,L,D] and timesteps I64 "
                            "[T]; fps I64 [1] is optional");
}

ForwardInputs read_inputs(const io::SafetensorsFile& f, const model::UNetConfig& c, const std::string& config_path) {
  ForwardInputs in;
  in.sample = require_tensor(f, "sample", 5, "[B,C,F,H,W]");
  in.text = require_tensor(f, "encoder_hidden_states", 3, "[B,L,D]");
  const Tensor ts = require_tensor(f, "timesteps", 1, "I64 [T]");
  for (const Tensor* t : {&in.sample, &in.text})
    VINF_INPUT_CHECK(t->dtype == DType::f32 || t->dtype == DType::f16 || t->dtype == DType::bf16, f.path(), ": '",
                     t == &in.sample ? "sample" : "encoder_hidden_states", "' must be F32 (or F16/BF16), got ",
                     io::safetensors_dtype_name(t->dtype));
  VINF_INPUT_CHECK(ts.dtype == DType::i64, f.path(), ": 'timesteps' must be I64, got ", io::safetensors_dtype_name(ts.dtype));
  VINF_INPUT_CHECK(ts.numel() > 0, f.path(), ": 'timesteps' is empty");
  // A safetensors file need not align an I64 tensor to 8 bytes: its values are read by bytes.
  const auto i64 = [](const Tensor& t, std::int64_t i) {
    std::int64_t v = 0;
    std::memcpy(&v, static_cast<const char*>(t.data) + i * static_cast<std::int64_t>(sizeof v), sizeof v);
    return v;
  };
  for (std::int64_t i = 0; i < ts.numel(); ++i) {
    const std::int64_t t = i64(ts, i);
    VINF_INPUT_CHECK(t >= 0 && t < (1 << 24), f.path(), ": timesteps[", i, "] = ", t, " is not a diffusion timestep");
    for (std::int64_t seen : in.timesteps)
      VINF_INPUT_CHECK(seen != t, f.path(), ": timestep ", t, " appears twice in 'timesteps'");
    in.timesteps.push_back(t);
  }
  if (const auto* e = f.find("fps")) {
    VINF_INPUT_CHECK(e->dtype == DType::i64 && e->shape.numel() == 1, f.path(), ": 'fps' must be I64 [1], got ",
                     io::safetensors_dtype_name(e->dtype), e->shape.str());
    in.fps = static_cast<double>(i64(f.tensor("fps"), 0));
    in.fps_given = true;
  }
  const Shape& s = in.sample.shape;
  VINF_INPUT_CHECK(s.numel() > 0, f.path(), ": 'sample' ", s.str(), " is empty");
  VINF_INPUT_CHECK(s[1] == c.in_channels, f.path(), ": 'sample' has ", s[1], " channels but the model (", config_path,
                   ") takes in_channels = ", c.in_channels);
  VINF_INPUT_CHECK(in.text.size(0) == s[0], f.path(), ": 'encoder_hidden_states' has batch ", in.text.size(0),
                   " but 'sample' has batch ", s[0]);
  VINF_INPUT_CHECK(in.text.size(2) == c.cross_attention_dim, f.path(), ": 'encoder_hidden_states' has width ",
                   in.text.size(2), " but the model (", config_path, ") has cross_attention_dim = ",
                   c.cross_attention_dim);
  VINF_INPUT_CHECK(in.text.size(1) > 0, f.path(), ": 'encoder_hidden_states' has no tokens");
  return in;
}

// One clip's share of the work: batch elements [b0, b0 + nb), frames [f0, f0 + nf).
struct Piece {
  std::int64_t b0 = 0, nb = 0, f0 = 0, nf = 0;
};

// Runs the UNet on one piece for every timestep; returns the predictions (host, F32, one per t)
// and, when `dump` is set, the observed tensors of the first call.
struct PieceResult {
  std::vector<std::vector<float>> preds;
  std::vector<double> seconds;
  std::map<std::string, std::vector<float>> dumped;
  std::map<std::string, Shape> dumped_shapes;
  double peak = 0;
};

PieceResult run_piece(Runtime& rt, const model::UNet3D& unet, model::TemporalContext& tc, const ForwardInputs& in,
                      const Piece& pc, bool dump, const std::function<double(double)>& slowest) {
  PieceResult res;
  const Tensor my_sample = in.sample.slice(0, pc.b0, pc.nb).slice(2, pc.f0, pc.nf);
  const Tensor my_text = in.text.slice(0, pc.b0, pc.nb);
  OwnedTensor sample = rt.arena().empty(DType::f32, my_sample.shape), text = rt.arena().empty(DType::f32, my_text.shape);
  ops::copy(rt.ctx(), my_sample, sample);
  ops::copy(rt.ctx(), my_text, text);
  const Shape& s = in.sample.shape;
  OwnedTensor pred = rt.arena().empty(DType::f32, {pc.nb, unet.config().out_channels, pc.nf, s[3], s[4]});
  rt.arena().reset_peak();
  model::UNet3D::Observer observe;
  if (dump) {
    observe = [&](const std::string& name, const Tensor& t) {
      std::vector<float>& v = res.dumped[name];
      v.resize(static_cast<std::size_t>(t.numel()));
      ops::copy(rt.ctx(), t, Tensor::wrap(v.data(), DType::f32, Device::cpu(), t.shape));
      res.dumped_shapes[name] = t.shape;
    };
  }
  for (std::size_t i = 0; i < in.timesteps.size(); ++i) {
    const auto t0 = Clock::now();
    unet.forward(rt.ctx(), sample, in.timesteps[i], in.fps, text, pred, tc, i == 0 ? observe : model::UNet3D::Observer{});
    res.preds.emplace_back(static_cast<std::size_t>(pred.numel()));
    ops::copy(rt.ctx(), pred, Tensor::wrap(res.preds.back().data(), DType::f32, Device::cpu(), pred.shape));
    res.seconds.push_back(slowest(seconds_since(t0)));
  }
  res.peak = static_cast<double>(rt.arena().stats().peak_in_use);
  return res;
}

// Writes a piece into the whole (B, C, F, H, W) result.
void place_piece(const std::vector<float>& piece, const Piece& pc, std::int64_t channels, std::int64_t frames,
                 std::int64_t hw, float* full) {
  for (std::int64_t b = 0; b < pc.nb; ++b)
    for (std::int64_t c = 0; c < channels; ++c)
      std::memcpy(full + (((pc.b0 + b) * channels + c) * frames + pc.f0) * hw,
                  piece.data() + ((b * channels + c) * pc.nf) * hw, sizeof(float) * static_cast<std::size_t>(pc.nf * hw));
}

void write_dump(const std::string& prefix, int rank, const PieceResult& r, const std::string& mode) {
  std::vector<io::TensorToWrite> out;
  for (const auto& [name, v] : r.dumped) out.push_back({name, DType::f32, r.dumped_shapes.at(name), v.data(), {}});
  io::write_safetensors(prefix + ".rank" + std::to_string(rank) + ".safetensors", out,
                        {{"rank", std::to_string(rank)}, {"vi.mode", mode}});
}

// What the command line asked for. The first block is bound to the option table; parse_forward_options
// fills the rest from it once every value is checked.
struct ForwardOptions {
  std::string config_file, model_dir, inputs_path, out_path, device = "auto", dtype = "auto", comm_backend = "auto",
      dump, profile;
  bool tf32 = false, ignore_unexpected = false, vi_given = false, vi_mode_given = false;
  int cfg = 1, tensor = 1, emulate = 0;  // emulate: clips run on threads of this one process (0: one clip per rank)
  double timeout = 300;
  app::ViOptions vi_options;

  infinity::Config vi;
  job::JobPlan plan;
};

po::options_description forward_option_table(ForwardOptions& o) {
  po::options_description opts(
      "vinf forward: one UNet call per timestep, for checking a model against reference numbers\n\n"
      "usage: vinf forward --model DIR --inputs IN.safetensors --out OUT.safetensors [options]\n"
      "       mpirun -np N vinf forward ...   (rank r takes frames [r F/N, (r+1) F/N); rank 0 writes all)\n\n"
      "IN holds sample F32 [B,C,F,H,W], encoder_hidden_states F32 [B,L,D], timesteps I64 [T] and\n"
      "optionally fps I64 [1] (default 24). OUT gets noise_pred.t<t> F32 [B,C,F,H,W] for each t.\n\n"
      "A Wan2.1 transformer (a directory whose config.json names WanTransformer3DModel, or a pipeline root\n"
      "with transformer/) takes hidden_states [B,C,F,H,W] (latent frames), encoder_hidden_states [B,L,D]\n"
      "and timesteps F32 [T] instead; OUT gets noise_pred.t<i> for the i-th timestep. It runs the plain\n"
      "model on one rank, or on N ranks rank r taking latent frames [r F/N, (r+1) F/N): with\n"
      "--vi.mode exact the self-attention sees every frame through all-to-alls over (sample, head)\n"
      "rows; with --vi.mode invariant (one rank or N) each latent frame attends to +-local-frames\n"
      "frames and global-frames shared ones (Video-Infinity's windows, the phase settings).\n"
      "--parallel.cfg 2 splits the batch over rank pairs (2N ranks); --parallel.tensor T gives each of T\n"
      "ranks a share of every attention's heads and of the feed-forward (T at most the heads; world =\n"
      "cfg x N x T). --vi.conv-halo, halo and sync-groupnorm are the UNet's.\n\n"
      "Options come from the command line and from --config FILE (INI: `inputs = IN.safetensors`;\n"
      "`[vi] mode = compat` is --vi.mode compat); the command line wins.\n\nOptions");
  opts.add_options()("help,h", "show this help")("config", path_value(&o.config_file, PathKind::file), kConfigOptionHelp)(
      "model", path_value(&o.model_dir, PathKind::directory), "UNet directory in diffusers layout (config.json + diffusion_pytorch_model"
                                        ".safetensors or sharded with an index), or a pipeline root with unet/")(
      "inputs", path_value(&o.inputs_path, PathKind::file), "input tensors (safetensors)")(
      "out", path_value(&o.out_path, PathKind::new_file), "output file (safetensors); written under a temporary name, then renamed")(
      "device", po::value(&o.device)->default_value(o.device), "auto | cpu | cuda (auto: CUDA when every rank has a GPU)")(
      "dtype", po::value(&o.dtype)->default_value(o.dtype), kDtypeOptionHelp)(
      "tf32", po::bool_switch(&o.tf32), kTf32OptionHelp)(
      "parallel.cfg", ranged(&o.cfg, 1, 2)->default_value(o.cfg),
      "1: every rank computes the whole batch of its clip; 2: rank pairs split the batch (CFG parallelism; "
      "ranks = 2 x clips)")(
      "parallel.tensor", ranged(&o.tensor, 1, 4096)->default_value(o.tensor), kTensorOptionHelp)(
      "comm-backend", po::value(&o.comm_backend)->default_value(o.comm_backend),
      "auto | mpi | nccl (auto: NCCL on GPUs, MPI on the CPU)")(
      "comm-timeout", zero_or(&o.timeout, 1, 604800)->default_value(o.timeout),
      "seconds a collective may wait before the job is ended with a message (0: wait forever; at least 1 s "
      "otherwise)")(
      "vi.emulate-clips", ranged(&o.emulate, 0, 1024)->default_value(o.emulate),
      "run N clips in this one process (threads instead of ranks): the single-process reference for an N-rank run")(
      "dump-temporal", po::value(&o.dump)->value_name("PREFIX"),
      "write every module's output at the first timestep (temporal modules: input and output) to "
      "PREFIX.rank<r>.safetensors, one file per rank")(
      "profile", path_value(&o.profile, PathKind::new_file),
      "time every op of every model call (CUDA events on a GPU): rank 0 prints the 20 op kinds and modules that "
      "took most and writes all its rows to FILE (JSON); not with --vi.emulate-clips")(
      "ignore-unexpected-weights", po::bool_switch(&o.ignore_unexpected),
      "load a weight file that holds tensors the model does not use (they are listed as a warning)");
  po::options_description vi_opts("Video-Infinity (flags take =true/=false)");
  o.vi_options.add_to(vi_opts);
  opts.add(vi_opts);
  return opts;
}

// Parses and checks what needs no job. Returns false when --help was asked for (and printed).
bool parse_forward_options(const std::vector<std::string>& args, ForwardOptions& o) {
  const po::options_description opts = forward_option_table(o);
  po::variables_map vm;
  parse_options(args, opts, vm, "forward");
  if (vm.count("help")) {
    std::cout << opts << "\n" << kRankLayoutHelp << "\nExit status: 0 on success, 2 for bad input (the message names the file and key), 1 for\n"
                         "other failures, 3 when a collective timed out. Under MPI a failure on any rank ends every rank.\n";
    return false;
  }
  for (const char* required : {"model", "inputs", "out"})
    VINF_INPUT_CHECK(vm.count(required), "vinf forward: --", required, " is required (see vinf forward --help)");
  VINF_INPUT_CHECK(!o.out_path.empty(), "vinf forward: --out is empty: give the output file");
  VINF_INPUT_CHECK(o.profile.empty() || o.emulate == 0, "vinf forward: --profile times the ranks' own calls; ",
                   "--vi.emulate-clips runs its clips on threads of their own: leave one of them out");
  o.vi = o.vi_options.resolve(vm);
  for (const auto& [name, value] : vm)
    if (name.rfind("vi.", 0) == 0 && name != "vi.emulate-clips" && !value.defaulted())
      (name == "vi.mode" ? o.vi_mode_given : o.vi_given) = true;
  o.plan.dtype = job::parse_dtype_choice(o.dtype);
  o.plan.device = job::parse_device_choice(o.device);
  o.plan.transport = job::parse_transport(o.comm_backend);
  o.plan.tf32 = o.tf32;
  o.plan.cfg = o.cfg;
  o.plan.tensor = o.tensor;
  o.plan.comm_timeout = o.timeout;
  // Emulated clips talk over a group of threads made later; a job of ranks talks over its clip group.
  o.plan.clip_group = o.vi.mode != infinity::Mode::off && o.emulate == 0;
  return true;
}

// How the sample is shared out: the cfg branches split the batch, the clips the frames.
struct Split {
  std::int64_t batch = 0, frames = 0;
  int cfg = 1, clips = 1;
  Piece piece(int cfg_index, int clip) const {
    return Piece{cfg_index * batch / cfg, batch / cfg, clip * frames / clips,
                 (clip + 1) * frames / clips - clip * frames / clips};
  }
};

// The job and its checked inputs, what the later phases work from.
struct ForwardJob {
  std::unique_ptr<job::Job> job;
  model::ModelFiles files;
  model::UNetConfig config;
  std::vector<std::string> warnings;             // of the config, then of the weights
  std::unique_ptr<io::SafetensorsFile> in_file;  // the file the inputs' tensors are read from
  ForwardInputs in;
  Split split;
  std::unique_ptr<model::WeightFiles> weight_files;  // open while the model is loaded from them
  std::unique_ptr<model::UNet3D> unet;
  std::unique_ptr<infinity::CommTensorGroup> tensor_group;  // with --parallel.tensor T > 1

  Reporter report;
};

// Starts the job and checks the model's config and the inputs against it and the job's size:
// everything a bad input can fail, before any weight is read.
ForwardJob start_forward(const ForwardOptions& o) {
  ForwardJob f;
  f.job = job::start_job(o.plan, [&](int world) {
    VINF_INPUT_CHECK(o.emulate == 0 || (world == 1 && o.cfg == 1 && o.tensor == 1), "--vi.emulate-clips runs in one ",
                     "process; launch it without mpirun (and without --parallel.cfg 2 or --parallel.tensor)");
  });
  f.report = Reporter("vinf forward:", f.job->root());
  f.files = model::find_model_files(o.model_dir);
  f.config = model::load_unet_config(f.files.config, &f.warnings);
  model::check_tensor_split(f.config, o.tensor, f.files.config);
  f.in_file = std::make_unique<io::SafetensorsFile>(o.inputs_path);
  f.in = read_inputs(*f.in_file, f.config, f.files.config);
  const Shape& s = f.in.sample.shape;
  f.split = Split{s[0], s[2], o.cfg, o.emulate > 0 ? o.emulate : f.job->grid().clip_size()};
  const Split& p = f.split;
  VINF_INPUT_CHECK(p.frames >= p.clips, o.inputs_path, ": 'sample' has ", p.frames, " frames, fewer than the ", p.clips,
                   " ranks it is split over; use at most ", p.frames, " ranks");
  VINF_INPUT_CHECK(p.batch % p.cfg == 0, "--parallel.cfg ", p.cfg, " splits the batch, but 'sample' has batch ",
                   p.batch);
  infinity::check_partition(o.vi, p.frames, p.clips);
  return f;
}

// Loads the weights onto the job's device and says what runs.
void load_model(const ForwardOptions& o, ForwardJob& f) {
  const auto t_load = Clock::now();
  const Device& device = f.job->device();
  const DType dtype = f.job->dtype();
  f.weight_files = std::make_unique<model::WeightFiles>(f.files);
  const auto params = model::unet_parameters(f.config);
  const mpi::ProcessGrid& grid = f.job->grid();
  f.unet = std::make_unique<model::UNet3D>(
      f.config, model::Weights(*f.weight_files, params, f.job->runtime(), dtype, o.ignore_unexpected, &f.warnings,
                               {grid.tensor_index(), grid.tensor_size()}));
  if (f.job->tensor_comm()) {
    f.tensor_group = std::make_unique<infinity::CommTensorGroup>(*f.job->tensor_comm());
    f.unet->set_tensor_group(f.tensor_group.get());
  }
  const model::UNet3D& unet = *f.unet;
  for (const std::string& wn : f.warnings) f.report.say("warning: " + wn);
  f.report.say("model " + f.files.dir + ": " + std::to_string(unet.weights().count()) + " parameters" +
        (grid.tensor_size() > 1 ? " on each of " + std::to_string(grid.tensor_size()) + " tensor ranks" : "") + ", " +
        format_mib(static_cast<double>(unet.weights().bytes())) + " as " + model::precision_name(dtype, device) +
        (tf32_in_effect(device, dtype) ? " (TF32 tensor cores)" : "") + " on " + device.name() + gpu_kernels_note(f.job->runtime().ctx()) + " (loaded in " +
        format_number(seconds_since(t_load), 5) + " s)");
  f.report.say(std::string("--vi.mode ") + infinity::mode_name(o.vi.mode) + ", " + std::to_string(f.split.clips) +
        (o.emulate > 0 ? " emulated clip(s)" : " clip(s)") + (o.cfg == 2 ? " x 2 CFG branches" : "") +
        (o.tensor > 1 ? " x " + std::to_string(o.tensor) + " tensor ranks" : "") + ", " +
        std::to_string(f.split.frames) + " frames, " + std::to_string(f.split.piece(0, 0).nf) + " on the first clip, " +
        std::to_string(f.in.timesteps.size()) + " timestep(s)" + (f.in.fps_given ? "" : ", fps 24 (not in the inputs)"));
}

std::unique_ptr<model::TemporalContext> temporal_context(const infinity::Config& vi, mpi::Communicator* clip_group,
                                                         const Split& split) {
  if (vi.mode == infinity::Mode::off) return std::make_unique<model::PlainTemporalContext>();
  return std::make_unique<infinity::Context>(vi, *clip_group, infinity::clip_frame_counts(split.frames, split.clips));
}

// The whole result (on rank 0) and what the run measured.
struct ForwardResults {
  std::vector<std::vector<float>> preds;    // per timestep, [B, C, F, H, W]; rank 0 only
  std::vector<mpi::CommCounters> counters;  // per clip (emulation) or per rank; rank 0 only
  std::vector<double> seconds;              // per timestep, the slowest clip's
  double peak = 0;                          // bytes, the largest of any clip

  ForwardResults(const ForwardJob& f, bool root) : seconds(f.in.timesteps.size(), 0.0) {
    const Split& p = f.split;
    const Shape& s = f.in.sample.shape;
    const auto full = static_cast<std::size_t>(p.batch * f.config.out_channels * p.frames * s[3] * s[4]);
    preds.assign(root ? f.in.timesteps.size() : 0, std::vector<float>(root ? full : 0));
  }
  void place(const std::vector<float>& piece, const Piece& pc, const ForwardJob& f, std::size_t step) {
    const Shape& s = f.in.sample.shape;
    place_piece(piece, pc, f.config.out_channels, f.split.frames, s[3] * s[4], preds[step].data());
  }
};

// N clips on N threads of this process, each with its own runtime, over the in-process transport.
ForwardResults run_emulated(const ForwardOptions& o, const ForwardJob& f) {
  const int n = o.emulate;
  auto group = mpi::make_thread_group(n);
  std::vector<PieceResult> res(static_cast<std::size_t>(n));
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  const int per_clip = cpu_threads_per_rank(n);  // the clips share this process's CPU threads
  for (int c = 0; c < n; ++c) {
    group[static_cast<std::size_t>(c)]->set_label("emulated clip group");
    threads.emplace_back([&, c] {
      try {
        set_cpu_threads(per_clip);
        Runtime trt(f.job->device());
        auto tc = temporal_context(o.vi, group[static_cast<std::size_t>(c)].get(), f.split);
        res[static_cast<std::size_t>(c)] =
            run_piece(trt, *f.unet, *tc, f.in, f.split.piece(0, c), !o.dump.empty(), [](double x) { return x; });
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(c)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int c = 0; c < n; ++c)
    if (!errors[static_cast<std::size_t>(c)].empty()) VINF_FAIL("emulated clip ", c, ": ", errors[static_cast<std::size_t>(c)]);
  ForwardResults out(f, true);
  for (int c = 0; c < n; ++c) {
    const PieceResult& r = res[static_cast<std::size_t>(c)];
    for (std::size_t i = 0; i < f.in.timesteps.size(); ++i) {
      out.place(r.preds[i], f.split.piece(0, c), f, i);
      out.seconds[i] = std::max(out.seconds[i], r.seconds[i]);
    }
    out.peak = std::max(out.peak, r.peak);
    out.counters.push_back(group[static_cast<std::size_t>(c)]->counters());
    if (!o.dump.empty()) write_dump(o.dump, c, r, infinity::mode_name(o.vi.mode));
  }
  return out;
}

// Rank 0 receives every rank's piece of each prediction (the pieces differ by up to a frame),
// over the job's world group; tensor ranks other than the first hold copies and send nothing.
void collect_predictions(ForwardJob& f, PieceResult& mine, ForwardResults& out) {
  job::Job& job = *f.job;
  const mpi::ProcessGrid& grid = job.grid();
  const int ranks = job.size(), clip_size = grid.clip_size(), tensor = grid.tensor_size();
  const Shape& s = f.in.sample.shape;
  auto piece_of = [&](int q) { return f.split.piece(q / tensor / clip_size, q / tensor % clip_size); };
  std::vector<std::int64_t> counts(static_cast<std::size_t>(ranks));
  std::int64_t total = 0;
  for (int q = 0; q < ranks; ++q) {
    const Piece pq = piece_of(q);
    const std::int64_t n = q % tensor == 0 ? pq.nb * f.config.out_channels * pq.nf * s[3] * s[4] : 0;
    VINF_INPUT_CHECK((total + n) * static_cast<std::int64_t>(sizeof(float)) < INT_MAX,
                     "the output is too large to gather in one message; use more ranks");
    counts[static_cast<std::size_t>(q)] = n;
    total += n;
  }
  std::vector<float> gathered(static_cast<std::size_t>(total));
  const Tensor all = Tensor::wrap(gathered.data(), DType::f32, Device::cpu(), {total});
  for (std::size_t i = 0; i < f.in.timesteps.size(); ++i) {
    const Tensor piece = Tensor::wrap(mine.preds[i].data(), DType::f32, Device::cpu(),
                                      {counts[static_cast<std::size_t>(job.rank())]});
    job.world().all_gather_v(job.host(), piece, all, counts);
    if (!job.root()) continue;
    std::int64_t offset = 0;
    for (int q = 0; q < ranks; ++q) {
      const std::int64_t n = counts[static_cast<std::size_t>(q)];
      if (n == 0) continue;
      const std::vector<float> part(gathered.begin() + offset, gathered.begin() + offset + n);
      out.place(part, piece_of(q), f, i);
      offset += n;
    }
  }
}

// One clip (and cfg branch) per rank, over the job's clip group.
ForwardResults run_on_ranks(const ForwardOptions& o, ForwardJob& f) {
  job::Job& job = *f.job;
  mpi::Session& session = job.session();
  mpi::Communicator* clip_comm = job.clip_comm();
  const Piece mine = f.split.piece(job.grid().cfg_index(), job.grid().clip_index());
  auto tc = temporal_context(o.vi, clip_comm, f.split);
  PieceResult r = run_piece(job.runtime(), *f.unet, *tc, f.in, mine, !o.dump.empty(),
                                  [&](double x) { return session.max(x); });
  ForwardResults out(f, job.root());
  out.seconds = r.seconds;
  out.peak = session.max(r.peak);
  if (!o.dump.empty()) write_dump(o.dump, job.rank(), r, infinity::mode_name(o.vi.mode));
  collect_predictions(f, r, out);
  mpi::CommCounters mine_counted = clip_comm ? clip_comm->counters() : mpi::CommCounters{};
  if (job.tensor_comm()) mine_counted.add(job.tensor_comm()->counters());
  out.counters = session.gather_values_on_root(mine_counted);
  return out;
}

// The timings and communication in the log; rank 0 writes the output file.
void write_results(const ForwardOptions& o, const ForwardJob& f, const ForwardResults& r) {
  const std::vector<std::int64_t>& timesteps = f.in.timesteps;
  const bool root = f.job->root();
  for (std::size_t i = 0; i < timesteps.size(); ++i)
    f.report.say("t=" + std::to_string(timesteps[i]) + ": " + format_number(r.seconds[i]) + " s");
  f.report.say("peak memory " + format_mib(r.peak) + " per rank (max over ranks; the weights are " +
        format_mib(static_cast<double>(f.unet->weights().bytes())) + " of it)");
  if (!root) return;
  std::map<std::string, std::string> meta = {
      {"generator", std::string("vinf ") + VINF_VERSION + " forward"},
      {"model", f.files.dir},
      {"vi.mode", infinity::mode_name(o.vi.mode)},
      {"ranks", std::to_string(o.emulate > 0 ? 1 : f.job->size())},
      {"clips", std::to_string(f.split.clips)},
      {"parallel.cfg", std::to_string(o.cfg)},
      {"parallel.tensor", std::to_string(o.tensor)},
      {"device", f.job->device().name()},
      {"dtype", dtype_name(f.job->dtype())}};
  if (o.vi.mode != infinity::Mode::off || o.tensor > 1) {
    f.report.say("communication per rank over " + std::to_string(timesteps.size()) +
          " UNet call(s) (bytes received from other ranks):");
    for (std::size_t q = 0; q < r.counters.size(); ++q) {
      const std::string line = r.counters[q].summary();
      f.report.say("  " + std::string(o.emulate > 0 ? "clip " : "rank ") + std::to_string(q) + ": " + line);
      meta["comm." + std::to_string(q)] = line;
    }
  }
  std::vector<io::TensorToWrite> out;
  std::string ts_list;
  const Shape& s = f.in.sample.shape;
  for (std::size_t i = 0; i < timesteps.size(); ++i) {
    out.push_back({"noise_pred.t" + std::to_string(timesteps[i]), DType::f32,
                   {f.split.batch, f.config.out_channels, f.split.frames, s[3], s[4]}, r.preds[i].data(), {}});
    ts_list += (i ? "," : "") + std::to_string(timesteps[i]);
  }
  meta["timesteps"] = ts_list;
  io::write_safetensors(o.out_path, out, meta);
  f.report.say("wrote " + o.out_path);
}

}  // namespace

int forward(const std::vector<std::string>& args) {
  ForwardOptions o;
  if (!parse_forward_options(args, o)) return 0;
  if (pipeline::model_family(o.model_dir) == pipeline::ModelFamily::wan) {
    WanForwardRequest r{o.model_dir, o.inputs_path, o.out_path, o.dump, o.profile, o.plan, o.ignore_unexpected, o.cfg,
                        o.tensor, o.emulate, o.vi_given, o.vi};
    if (!o.vi_mode_given) r.vi.mode = infinity::Mode::off;
    return forward_wan(r);
  }
  ForwardJob f = start_forward(o);
  load_model(o, f);
  job::RunProfile profile(*f.job, o.profile);
  const ForwardResults results = o.emulate > 0 ? run_emulated(o, f) : run_on_ranks(o, f);
  write_results(o, f, results);
  profile.finish(std::cout);
  return 0;
}

}  // namespace vinf::app
