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
// and rank 0 checks the targets: UNet FLOP/s against that GEMM rate (CPU) or the GPU's
// peak (MFU), exposed against raw communication (overlap), and the projected time of a long video
// (--project-*, by default the released Video-Infinity's 2,300 frames x 30 steps on 8 GPUs in
// 312 s), saying by how much a target is missed. Table on stdout; --json FILE writes the same.
//
//   mpirun -np N vinf_bench_step [--preset small] [--height 128 --width 128] [--frames-per-rank 8]
//       [--batch 2] [--calls 3] [--warmup 1] [--device auto] [--dtype auto] [--tf32] [--comm-backend auto]
//       [--vi.mode invariant --vi.halo x|kv --vi.exchange three-round|fused ...] [--json FILE]
#include <mpi.h>
#include <omp.h>

#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "app/vi_options.hpp"
#include "infinity/config.hpp"
#include "infinity/context.hpp"
#include "model/flops.hpp"
#include "model/presets.hpp"
#include "model/unet3d.hpp"
#include "job/job.hpp"
#include "mpi/grid.hpp"
#include "mpi/session.hpp"
#include "ops/gemm.hpp"
#include "ops/random.hpp"
#include "ops/runtime.hpp"
#include "bench_flags.hpp"

using namespace vinf;
namespace po = boost::program_options;

namespace {

using Clock = std::chrono::steady_clock;

// One rank's figures, means over the timed calls; gathered to rank 0 as plain doubles.
struct RankFigures {
  double call_s = 0, comm_s = 0, peak_bytes = 0, flops = 0, raw_comm_s = 0, gemm_flops_per_s = 0;
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

int run(int argc, char** argv) {
  std::string preset = "small", device_opt = "auto", dtype_opt = "auto", backend = "auto", json_path;
  bool tf32 = false;
  std::int64_t height = 128, width = 128, frames_per_rank = 8, batch = 2, tokens = 77;
  int calls = 3, warmup = 1;
  std::int64_t project_frames = 2300, project_steps = 30, project_ranks = 8;
  double project_reference_s = 312, project_aim_s = 60;
  app::ViOptions vi;
  po::options_description opts("vinf_bench_step: timed UNet calls with Video-Infinity over the MPI ranks");
  opts.add_options()("help", "this text")("preset", po::value(&preset)->default_value(preset), "tiny | small | vc2")(
      "height", po::value(&height)->default_value(height), "pixels (a multiple of 8)")(
      "width", po::value(&width)->default_value(width), "pixels (a multiple of 8)")(
      "frames-per-rank", po::value(&frames_per_rank)->default_value(frames_per_rank), "frames of each rank's clip")(
      "batch", po::value(&batch)->default_value(batch), "2: a guidance batch (negative + positive), 1: one branch")(
      "calls", po::value(&calls)->default_value(calls), "timed UNet calls")(
      "warmup", po::value(&warmup)->default_value(warmup), "untimed calls first")(
      "device", po::value(&device_opt)->default_value(device_opt), "auto | cpu | cuda")(
      "dtype", po::value(&dtype_opt)->default_value(dtype_opt), kDtypeOptionHelp)(
      "tf32", po::bool_switch(&tf32), kTf32OptionHelp)(
      "comm-backend", po::value(&backend)->default_value(backend), "auto | mpi | nccl")(
      "json", po::value(&json_path), "also write the figures to this JSON file")(
      "project-frames", po::value(&project_frames)->default_value(project_frames), "projection: video length")(
      "project-steps", po::value(&project_steps)->default_value(project_steps), "projection: sampling steps")(
      "project-ranks", po::value(&project_ranks)->default_value(project_ranks), "projection: ranks (GPUs)")(
      "project-reference", po::value(&project_reference_s)->default_value(project_reference_s),
      "projection: the reference time, s (the released Video-Infinity on 8 RTX 6000 Ada)")(
      "project-aim", po::value(&project_aim_s)->default_value(project_aim_s), "projection: the time to aim for, s");
  vi.add_to(opts);
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
  const infinity::Config vcfg = vi.resolve(vm);
  VINF_INPUT_CHECK(height % 8 == 0 && width % 8 == 0 && height > 0 && width > 0, "--height and --width must be ",
                   "positive multiples of 8");
  VINF_INPUT_CHECK(calls >= 1 && warmup >= 0 && frames_per_rank >= 1 && (batch == 1 || batch == 2),
                   "--calls >= 1, --warmup >= 0, --frames-per-rank >= 1 and --batch 1 or 2, please");
  VINF_INPUT_CHECK(project_frames >= 1 && project_steps >= 1 && project_ranks >= 1 && project_reference_s > 0 &&
                       project_aim_s > 0,
                   "the --project-* values must be positive");
  check_dtype_option(dtype_opt);

  mpi::Session mpi(&argc, &argv);
  const bool root = mpi.rank() == 0;
  mpi::ProcessGrid grid(mpi, 1);
  const Device device = job::choose_device(mpi, job::parse_device_choice(device_opt));
  const DType dtype = resolve_dtype_option(dtype_opt, device);
  set_allow_tf32(tf32);
  const int clips = grid.clip_size();
  if (vcfg.mode != infinity::Mode::off) infinity::check_partition(vcfg, frames_per_rank * clips, clips);

  const model::UNetConfig config = model::preset_config(preset);
  Runtime rt(device);
  const model::UNet3D unet(config, model::Weights::random(model::unet_parameters(config), rt, dtype, 7));
  const std::int64_t h = height / 8, w = width / 8;
  const Shape in_shape{batch, config.in_channels, frames_per_rank, h, w};
  OwnedTensor sample = rt.arena().empty(DType::f32, in_shape);
  OwnedTensor text = rt.arena().empty(DType::f32, {batch, tokens, config.cross_attention_dim});
  OwnedTensor out = rt.arena().empty(DType::f32, {batch, config.out_channels, frames_per_rank, h, w});
  ops::normal(rt.ctx(), sample, 3, static_cast<std::uint64_t>(mpi.rank()), 0);
  ops::normal(rt.ctx(), text, 3, 1000, 0);

  std::unique_ptr<mpi::Communicator> comm;
  std::unique_ptr<model::TemporalContext> tc;
  if (vcfg.mode == infinity::Mode::off) {
    tc = std::make_unique<model::PlainTemporalContext>();
  } else {
    comm = job::make_group_communicator(grid.clip_comm(), device, job::parse_transport(backend), "clip group");
    tc = std::make_unique<infinity::Context>(vcfg, *comm, frames_per_rank);
  }
  auto one_call = [&](std::int64_t t) {
    unet.forward(rt.ctx(), sample, t, 24.0, text, out, *tc);
    rt.synchronize();
  };
  // Timesteps on both sides of the phase switch, as a run has them.
  for (int i = 0; i < warmup; ++i) one_call(i % 2 ? 500 : 900);
  rt.arena().reset_peak();
  const mpi::CommCounters before = comm ? comm->counters() : mpi::CommCounters{};
  std::vector<mpi::CommRecord> trace;
  if (comm) comm->set_trace(&trace);
  MPI_Barrier(mpi.world());
  double total = 0;
  for (int i = 0; i < calls; ++i) {
    const auto t0 = Clock::now();
    one_call(i % 2 ? 500 : 900);
    total += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  RankFigures mine;
  mine.call_s = total / calls;
  if (comm) {
    const mpi::CommCounters after = comm->counters();
    for (int k = 0; k < mpi::kCommOps; ++k) {
      mine.bytes[static_cast<std::size_t>(k)] =
          static_cast<double>(after.bytes[static_cast<std::size_t>(k)] - before.bytes[static_cast<std::size_t>(k)]) / calls;
      mine.comm_seconds[static_cast<std::size_t>(k)] =
          (after.seconds[static_cast<std::size_t>(k)] - before.seconds[static_cast<std::size_t>(k)]) / calls;
      mine.comm_s += mine.comm_seconds[static_cast<std::size_t>(k)];
    }
  }
  mine.peak_bytes = static_cast<double>(rt.arena().stats().peak_in_use);
  const model::FlopCount flop_kinds = model::unet_flops(config, batch, frames_per_rank, h, w, tokens);
  mine.flops = flop_kinds.total();
  // The same collectives without the compute between them, all ranks together.
  if (comm) {
    comm->set_trace(nullptr);
    MPI_Barrier(mpi.world());
    mine.raw_comm_s = mpi::replay_trace(*comm, rt.ctx(), trace) / calls;
  }
  MPI_Barrier(mpi.world());
  mine.gemm_flops_per_s = gemm_rate(rt, dtype);

  constexpr int kFields = 6 + 2 * mpi::kCommOps;
  std::vector<double> row{mine.call_s, mine.comm_s, mine.peak_bytes, mine.flops, mine.raw_comm_s, mine.gemm_flops_per_s};
  row.insert(row.end(), mine.bytes.begin(), mine.bytes.end());
  row.insert(row.end(), mine.comm_seconds.begin(), mine.comm_seconds.end());
  std::vector<double> all(root ? static_cast<std::size_t>(kFields * mpi.size()) : 0);
  MPI_Gather(row.data(), kFields, MPI_DOUBLE, all.data(), kFields, MPI_DOUBLE, 0, mpi.world());
  if (!root) return 0;

  nlohmann::ordered_json j;
  j["format"] = "vinf-bench-step";
  j["config"] = {{"preset", preset},
                 {"height", height},
                 {"width", width},
                 {"frames_per_rank", frames_per_rank},
                 {"ranks", mpi.size()},
                 {"batch", batch},
                 {"calls", calls},
                 {"warmup", warmup},
                 {"device", device.name()},
                 {"dtype", dtype_name(dtype)},
                 {"tf32", tf32_in_effect(device, dtype)},
                 {"comm_backend", comm ? std::string(comm->backend()) : std::string("none")},
                 {"vi.mode", infinity::mode_name(vcfg.mode)},
                 {"vi.halo", infinity::halo_name(vcfg.halo)},
                 {"vi.exchange", infinity::exchange_name(vcfg.exchange)},
                 {"vi.local-frames", vcfg.local_frames},
                 {"vi.global-frames", vcfg.global_frames},
                 {"omp_threads", omp_get_max_threads()}};
  j["flops_per_call_by_kind"] = {{"conv", flop_kinds.conv},
                                 {"temporal_conv", flop_kinds.temporal_conv},
                                 {"linear", flop_kinds.linear},
                                 {"attention", flop_kinds.attention}};
  std::cout << "vinf_bench_step: " << preset << ", " << mpi.size() << " rank(s) x " << frames_per_rank << " frames at "
            << height << "x" << width << ", batch " << batch << ", " << device.name() << " " << dtype_name(dtype)
            << ", --vi.mode " << infinity::mode_name(vcfg.mode) << " --vi.halo " << infinity::halo_name(vcfg.halo) << " --vi.exchange "
            << infinity::exchange_name(vcfg.exchange) << "; means over " << calls << " call(s) after " << warmup << " warm-up\n";
  std::cout << std::left << std::setw(6) << "rank" << std::right << std::setw(10) << "call s" << std::setw(11)
            << "compute s" << std::setw(12) << "exposed s" << std::setw(12) << "MB/call" << std::setw(11)
            << "peak MiB" << std::setw(10) << "GFLOP" << std::setw(10) << "GFLOP/s" << std::setw(10) << "raw s"
            << std::setw(11) << "GEMM GF/s" << "\n";
  double worst_call = 0, worst_comm = 0, worst_raw = 0, bytes_sum = 0, peak_max = 0, gemm_min = 1e300, rate_min = 1e300;
  double worst_compute = 0;
  for (int r = 0; r < mpi.size(); ++r) {
    const double* f = all.data() + static_cast<std::ptrdiff_t>(r) * kFields;
    const double call = f[0], comm_s = f[1], peak = f[2], flops = f[3], raw = f[4], gemm = f[5];
    const double* kind_bytes = f + 6;
    const double* kind_secs = f + 6 + mpi::kCommOps;
    double bytes = 0;
    nlohmann::ordered_json kinds, kind_seconds;
    for (int k = 0; k < mpi::kCommOps; ++k) {
      bytes += kind_bytes[k];
      if (kind_bytes[k] > 0 || kind_secs[k] > 0) {
        kinds[mpi::comm_op_name(static_cast<mpi::CommOp>(k))] = kind_bytes[k];
        kind_seconds[mpi::comm_op_name(static_cast<mpi::CommOp>(k))] = kind_secs[k];
      }
    }
    worst_call = std::max(worst_call, call);
    worst_comm = std::max(worst_comm, comm_s);
    worst_raw = std::max(worst_raw, raw);
    worst_compute = std::max(worst_compute, call - comm_s);
    peak_max = std::max(peak_max, peak);
    gemm_min = std::min(gemm_min, gemm);
    rate_min = std::min(rate_min, flops / call);
    bytes_sum += bytes;
    j["ranks"].push_back({{"rank", r},
                          {"call_s", call},
                          {"compute_s", call - comm_s},
                          {"exposed_comm_s", comm_s},
                          {"bytes_received_per_call", kinds.is_null() ? nlohmann::ordered_json::object() : kinds},
                          {"comm_seconds_per_call", kind_seconds.is_null() ? nlohmann::ordered_json::object() : kind_seconds},
                          {"peak_memory_bytes", peak},
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
  j["summary"] = {{"call_s", worst_call},
                  {"exposed_comm_s", worst_comm},
                  {"bytes_received_per_rank_per_call", bytes_sum / mpi.size()},
                  {"raw_comm_s", worst_raw},
                  {"gemm_flops_per_s", gemm_min},
                  {"flops_per_s", rate_min},
                  {"peak_memory_bytes", peak_max},
                  {"frame_steps_per_s", static_cast<double>(frames_per_rank * mpi.size()) / worst_call}};
  std::cout << "slowest rank: " << std::setprecision(3) << worst_call << " s per call, " << worst_comm
            << " s of it in collectives at most; " << std::setprecision(1)
            << static_cast<double>(frames_per_rank * mpi.size()) / worst_call << " frame-steps/s\n";

  // The targets. On a GPU the FLOP rate is judged against the nominal peak (MFU), on the CPU
  // against the GEMM rate measured above.
  std::vector<Target> targets;
  if (device.is_cuda()) {
    std::string gpu;
    const double peak = bench::gpu_peak_tflops(&gpu) * 1e12;
    if (peak > 0)
      targets.push_back({"mfu", "UNet FLOP/s of the slowest rank against " + gpu + "'s dense 16-bit peak (" +
                                    std::to_string(static_cast<int>(peak / 1e12)) + " TFLOP/s)",
                         100 * rate_min / peak, 50, false, "%", ""});
  }
  targets.push_back({"gemm_efficiency",
                     "UNet FLOP/s of the slowest rank against the GEMM rate of the same ranks in this run",
                     100 * rate_min / gemm_min, 60, false, "%", ""});
  if (comm && mpi.size() > 1)
    targets.push_back({"overlap", "exposed communication against the raw exchange time (slowest ranks)",
                       worst_raw > 0 ? 100 * worst_comm / worst_raw : 0, 20, true, "%",
                       device.is_cuda() ? ""
                                        : "the target is for GPUs; on the CPU, MPI moves data only when the "
                                          "rank calls into it, and a rank also waits for its slower neighbour"});
  // A long video: every rank holds ceil(frames / ranks) frames; compute grows linearly with
  // frames per rank (banded attention), the communication per call is taken as measured here.
  const double fpr_target = std::ceil(static_cast<double>(project_frames) / static_cast<double>(project_ranks));
  const double calls_per_step = batch == 2 ? 1 : 2;
  const double projected = static_cast<double>(project_steps) * calls_per_step *
                           (worst_compute * fpr_target / static_cast<double>(frames_per_rank) + worst_comm);
  std::ostringstream pw;
  pw << project_frames << " frames x " << project_steps << " steps on " << project_ranks << " ranks of this device ("
     << fpr_target << " frames each), against " << project_reference_s << " s for the reference";
  targets.push_back({"projection", pw.str(), projected, project_aim_s, true, "s",
                     mpi.size() < 2 ? "one rank: no communication measured" : ""});
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
    std::cout << "  projected speed: " << std::setprecision(1) << project_reference_s / projected
              << "x the reference's speed\n";
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << j.dump(2) << "\n";
    VINF_CHECK(f.good(), "cannot write ", json_path);
    std::cout << "wrote " << json_path << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const InputError& e) {
    std::cerr << std::string("vinf_bench_step: error: ") + e.what() + "\n";  // one write: ranks interleave
    return 2;
  } catch (const std::exception& e) {
    std::cerr << std::string("vinf_bench_step: error: ") + e.what() + "\n";
    return 1;
  }
}
