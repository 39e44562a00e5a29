#include "pipeline/plan_estimate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "core/error.hpp"
#include "infinity/config.hpp"
#include "infinity/exchange_cost.hpp"
#include "model/flops.hpp"
#include "model/footprint.hpp"
#include "model/params.hpp"
#include "model/weights.hpp"
#include "ops/runtime.hpp"
#include "sampling/long_video.hpp"

namespace vinf::pipeline {

namespace {

// Text tokens of every CLIP tokenizer vinf reads (model_max_length).
constexpr std::int64_t kTextTokens = 77;

// Weights::allocate: every parameter (the shard's part) at a 256-byte boundary, one allocation.
double weight_bytes(const std::vector<model::ParamSpec>& params, int rank, int size, DType dtype,
                    const Device& device) {
  double bytes = 0;
  for (const model::ParamSpec& p : params) {
    const double b = static_cast<double>(model::param_shard(p, rank, size).shape.numel()) *
                     static_cast<double>(dtype_size(model::parameter_dtype(p.shape, dtype, device)));
    bytes += std::ceil(b / 256) * 256;
  }
  return model::arena_bytes(bytes);
}

// The Denoiser's and Sampler's f32 buffers of one clip (app/generate.cpp): the latents and the
// solver's two memories, the frame-major copy, the UNet's prediction, the guided prediction, the
// step's noise and the text; the UNet's input batch (guidance in one batch) and both branches'
// predictions (CFG parallelism).
double sampler_bytes(const GenerateSpec& o, double latent, int batch, double text) {
  const auto a = [](double b) { return model::arena_bytes(b); };
  double bytes = 4 * a(latent) + a(batch * latent) + 2 * a(latent) + a(text);
  if (batch > 1) bytes += a(batch * latent);
  if (o.cfg() == 2) bytes += a(2 * latent);
  return bytes;
}

struct Shapes {
  std::int64_t frames = 0, lh = 0, lw = 0;
};

// --long.mode windows and fifo: every rank runs the plain model on one window at a time (its share
// of the windows) and holds the whole state: the sampler's buffers over every frame (FIFO: the
// video so far and the queue) and every window's gathered prediction.
void estimate_long_method(const PlanEstimate& e, const Shapes& sh, RankEstimate& r) {
  const GenerateSpec& o = e.inputs.run;
  const model::UNetConfig& u = e.inputs.unet;
  const sampling::LongVideoConfig& l = o.long_video;
  std::int64_t window = 0, windows = 0, state = sh.frames;
  if (l.mode == sampling::LongMode::fifo) {
    const sampling::FifoPlan plan(l.fifo_window, l.fifo_partitions, l.fifo_lookahead);
    window = plan.window();
    windows = static_cast<std::int64_t>(plan.windows().size());
    state += plan.queue_length();
  } else {
    const std::vector<sampling::FrameSpan> w = sampling::sliding_windows(sh.frames, l.window, l.stride);
    window = w.front().count;
    windows = static_cast<std::int64_t>(w.size());
  }
  const std::int64_t mine = sampling::share(windows, e.layout.clips, r.place.clip).count;
  const model::ForwardShape fs{r.batch,
                               window,
                               sh.lh,
                               sh.lw,
                               kTextTokens,
                               dtype_size(model::activation_dtype(e.dtype, e.device)),
                               1,
                               e.device.is_cuda(),
                               vinf::cpu_threads(),
                               model::activation_dtype(e.dtype, e.device) != e.dtype};
  const model::ForwardFootprint f = model::unet_footprint(u, fs, model::TemporalCost{});
  r.activations = f.activations;
  r.workspace = f.workspace;
  r.comm_buffers = 0;
  const double frame = static_cast<double>(u.in_channels * sh.lh * sh.lw) * 4;
  const auto a = [](double b) { return model::arena_bytes(b); };
  const double text = static_cast<double>(r.batch * kTextTokens * u.cross_attention_dim) * 4;
  // x, m0, m1, the frame-major copy, eps and z over the state; the gathered and the own windows'
  // predictions; the UNet's input and output batch; the prompts' text.
  r.sampler = 6 * a(frame * static_cast<double>(state)) + a(frame * static_cast<double>(windows * window)) +
              a(frame * static_cast<double>(mine * window)) + 2 * a(frame * static_cast<double>(r.batch * window)) +
              a(text * static_cast<double>(std::max<std::size_t>(o.prompts.size(), 1)));
  r.clip_bytes = frame * static_cast<double>((windows - mine) * window);
  const model::FlopCount fl = model::unet_flops(u, r.batch, window, sh.lh, sh.lw, kTextTokens);
  r.flops = static_cast<double>(mine) * (fl.conv + fl.temporal_conv + fl.linear + fl.attention);
}

RankEstimate estimate_rank(const PlanEstimate& e, const Shapes& sh, int rank) {
  const GenerateSpec& o = e.inputs.run;
  const model::UNetConfig& u = e.inputs.unet;
  const job::Layout& l = e.layout;
  RankEstimate r;
  r.place = rank_place(l, sh.frames, o.steps, rank);
  r.batch = o.guidance > 1 && o.cfg() == 1 ? 2 : 1;
  const bool cuda = e.device.is_cuda();
  const std::size_t elt = dtype_size(model::activation_dtype(e.dtype, e.device));
  r.weights = weight_bytes(model::unet_parameters(u), r.place.tensor_rank, l.tensor, e.dtype, e.device);
  if (e.inputs.vae) r.vae_weights = weight_bytes(model::vae_decoder_parameters(*e.inputs.vae), 0, 1, e.dtype, e.device);
  const model::ForwardShape fs{r.batch,
                               r.place.frames,
                               sh.lh,
                               sh.lw,
                               kTextTokens,
                               elt,
                               l.tensor,
                               cuda,
                               vinf::cpu_threads(),
                               model::activation_dtype(e.dtype, e.device) != e.dtype};
  const std::vector<std::int64_t> clips = infinity::clip_frame_counts(sh.frames, l.clips);
  const model::ForwardFootprint f =
      o.vi.mode == infinity::Mode::off
          ? model::unet_footprint(u, fs, model::TemporalCost{})
          : model::unet_footprint(u, fs, infinity::ExchangeCost(o.vi, clips, r.place.clip));
  r.activations = f.activations;
  r.workspace = f.workspace;
  r.comm_buffers = f.comm_buffers;
  const double latent = static_cast<double>(u.in_channels * r.place.frames * sh.lh * sh.lw) * 4;
  const double text = static_cast<double>(r.batch * kTextTokens * u.cross_attention_dim) * 4;
  r.sampler = sampler_bytes(o, latent, r.batch, text);
  if (l.pipeline > 1) r.handoff = 2 * model::arena_bytes(latent);
  if (r.place.decodes && e.inputs.vae)
    r.vae_decode = model::vae_decode_footprint(*e.inputs.vae, r.place.frames, sh.lh, sh.lw, elt, o.vae_tile, cuda);
  r.clip_bytes = f.clip_received;
  r.cfg_bytes = o.cfg() == 2 ? latent : 0;
  r.tensor_bytes = f.tensor_received;
  if (l.pipeline > 1 && r.place.stage > 0) r.handoff_bytes = 2 * latent + text;
  const model::FlopCount fl = model::unet_flops(u, r.batch, r.place.frames, sh.lh, sh.lw, kTextTokens);
  r.flops = fl.conv + fl.temporal_conv + (fl.linear + fl.attention) / l.tensor;
  if (!o.long_clips()) estimate_long_method(e, sh, r);
  return r;
}

Shapes shapes_of(const GenerateSpec& o, const std::optional<model::VaeConfig>& vae, const job::Layout& l) {
  Shapes s;
  s.frames = o.frames > 0 ? o.frames : o.frames_per_clip * l.clips;
  const std::int64_t scale = vae ? vae->upscale() : 8;  // generate's scale when there is no VAE
  s.lh = o.height / scale;
  s.lw = o.width / scale;
  return s;
}

// The most any rank of a changed layout needs: the ranks that differ (first and last tensor
// ranks, the clips at the ends and inside, the one with the most frames) of branch 0 of the last
// stage, where the decoding is.
double largest_need(const PlanEstimate& base, const GenerateSpec& o, const job::Layout& l, DType dtype) {
  PlanEstimate e;
  e.layout = l;
  e.inputs = {o, base.inputs.unet, base.inputs.vae};
  e.dtype = dtype;
  e.device = base.device;
  const Shapes s = shapes_of(o, base.inputs.vae, l);
  std::set<int> ranks;
  for (int clip : {0, 1, l.clips - 2, l.clips - 1})
    for (int t : {0, l.tensor - 1})
      if (clip >= 0 && clip < l.clips) ranks.insert(l.world_rank(0, l.pipeline - 1, clip * l.tensor + t));
  double most = 0;
  for (int w : ranks) most = std::max(most, estimate_rank(e, s, w).total());
  return most;
}

bool partition_ok(const GenerateSpec& o, std::int64_t frames, int clips) {
  if (frames < clips) return false;
  try {
    infinity::check_partition(o.vi, frames, clips);
  } catch (const InputError&) {
    return false;
  }
  return true;
}

// The most frames per clip (this layout) that fit, by bisection: memory grows with the frames.
std::string fewer_frames(const PlanEstimate& e, const GenerateSpec& base, double usable) {
  const job::Layout& l = e.layout;
  GenerateSpec o = base;
  const auto fits = [&](std::int64_t per_clip) {
    o.frames = per_clip * l.clips;
    return partition_ok(o, o.frames, l.clips) && largest_need(e, o, l, e.dtype) <= usable;
  };
  std::int64_t lo = 0, hi = (e.frames + l.clips - 1) / l.clips;  // fits(lo) or lo == 0; !fits(hi)
  while (hi - lo > 1) {
    const std::int64_t mid = (lo + hi) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  if (lo == 0 || !fits(lo)) return "";
  return "--video.frames " + std::to_string(lo * l.clips) + " (" + std::to_string(lo) + " frames per clip)";
}

// The fewest frame ranks (the same frames) that fit.
std::string more_clips(const PlanEstimate& e, const GenerateSpec& base, double usable) {
  job::Layout l = e.layout;
  const int first = l.clips;
  GenerateSpec o = base;
  o.frames = e.frames;
  for (int clips = first + 1; clips <= std::min<std::int64_t>(e.frames, 16 * first + 64); ++clips) {
    l.clips = clips;
    if (!partition_ok(o, e.frames, clips) || largest_need(e, o, l, e.dtype) > usable) continue;
    return std::to_string(clips) + " frame ranks instead of " + std::to_string(first) + " (" +
           std::to_string(l.world()) + " ranks)";
  }
  return "";
}

// The fewest tensor ranks that fit, up to the model's fewest heads.
std::string more_tensor_ranks(const PlanEstimate& e, const GenerateSpec& base, double usable) {
  job::Layout l = e.layout;
  const int first = l.tensor;
  for (int t = first + 1; t <= model::fewest_heads(e.inputs.unet); ++t) {
    l.tensor = t;
    if (largest_need(e, base, l, e.dtype) > usable) continue;
    return "--parallel.tensor " + std::to_string(t) + " (" + std::to_string(l.world()) + " ranks)";
  }
  return "";
}

// A 16-bit dtype, CFG parallelism: other settings of the same video that shrink what a rank holds.
std::vector<std::string> other_settings(const PlanEstimate& e, const GenerateSpec& o, double usable) {
  std::vector<std::string> out;
  if (e.device.is_cuda() && e.dtype == DType::f32 && largest_need(e, o, e.layout, DType::bf16) <= usable)
    out.push_back("--dtype bf16");
  if (o.cfg() == 1 && o.guidance > 1) {
    GenerateSpec split = o;
    split.job.cfg = 2;
    job::Layout l = e.layout;
    l.cfg = 2;
    if (largest_need(e, split, l, e.dtype) <= usable)
      out.push_back("--parallel.cfg 2 (" + std::to_string(l.world()) + " ranks)");
  }
  return out;
}

// Each change alone that makes the layout fit; where none does and the VAE decodes whole frames,
// each together with VAE tiles.
std::vector<std::string> what_would_fit(const PlanEstimate& e, double usable) {
  GenerateSpec o = e.inputs.run;
  std::vector<std::string> fits;
  for (int tiled = 0; tiled < 2 && fits.empty(); ++tiled) {
    if (tiled) {
      if (!e.inputs.vae || o.vae_tile > 0) break;
      o.vae_tile = 16;
      if (largest_need(e, o, e.layout, e.dtype) <= usable) return {"--vae.tile 16"};
    }
    const std::string with = tiled ? " with --vae.tile 16" : "";
    for (const auto& f : {fewer_frames, more_clips, more_tensor_ranks})
      if (std::string s = f(e, o, usable); !s.empty()) fits.push_back(s + with);
    for (const std::string& s : other_settings(e, o, usable)) fits.push_back(s + with);
  }
  return fits;
}

}  // namespace

void check_plan_fits(const PlanEstimate& e, double capacity_bytes, const std::string& device_name) {
  const double usable = capacity_bytes * kPlanHeadroom;
  const RankEstimate& r = e.largest();
  if (capacity_bytes <= 0 || r.total() <= usable) return;
  std::string what;
  for (const std::string& f : what_would_fit(e, usable)) what += (what.empty() ? "" : ", or ") + f;
  const double call = r.activations + r.workspace + r.comm_buffers;
  VINF_INPUT_FAIL("the layout does not fit: rank ", r.place.rank, " needs about ", format_size(r.total()), " (weights ",
                  format_size(r.weights + r.vae_weights), ", a UNet call ", format_size(call), ", sampler ",
                  format_size(r.sampler + r.handoff),
                  r.vae_decode > 0 ? ", VAE decoding " + format_size(r.vae_decode) : std::string(), ") but ",
                  device_name, " has ", format_size(capacity_bytes), ", of which ",
                  static_cast<int>(kPlanHeadroom * 100), "% is planned; ",
                  what.empty() ? "no smaller video, more ranks, VAE tiles or 16-bit dtype fits: use devices with more "
                                 "memory"
                               : "what would fit: " + what);
}

std::string format_size(double bytes) {
  char buf[32];
  if (bytes >= 1073741824.0)
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / 1073741824.0);
  else if (bytes >= 1048576.0 || bytes == 0)
    std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
  else
    std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  return buf;
}

double RankEstimate::total() const {
  return weights + vae_weights + sampler + handoff + std::max(activations + workspace + comm_buffers, vae_decode);
}

RankPlace rank_place(const job::Layout& l, std::int64_t frames, int steps, int rank) {
  RankPlace p;
  p.rank = rank;
  p.replica = l.replica_of(rank);
  p.stage = l.stage_of(rank);
  const int u = l.unit_rank_of(rank);
  // The process grid's order inside a unit (mpi/grid.hpp): tensor rank fastest, then clip, then branch.
  p.tensor_rank = u % l.tensor;
  p.clip = u / l.tensor % l.clips;
  p.cfg_branch = u / (l.tensor * l.clips);
  const infinity::FrameRange range = infinity::clip_frames(frames, l.clips, p.clip);
  p.first_frame = range.first;
  p.frames = range.count;
  p.steps = job::stage_steps(steps, l.pipeline, p.stage);
  p.decodes = p.cfg_branch == 0 && p.tensor_rank == 0 && p.stage == l.pipeline - 1;
  return p;
}

const RankEstimate& PlanEstimate::largest() const {
  return *std::max_element(ranks.begin(), ranks.end(),
                           [](const RankEstimate& a, const RankEstimate& b) { return a.total() < b.total(); });
}

PlanEstimate estimate_plan(const GenerateSpec& o, const model::UNetConfig& ucfg,
                           const std::optional<model::VaeConfig>& vae, const job::Layout& layout, DType dtype,
                           const Device& device) {
  PlanEstimate e;
  e.layout = layout;
  e.inputs = {o, ucfg, vae};
  const Shapes s = shapes_of(o, vae, layout);
  e.frames = s.frames;
  e.latent_height = s.lh;
  e.latent_width = s.lw;
  e.steps = o.steps;
  e.dtype = dtype;
  e.device = device;
  e.ranks.reserve(static_cast<std::size_t>(layout.world()));
  for (int w = 0; w < layout.world(); ++w) e.ranks.push_back(estimate_rank(e, s, w));
  return e;
}

NodeSpans node_spans(const job::Layout& l, int ranks_per_node) {
  NodeSpans s;
  const auto node = [&](int w) { return w / std::max(ranks_per_node, 1); };
  for (int rep = 0; rep < l.data; ++rep)
    for (int st = 0; st < l.pipeline; ++st)
      for (int b = 0; b < l.cfg; ++b) {
        for (int c = 0; c < l.clips; ++c) {
          const int first = l.world_rank(rep, st, (b * l.clips + c) * l.tensor), last = first + l.tensor - 1;
          if (node(first) != node(last))
            s.tensor_groups.push_back("tensor group of replica " + std::to_string(rep) + ", stage " +
                                      std::to_string(st) + ", branch " + std::to_string(b) + ", clip " +
                                      std::to_string(c) + " (ranks " + std::to_string(first) + "-" +
                                      std::to_string(last) + ") spans nodes " + std::to_string(node(first)) + "-" +
                                      std::to_string(node(last)));
        }
        for (int t = 0; t < l.tensor; ++t) {
          ++s.clip_groups;
          const int first = l.world_rank(rep, st, b * l.clips * l.tensor + t);
          const int last = l.world_rank(rep, st, ((b * l.clips) + l.clips - 1) * l.tensor + t);
          s.clip_groups_spanning += node(first) != node(last);
        }
      }
  return s;
}

}  // namespace vinf::pipeline
