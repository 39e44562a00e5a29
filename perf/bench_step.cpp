// The Video-Infinity step benchmark: UNet calls of one preset with random weights, each rank
// holding a clip of `--frames-per-rank` frames, the temporal layers talking over the clip group as
// in `vinf generate`. After --warmup untimed calls, --calls timed ones; per rank it reports the
// time per call, the exposed communication (the time the rank, or on a GPU its compute stream,
// sat waiting for a collective: the part that compute did not hide; the temporal attention's
// halo and global exchanges run while the own frames are projected), the rest as compute, bytes received
// per collective kind, peak arena memory, the call's FLOPs by kind (model/flops.hpp) and the
// achieved FLOP/s. Then, with nothing else running, every rank
//   - replays the collectives of the timed calls back to back (the raw exchange time), and
//   - times a square GEMM in the compute dtype (the machine's GEMM rate in the same run),
// and rank 0 checks its targets: UNet FLOP/s against that GEMM rate (CPU) or the GPU's
// peak (MFU), exposed against raw communication (overlap), and the projected time of a long video
// (--project-*, by default the released Video-Infinity's 2,300 frames x 30 steps on 8 GPUs in
// 312 s), saying by how much a target is missed. Table on stdout; --json FILE writes the same.
//
//   mpirun -np N vinf_bench_step [--preset small] [--height 128 --width 128] [--frames-per-rank 8]
//       [--batch 2] [--calls 3] [--warmup 1] [--device auto] [--dtype auto] [--tf32] [--comm-backend auto]
//       [--parallel.tensor 1] [--vi.mode invariant|exact|... --vi.halo x|kv --vi.exchange three-round|fused ...]
//       [--profile] [--json FILE]
#include <omp.h>

#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "app/vi_options.hpp"
#include "ops/profile_json.hpp"
#include "bench_main.hpp"
#include "infinity/config.hpp"
#include "infinity/context.hpp"
#include "model/flops.hpp"
#include "infinity/tensor_group.hpp"
#include "model/presets.hpp"
#include "model/unet3d.hpp"
#include "job/job.hpp"
#include "ops/gemm.hpp"
#include "ops/random.hpp"
#include "ops/runtime.hpp"
#include "bench_flags.hpp"

using namespace vinf;
namespace po = boost::program_options;

namespace {

using Clock = std::chrono::steady_clock;

// One rank's figures, means over the timed calls; gathered to rank 0 as they are.
struct RankFigures {
  double call_s = 0, comm_s = 0, peak_bytes = 0, flops = 0, raw_comm_s = 0, gemm_flops_per_s = 0, weight_bytes = 0,
         split_weight_bytes = 0;
  std::array<double, mpi::kCommOps> bytes{}, comm_seconds{};
};

// The machine's GEMM rate in the benchmark's own setting: a square product in the compute dtype
// (sgemm on the CPU with the rank's threads, cuBLAS on a GPU), best of a few after a warm-up.
double gemm_rate(Runtime& rt, DType dtype) {
  const std::int64_t n = rt.device().is_cuda() ? 8192 : 2048;
  OwnedTensor a = rt.arena().empty(dtype, {1, n, n}), b = rt.arena().empty(dtype, {1, n, n});
  OwnedTensor c = rt.arena().empty(dtype, {1, n, n});
  ops::normal(rt.ctx(), a, 1, 0, 0);
  ops::normal(rt.ctx(), b, 2, 0, 0);
  double best = 1e30;
  for (int i = 0; i < 4; ++i) {
    const auto t0 = Clock::now();
    ops::bmm(rt.ctx(), a, b, c);
    rt.synchronize();
    if (i > 0) best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return 2.0 * static_cast<double>(n) * n * n / best;
}

// One target check: the measured value, the bound, and whether it is met; printed and in JSON.
struct Target {
  std::string name, what;
  double value, bound;
  bool upper;  // the value must stay at or below the bound (else at or above)
  std::string unit, note;
  bool met() const { return upper ? value <= bound : value >= bound; }
  std::string verdict() const {
    std::ostringstream o;
    o << std::fixed << std::setprecision(unit == "s" ? 1 : 0);
    if (met()) return "met";
    o << "missed by " << std::fabs(value - bound) << (unit == "%" ? " points" : " " + unit);
    if (!upper && value > 0) o << std::setprecision(1) << " (x" << bound / value << " to go)";
    if (upper && bound > 0) o << std::setprecision(1) << " (x" << value / bound << " over)";
    return o.str();
  }
};

// The command line. The first block is bound to the option table; parse_step_options fills the rest.
struct StepOptions {
  std::string preset = "small", device = "auto", dtype = "auto", backend = "auto", json_path;
  bool tf32 = false, profile = false;
  std::int64_t height = 128, width = 128, frames_per_rank = 8, batch = 2, tokens = 77;
  int calls = 3, warmup = 1, tensor = 1;
  std::int64_t project_frames = 2300, project_steps = 30, project_ranks = 8;
  double project_reference_s = 312, project_aim_s = 60;
  app::ViOptions vi;

  infinity::Config vcfg;
  job::JobPlan plan;
};

po::options_description step_option_table(StepOptions& o) {
  po::options_description opts("vinf_bench_step: timed UNet calls with Video-Infinity over the MPI ranks");
  opts.add_options()("help", "this text")("preset", po::value(&o.preset)->default_value(o.preset),
                                          "tiny | small | vc2")("height", po::value(&o.height)->default_value(o.height),
                                                                "pixels (a multiple of 8)")(
      "width", po::value(&o.width)->default_value(o.width), "pixels (a multiple of 8)")(
      "frames-per-rank", po::value(&o.frames_per_rank)->default_value(o.frames_per_rank), "frames of each rank's clip")(
      "batch", po::value(&o.batch)->default_value(o.batch), "2: a guidance batch (negative + positive), 1: one branch")(
      "calls", po::value(&o.calls)->default_value(o.calls), "timed UNet calls")(
      "warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed calls first")(
      "device", po::value(&o.device)->default_value(o.device), "auto | cpu | cuda")(
      "dtype", po::value(&o.dtype)->default_value(o.dtype), kDtypeOptionHelp)("tf32", po::bool_switch(&o.tf32),
                                                                              kTf32OptionHelp)(
      "comm-backend", po::value(&o.backend)->default_value(o.backend), "auto | mpi | nccl")(
      "parallel.tensor", po::value(&o.tensor)->default_value(o.tensor),
      "T: ranks that split each clip's transformer blocks (the ranks are frame ranks x T, tensor groups "
      "consecutive); figures per rank, FLOPs counted as the clip's over T")("json", po::value(&o.json_path),
                                                                            "also write the figures to this JSON file")(
      "profile", po::bool_switch(&o.profile),
      "then --calls more calls with every op timed (CUDA events on a GPU): time per op kind and per module, the "
      "ops' sum against the call, launches and host synchronisations; rank 0's top 20 printed, all in --json")(
      "project-frames", po::value(&o.project_frames)->default_value(o.project_frames), "projection: video length")(
      "project-steps", po::value(&o.project_steps)->default_value(o.project_steps), "projection: sampling steps")(
      "project-ranks", po::value(&o.project_ranks)->default_value(o.project_ranks), "projection: ranks (GPUs)")(
      "project-reference", po::value(&o.project_reference_s)->default_value(o.project_reference_s),
      "projection: the reference time, s (the released Video-Infinity on 8 RTX 6000 Ada)")(
      "project-aim", po::value(&o.project_aim_s)->default_value(o.project_aim_s), "projection: the time to aim for, s");
  o.vi.add_to(opts);
  return opts;
}

// Parses and checks the options. Returns the exit status when the program ends here (--help: 0,
// an option Boost refuses: 2), nothing when the benchmark runs.
std::optional<int> parse_step_options(int argc, char** argv, StepOptions& o) {
  const po::options_description opts = step_option_table(o);
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "vinf_bench_step: error: " << e.what() << "\n";
    return 2;
  }
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  o.vcfg = o.vi.resolve(vm);
  VINF_INPUT_CHECK(o.height % 8 == 0 && o.width % 8 == 0 && o.height > 0 && o.width > 0,
                   "--height and --width must be ", "positive multiples of 8");
  VINF_INPUT_CHECK(o.calls >= 1 && o.warmup >= 0 && o.frames_per_rank >= 1 && (o.batch == 1 || o.batch == 2),
                   "--calls >= 1, --warmup >= 0, --frames-per-rank >= 1 and --batch 1 or 2, please");
  VINF_INPUT_CHECK(o.project_frames >= 1 && o.project_steps >= 1 && o.project_ranks >= 1 && o.project_reference_s > 0 &&
                       o.project_aim_s > 0,
                   "the --project-* values must be positive");
  o.plan.dtype = job::parse_dtype_choice(o.dtype);
  o.plan.device = job::parse_device_choice(o.device);
  o.plan.transport = job::parse_transport(o.backend);
  o.plan.tf32 = o.tf32;
  o.plan.clip_group = o.vcfg.mode != infinity::Mode::off;
  o.plan.tensor = o.tensor;
  VINF_INPUT_CHECK(o.tensor >= 1, "--parallel.tensor must be >= 1, got ", o.tensor);
  return std::nullopt;
}

// This rank's model (random weights), its clip's inputs and the temporal layers' context.
struct StepModel {
  model::UNetConfig config;
  std::unique_ptr<model::UNet3D> unet;
  std::int64_t h = 0, w = 0;  // latent pixels
  OwnedTensor sample, text, out;
  std::unique_ptr<model::TemporalContext> tc;
  std::unique_ptr<infinity::CommTensorGroup> tensor_group;
};

StepModel make_step_model(const StepOptions& o, job::Job& job) {
  Runtime& rt = job.runtime();
  StepModel m;
  m.config = model::preset_config(o.preset);
  model::check_tensor_split(m.config, o.tensor, "preset " + o.preset);
  const mpi::ProcessGrid& grid = job.grid();
  m.unet = std::make_unique<model::UNet3D>(m.config,
                                           model::Weights::random(model::unet_parameters(m.config), rt, job.dtype(), 7,
                                                                  {grid.tensor_index(), grid.tensor_size()}));
  if (job.tensor_comm()) {
    m.tensor_group = std::make_unique<infinity::CommTensorGroup>(*job.tensor_comm());
    m.unet->set_tensor_group(m.tensor_group.get());
  }
  m.h = o.height / 8;
  m.w = o.width / 8;
  m.sample = rt.arena().empty(DType::f32, {o.batch, m.config.in_channels, o.frames_per_rank, m.h, m.w});
  m.text = rt.arena().empty(DType::f32, {o.batch, o.tokens, m.config.cross_attention_dim});
  m.out = rt.arena().empty(DType::f32, {o.batch, m.config.out_channels, o.frames_per_rank, m.h, m.w});
  // The same inputs on every rank of a tensor group (it computes one clip).
  ops::normal(rt.ctx(), m.sample, 3, static_cast<std::uint64_t>(job.rank() / grid.tensor_size()), 0);
  ops::normal(rt.ctx(), m.text, 3, 1000, 0);
  if (job.clip_comm())
    m.tc = std::make_unique<infinity::Context>(o.vcfg, *job.clip_comm(), o.frames_per_rank);
  else
    m.tc = std::make_unique<model::PlainTemporalContext>();
  return m;
}

// The warm-up and timed calls, the replay of their collectives and the GEMM rate: this rank's
// figures, means over the timed calls.
RankFigures measure(const StepOptions& o, job::Job& job, StepModel& m) {
  Runtime& rt = job.runtime();
  // The clip group's collectives and the tensor group's, counted and replayed alike.
  std::vector<mpi::Communicator*> comms;
  for (mpi::Communicator* c : {job.clip_comm(), job.tensor_comm()})
    if (c) comms.push_back(c);
  auto counted = [&] {
    mpi::CommCounters sum;
    for (mpi::Communicator* c : comms) sum.add(c->counters());
    return sum;
  };
  auto one_call = [&](std::int64_t t) {
    m.unet->forward(rt.ctx(), m.sample, t, 24.0, m.text, m.out, *m.tc);
    rt.synchronize();
  };
  // Timesteps on both sides of the phase switch, as a run has them.
  for (int i = 0; i < o.warmup; ++i) one_call(i % 2 ? 500 : 900);
  rt.arena().reset_peak();
  const mpi::CommCounters before = counted();
  std::vector<std::vector<mpi::CommRecord>> traces(comms.size());
  for (std::size_t c = 0; c < comms.size(); ++c) comms[c]->set_trace(&traces[c]);
  job.world().barrier(job.host());
  double total = 0;
  for (int i = 0; i < o.calls; ++i) {
    const auto t0 = Clock::now();
    one_call(i % 2 ? 500 : 900);
    total += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  RankFigures mine;
  mine.call_s = total / o.calls;
  if (!comms.empty()) {
    const mpi::CommCounters after = counted();
    for (std::size_t k = 0; k < static_cast<std::size_t>(mpi::kCommOps); ++k) {
      mine.bytes[k] = static_cast<double>(after.bytes[k] - before.bytes[k]) / o.calls;
      mine.comm_seconds[k] = (after.seconds[k] - before.seconds[k]) / o.calls;
      mine.comm_s += mine.comm_seconds[k];
    }
  }
  mine.peak_bytes = static_cast<double>(rt.arena().stats().peak_in_use);
  mine.weight_bytes = static_cast<double>(m.unet->weights().bytes());
  mine.split_weight_bytes = static_cast<double>(m.unet->weights().split_bytes());
  mine.flops = model::unet_flops(m.config, o.batch, o.frames_per_rank, m.h, m.w, o.tokens).total() / o.tensor;
  // The same collectives without the compute between them, all ranks together, group by group.
  for (std::size_t c = 0; c < comms.size(); ++c) {
    comms[c]->set_trace(nullptr);
    job.world().barrier(job.host());
    mine.raw_comm_s += mpi::replay_trace(*comms[c], rt.ctx(), traces[c]) / o.calls;
  }
  job.world().barrier(job.host());
  mine.gemm_flops_per_s = gemm_rate(rt, job.dtype());
  return mine;
}

// --profile: --calls more calls, every op timed; this rank's report.
ProfileReport profile_step(const StepOptions& o, job::Job& job, StepModel& m) {
  Runtime& rt = job.runtime();
  job.world().barrier(job.host());
  const Profiling profiling(rt.ctx());
  for (int i = 0; i < o.calls; ++i) {
    m.unet->forward(rt.ctx(), m.sample, i % 2 ? 500 : 900, 24.0, m.text, m.out, *m.tc);
    rt.synchronize();
  }
  return profiling.report();
}

// The run's settings in the JSON and the table's heading.
void describe_run(const StepOptions& o, job::Job& job, const StepModel& m, nlohmann::ordered_json& j) {
  const Device& device = job.device();
  const DType dtype = job.dtype();
  const mpi::Communicator* comm = job.clip_comm() ? job.clip_comm() : job.tensor_comm();
  const model::FlopCount flop_kinds = model::unet_flops(m.config, o.batch, o.frames_per_rank, m.h, m.w, o.tokens);
  j["format"] = "vinf-bench-step";
  j["config"] = {{"preset", o.preset},
                 {"height", o.height},
                 {"width", o.width},
                 {"frames_per_rank", o.frames_per_rank},
                 {"ranks", job.size()},
                 {"batch", o.batch},
                 {"calls", o.calls},
                 {"warmup", o.warmup},
                 {"device", device.name()},
                 {"dtype", dtype_name(dtype)},
                 {"tf32", tf32_in_effect(device, dtype)},
                 {"comm_backend", comm ? std::string(comm->backend()) : std::string("none")},
                 {"parallel.tensor", o.tensor},
                 {"vi.mode", infinity::mode_name(o.vcfg.mode)},
                 {"vi.halo", infinity::halo_name(o.vcfg.halo)},
                 {"vi.exchange", infinity::exchange_name(o.vcfg.exchange)},
                 {"vi.local-frames", o.vcfg.local_frames},
                 {"vi.global-frames", o.vcfg.global_frames},
                 {"omp_threads", omp_get_max_threads()}};
  j["flops_per_call_by_kind"] = {{"conv", flop_kinds.conv},
                                 {"temporal_conv", flop_kinds.temporal_conv},
                                 {"linear", flop_kinds.linear},
                                 {"attention", flop_kinds.attention}};
  std::cout << "vinf_bench_step: " << o.preset << ", " << job.size() << " rank(s) x " << o.frames_per_rank
            << " frames at " << o.height << "x" << o.width << ", batch " << o.batch << ", " << device.name() << " "
            << dtype_name(dtype) << ", --parallel.tensor " << o.tensor << ", --vi.mode "
            << infinity::mode_name(o.vcfg.mode) << " --vi.halo " << infinity::halo_name(o.vcfg.halo)
            << " --vi.exchange " << infinity::exchange_name(o.vcfg.exchange) << "; means over " << o.calls
            << " call(s) after " << o.warmup << " warm-up\n";
}

// The figures over all ranks that the targets judge: the slowest rank's times, the least rates.
struct StepSummary {
  double worst_call = 0, worst_comm = 0, worst_raw = 0, worst_compute = 0, bytes_sum = 0, peak_max = 0, weights_max = 0,
         split_weights_max = 0;
  double gemm_min = 1e300, rate_min = 1e300;
};

// One table row and JSON entry per rank; returns their summary.
StepSummary report_ranks(const std::vector<RankFigures>& all, nlohmann::ordered_json& j) {
  std::cout << std::left << std::setw(6) << "rank" << std::right << std::setw(10) << "call s" << std::setw(11)
            << "compute s" << std::setw(12) << "exposed s" << std::setw(12) << "MB/call" << std::setw(11) << "peak MiB"
            << std::setw(10) << "GFLOP" << std::setw(10) << "GFLOP/s" << std::setw(10) << "raw s" << std::setw(11)
            << "GEMM GF/s"
            << "\n";
  StepSummary sum;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const RankFigures& f = all[r];
    const double call = f.call_s, comm_s = f.comm_s, peak = f.peak_bytes, flops = f.flops, raw = f.raw_comm_s;
    const double gemm = f.gemm_flops_per_s;
    double bytes = 0;
    nlohmann::ordered_json kinds, kind_seconds;
    for (std::size_t k = 0; k < static_cast<std::size_t>(mpi::kCommOps); ++k) {
      bytes += f.bytes[k];
      if (f.bytes[k] > 0 || f.comm_seconds[k] > 0) {
        kinds[mpi::comm_op_name(static_cast<mpi::CommOp>(k))] = f.bytes[k];
        kind_seconds[mpi::comm_op_name(static_cast<mpi::CommOp>(k))] = f.comm_seconds[k];
      }
    }
    sum.worst_call = std::max(sum.worst_call, call);
    sum.worst_comm = std::max(sum.worst_comm, comm_s);
    sum.worst_raw = std::max(sum.worst_raw, raw);
    sum.worst_compute = std::max(sum.worst_compute, call - comm_s);
    sum.peak_max = std::max(sum.peak_max, peak);
    sum.weights_max = std::max(sum.weights_max, f.weight_bytes);
    sum.split_weights_max = std::max(sum.split_weights_max, f.split_weight_bytes);
    sum.gemm_min = std::min(sum.gemm_min, gemm);
    sum.rate_min = std::min(sum.rate_min, flops / call);
    sum.bytes_sum += bytes;
    j["ranks"].push_back(
        {{"rank", r},
         {"call_s", call},
         {"compute_s", call - comm_s},
         {"exposed_comm_s", comm_s},
         {"bytes_received_per_call", kinds.is_null() ? nlohmann::ordered_json::object() : kinds},
         {"comm_seconds_per_call", kind_seconds.is_null() ? nlohmann::ordered_json::object() : kind_seconds},
         {"peak_memory_bytes", peak},
         {"weight_bytes", f.weight_bytes},
         {"split_weight_bytes", f.split_weight_bytes},
         {"flops_per_call", flops},
         {"flops_per_s", flops / call},
         {"raw_comm_s", raw},
         {"gemm_flops_per_s", gemm}});
    std::cout << std::left << std::setw(6) << r << std::right << std::fixed << std::setprecision(3) << std::setw(10)
              << call << std::setw(11) << call - comm_s << std::setw(12) << comm_s << std::setprecision(2)
              << std::setw(12) << bytes / 1e6 << std::setprecision(1) << std::setw(11) << peak / 1048576.0
              << std::setw(10) << flops / 1e9 << std::setw(10) << flops / call / 1e9 << std::setprecision(3)
              << std::setw(10) << raw << std::setprecision(1) << std::setw(11) << gemm / 1e9 << "\n";
  }
  return sum;
}

void report_summary(const StepOptions& o, int ranks, const StepSummary& sum, nlohmann::ordered_json& j) {
  const double frame_steps = static_cast<double>(o.frames_per_rank * ranks / o.tensor) / sum.worst_call;
  j["summary"] = {{"call_s", sum.worst_call},
                  {"exposed_comm_s", sum.worst_comm},
                  {"bytes_received_per_rank_per_call", sum.bytes_sum / ranks},
                  {"raw_comm_s", sum.worst_raw},
                  {"gemm_flops_per_s", sum.gemm_min},
                  {"flops_per_s", sum.rate_min},
                  {"peak_memory_bytes", sum.peak_max},
                  {"weight_bytes_per_rank", sum.weights_max},
                  {"split_weight_bytes_per_rank", sum.split_weights_max},
                  {"frame_steps_per_s", frame_steps}};
  std::cout << "slowest rank: " << std::setprecision(3) << sum.worst_call << " s per call, " << sum.worst_comm
            << " s of it in collectives at most; " << std::setprecision(1) << frame_steps << " frame-steps/s\n";
}

// A long video: every rank holds ceil(frames / ranks) frames; compute grows linearly with frames
// per rank (banded attention), the communication per call is taken as measured here.
double projected_seconds(const StepOptions& o, const StepSummary& sum) {
  const double fpr_target = std::ceil(static_cast<double>(o.project_frames) / static_cast<double>(o.project_ranks));
  const double calls_per_step = o.batch == 2 ? 1 : 2;
  return static_cast<double>(o.project_steps) * calls_per_step *
         (sum.worst_compute * fpr_target / static_cast<double>(o.frames_per_rank) + sum.worst_comm);
}

// The targets. On a GPU the FLOP rate is judged against the nominal peak (MFU), on the CPU
// against the GEMM rate measured above.
std::vector<Target> step_targets(const StepOptions& o, job::Job& job, const StepSummary& sum) {
  const Device& device = job.device();
  std::vector<Target> targets;
  if (device.is_cuda()) {
    std::string gpu;
    const double peak = bench::gpu_peak_tflops(&gpu) * 1e12;
    if (peak > 0)
      targets.push_back({"mfu",
                         "UNet FLOP/s of the slowest rank against " + gpu + "'s dense 16-bit peak (" +
                             std::to_string(static_cast<int>(peak / 1e12)) + " TFLOP/s)",
                         100 * sum.rate_min / peak, 50, false, "%", ""});
  }
  targets.push_back({"gemm_efficiency",
                     "UNet FLOP/s of the slowest rank against the GEMM rate of the same ranks in this run",
                     100 * sum.rate_min / sum.gemm_min, 60, false, "%", ""});
  if (job.clip_comm() && job.size() > 1)
    targets.push_back({"overlap", "exposed communication against the raw exchange time (slowest ranks)",
                       sum.worst_raw > 0 ? 100 * sum.worst_comm / sum.worst_raw : 0, 20, true, "%",
                       device.is_cuda() ? ""
                                        : "the target is for GPUs; on the CPU, MPI moves data only when the "
                                          "rank calls into it, and a rank also waits for its slower neighbour"});
  const double fpr_target = std::ceil(static_cast<double>(o.project_frames) / static_cast<double>(o.project_ranks));
  std::ostringstream pw;
  pw << o.project_frames << " frames x " << o.project_steps << " steps on " << o.project_ranks
     << " ranks of this device (" << fpr_target << " frames each), against " << o.project_reference_s
     << " s for the reference";
  targets.push_back({"projection", pw.str(), projected_seconds(o, sum), o.project_aim_s, true, "s",
                     job.size() < 2 ? "one rank: no communication measured" : ""});
  return targets;
}

void report_targets(const StepOptions& o, const std::vector<Target>& targets, double projected,
                    nlohmann::ordered_json& j) {
  std::cout << "targets:\n";
  for (const Target& t : targets) {
    std::cout << "  " << t.name << ": " << std::setprecision(t.unit == "s" ? 1 : 0) << t.value << " " << t.unit
              << (t.upper ? " (at most " : " (at least ") << t.bound << " " << t.unit << "): " << t.verdict() << " -- "
              << t.what << (t.note.empty() ? "" : "; " + t.note) << "\n";
    j["targets"].push_back({{"name", t.name},
                            {"what", t.what},
                            {"value", t.value},
                            {"unit", t.unit},
                            {"bound", t.bound},
                            {"bound_is", t.upper ? "upper" : "lower"},
                            {"met", t.met()},
                            {"verdict", t.verdict()},
                            {"note", t.note}});
  }
  if (projected > 0)
    std::cout << "  projected speed: " << std::setprecision(1) << o.project_reference_s / projected
              << "x the reference's speed\n";
}

int run(int argc, char** argv) {
  StepOptions o;
  if (const std::optional<int> status = parse_step_options(argc, argv, o)) return *status;
  const std::unique_ptr<job::Job> job = job::start_job(o.plan);
  const int clips = job->grid().clip_size();
  if (o.vcfg.mode != infinity::Mode::off) infinity::check_partition(o.vcfg, o.frames_per_rank * clips, clips);

  StepModel m = make_step_model(o, *job);
  const RankFigures mine = measure(o, *job, m);
  const std::vector<RankFigures> all = job->session().gather_values_on_root(mine);
  const std::optional<ProfileReport> profile =
      o.profile ? std::optional<ProfileReport>(profile_step(o, *job, m)) : std::nullopt;
  if (!job->root()) return 0;

  nlohmann::ordered_json j;
  describe_run(o, *job, m, j);
  const StepSummary sum = report_ranks(all, j);
  report_summary(o, job->size(), sum, j);
  report_targets(o, step_targets(o, *job, sum), projected_seconds(o, sum), j);
  if (profile) {
    std::cout << "rank 0, ";
    print_profile(std::cout, *profile);
    j["profile"] = profile_json(*profile);
    j["profile"]["rank"] = 0;
  }
  bench::write_figures(o.json_path, j);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return bench::guarded_main("vinf_bench_step", run, argc, argv); }
