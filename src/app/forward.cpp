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

#include "app/commands.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/unet3d.hpp"
#include "mpi/check.hpp"
#include "mpi/session.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

namespace po = boost::program_options;

namespace vinf::app {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

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

}  // namespace

int forward(const std::vector<std::string>& args) {
  std::string model_dir, inputs_path, out_path, device_opt = "auto", dtype_opt = "f32", vi_mode = "invariant";
  bool ignore_unexpected = false;
  po::options_description opts(
      "vinf forward: one UNet call per timestep, for checking a model against reference numbers\n\n"
      "usage: vinf forward --model DIR --inputs IN.safetensors --out OUT.safetensors [options]\n"
      "       mpirun -np N vinf forward ...   (rank r takes frames [r F/N, (r+1) F/N); rank 0 writes all)\n\n"
      "IN holds sample F32 [B,C,F,H,W], encoder_hidden_states F32 [B,L,D], timesteps I64 [T] and\n"
      "optionally fps I64 [1] (default 24). OUT gets noise_pred.t<t> F32 [B,C,F,H,W] for each t.\n\nOptions");
  opts.add_options()("help,h", "show this help")(
      "model", po::value(&model_dir), "UNet directory in diffusers layout (config.json + diffusion_pytorch_model"
                                      ".safetensors or sharded with an index), or a pipeline root with unet/")(
      "inputs", po::value(&inputs_path), "input tensors (safetensors)")(
      "out", po::value(&out_path), "output file (safetensors); written under a temporary name, then renamed")(
      "device", po::value(&device_opt)->default_value(device_opt), "auto | cpu | cuda (auto: CUDA when every rank has a GPU)")(
      "dtype", po::value(&dtype_opt)->default_value(dtype_opt), "compute dtype: f32 | f16 | bf16 (16-bit on CUDA only)")(
      "vi.mode", po::value(&vi_mode)->default_value(vi_mode),
      "Video-Infinity mode: invariant | compat | off (off = the plain diffusers model on each clip; "
      "this version has only off)")(
      "ignore-unexpected-weights", po::bool_switch(&ignore_unexpected),
      "load a weight file that holds tensors the model does not use (they are listed as a warning)");
  po::variables_map vm;
  if (!parse_options(args, opts, vm)) return 2;
  if (vm.count("help")) {
    std::cout << opts << "\nExit status: 0 on success, 2 for bad input (the message names the file and key), 1 for\n"
                         "other failures. Under MPI a failure on any rank ends every rank.\n";
    return 0;
  }
  for (const char* required : {"model", "inputs", "out"})
    VINF_INPUT_CHECK(vm.count(required), "vinf forward: --", required, " is required (see vinf forward --help)");
  VINF_INPUT_CHECK(vi_mode == "invariant" || vi_mode == "compat" || vi_mode == "off",
                   "--vi.mode must be invariant, compat or off, got '", vi_mode, "'");
  VINF_INPUT_CHECK(vi_mode == "off", "--vi.mode ", vi_mode,
                   " needs the Video-Infinity temporal layer, which this version does not have yet; "
                   "run with --vi.mode off (the plain model on each rank's clip)");
  DType dtype;
  VINF_INPUT_CHECK(parse_dtype(dtype_opt, dtype) && (dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16),
                   "--dtype must be f32, f16 or bf16, got '", dtype_opt, "'");

  mpi::Session mpi(nullptr, nullptr);
  const bool root = mpi.rank() == 0;
  auto log = [&](const std::string& line) {
    if (root) std::cerr << "vinf forward: " << line << "\n" << std::flush;
  };
  const Device device = mpi.choose_device(device_opt);
  VINF_INPUT_CHECK(device.is_cuda() || dtype == DType::f32, "--dtype ", dtype_opt,
                   " runs on CUDA only; the CPU path computes in f32 (this run uses the CPU)");

  const model::ModelFiles files = model::find_model_files(model_dir);
  std::vector<std::string> warnings;
  const model::UNetConfig config = model::load_unet_config(files.config, &warnings);
  const io::SafetensorsFile in_file(inputs_path);
  const ForwardInputs in = read_inputs(in_file, config, files.config);
  const std::int64_t frames = in.sample.size(2), ranks = mpi.size();
  VINF_INPUT_CHECK(frames >= ranks, inputs_path, ": 'sample' has ", frames, " frames, fewer than the ", ranks,
                   " ranks it is split over; use at most ", frames, " ranks");
  const std::int64_t f0 = mpi.rank() * frames / ranks, f1 = (mpi.rank() + 1) * frames / ranks;

  const auto t_load = Clock::now();
  Runtime rt(device);
  const model::WeightFiles wf(files);
  const auto params = model::unet_parameters(config);
  model::UNet3D unet(config, model::Weights(wf, params, rt, dtype, ignore_unexpected, &warnings));
  for (const std::string& w : warnings) log("warning: " + w);
  log("model " + files.dir + ": " + std::to_string(unet.weights().count()) + " parameters, " +
      format_mib(static_cast<double>(unet.weights().bytes())) + " as " + dtype_name(dtype) + " on " + device.name() +
      " (loaded in " + std::to_string(seconds_since(t_load)).substr(0, 5) + " s)");
  log(std::to_string(ranks) + " rank(s), " + std::to_string(frames) + " frames, " +
      std::to_string(f1 - f0) + (ranks > 1 ? " frames on rank 0" : " frames per call") + ", " +
      std::to_string(in.timesteps.size()) + " timestep(s)" + (in.fps_given ? "" : ", fps 24 (not in the inputs)"));

  const Shape& s = in.sample.shape;
  const std::int64_t b = s[0], h = s[3], w = s[4], cout = config.out_channels;
  const Tensor my_sample = in.sample.slice(2, f0, f1 - f0);
  OwnedTensor sample = rt.arena().empty(DType::f32, my_sample.shape), text = rt.arena().empty(DType::f32, in.text.shape);
  ops::copy(rt.ctx(), my_sample, sample);
  ops::copy(rt.ctx(), in.text, text);
  OwnedTensor pred = rt.arena().empty(DType::f32, {b, cout, f1 - f0, h, w});
  rt.arena().reset_peak();

  // Rank 0 receives every rank's frames; counts in floats.
  std::vector<int> counts(static_cast<std::size_t>(ranks)), displs(static_cast<std::size_t>(ranks));
  for (std::int64_t r = 0, off = 0; r < ranks; ++r) {
    const std::int64_t n = b * cout * ((r + 1) * frames / ranks - r * frames / ranks) * h * w;
    VINF_INPUT_CHECK(off + n < INT_MAX, "the output is too large to gather in one message; use more ranks");
    counts[r] = static_cast<int>(n);
    displs[r] = static_cast<int>(off);
    off += n;
  }
  std::vector<float> mine(static_cast<std::size_t>(pred.numel())), gathered(root ? static_cast<std::size_t>(b * cout * frames * h * w) : 0);
  std::vector<std::vector<float>> results;
  model::PlainTemporalContext plain;
  for (std::int64_t t : in.timesteps) {
    const auto t0 = Clock::now();
    unet.forward(rt.ctx(), sample, t, in.fps, text, pred, plain);
    ops::copy(rt.ctx(), pred, Tensor::wrap(mine.data(), DType::f32, Device::cpu(), pred.shape));
    const double secs = mpi.max(seconds_since(t0));
    VINF_CHECK_MPI(MPI_Gatherv(mine.data(), counts[mpi.rank()], MPI_FLOAT, gathered.data(), counts.data(),
                               displs.data(), MPI_FLOAT, 0, mpi.world()));
    if (root) {
      // Pieces arrive rank after rank as (B, C, F_r, H, W); interleave them along frames.
      std::vector<float> full(gathered.size());
      const std::int64_t hw = h * w;
      for (std::int64_t r = 0; r < ranks; ++r) {
        const std::int64_t r0 = r * frames / ranks, fr = (r + 1) * frames / ranks - r0;
        const float* src = gathered.data() + displs[r];
        for (std::int64_t bc = 0; bc < b * cout; ++bc)
          std::memcpy(full.data() + (bc * frames + r0) * hw, src + bc * fr * hw, sizeof(float) * fr * hw);
      }
      results.push_back(std::move(full));
    }
    log("t=" + std::to_string(t) + ": " + std::to_string(secs).substr(0, 6) + " s");
  }
  const double peak = mpi.max(static_cast<double>(rt.arena().stats().peak_in_use));
  log("peak memory " + format_mib(peak) + " per rank (max over ranks; the weights are " +
      format_mib(static_cast<double>(unet.weights().bytes())) + " of it)");
  if (root) {
    std::vector<io::TensorToWrite> out;
    std::string ts_list;
    for (std::size_t i = 0; i < in.timesteps.size(); ++i) {
      out.push_back({"noise_pred.t" + std::to_string(in.timesteps[i]), DType::f32, {b, cout, frames, h, w},
                     results[i].data(), {}});
      ts_list += (i ? "," : "") + std::to_string(in.timesteps[i]);
    }
    io::write_safetensors(out_path, out,
                          {{"generator", std::string("vinf ") + VINF_VERSION + " forward"},
                           {"model", files.dir},
                           {"vi.mode", vi_mode},
                           {"ranks", std::to_string(ranks)},
                           {"device", device.name()},
                           {"dtype", dtype_name(dtype)},
                           {"timesteps", ts_list}});
    log("wrote " + out_path);
  }
  return 0;
}

}  // namespace vinf::app
