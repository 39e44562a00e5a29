#include "pipeline/df_denoise.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/error.hpp"
#include "infinity/config.hpp"
#include "infinity/wan_bands.hpp"
#include "infinity/wan_exact.hpp"
#include "mpi/communicator.hpp"
#include "io/safetensors.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"
#include "sampling/diffusion_forcing.hpp"
#include "sampling/flow_sampler.hpp"
#include "sampling/noise.hpp"

namespace vinf::pipeline {

// One window's draws: its starting noise, and a row's noise of the prefix; from the file, or the
// seed's keyed by the video's latent frames.
class DfWindowDraws {
 public:
  DfWindowDraws(Runtime& rt, const DfDraws& d, const io::SafetensorsFile* file, std::size_t k,
                const sampling::DfWindow& w)
      : rt_(rt),
        file_(file),
        key_("window" + std::to_string(k)),
        source_(sampling::NoiseMode::invariant, d.seed, 0, w.first) {}
  void noise(const Tensor& out) const {
    fill(key_ + ".noise", out, [&] { source_.initial(rt_.ctx(), rt_.arena(), out); });
  }
  void addnoise(std::size_t row, const Tensor& out) const {
    fill(key_ + ".addnoise.row" + std::to_string(row), out,
         [&] { source_.step(rt_.ctx(), rt_.arena(), static_cast<int>(row), out); });
  }

 private:
  template <class Draw>
  void fill(const std::string& key, const Tensor& out, Draw draw) const {
    if (!file_) return draw();
    VINF_INPUT_CHECK(file_->contains(key), "--latents-init ", file_->path(), " has no tensor '", key,
                     "' (a diffusion-forcing run's draws: window<k>.noise, window<k>.addnoise.row<i>)");
    const Tensor t = file_->tensor(key);
    VINF_INPUT_CHECK(t.dtype == DType::f32 && t.shape == out.shape, "--latents-init ", file_->path(), ": '", key,
                     "' is ", t.describe(), " but this window needs F32", out.shape.str());
    ops::copy(rt_.ctx(), t, out);
  }
  Runtime& rt_;
  const io::SafetensorsFile* file_;
  std::string key_;
  sampling::NoiseSource source_;
};

// The window at hand: its place, schedule and draws, each frame's solver, this rank's frames of
// the model calls and the calls' buffers.
struct DfStepper::Window {
  std::size_t k = 0;
  sampling::DfWindow w;
  const sampling::DfSchedule* schedule = nullptr;
  std::unique_ptr<DfWindowDraws> draws;
  std::vector<std::unique_ptr<sampling::FlowSampler>> frames;
  infinity::FrameRange part;  // this rank's frames of the model calls
  std::vector<std::int64_t> counts;  // every rank's, in elements of the gathered prediction
  std::unique_ptr<model::WanSelfAttention> attention;
  OwnedTensor model_in, in, pred, t, v, mine, both, sent, gathered, noise;
};

std::vector<std::int64_t> df_rank_frames(std::int64_t frames, int ranks, std::int64_t block) {
  if (block <= 0) return infinity::clip_frame_counts(frames, ranks);
  VINF_CHECK(frames % block == 0 && frames / block >= ranks, "df_rank_frames: ", frames, " frames in blocks of ", block,
             " over ", ranks, " ranks");
  std::vector<std::int64_t> n = infinity::clip_frame_counts(frames / block, ranks);
  for (std::int64_t& b : n) b *= block;
  return n;
}

DfStepper::DfStepper(Runtime& rt, const DfDenoise& d, const Shape& video)
    : rt_(rt), d_(d), video_(video), guidance_(Guidance::of(d.guidance > 1.f, d.guidance, d.cfg_group)) {
  const DfSettings& s = d.settings;
  VINF_CHECK(video.rank() == 5 && video[0] == 1, "DfStepper: video ", video.str());
  windows_ = sampling::df_windows(video[2], s.base, s.overlap, s.block);
  int rows = 0;
  for (const sampling::DfWindow& w : windows_) {
    // The windows share a few schedules (the first, the ones after, a shorter last): one each.
    const std::pair<std::int64_t, std::int64_t> key{w.frames, w.prefix};
    if (!distinct_.count(key))
      distinct_.emplace(key, sampling::df_schedule(w.frames, d.scheduler.timesteps(), w.prefix, s.ar_step, s.block));
    schedules_.push_back(&distinct_.at(key));
    first_row_.push_back(rows);
    rows += static_cast<int>(schedules_.back()->rows());
  }
  first_row_.push_back(rows);
  if (!d.draws.file.empty()) file_ = std::make_unique<io::SafetensorsFile>(d.draws.file);
  // The batch of prompts: [negative, prompt], this rank's branch, or the prompt.
  text_ = rt.arena().empty(d.transformer.weights().dtype(), {guidance_.batch(), d.prompt.size(1), d.prompt.size(2)});
  ExecContext& ctx = rt.ctx();
  guidance_.text_batch(ctx, d.prompt, d.negative, d.cfg_index, text_);
  const std::int64_t base = std::min(s.base, video[2]);
  lat_ = rt.arena().empty(DType::f32, {1, video[1], base, video[3], video[4]});
  ops::fill(ctx, lat_, 0.0);
  for (std::size_t m = 0; m < sampling::FlowSampler::memory_names().size(); ++m)
    memories_.push_back(rt.arena().empty(DType::f32, lat_.shape));
}

DfStepper::~DfStepper() = default;

int DfStepper::rows() const { return first_row_.back(); }

std::size_t DfStepper::window_of(int i) const {
  // The last window whose first row is at or before i.
  const auto after = std::upper_bound(first_row_.begin(), first_row_.end() - 1, i);
  return static_cast<std::size_t>(std::max<std::ptrdiff_t>(after - first_row_.begin() - 1, 0));
}

std::size_t DfStepper::window_rows(std::size_t k) const { return schedules_[k]->rows(); }

std::int64_t DfStepper::frames_final(int done) const {
  std::int64_t n = 0;
  for (std::size_t k = 0; k < windows_.size(); ++k)
    if (first_row_[k + 1] <= done) n += windows_[k].frames - windows_[k].keep_from;
  return n;
}

// Window k's solvers from its noise, its prefix the last frames of the window before (in lat_);
// or, from_noise false, as they are (restore fills them).
void DfStepper::begin_window(std::size_t k, bool from_noise) {
  ExecContext& ctx = rt_.ctx();
  const sampling::DfWindow& w = windows_[k];
  const std::int64_t C = video_[1], h = video_[3], wd = video_[4], F = w.frames, P = w.prefix;
  const DType dt = d_.transformer.weights().dtype();
  const std::int64_t B = guidance_.batch();
  w_.reset();  // the last window's buffers go before this one's come
  w_ = std::make_unique<Window>();
  Window& x = *w_;
  x.k = k;
  x.w = w;
  x.schedule = schedules_[k];
  x.draws = std::make_unique<DfWindowDraws>(rt_, d_.draws, file_.get(), k, w);
  const Tensor window = lat_.view().slice(2, 0, F);
  if (from_noise) {
    if (P > 0) {
      const sampling::DfWindow& before = windows_[k - 1];
      carry_ = rt_.arena().empty(DType::f32, {1, C, P, h, wd});
      ops::copy(ctx, lat_.view().slice(2, w.first - before.first, P), carry_);
    }
    x.draws->noise(window);
    if (P > 0) ops::copy(ctx, carry_, window.slice(2, 0, P));
    carry_ = OwnedTensor{};
  }
  for (std::int64_t f = 0; f < F; ++f) {
    x.frames.push_back(std::make_unique<sampling::FlowSampler>(d_.scheduler, rt_.arena(), Shape{1, C, 1, h, wd}));
    x.frames.back()->set_uncorrected_last_is_result(true);  // the reference's in-place frames
    for (const auto& [name, memory] : x.frames.back()->memories()) ops::fill(ctx, memory, 0.0);  // as checkpointed
    ops::copy(ctx, window.slice(2, f, 1), x.frames.back()->latents());
  }
  // This rank's frames of the model calls: all of them, or its share in exact mode.
  const int n = d_.clip_group ? d_.clip_group->size() : 1, me = d_.clip_group ? d_.clip_group->rank() : 0;
  const std::vector<std::int64_t> frames = df_rank_frames(F, n, d_.settings.bands ? d_.settings.block : 0);
  x.part = {0, frames[static_cast<std::size_t>(me)]};
  for (int r = 0; r < me; ++r) x.part.first += frames[static_cast<std::size_t>(r)];
  if (d_.clip_group) {
    const std::int64_t per_frame =
        (h / d_.transformer.config().patch_size[1]) * (wd / d_.transformer.config().patch_size[2]);
    std::vector<std::int64_t> tokens = frames;
    for (std::int64_t c : tokens) x.counts.push_back(c * C * h * wd);
    for (std::int64_t& c : tokens) c *= per_frame;
    if (d_.settings.bands) {
      x.attention = std::make_unique<infinity::WanBandAttention>(*d_.clip_group, tokens);
    } else {
      x.attention = std::make_unique<infinity::WanExactAttention>(*d_.clip_group, tokens);
    }
    x.sent = rt_.arena().empty(DType::f32, {x.part.count, C, h, wd});
    x.gathered = rt_.arena().empty(DType::f32, {F, C, h, wd});
  }
  const std::int64_t Fm = x.part.count;
  x.model_in = rt_.arena().empty(DType::f32, {1, C, F, h, wd});
  x.in = rt_.arena().empty(dt, {B, C, Fm, h, wd});
  x.pred = rt_.arena().empty(dt, {B, C, Fm, h, wd});
  x.t = rt_.arena().empty(DType::f32, {B, Fm});
  x.mine = rt_.arena().empty(DType::f32, {1, C, Fm, h, wd});
  x.v = rt_.arena().empty(DType::f32, {1, C, F, h, wd});
  if (guidance_.layout == Guidance::Layout::across_ranks) x.both = rt_.arena().empty(dt, {2, C, Fm, h, wd});
  if (d_.settings.addnoise > 0 && P > 0) x.noise = rt_.arena().empty(DType::f32, {1, C, P, h, wd});
}

// Row r of the window at hand: the model's input (the prefix noised with addnoise), this rank's
// frames of the guided prediction (gathered from every rank in exact mode), each frame's update.
void DfStepper::run_row(std::size_t r) {
  ExecContext& ctx = rt_.ctx();
  Window& x = *w_;
  const sampling::DfSchedule& schedule = *x.schedule;
  const std::int64_t F = x.w.frames, P = x.w.prefix, B = guidance_.batch(), Fm = x.part.count;
  const bool addnoise = d_.settings.addnoise > 0 && P > 0;
  const Tensor window = lat_.view().slice(2, 0, F);
  ops::copy(ctx, window, x.model_in);
  std::vector<float> ts(static_cast<std::size_t>(F));
  for (std::int64_t f = 0; f < F; ++f)
    ts[static_cast<std::size_t>(f)] = static_cast<float>(schedule.timesteps[r][static_cast<std::size_t>(f)]);
  if (addnoise) {
    // As the reference: the factors rounded to f32 first; the stored prefix stays clean.
    x.draws->addnoise(r, x.noise);
    ops::axpby(ctx, static_cast<float>(1.0 - 0.001 * d_.settings.addnoise), window.slice(2, 0, P),
               static_cast<float>(0.001 * d_.settings.addnoise), x.noise, x.model_in.view().slice(2, 0, P));
    for (std::int64_t f = 0; f < P; ++f) ts[static_cast<std::size_t>(f)] = static_cast<float>(d_.settings.addnoise);
  }
  ops::copy(ctx, x.model_in.view().slice(2, x.part.first, Fm).expand(x.in.shape), x.in);
  std::vector<float> mine_t(static_cast<std::size_t>(B * Fm));
  for (std::int64_t i = 0; i < B * Fm; ++i)
    mine_t[static_cast<std::size_t>(i)] = ts[static_cast<std::size_t>(x.part.first + i % Fm)];
  ops::copy(ctx, Tensor::wrap(mine_t.data(), DType::f32, Device::cpu(), x.t.shape), x.t);
  model::WanFrames where;
  where.first = x.part.first;
  where.total = F;
  where.fps = d_.settings.fps;
  where.block_frames = d_.settings.block;
  d_.transformer.forward(ctx, x.in, x.t, text_, x.pred, nullptr, where, x.attention.get());
  if (d_.clip_group) {
    guidance_.combine(ctx, x.pred, x.both, x.mine);
    ops::copy(ctx, x.mine.view().select(0, 0).permute({1, 0, 2, 3}), x.sent);
    d_.clip_group->all_gather_v(ctx, x.sent, x.gathered, x.counts);
    ops::copy(ctx, x.gathered.view().permute({1, 0, 2, 3}).unsqueeze(0), x.v);
  } else {
    guidance_.combine(ctx, x.pred, x.both, x.v);
  }
  for (std::int64_t f = 0; f < F; ++f) {
    const auto fi = static_cast<std::size_t>(f);
    if (schedule.update[r][fi]) x.frames[fi]->step(ctx, schedule.counters[r][fi] - 1, x.v.view().slice(2, f, 1));
    ops::copy(ctx, x.frames[fi]->latents(), window.slice(2, f, 1));
  }
  if (d_.probe) {
    OwnedTensor t = rt_.arena().empty(DType::f32, {F});
    ops::copy(ctx, Tensor::wrap(ts.data(), DType::f32, Device::cpu(), t.shape), t);
    d_.probe(x.k, r, "model_input", x.model_in);
    d_.probe(x.k, r, "timesteps", t);
    d_.probe(x.k, r, "latents", window);
  }
  rt_.synchronize();
}

void DfStepper::step(int i) {
  VINF_CHECK(i == done_ && i < rows(), "DfStepper: row ", i, " after ", done_, " of ", rows());
  const std::size_t k = window_of(i);
  if (i == first_row_[k]) begin_window(k, true);
  const auto r = static_cast<std::size_t>(i - first_row_[k]);
  run_row(r);
  ++done_;
  if (d_.progress) d_.progress(k, r, schedules_[k]->rows());
  if (done_ < first_row_[k + 1]) return;
  const sampling::DfWindow& w = windows_[k];
  if (d_.emit) d_.emit(w.first + w.keep_from, lat_.view().slice(2, w.keep_from, w.frames - w.keep_from));
  rt_.synchronize();
}

std::vector<std::string> DfStepper::state_names() {
  std::vector<std::string> names{"latents"};
  for (const std::string& m : sampling::FlowSampler::memory_names()) names.push_back(m);
  return names;
}

std::vector<std::pair<std::string, Tensor>> DfStepper::state() {
  ExecContext& ctx = rt_.ctx();
  std::vector<std::pair<std::string, Tensor>> out{{"latents", lat_.view()}};
  const std::vector<std::string> names = sampling::FlowSampler::memory_names();
  for (std::size_t m = 0; m < names.size(); ++m) {
    ops::fill(ctx, memories_[m], 0.0);
    for (std::size_t f = 0; w_ && f < w_->frames.size(); ++f)
      ops::copy(ctx, w_->frames[f]->memories()[m].second,
                memories_[m].view().slice(2, static_cast<std::int64_t>(f), 1));
    out.emplace_back(names[m], memories_[m].view());
  }
  return out;
}

void DfStepper::spoil() {
  ops::fill(rt_.ctx(), lat_, std::nan(""));
  for (std::size_t f = 0; w_ && f < w_->frames.size(); ++f)
    ops::fill(rt_.ctx(), w_->frames[f]->latents(), std::nan(""));
}

void DfStepper::restore(int done, const std::vector<Tensor>& state) {
  VINF_CHECK(done >= 0 && done <= rows() && !state.empty(), "DfStepper: restoring after ", done, " of ", rows(),
             " rows");
  done_ = done;
  if (done == 0) return;
  ExecContext& ctx = rt_.ctx();
  ops::copy(ctx, state[0], lat_);
  const std::size_t k = window_of(done - 1);
  begin_window(k, false);
  const sampling::DfSchedule& schedule = *schedules_[k];
  const auto rows_done = static_cast<std::size_t>(done - first_row_[k]);
  // Each frame's steps taken (the rows that updated it), its latents and memories by name.
  const std::vector<std::string> names = sampling::FlowSampler::memory_names();
  VINF_CHECK(state.size() == names.size() + 1, "DfStepper: ", state.size(), " state tensors for ", names.size(),
             " memories");
  auto memory = [&](const char* name, std::int64_t f) {
    for (std::size_t m = 0; m < names.size(); ++m)
      if (names[m] == name) return state[m + 1].slice(2, f, 1);
    throw Error(std::string("DfStepper: the solver has no memory ") + name);
  };
  for (std::int64_t f = 0; f < windows_[k].frames; ++f) {
    int taken = 0;
    for (std::size_t r = 0; r < rows_done; ++r) taken += schedule.update[r][static_cast<std::size_t>(f)] ? 1 : 0;
    w_->frames[static_cast<std::size_t>(f)]->restore(ctx, taken, lat_.view().slice(2, f, 1),
                                                     memory("last_corrected", f), memory("previous_x0", f),
                                                     memory("second_previous_x0", f));
  }
  rt_.synchronize();
}

void df_denoise(Runtime& rt, const DfDenoise& d, const Tensor& video) {
  DfDenoise with = d;
  with.emit = [&](std::int64_t first, const Tensor& frames) {
    ops::copy(rt.ctx(), frames, video.slice(2, first, frames.size(2)));
    if (d.emit) d.emit(first, frames);
  };
  DfStepper stepper(rt, with, video.shape);
  for (int i = 0; i < stepper.rows(); ++i) stepper.step(i);
  rt.synchronize();
}

}  // namespace vinf::pipeline
