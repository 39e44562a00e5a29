#include "app/forward_wan.hpp"

#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "infinity/tensor_group.hpp"
#include "infinity/wan_exact.hpp"
#include "infinity/wan_windows.hpp"
#include "io/safetensors.hpp"
#include "mpi/session.hpp"
#include "model/wan_transformer.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

namespace vinf::app {

namespace {

using Clock = std::chrono::steady_clock;

const char* const kWanInputs =
    "vinf forward on a Wan transformer needs hidden_states [B,C,F,H,W], encoder_hidden_states [B,L,D] and "
    "timesteps F32 [T]";

Tensor wan_input(const io::SafetensorsFile& f, const char* name, int rank, const char* layout) {
  const auto* e = f.find(name);
  VINF_INPUT_CHECK(e != nullptr, f.path(), " has no tensor '", name, "' (", kWanInputs, ")");
  VINF_INPUT_CHECK(e->shape.rank() == rank, f.path(), ": '", name, "' must be ", layout, ", got shape ", e->shape.str());
  VINF_INPUT_CHECK(e->shape.numel() > 0, f.path(), ": '", name, "' ", e->shape.str(), " is empty");
  const Tensor t = f.tensor(name);
  VINF_INPUT_CHECK(t.dtype == DType::f32 || t.dtype == DType::f16 || t.dtype == DType::bf16 ||
                       (rank == 1 && t.dtype == DType::i64),
                   f.path(), ": '", name, "' must be F32 (or F16/BF16), got ", io::safetensors_dtype_name(t.dtype));
  return t;
}

}  // namespace

int forward_wan(const WanForwardRequest& r) {
  const std::string what = "vinf forward: " + r.model_dir + " is a Wan transformer, ";
  const infinity::Mode mode = r.vi.mode;
  VINF_INPUT_CHECK(mode != infinity::Mode::compat, what, "and --vi.mode compat reproduces the released ",
                   "Video-Infinity's UNet: it has no meaning here; --vi.mode exact spreads the frames over ranks, ",
                   "--vi.mode invariant runs Video-Infinity's windows over them");
  VINF_INPUT_CHECK(r.emulate == 0, what, "whose windows on one rank are the emulation of any number of ranks: ",
                   "drop --vi.emulate-clips");
  VINF_INPUT_CHECK(r.dump.empty(), "vinf forward: --dump-temporal is for the UNet; a Wan transformer has no ",
                   "temporal modules");
  const bool exact = mode == infinity::Mode::exact, windows = mode == infinity::Mode::invariant;
  job::JobPlan plan = r.plan;
  plan.clip_group = exact || windows;
  const int fixed = r.cfg * r.tensor;  // the ranks of one share of the frames
  const std::unique_ptr<job::Job> job = job::start_job(plan, [&](int world) {
    VINF_INPUT_CHECK(world % fixed == 0, "--parallel.cfg ", r.cfg, " x --parallel.tensor ", r.tensor, " = ", fixed,
                     " ranks hold each share of the frames of ", r.model_dir, ": launch a multiple of ", fixed,
                     " ranks (", world, " were started)");
    VINF_INPUT_CHECK(world == fixed || exact || windows, what, "which runs on ", fixed, fixed == 1 ? " rank" : " ranks",
                     " (--parallel.cfg x --parallel.tensor) unless --vi.mode exact or invariant spreads its frames ",
                     "over more (", world, " ranks were started): add --vi.mode exact, or launch it ",
                     fixed == 1 ? std::string("without mpirun") : "on " + std::to_string(fixed) + " ranks");
  });
  const bool root = job->root();
  auto log = [&](const std::string& line) {
    if (root) std::cerr << "vinf forward: " << line << "\n" << std::flush;
  };
  if (r.vi_given && !windows)
    log(std::string("note: the --vi.* settings but the mode are for Video-Infinity's windows (--vi.mode invariant) ") +
        "and do not change a Wan call in mode " + infinity::mode_name(mode));
  if (r.vi_given && windows)
    log("note: --vi.conv-halo, --vi.halo and --vi.sync-groupnorm are for the UNet family (a Wan transformer has no "
        "temporal convolutions or group norms, and its windows carry keys and values)");

  const io::SafetensorsFile in(r.inputs_path);
  const Tensor x = wan_input(in, "hidden_states", 5, "[B,C,F,H,W]");
  const Tensor text = wan_input(in, "encoder_hidden_states", 3, "[B,L,D]");
  const Tensor ts = wan_input(in, "timesteps", 1, "F32 [T]");
  std::vector<float> timesteps;
  for (std::int64_t i = 0; i < ts.numel(); ++i) {
    Tensor one = ts.slice(0, i, 1);
    double v = 0;
    ops::copy(job->runtime().ctx(), one, Tensor::wrap(&v, DType::f64, Device::cpu(), {1}));
    VINF_INPUT_CHECK(std::isfinite(v) && v >= 0 && v <= 1e6, r.inputs_path, ": timesteps[", i, "] = ", v,
                     " is not a diffusion timestep");
    timesteps.push_back(static_cast<float>(v));
  }
  VINF_INPUT_CHECK(text.size(0) == x.size(0), r.inputs_path, ": 'encoder_hidden_states' has batch ", text.size(0),
                   " but 'hidden_states' has batch ", x.size(0));
  // The frames over the clip ranks of each branch; --parallel.cfg 2 splits the batch between two.
  const int ranks = job->grid().clip_size(), me = job->grid().clip_index(), cfg = r.cfg;
  VINF_INPUT_CHECK(x.size(0) % cfg == 0, "--parallel.cfg ", cfg, " splits the batch, but 'hidden_states' has batch ",
                   x.size(0));
  const std::int64_t F = x.size(2);
  VINF_INPUT_CHECK(F >= ranks, r.inputs_path, ": 'hidden_states' has ", F, " latent frames, fewer than the ", ranks,
                   " ranks they are split over; use at most ", F, " ranks");
  if (windows) infinity::check_wan_windows(r.vi, F, ranks);

  Runtime& rt = job->runtime();
  const DType dtype = job->dtype();
  std::vector<std::string> warnings;
  const auto t_load = Clock::now();
  const mpi::ProcessGrid& grid = job->grid();
  const int tensor = grid.tensor_size();
  model::WanTransformer wan = model::WanTransformer::load(r.model_dir, rt, dtype, r.ignore_unexpected, &warnings,
                                                          {grid.tensor_index(), tensor});
  std::unique_ptr<infinity::CommTensorGroup> tensor_group;
  if (job->tensor_comm()) {
    tensor_group = std::make_unique<infinity::CommTensorGroup>(*job->tensor_comm());
    wan.set_tensor_group(tensor_group.get());
  }
  const model::WanTransformerConfig& c = wan.config();
  for (const std::string& w : warnings) log("warning: " + w);
  VINF_INPUT_CHECK(x.size(1) == c.in_channels, r.inputs_path, ": 'hidden_states' has ", x.size(1),
                   " channels but the transformer takes in_channels = ", c.in_channels);
  VINF_INPUT_CHECK(text.size(2) == c.text_dim, r.inputs_path, ": 'encoder_hidden_states' has width ", text.size(2),
                   " but the transformer has text_dim = ", c.text_dim);
  const auto [pt, ph, pw] = c.patch_size;
  VINF_INPUT_CHECK(pt == 1 || ranks == 1, what, "and its patch spans ", pt, " frames: its frames are not split over ",
                   "ranks in this version");
  log("Wan transformer " + r.model_dir + ": " + std::to_string(wan.weights().count()) + " parameters" +
      (tensor > 1 ? " on each of " + std::to_string(tensor) + " tensor ranks" : "") + ", " +
      format_mib(static_cast<double>(wan.weights().bytes())) + " as " + model::precision_name(dtype, rt.device()) +
      " on " + rt.device().name() + " (loaded in " + format_number(seconds_since(t_load), 5) + " s); " +
      std::to_string(timesteps.size()) + " timestep(s)" +
      (exact ? "; --vi.mode exact, " + std::to_string(F) + " latent frames over " + std::to_string(ranks) + " rank(s)"
             : "") +
      (windows ? "; --vi.mode invariant, windows of +-" + std::to_string(r.vi.local_frames) + " latent frames and " +
                     std::to_string(r.vi.global_frames) + " global frame(s), " + std::to_string(F) +
                     " latent frames over " + std::to_string(ranks) + " rank(s)"
               : "") +
      (cfg == 2 ? "; --parallel.cfg 2, the batch over 2 x " + std::to_string(ranks) + " ranks" : "") +
      (tensor > 1 ? "; --parallel.tensor " + std::to_string(tensor) + ", each rank " +
                        std::to_string(wan.weights().get("blocks.0.attn1.to_q.weight").size(0) / c.head_dim) + " of " +
                        std::to_string(c.heads) + " heads"
                  : ""));

  // This rank's frames and every rank's tokens.
  const std::int64_t B = x.size(0) / cfg, b0 = job->grid().cfg_index() * B, per_frame = (x.size(3) / ph) * (x.size(4) / pw);
  const std::vector<std::int64_t> frame_counts = infinity::clip_frame_counts(F, ranks);
  std::vector<std::int64_t> tokens;
  for (std::int64_t n : frame_counts) tokens.push_back(n * per_frame);
  const infinity::FrameRange mine = infinity::clip_frames(F, ranks, me);
  std::unique_ptr<model::WanSelfAttention> attention;
  if (exact) attention = std::make_unique<infinity::WanExactAttention>(*job->clip_comm(), tokens);
  if (windows)
    attention = std::make_unique<infinity::WanWindowAttention>(r.vi, ranks > 1 ? job->clip_comm() : nullptr,
                                                                frame_counts, per_frame);
  const Shape out_shape{B * cfg, c.out_channels, F, x.size(3), x.size(4)};
  const Shape piece{B, c.out_channels, mine.count, x.size(3), x.size(4)};
  OwnedTensor xd = rt.arena().empty(dtype, {B, x.size(1), mine.count, x.size(3), x.size(4)}),
              ed = rt.arena().empty(dtype, {B, text.size(1), text.size(2)}), td = rt.arena().empty(DType::f32, {B}),
              pred = rt.arena().empty(dtype, piece);
  ops::copy(rt.ctx(), x.slice(0, b0, B).slice(2, mine.first, mine.count), xd);
  ops::copy(rt.ctx(), text.slice(0, b0, B), ed);
  // Every rank's piece, gathered on the host in rank order (branch, clip, tensor rank): [rank][B, C,
  // F_r, H, W]. The ranks of a tensor group hold the same piece.
  std::vector<std::int64_t> counts;
  for (int k = 0; k < job->size(); ++k)
    counts.push_back(frame_counts[static_cast<std::size_t>(k / tensor % ranks)] * B * c.out_channels * x.size(3) *
                     x.size(4));
  std::int64_t gathered_numel = 0;
  for (std::int64_t n : counts) gathered_numel += n;
  const int my_rank = job->rank();
  std::vector<std::vector<float>> preds;
  std::vector<float> own(static_cast<std::size_t>(pred.numel()));
  for (std::size_t i = 0; i < timesteps.size(); ++i) {
    const auto t0 = Clock::now();
    std::vector<float> tb(static_cast<std::size_t>(B), timesteps[i]);
    ops::copy(rt.ctx(), Tensor::wrap(tb.data(), DType::f32, Device::cpu(), {B}), td);
    if (attention) attention->begin_call(timesteps[i]);
    wan.forward(rt.ctx(), xd, td, ed, pred, nullptr, {mine.first, F}, attention.get());
    ops::copy(rt.ctx(), pred, Tensor::wrap(own.data(), DType::f32, Device::cpu(), piece));
    rt.synchronize();
    const double seconds = job->session().max(seconds_since(t0));
    std::vector<float> gathered(static_cast<std::size_t>(gathered_numel));
    if (job->size() == 1) {
      gathered = own;
    } else {
      job->world().all_gather_v(job->host(), Tensor::wrap(own.data(), DType::f32, Device::cpu(), {counts[my_rank]}),
                                Tensor::wrap(gathered.data(), DType::f32, Device::cpu(), {gathered_numel}), counts);
    }
    // Rank order to [B, C, F, H, W].
    preds.emplace_back(static_cast<std::size_t>(out_shape.numel()));
    const Tensor whole = Tensor::wrap(preds.back().data(), DType::f32, Device::cpu(), out_shape);
    std::int64_t offset = 0;
    for (int k = 0; k < job->size(); offset += counts[static_cast<std::size_t>(k)], ++k) {
      if (k % tensor != 0) continue;
      const int clip = k / tensor % ranks, branch = k / tensor / ranks;
      const infinity::FrameRange sk = infinity::clip_frames(F, ranks, clip);
      ops::copy(job->host(), Tensor::wrap(gathered.data() + offset, DType::f32, Device::cpu(),
                                          {B, c.out_channels, sk.count, x.size(3), x.size(4)}),
                whole.slice(0, branch * B, B).slice(2, sk.first, sk.count));
    }
    log("t[" + std::to_string(i) + "] = " + std::to_string(timesteps[i]) + ": " + format_number(seconds) +
        " s");
  }
  std::map<std::string, std::string> meta = {{"generator", std::string("vinf ") + VINF_VERSION + " forward"},
                                             {"model", r.model_dir},
                                             {"family", "wan"},
                                             {"vi.mode", infinity::mode_name(mode)},
                                             {"ranks", std::to_string(job->size())},
                                             {"parallel.cfg", std::to_string(cfg)},
                                             {"parallel.tensor", std::to_string(tensor)},
                                             {"device", rt.device().name()},
                                             {"dtype", dtype_name(dtype)}};
  if (windows) {
    meta["vi.local-frames"] = std::to_string(r.vi.local_frames);
    meta["vi.global-frames"] = std::to_string(r.vi.global_frames);
  }
  if (exact || windows || tensor > 1) {
    mpi::CommCounters mine;
    if (job->clip_comm()) mine = job->clip_comm()->counters();
    if (job->tensor_comm()) mine.add(job->tensor_comm()->counters());
    const std::vector<mpi::CommCounters> counted = job->session().gather_values_on_root(mine);
    log("communication per rank over " + std::to_string(timesteps.size()) +
        " call(s) (bytes received from other ranks):");
    for (std::size_t q = 0; q < counted.size(); ++q) {
      log("  rank " + std::to_string(q) + ": " + counted[q].summary());
      meta["comm." + std::to_string(q)] = counted[q].summary();
    }
  }
  const double peak = job->session().max(static_cast<double>(rt.arena().stats().peak_in_use));
  if (!root) return 0;
  std::vector<io::TensorToWrite> out;
  std::string list;
  for (std::size_t i = 0; i < preds.size(); ++i) {
    out.push_back({"noise_pred.t" + std::to_string(i), DType::f32, out_shape, preds[i].data(), {}});
    list += (i ? "," : "") + std::to_string(timesteps[i]);
  }
  meta["timesteps"] = list;
  io::write_safetensors(r.out_path, out, meta);
  log("peak memory " + format_mib(peak) + (ranks > 1 ? " per rank (max over ranks)" : "") + "; wrote " + r.out_path);
  return 0;
}

}  // namespace vinf::app
