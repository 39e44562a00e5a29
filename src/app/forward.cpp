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
#include "core/error.hpp"
#include "core/progress.hpp"
#include "app/vi_options.hpp"
#include "infinity/context.hpp"
#include "io/safetensors.hpp"
#include "model/unet3d.hpp"
#include "job/job.hpp"
#include "mpi/check.hpp"
#include "mpi/grid.hpp"
#include "mpi/session.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

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
  const auto* e = f.find(name);
  VINF_INPUT_CHECK(e != nullptr, f.path(), " has no tensor '", name, "' (vinf forward needs sample ",
                   "[B,C,F,H,W], encoder_hidden_states [B,L,D] and timesteps I64 [T]; fps I64 [1] is optional)");
  VINF_INPUT_CHECK(e->shape.rank() == rank, f.path(), ": '", name, "' must be ", layout, ", got shape ", e->shape.str());
  return f.tensor(name);
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
  for (std::int64_t i = 0; i < ts.numel(); ++i) {
    const std::int64_t t = ts.ptr<std::int64_t>()[i];
    VINF_INPUT_CHECK(t >= 0 && t < (1 << 24), f.path(), ": timesteps[", i, "] = ", t, " is not a diffusion timestep");
    for (std::int64_t seen : in.timesteps)
      VINF_INPUT_CHECK(seen != t, f.path(), ": timestep ", t, " appears twice in 'timesteps'");
    in.timesteps.push_back(t);
  }
  if (const auto* e = f.find("fps")) {
    VINF_INPUT_CHECK(e->dtype == DType::i64 && e->shape.numel() == 1, f.path(), ": 'fps' must be I64 [1], got ",
                     io::safetensors_dtype_name(e->dtype), e->shape.str());
    in.fps = static_cast<double>(f.tensor("fps").ptr<std::int64_t>()[0]);
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

}  // namespace

int forward(const std::vector<std::string>& args) {
  std::string config_file, model_dir, inputs_path, out_path, device_opt = "auto", dtype_opt = "auto",
      comm_backend = "auto", dump;
  bool tf32 = false;
  int cfg_size = 1, emulate = 0;
  double timeout = 300;
  bool ignore_unexpected = false;
  app::ViOptions vi;
  po::options_description opts(
      "vinf forward: one UNet call per timestep, for checking a model against reference numbers\n\n"
      "usage: vinf forward --model DIR --inputs IN.safetensors --out OUT.safetensors [options]\n"
      "       mpirun -np N vinf forward ...   (rank r takes frames [r F/N, (r+1) F/N); rank 0 writes all)\n\n"
      "IN holds sample F32 [B,C,F,H,W], encoder_hidden_states F32 [B,L,D], timesteps I64 [T] and\n"
      "optionally fps I64 [1] (default 24). OUT gets noise_pred.t<t> F32 [B,C,F,H,W] for each t.\n\n"
      "Options come from the command line and from --config FILE (INI: `inputs = IN.safetensors`;\n"
      "`[vi] mode = compat` is --vi.mode compat); the command line wins.\n\nOptions");
  opts.add_options()("help,h", "show this help")("config", po::value(&config_file), kConfigOptionHelp)(
      "model", po::value(&model_dir), "UNet directory in diffusers layout (config.json + diffusion_pytorch_model"
                                      ".safetensors or sharded with an index), or a pipeline root with unet/")(
      "inputs", po::value(&inputs_path), "input tensors (safetensors)")(
      "out", po::value(&out_path), "output file (safetensors); written under a temporary name, then renamed")(
      "device", po::value(&device_opt)->default_value(device_opt), "auto | cpu | cuda (auto: CUDA when every rank has a GPU)")(
      "dtype", po::value(&dtype_opt)->default_value(dtype_opt), kDtypeOptionHelp)(
      "tf32", po::bool_switch(&tf32), kTf32OptionHelp)(
      "parallel.cfg", po::value(&cfg_size)->default_value(cfg_size),
      "1: every rank computes the whole batch of its clip; 2: rank pairs split the batch (CFG parallelism; "
      "ranks = 2 x clips)")(
      "comm-backend", po::value(&comm_backend)->default_value(comm_backend),
      "auto | mpi | nccl (auto: NCCL on GPUs, MPI on the CPU)")(
      "comm-timeout", po::value(&timeout)->default_value(timeout),
      "seconds a collective may wait before the job is ended with a message (0: wait forever)")(
      "vi.emulate-clips", po::value(&emulate)->default_value(emulate),
      "run N clips in this one process (threads instead of ranks): the single-process reference for an N-rank run")(
      "dump-temporal", po::value(&dump),
      "write every module's output at the first timestep (temporal modules: input and output) to "
      "PREFIX.rank<r>.safetensors, one file per rank")(
      "ignore-unexpected-weights", po::bool_switch(&ignore_unexpected),
      "load a weight file that holds tensors the model does not use (they are listed as a warning)");
  po::options_description vi_opts("Video-Infinity (flags take =true/=false)");
  vi.add_to(vi_opts);
  opts.add(vi_opts);
  po::variables_map vm;
  parse_options(args, opts, vm, "forward");
  if (vm.count("help")) {
    std::cout << opts << "\nExit status: 0 on success, 2 for bad input (the message names the file and key), 1 for\n"
                         "other failures, 3 when a collective timed out. Under MPI a failure on any rank ends every rank.\n";
    return 0;
  }
  for (const char* required : {"model", "inputs", "out"})
    VINF_INPUT_CHECK(vm.count(required), "vinf forward: --", required, " is required (see vinf forward --help)");
  VINF_INPUT_CHECK(!out_path.empty(), "vinf forward: --out is empty: give the output file");
  const infinity::Config vcfg = vi.resolve(vm);
  check_dtype_option(dtype_opt);
  VINF_INPUT_CHECK(timeout >= 0, "--comm-timeout must be >= 0 seconds, got ", timeout);
  mpi::set_comm_timeout(timeout);

  mpi::Session mpi(nullptr, nullptr);
  const bool root = mpi.rank() == 0;
  auto log = [&](const std::string& line) {
    if (root) std::cerr << "vinf forward: " << line << "\n" << std::flush;
  };
  VINF_INPUT_CHECK(emulate >= 0, "--vi.emulate-clips must be >= 0, got ", emulate);
  VINF_INPUT_CHECK(emulate == 0 || (mpi.size() == 1 && cfg_size == 1), "--vi.emulate-clips runs in one process; ",
                   "launch it without mpirun (and without --parallel.cfg 2)");
  job::check_cfg_layout(cfg_size, mpi.size());
  mpi::ProcessGrid grid(mpi, cfg_size);
  const Device device = job::choose_device(mpi, job::parse_device_choice(device_opt));
  const DType dtype = resolve_dtype_option(dtype_opt, device);
  set_allow_tf32(tf32);

  const model::ModelFiles files = model::find_model_files(model_dir);
  std::vector<std::string> warnings;
  const model::UNetConfig config = model::load_unet_config(files.config, &warnings);
  const io::SafetensorsFile in_file(inputs_path);
  const ForwardInputs in = read_inputs(in_file, config, files.config);
  const Shape& s = in.sample.shape;
  const std::int64_t batch = s[0], frames = s[2], h = s[3], w = s[4], cout = config.out_channels;
  const int clips = emulate > 0 ? emulate : grid.clip_size();
  VINF_INPUT_CHECK(frames >= clips, inputs_path, ": 'sample' has ", frames, " frames, fewer than the ", clips,
                   " ranks it is split over; use at most ", frames, " ranks");
  VINF_INPUT_CHECK(batch % cfg_size == 0, "--parallel.cfg ", cfg_size, " splits the batch, but 'sample' has batch ",
                   batch);
  infinity::check_partition(vcfg, frames, clips);
  auto piece_of = [&](int cfg_index, int clip) {
    return Piece{cfg_index * batch / cfg_size, batch / cfg_size, clip * frames / clips,
                 (clip + 1) * frames / clips - clip * frames / clips};
  };

  const auto t_load = Clock::now();
  Runtime rt(device);
  const model::WeightFiles wf(files);
  const auto params = model::unet_parameters(config);
  model::UNet3D unet(config, model::Weights(wf, params, rt, dtype, ignore_unexpected, &warnings));
  for (const std::string& wn : warnings) log("warning: " + wn);
  log("model " + files.dir + ": " + std::to_string(unet.weights().count()) + " parameters, " +
      format_mib(static_cast<double>(unet.weights().bytes())) + " as " + dtype_name(dtype) +
      (tf32_in_effect(device, dtype) ? " (TF32 tensor cores)" : "") + " on " + device.name() +
      " (loaded in " + std::to_string(seconds_since(t_load)).substr(0, 5) + " s)");
  log(std::string("--vi.mode ") + infinity::mode_name(vcfg.mode) + ", " + std::to_string(clips) +
      (emulate > 0 ? " emulated clip(s)" : " clip(s)") + (cfg_size == 2 ? " x 2 CFG branches" : "") + ", " +
      std::to_string(frames) + " frames, " + std::to_string(piece_of(0, 0).nf) + " on the first clip, " +
      std::to_string(in.timesteps.size()) + " timestep(s)" + (in.fps_given ? "" : ", fps 24 (not in the inputs)"));

  const std::size_t full_size = static_cast<std::size_t>(batch * cout * frames * h * w);
  std::vector<std::vector<float>> results(root ? in.timesteps.size() : 0, std::vector<float>(root ? full_size : 0));
  std::vector<mpi::CommCounters> counters;  // per clip (emulation) or this rank
  std::vector<double> seconds(in.timesteps.size(), 0.0);
  double peak = 0;

  auto make_context = [&](mpi::Communicator* comm, std::int64_t clip_frames) -> std::unique_ptr<model::TemporalContext> {
    if (vcfg.mode == infinity::Mode::off) return std::make_unique<model::PlainTemporalContext>();
    return std::make_unique<infinity::Context>(vcfg, *comm, clip_frames);
  };

  if (emulate > 0) {
    // N clips on N threads of this process, each with its own runtime, over the in-process transport.
    auto group = mpi::make_thread_group(emulate);
    std::vector<PieceResult> res(static_cast<std::size_t>(emulate));
    std::vector<std::string> errors(static_cast<std::size_t>(emulate));
    std::vector<std::thread> threads;
    for (int c = 0; c < emulate; ++c) {
      group[static_cast<std::size_t>(c)]->set_label("emulated clip group");
      threads.emplace_back([&, c] {
        try {
          Runtime trt(device);
          auto tc = make_context(group[static_cast<std::size_t>(c)].get(), piece_of(0, c).nf);
          res[static_cast<std::size_t>(c)] =
              run_piece(trt, unet, *tc, in, piece_of(0, c), !dump.empty(), [](double x) { return x; });
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(c)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int c = 0; c < emulate; ++c)
      if (!errors[static_cast<std::size_t>(c)].empty())
        VINF_FAIL("emulated clip ", c, ": ", errors[static_cast<std::size_t>(c)]);
    for (int c = 0; c < emulate; ++c) {
      const PieceResult& r = res[static_cast<std::size_t>(c)];
      for (std::size_t i = 0; i < in.timesteps.size(); ++i) {
        place_piece(r.preds[i], piece_of(0, c), cout, frames, h * w, results[i].data());
        seconds[i] = std::max(seconds[i], r.seconds[i]);
      }
      peak = std::max(peak, r.peak);
      counters.push_back(group[static_cast<std::size_t>(c)]->counters());
      if (!dump.empty()) write_dump(dump, c, r, infinity::mode_name(vcfg.mode));
    }
  } else {
    std::unique_ptr<mpi::Communicator> clip_comm;
    if (vcfg.mode != infinity::Mode::off)
      clip_comm = job::make_group_communicator(grid.clip_comm(), device, job::parse_transport(comm_backend), "clip group");
    const Piece mine = piece_of(grid.cfg_index(), grid.clip_index());
    auto tc = make_context(clip_comm.get(), mine.nf);
    PieceResult r = run_piece(rt, unet, *tc, in, mine, !dump.empty(), [&](double x) { return mpi.max(x); });
    seconds = r.seconds;
    peak = mpi.max(r.peak);
    if (!dump.empty()) write_dump(dump, mpi.rank(), r, infinity::mode_name(vcfg.mode));
    // Rank 0 receives every rank's pieces (equal sizes within a mode off run only up to one frame).
    const int ranks = mpi.size();
    for (std::size_t i = 0; i < in.timesteps.size(); ++i) {
      std::vector<int> counts(static_cast<std::size_t>(ranks)), displs(static_cast<std::size_t>(ranks));
      std::int64_t off = 0;
      for (int q = 0; q < ranks; ++q) {
        const Piece pq = piece_of(q / grid.clip_size(), q % grid.clip_size());
        const std::int64_t n = pq.nb * cout * pq.nf * h * w;
        VINF_INPUT_CHECK(off + n < INT_MAX, "the output is too large to gather in one message; use more ranks");
        counts[static_cast<std::size_t>(q)] = static_cast<int>(n);
        displs[static_cast<std::size_t>(q)] = static_cast<int>(off);
        off += n;
      }
      std::vector<float> gathered(root ? static_cast<std::size_t>(off) : 0);
      VINF_CHECK_MPI(MPI_Gatherv(r.preds[i].data(), counts[static_cast<std::size_t>(mpi.rank())], MPI_FLOAT,
                                 gathered.data(), counts.data(), displs.data(), MPI_FLOAT, 0, mpi.world()));
      if (root)
        for (int q = 0; q < ranks; ++q) {
          const std::vector<float> part(gathered.begin() + displs[static_cast<std::size_t>(q)],
                                        gathered.begin() + displs[static_cast<std::size_t>(q)] +
                                            counts[static_cast<std::size_t>(q)]);
          place_piece(part, piece_of(q / grid.clip_size(), q % grid.clip_size()), cout, frames, h * w,
                      results[i].data());
        }
    }
    // Every rank's counters to rank 0 for the summary.
    const mpi::CommCounters mine_c = clip_comm ? clip_comm->counters() : mpi::CommCounters{};
    counters.resize(root ? static_cast<std::size_t>(ranks) : 1);
    static_assert(sizeof(mpi::CommCounters) % sizeof(double) == 0);
    VINF_CHECK_MPI(MPI_Gather(&mine_c, sizeof mine_c, MPI_BYTE, counters.data(), sizeof mine_c, MPI_BYTE, 0, mpi.world()));
  }

  for (std::size_t i = 0; i < in.timesteps.size(); ++i)
    log("t=" + std::to_string(in.timesteps[i]) + ": " + std::to_string(seconds[i]).substr(0, 6) + " s");
  log("peak memory " + format_mib(peak) + " per rank (max over ranks; the weights are " +
      format_mib(static_cast<double>(unet.weights().bytes())) + " of it)");
  std::map<std::string, std::string> comm_meta;
  if (root && vcfg.mode != infinity::Mode::off) {
    log("communication per rank over " + std::to_string(in.timesteps.size()) +
        " UNet call(s) (bytes received from other ranks):");
    for (std::size_t q = 0; q < counters.size(); ++q) {
      const std::string line = counters[q].summary();
      log("  " + std::string(emulate > 0 ? "clip " : "rank ") + std::to_string(q) + ": " + line);
      comm_meta["comm." + std::to_string(q)] = line;
    }
  }
  if (root) {
    std::vector<io::TensorToWrite> out;
    std::string ts_list;
    for (std::size_t i = 0; i < in.timesteps.size(); ++i) {
      out.push_back({"noise_pred.t" + std::to_string(in.timesteps[i]), DType::f32, {batch, cout, frames, h, w},
                     results[i].data(), {}});
      ts_list += (i ? "," : "") + std::to_string(in.timesteps[i]);
    }
    std::map<std::string, std::string> meta = {
        {"generator", std::string("vinf ") + VINF_VERSION + " forward"},
        {"model", files.dir},
        {"vi.mode", infinity::mode_name(vcfg.mode)},
        {"ranks", std::to_string(emulate > 0 ? 1 : mpi.size())},
        {"clips", std::to_string(clips)},
        {"device", device.name()},
        {"dtype", dtype_name(dtype)},
        {"timesteps", ts_list}};
    meta.insert(comm_meta.begin(), comm_meta.end());
    io::write_safetensors(out_path, out, meta);
    log("wrote " + out_path);
  }
  return 0;
}

}  // namespace vinf::app
