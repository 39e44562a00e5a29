#include "pipeline/df_denoise.hpp"

#include <memory>
#include <vector>

#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"
#include "sampling/diffusion_forcing.hpp"
#include "sampling/flow_sampler.hpp"
#include "sampling/noise.hpp"

namespace vinf::pipeline {

namespace {

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

// What every window's rows share: the batch of prompts and the guidance over it.
struct DfCall {
  Guidance guidance;
  OwnedTensor text;  // [B, L, text_dim]: [negative, prompt], or this rank's branch, or the prompt
};

DfCall df_call(Runtime& rt, const DfDenoise& d) {
  DfCall c{Guidance::of(d.guidance > 1.f, d.guidance, d.cfg_group), {}};
  const std::int64_t B = c.guidance.batch(), L = d.prompt.size(1), D = d.prompt.size(2);
  c.text = rt.arena().empty(d.transformer.weights().dtype(), {B, L, D});
  ExecContext& ctx = rt.ctx();
  if (c.guidance.layout == Guidance::Layout::across_ranks) {
    ops::copy(ctx, d.cfg_index == 0 ? d.negative : d.prompt, c.text);
  } else if (c.guidance.layout == Guidance::Layout::batched) {
    ops::copy(ctx, d.negative, c.text.view().slice(0, 0, 1));
    ops::copy(ctx, d.prompt, c.text.view().slice(0, 1, 1));
  } else {
    ops::copy(ctx, d.prompt, c.text);
  }
  return c;
}

// One window: its frames' solvers from its noise (the prefix from the video), then per row the
// model's input (the prefix noised with addnoise), the guided prediction and the frames' updates;
// at the end its frames from keep_from on into the video.
void df_window(Runtime& rt, const DfDenoise& d, const DfCall& call, const DfWindowDraws& draws,
               const sampling::DfWindow& w, std::size_t k, const Tensor& video) {
  ExecContext& ctx = rt.ctx();
  const std::int64_t C = video.size(1), h = video.size(3), wd = video.size(4), F = w.frames, P = w.prefix;
  const std::int64_t B = call.guidance.batch();
  const sampling::DfSchedule schedule =
      sampling::df_schedule(F, d.scheduler.timesteps(), P, d.settings.ar_step, d.settings.block);
  const DType dt = d.transformer.weights().dtype();
  OwnedTensor lat = rt.arena().empty(DType::f32, {1, C, F, h, wd});
  draws.noise(lat);
  if (P > 0) ops::copy(ctx, video.slice(2, w.first, P), lat.view().slice(2, 0, P));
  std::vector<std::unique_ptr<sampling::FlowSampler>> frames;
  for (std::int64_t f = 0; f < F; ++f) {
    frames.push_back(std::make_unique<sampling::FlowSampler>(d.scheduler, rt.arena(), Shape{1, C, 1, h, wd}));
    frames.back()->set_uncorrected_last_is_result(true);  // the reference's in-place frames
    ops::copy(ctx, lat.view().slice(2, f, 1), frames.back()->latents());
  }
  OwnedTensor in = rt.arena().empty(dt, {B, C, F, h, wd}), pred = rt.arena().empty(dt, {B, C, F, h, wd});
  OwnedTensor t = rt.arena().empty(DType::f32, {B, F}), v = rt.arena().empty(DType::f32, {1, C, F, h, wd});
  OwnedTensor both;
  if (call.guidance.layout == Guidance::Layout::across_ranks) both = rt.arena().empty(dt, {2, C, F, h, wd});
  Shape prefix_shape{1, C, P, h, wd};
  OwnedTensor n = rt.arena().empty(DType::f32, prefix_shape), noised = rt.arena().empty(DType::f32, prefix_shape);
  model::WanFrames where;
  where.fps = d.settings.fps;
  where.block_frames = d.settings.block;
  const bool addnoise = d.settings.addnoise > 0 && P > 0;
  for (std::size_t r = 0; r < schedule.rows(); ++r) {
    for (std::int64_t f = 0; f < F; ++f) ops::copy(ctx, frames[static_cast<std::size_t>(f)]->latents(), lat.view().slice(2, f, 1));
    ops::copy(ctx, lat.view().expand(in.shape), in);
    std::vector<float> ts(static_cast<std::size_t>(B * F));
    for (std::int64_t i = 0; i < B * F; ++i)
      ts[static_cast<std::size_t>(i)] = static_cast<float>(schedule.timesteps[r][static_cast<std::size_t>(i % F)]);
    if (addnoise) {
      // As the reference: the factors rounded to f32 first; the stored prefix stays clean.
      draws.addnoise(r, n);
      ops::axpby(ctx, static_cast<float>(1.0 - 0.001 * d.settings.addnoise), lat.view().slice(2, 0, P),
                 static_cast<float>(0.001 * d.settings.addnoise), n, noised);
      ops::copy(ctx, noised.view().expand({B, C, P, h, wd}), in.view().slice(2, 0, P));
      for (std::int64_t i = 0; i < B * F; ++i)
        if (i % F < P) ts[static_cast<std::size_t>(i)] = static_cast<float>(d.settings.addnoise);
    }
    ops::copy(ctx, Tensor::wrap(ts.data(), DType::f32, Device::cpu(), t.shape), t);
    d.transformer.forward(ctx, in, t, call.text, pred, nullptr, where);
    call.guidance.combine(ctx, pred, both, v);
    for (std::int64_t f = 0; f < F; ++f)
      if (schedule.update[r][static_cast<std::size_t>(f)])
        frames[static_cast<std::size_t>(f)]->step(ctx, schedule.counters[r][static_cast<std::size_t>(f)] - 1,
                                                   v.view().slice(2, f, 1));
    if (d.probe) {
      d.probe(k, r, "model_input", in.view().slice(0, 0, 1));
      d.probe(k, r, "timesteps", t.view().select(0, 0));
      for (std::int64_t f = 0; f < F; ++f)
        ops::copy(ctx, frames[static_cast<std::size_t>(f)]->latents(), lat.view().slice(2, f, 1));
      d.probe(k, r, "latents", lat);
    }
    rt.synchronize();
    if (d.progress) d.progress(k, r, schedule.rows());
  }
  for (std::int64_t f = w.keep_from; f < F; ++f)
    ops::copy(ctx, frames[static_cast<std::size_t>(f)]->latents(), video.slice(2, w.first + f, 1));
  rt.synchronize();
}

}  // namespace

void df_denoise(Runtime& rt, const DfDenoise& d, const Tensor& video) {
  const DfSettings& s = d.settings;
  VINF_CHECK(video.rank() == 5 && video.size(0) == 1, "df_denoise: video ", video.describe());
  const std::vector<sampling::DfWindow> windows = sampling::df_windows(video.size(2), s.base, s.overlap, s.block);
  std::unique_ptr<io::SafetensorsFile> file;
  if (!d.draws.file.empty()) file = std::make_unique<io::SafetensorsFile>(d.draws.file);
  const DfCall call = df_call(rt, d);
  for (std::size_t k = 0; k < windows.size(); ++k) {
    const DfWindowDraws draws(rt, d.draws, file.get(), k, windows[k]);
    df_window(rt, d, call, draws, windows[k], k, video);
  }
}

}  // namespace vinf::pipeline
