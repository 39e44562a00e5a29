// The Video-Infinity step benchmark: UNet calls of one preset with random weights, each rank
// holding a clip of `--frames-per-rank` frames, the temporal layers talking over the clip group as
// in `vinf generate`. After --warmup untimed calls, --calls timed ones; per rank it reports the
// time per call, the time spent inside collectives (exposed communication: the collectives block,
// so this is the communication that compute did not hide), the rest as compute, bytes received
// per collective kind, peak arena memory, the call's FLOPs (model/flops.hpp) and the achieved
// FLOP/s. Rank 0 prints a table and, with --json FILE, writes the same as JSON.
//
//   mpirun -np N vinf_bench_step [--preset small] [--height 128 --width 128] [--frames-per-rank 8]
//       [--batch 2] [--calls 3] [--warmup 1] [--device auto] [--dtype f32] [--comm-backend auto]
//       [--vi.mode invariant --vi.halo x|kv --vi.exchange three-round|fused ...] [--json FILE]
#include <mpi.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "infinity/config.hpp"
#include "infinity/context.hpp"
#include "model/flops.hpp"
#include "model/presets.hpp"
#include "model/unet3d.hpp"
#include "mpi/grid.hpp"
#include "mpi/session.hpp"
#include "ops/random.hpp"
#include "ops/runtime.hpp"

using namespace vinf;
namespace po = boost::program_options;

namespace {

using Clock = std::chrono::steady_clock;

// One rank's figures, means over the timed calls; gathered to rank 0 as plain doubles.
struct RankFigures {
  double call_s = 0, comm_s = 0, peak_bytes = 0, flops = 0;
  std::array<double, mpi::kCommOps> bytes{}, comm_seconds{};
};

int run(int argc, char** argv) {
  std::string preset = "small", device_opt = "auto", dtype_opt = "f32", backend = "auto", json_path;
  std::int64_t height = 128, width = 128, frames_per_rank = 8, batch = 2, tokens = 77;
  int calls = 3, warmup = 1;
  infinity::Options vi;
  po::options_description opts("vinf_bench_step: timed UNet calls with Video-Infinity over the MPI ranks");
  opts.add_options()("help", "this text")("preset", po::value(&preset)->default_value(preset), "tiny | small | vc2")(
      "height", po::value(&height)->default_value(height), "pixels (a multiple of 8)")(
      "width", po::value(&width)->default_value(width), "pixels (a multiple of 8)")(
      "frames-per-rank", po::value(&frames_per_rank)->default_value(frames_per_rank), "frames of each rank's clip")(
      "batch", po::value(&batch)->default_value(batch), "2: a guidance batch (negative + positive), 1: one branch")(
      "calls", po::value(&calls)->default_value(calls), "timed UNet calls")(
      "warmup", po::value(&warmup)->default_value(warmup), "untimed calls first")(
      "device", po::value(&device_opt)->default_value(device_opt), "auto | cpu | cuda")(
      "dtype", po::value(&dtype_opt)->default_value(dtype_opt), "f32 | f16 | bf16 (16-bit on CUDA only)")(
      "comm-backend", po::value(&backend)->default_value(backend), "auto | mpi | nccl")(
      "json", po::value(&json_path), "also write the figures to this JSON file");
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
  DType dtype;
  VINF_INPUT_CHECK(parse_dtype(dtype_opt, dtype), "--dtype must be f32, f16 or bf16");

  mpi::Session mpi(&argc, &argv);
  const bool root = mpi.rank() == 0;
  mpi::ProcessGrid grid(mpi, 1);
  const Device device = mpi.choose_device(device_opt);
  VINF_INPUT_CHECK(device.is_cuda() || dtype == DType::f32, "--dtype ", dtype_opt, " needs CUDA; the CPU computes in f32");
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
    comm = mpi::make_communicator(grid.clip_comm(), device, backend, "clip group");
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
  mine.flops = model::unet_flops(config, batch, frames_per_rank, h, w, tokens).total();

  constexpr int kFields = 4 + 2 * mpi::kCommOps;
  std::vector<double> row{mine.call_s, mine.comm_s, mine.peak_bytes, mine.flops};
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
                 {"comm_backend", comm ? std::string(comm->backend()) : std::string("none")},
                 {"vi.mode", infinity::mode_name(vcfg.mode)},
                 {"vi.halo", vi.halo},
                 {"vi.exchange", vi.exchange},
                 {"vi.local-frames", vcfg.local_frames},
                 {"vi.global-frames", vcfg.global_frames}};
  std::cout << "vinf_bench_step: " << preset << ", " << mpi.size() << " rank(s) x " << frames_per_rank << " frames at "
            << height << "x" << width << ", batch " << batch << ", " << device.name() << " " << dtype_name(dtype)
            << ", --vi.mode " << infinity::mode_name(vcfg.mode) << " --vi.halo " << vi.halo << " --vi.exchange "
            << vi.exchange << "; means over " << calls << " call(s) after " << warmup << " warm-up\n";
  std::cout << std::left << std::setw(6) << "rank" << std::right << std::setw(10) << "call s" << std::setw(11)
            << "compute s" << std::setw(12) << "exposed s" << std::setw(12) << "MB/call" << std::setw(11)
            << "peak MiB" << std::setw(10) << "GFLOP" << std::setw(10) << "GFLOP/s" << "\n";
  double worst_call = 0, worst_comm = 0, bytes_sum = 0, peak_max = 0;
  for (int r = 0; r < mpi.size(); ++r) {
    const double* f = all.data() + static_cast<std::ptrdiff_t>(r) * kFields;
    const double call = f[0], comm_s = f[1], peak = f[2], flops = f[3];
    double bytes = 0;
    nlohmann::ordered_json kinds, kind_seconds;
    for (int k = 0; k < mpi::kCommOps; ++k) {
      bytes += f[4 + k];
      if (f[4 + k] > 0 || f[4 + mpi::kCommOps + k] > 0) {
        kinds[mpi::comm_op_name(static_cast<mpi::CommOp>(k))] = f[4 + k];
        kind_seconds[mpi::comm_op_name(static_cast<mpi::CommOp>(k))] = f[4 + mpi::kCommOps + k];
      }
    }
    worst_call = std::max(worst_call, call);
    worst_comm = std::max(worst_comm, comm_s);
    peak_max = std::max(peak_max, peak);
    bytes_sum += bytes;
    j["ranks"].push_back({{"rank", r},
                          {"call_s", call},
                          {"compute_s", call - comm_s},
                          {"exposed_comm_s", comm_s},
                          {"bytes_received_per_call", kinds.is_null() ? nlohmann::ordered_json::object() : kinds},
                          {"comm_seconds_per_call", kind_seconds.is_null() ? nlohmann::ordered_json::object() : kind_seconds},
                          {"peak_memory_bytes", peak},
                          {"flops_per_call", flops},
                          {"flops_per_s", flops / call}});
    std::cout << std::left << std::setw(6) << r << std::right << std::fixed << std::setprecision(3) << std::setw(10)
              << call << std::setw(11) << call - comm_s << std::setw(12) << comm_s << std::setprecision(2)
              << std::setw(12) << bytes / 1e6 << std::setprecision(1) << std::setw(11) << peak / 1048576.0
              << std::setw(10) << flops / 1e9 << std::setw(10) << flops / call / 1e9 << "\n";
  }
  j["summary"] = {{"call_s", worst_call},
                  {"exposed_comm_s", worst_comm},
                  {"bytes_received_per_rank_per_call", bytes_sum / mpi.size()},
                  {"peak_memory_bytes", peak_max},
                  {"frame_steps_per_s", static_cast<double>(frames_per_rank * mpi.size()) / worst_call}};
  std::cout << "slowest rank: " << std::setprecision(3) << worst_call << " s per call, " << worst_comm
            << " s of it in collectives at most; " << std::setprecision(1)
            << static_cast<double>(frames_per_rank * mpi.size()) / worst_call << " frame-steps/s\n";
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
    std::cerr << "vinf_bench_step: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "vinf_bench_step: error: " << e.what() << "\n";
    return 1;
  }
}
