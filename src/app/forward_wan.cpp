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
    "timesteps F32 [T] (an image-to-video transformer also encoder_hidden_states_image [B,tokens,image_dim])";

Tensor wan_input(const io::SafetensorsFile& f, const char* name, int rank, const char* layout) {
  return io::require_values(f, name, rank, layout, kWanInputs, rank == 1);
}

}  // namespace

namespace {

// What the phases of a Wan forward call share: the request, the job, the inputs, the model and
// this rank's part of the frames and the batch.
struct WanForward {
  const WanForwardRequest& r;
  std::string what;
  infinity::Mode mode;
  bool exact = false, windows = false;
  std::unique_ptr<job::Job> job;
  Tensor x, text;
  Tensor image;  // an image-to-video transformer's CLIP states, [B, tokens, image_dim]; empty otherwise
  std::vector<float> timesteps;
  int ranks = 1, me = 0, cfg = 1, tensor = 1;
  std::int64_t F = 0;
  std::unique_ptr<model::WanTransformer> wan;
  std::unique_ptr<infinity::CommTensorGroup> tensor_group;
  std::unique_ptr<io::SafetensorsFile> in;

  Reporter report;

  explicit WanForward(const WanForwardRequest& request)
      : r(request), what("vinf forward: " + request.model_dir + " is a Wan transformer, "), mode(request.vi.mode) {}
};

// The modes a Wan call has, and the job over a world that fits them.
void start_wan_forward(WanForward& f) {
  const WanForwardRequest& r = f.r;
  const std::string& what = f.what;
  VINF_INPUT_CHECK(f.mode != infinity::Mode::compat, what, "and --vi.mode compat reproduces the released ",
                   "Video-Infinity's UNet: it has no meaning here; --vi.mode exact spreads the frames over ranks, ",
                   "--vi.mode invariant runs Video-Infinity's windows over them");
  VINF_INPUT_CHECK(r.emulate == 0, what,
                   "whose windows on one rank are the emulation of any number of ranks: ", "drop --vi.emulate-clips");
  VINF_INPUT_CHECK(r.dump.empty(), "vinf forward: --dump-temporal is for the UNet; a Wan transformer has no ",
                   "temporal modules");
  f.exact = f.mode == infinity::Mode::exact;
  f.windows = f.mode == infinity::Mode::invariant;
  const bool spread = f.exact || f.windows;
  job::JobPlan plan = r.plan;
  plan.clip_group = spread;
  const int fixed = r.cfg * r.tensor;  // the ranks of one share of the frames
  f.job = job::start_job(plan, [&](int world) {
    VINF_INPUT_CHECK(world % fixed == 0, "--parallel.cfg ", r.cfg, " x --parallel.tensor ", r.tensor, " = ", fixed,
                     " ranks hold each share of the frames of ", r.model_dir, ": launch a multiple of ", fixed,
                     " ranks (", world, " were started)");
    VINF_INPUT_CHECK(world == fixed || spread, what, "which runs on ", fixed, fixed == 1 ? " rank" : " ranks",
                     " (--parallel.cfg x --parallel.tensor) unless --vi.mode exact or invariant spreads its frames ",
                     "over more (", world, " ranks were started): add --vi.mode exact, or launch it ",
                     fixed == 1 ? std::string("without mpirun") : "on " + std::to_string(fixed) + " ranks");
  });
  f.report = Reporter("vinf forward:", f.job->root());
  if (r.vi_given && !f.windows)
    f.report.say(
        std::string("note: the --vi.* settings but the mode are for Video-Infinity's windows (--vi.mode invariant) ") +
        "and do not change a Wan call in mode " + infinity::mode_name(f.mode));
  if (r.vi_given && f.windows)
    f.report.say(
        "note: --vi.conv-halo, --vi.halo and --vi.sync-groupnorm are for the UNet family (a Wan transformer has no "
        "temporal convolutions or group norms, and its windows carry keys and values)");
}

// The inputs, checked against each other and the layout.
void read_wan_forward_inputs(WanForward& f) {
  const WanForwardRequest& r = f.r;
  f.in = std::make_unique<io::SafetensorsFile>(r.inputs_path);
  f.x = wan_input(*f.in, "hidden_states", 5, "[B,C,F,H,W]");
  f.text = wan_input(*f.in, "encoder_hidden_states", 3, "[B,L,D]");
  const Tensor ts = wan_input(*f.in, "timesteps", 1, "F32 [T]");
  for (std::int64_t i = 0; i < ts.numel(); ++i) {
    Tensor one = ts.slice(0, i, 1);
    double v = 0;
    ops::copy(f.job->runtime().ctx(), one, Tensor::wrap(&v, DType::f64, Device::cpu(), {1}));
    VINF_INPUT_CHECK(std::isfinite(v) && v >= 0 && v <= 1e6, r.inputs_path, ": timesteps[", i, "] = ", v,
                     " is not a diffusion timestep");
    f.timesteps.push_back(static_cast<float>(v));
  }
  VINF_INPUT_CHECK(f.text.size(0) == f.x.size(0), r.inputs_path, ": 'encoder_hidden_states' has batch ", f.text.size(0),
                   " but 'hidden_states' has batch ", f.x.size(0));
  if (f.in->contains("encoder_hidden_states_image")) {
    f.image = wan_input(*f.in, "encoder_hidden_states_image", 3, "[B,tokens,image_dim]");
    VINF_INPUT_CHECK(f.image.size(0) == f.x.size(0), r.inputs_path, ": 'encoder_hidden_states_image' has batch ",
                     f.image.size(0), " but 'hidden_states' has batch ", f.x.size(0));
  }
  // The frames over the clip ranks of each branch; --parallel.cfg 2 splits the batch between two.
  f.ranks = f.job->grid().clip_size();
  f.me = f.job->grid().clip_index();
  f.cfg = r.cfg;
  VINF_INPUT_CHECK(f.x.size(0) % f.cfg == 0, "--parallel.cfg ", f.cfg,
                   " splits the batch, but 'hidden_states' has batch ", f.x.size(0));
  f.F = f.x.size(2);
  VINF_INPUT_CHECK(f.F >= f.ranks, r.inputs_path, ": 'hidden_states' has ", f.F, " latent frames, fewer than the ",
                   f.ranks, " ranks they are split over; use at most ", f.F, " ranks");
  if (f.windows) infinity::check_wan_windows(r.vi, f.F, f.ranks);
}

// The transformer (this tensor rank's share of it), checked against the inputs.
void load_wan_for_forward(WanForward& f) {
  const WanForwardRequest& r = f.r;
  Runtime& rt = f.job->runtime();
  const DType dtype = f.job->dtype();
  std::vector<std::string> warnings;
  const auto t_load = Clock::now();
  const mpi::ProcessGrid& grid = f.job->grid();
  f.tensor = grid.tensor_size();
  f.wan = std::make_unique<model::WanTransformer>(model::WanTransformer::load(
      r.model_dir, rt, dtype, r.ignore_unexpected, &warnings, {grid.tensor_index(), f.tensor}));
  if (f.job->tensor_comm()) {
    f.tensor_group = std::make_unique<infinity::CommTensorGroup>(*f.job->tensor_comm());
    f.wan->set_tensor_group(f.tensor_group.get());
  }
  const model::WanTransformerConfig& c = f.wan->config();
  for (const std::string& w : warnings) f.report.say("warning: " + w);
  VINF_INPUT_CHECK(f.x.size(1) == c.in_channels, r.inputs_path, ": 'hidden_states' has ", f.x.size(1),
                   " channels but the transformer takes in_channels = ", c.in_channels);
  VINF_INPUT_CHECK(f.text.size(2) == c.text_dim, r.inputs_path, ": 'encoder_hidden_states' has width ", f.text.size(2),
                   " but the transformer has text_dim = ", c.text_dim);
  VINF_INPUT_CHECK(c.image_conditioned() == (f.image.rank() == 3), r.inputs_path,
                   c.image_conditioned()
                       ? ": the transformer is image-to-video (image_dim " + std::to_string(c.image_dim) +
                             "): give its CLIP states as 'encoder_hidden_states_image' [B,tokens," +
                             std::to_string(c.image_dim) + "]"
                       : std::string(": 'encoder_hidden_states_image' is for an image-to-video "
                                     "transformer; ") +
                             r.model_dir + " is text-to-video");
  VINF_INPUT_CHECK(
      !c.image_conditioned() ||
          (f.image.size(2) == c.image_dim && (c.pos_embed_seq_len == 0 || f.image.size(1) == c.pos_embed_seq_len)),
      r.inputs_path, ": 'encoder_hidden_states_image' ", f.image.shape.str(), " must be [B, tokens, ", c.image_dim, "]",
      c.pos_embed_seq_len > 0 ? " with " + std::to_string(c.pos_embed_seq_len) + " tokens" : "");
  const auto [pt, ph, pw] = c.patch_size;
  VINF_INPUT_CHECK(pt == 1 || f.ranks == 1, f.what, "and its patch spans ", pt,
                   " frames: its frames are not split over ranks in this version");
  const std::string F = std::to_string(f.F), ranks = std::to_string(f.ranks);
  f.report.say("Wan transformer " + r.model_dir + ": " + std::to_string(f.wan->weights().count()) + " parameters" +
               (f.tensor > 1 ? " on each of " + std::to_string(f.tensor) + " tensor ranks" : "") + ", " +
               format_mib(static_cast<double>(f.wan->weights().bytes())) + " as " +
               model::precision_name(dtype, rt.device()) + " on " + rt.device().name() + " (loaded in " +
               format_number(seconds_since(t_load), 5) + " s); " + std::to_string(f.timesteps.size()) + " timestep(s)" +
               (f.exact ? "; --vi.mode exact, " + F + " latent frames over " + ranks + " rank(s)" : "") +
               (f.windows ? "; --vi.mode invariant, windows of +-" + std::to_string(r.vi.local_frames) +
                                " latent frames and " + std::to_string(r.vi.global_frames) + " global frame(s), " + F +
                                " latent frames over " + ranks + " rank(s)"
                          : "") +
               (f.cfg == 2 ? "; --parallel.cfg 2, the batch over 2 x " + ranks + " ranks" : "") +
               (f.tensor > 1
                    ? "; --parallel.tensor " + std::to_string(f.tensor) + ", each rank " +
                          std::to_string(f.wan->weights().get("blocks.0.attn1.to_q.weight").size(0) / c.head_dim) +
                          " of " + std::to_string(c.heads) + " heads"
                    : ""));
}

// One call per timestep on this rank's frames and batch; every rank's piece gathered on the host
// in rank order (branch, clip, tensor rank) into [B, C, F, H, W] (the ranks of a tensor group hold
// the same piece). Returns the predictions, one per timestep.
std::vector<std::vector<float>> run_wan_calls(WanForward& f, const Shape& out_shape) {
  Runtime& rt = f.job->runtime();
  const model::WanTransformerConfig& c = f.wan->config();
  const auto [pt, ph, pw] = c.patch_size;
  (void)pt;
  const Tensor& x = f.x;
  const std::int64_t B = x.size(0) / f.cfg, b0 = f.job->grid().cfg_index() * B,
                     per_frame = (x.size(3) / ph) * (x.size(4) / pw);
  const std::vector<std::int64_t> frame_counts = infinity::clip_frame_counts(f.F, f.ranks);
  std::vector<std::int64_t> tokens;
  for (std::int64_t n : frame_counts) tokens.push_back(n * per_frame);
  const infinity::FrameRange mine = infinity::clip_frames(f.F, f.ranks, f.me);
  std::unique_ptr<model::WanSelfAttention> attention;
  if (f.exact) attention = std::make_unique<infinity::WanExactAttention>(*f.job->clip_comm(), tokens);
  if (f.windows)
    attention = std::make_unique<infinity::WanWindowAttention>(f.r.vi, f.ranks > 1 ? f.job->clip_comm() : nullptr,
                                                               frame_counts, per_frame);
  const DType dtype = f.job->dtype();
  const Shape piece{B, c.out_channels, mine.count, x.size(3), x.size(4)};
  OwnedTensor xd = rt.arena().empty(dtype, {B, x.size(1), mine.count, x.size(3), x.size(4)}),
              ed = rt.arena().empty(dtype, {B, f.text.size(1), f.text.size(2)}), td = rt.arena().empty(DType::f32, {B}),
              pred = rt.arena().empty(dtype, piece);
  ops::copy(rt.ctx(), x.slice(0, b0, B).slice(2, mine.first, mine.count), xd);
  ops::copy(rt.ctx(), f.text.slice(0, b0, B), ed);
  OwnedTensor image;
  if (f.image.rank() == 3) {
    image = rt.arena().empty(dtype, {B, f.image.size(1), f.image.size(2)});
    ops::copy(rt.ctx(), f.image.slice(0, b0, B), image);
  }
  const Tensor image_view = image.view();
  std::vector<std::int64_t> counts;
  for (int k = 0; k < f.job->size(); ++k)
    counts.push_back(frame_counts[static_cast<std::size_t>(k / f.tensor % f.ranks)] * B * c.out_channels * x.size(3) *
                     x.size(4));
  std::int64_t gathered_numel = 0;
  for (std::int64_t n : counts) gathered_numel += n;
  std::vector<std::vector<float>> preds;
  std::vector<float> own(static_cast<std::size_t>(pred.numel()));
  for (std::size_t i = 0; i < f.timesteps.size(); ++i) {
    const auto t0 = Clock::now();
    std::vector<float> tb(static_cast<std::size_t>(B), f.timesteps[i]);
    ops::copy(rt.ctx(), Tensor::wrap(tb.data(), DType::f32, Device::cpu(), {B}), td);
    if (attention) attention->begin_call(f.timesteps[i]);
    f.wan->forward(rt.ctx(), xd, td, ed, pred, nullptr, {mine.first, f.F}, attention.get(),
                   f.image.rank() == 3 ? &image_view : nullptr);
    ops::copy(rt.ctx(), pred, Tensor::wrap(own.data(), DType::f32, Device::cpu(), piece));
    rt.synchronize();
    const double seconds = f.job->session().max(seconds_since(t0));
    std::vector<float> gathered(static_cast<std::size_t>(gathered_numel));
    if (f.job->size() == 1) {
      gathered = own;
    } else {
      f.job->world().all_gather_v(f.job->host(),
                                  Tensor::wrap(own.data(), DType::f32, Device::cpu(), {counts[f.job->rank()]}),
                                  Tensor::wrap(gathered.data(), DType::f32, Device::cpu(), {gathered_numel}), counts);
    }
    preds.emplace_back(static_cast<std::size_t>(out_shape.numel()));
    const Tensor whole = Tensor::wrap(preds.back().data(), DType::f32, Device::cpu(), out_shape);
    std::int64_t offset = 0;
    for (int k = 0; k < f.job->size(); offset += counts[static_cast<std::size_t>(k)], ++k) {
      if (k % f.tensor != 0) continue;
      const int clip = k / f.tensor % f.ranks, branch = k / f.tensor / f.ranks;
      const infinity::FrameRange sk = infinity::clip_frames(f.F, f.ranks, clip);
      ops::copy(f.job->host(),
                Tensor::wrap(gathered.data() + offset, DType::f32, Device::cpu(),
                             {B, c.out_channels, sk.count, x.size(3), x.size(4)}),
                whole.slice(0, branch * B, B).slice(2, sk.first, sk.count));
    }
    f.report.say("t[" + std::to_string(i) + "] = " + std::to_string(f.timesteps[i]) + ": " + format_number(seconds) +
                 " s");
  }
  return preds;
}

// The predictions as noise_pred.t<i> with the run's settings and each rank's traffic in the
// metadata; rank 0 writes. Collective.
void write_wan_forward(WanForward& f, const Shape& out_shape, std::vector<std::vector<float>>& preds) {
  Runtime& rt = f.job->runtime();
  const WanForwardRequest& r = f.r;
  std::map<std::string, std::string> meta = {{"generator", std::string("vinf ") + VINF_VERSION + " forward"},
                                             {"model", r.model_dir},
                                             {"family", "wan"},
                                             {"vi.mode", infinity::mode_name(f.mode)},
                                             {"ranks", std::to_string(f.job->size())},
                                             {"parallel.cfg", std::to_string(f.cfg)},
                                             {"parallel.tensor", std::to_string(f.tensor)},
                                             {"device", rt.device().name()},
                                             {"dtype", dtype_name(f.job->dtype())}};
  if (f.windows) {
    meta["vi.local-frames"] = std::to_string(r.vi.local_frames);
    meta["vi.global-frames"] = std::to_string(r.vi.global_frames);
  }
  if (f.exact || f.windows || f.tensor > 1) {
    mpi::CommCounters mine;
    if (f.job->clip_comm()) mine = f.job->clip_comm()->counters();
    if (f.job->tensor_comm()) mine.add(f.job->tensor_comm()->counters());
    const std::vector<mpi::CommCounters> counted = f.job->session().gather_values_on_root(mine);
    f.report.say("communication per rank over " + std::to_string(f.timesteps.size()) +
                 " call(s) (bytes received from other ranks):");
    for (std::size_t q = 0; q < counted.size(); ++q) {
      f.report.say("  rank " + std::to_string(q) + ": " + counted[q].summary());
      meta["comm." + std::to_string(q)] = counted[q].summary();
    }
  }
  const double peak = f.job->session().max(static_cast<double>(rt.arena().stats().peak_in_use));
  if (!f.job->root()) return;
  std::vector<io::TensorToWrite> out;
  std::string list;
  for (std::size_t i = 0; i < preds.size(); ++i) {
    out.push_back({"noise_pred.t" + std::to_string(i), DType::f32, out_shape, preds[i].data(), {}});
    list += (i ? "," : "") + std::to_string(f.timesteps[i]);
  }
  meta["timesteps"] = list;
  io::write_safetensors(r.out_path, out, meta);
  f.report.say("peak memory " + format_mib(peak) + (f.ranks > 1 ? " per rank (max over ranks)" : "") + "; wrote " +
               r.out_path);
}

}  // namespace

int forward_wan(const WanForwardRequest& r) {
  WanForward f(r);
  start_wan_forward(f);
  read_wan_forward_inputs(f);
  load_wan_for_forward(f);
  const Shape out_shape{f.x.size(0), f.wan->config().out_channels, f.F, f.x.size(3), f.x.size(4)};
  job::RunProfile profile(*f.job, r.profile);
  std::vector<std::vector<float>> preds = run_wan_calls(f, out_shape);
  write_wan_forward(f, out_shape, preds);
  profile.finish(std::cout);
  return 0;
}

}  // namespace vinf::app
