#include "pipeline/wan_condition.hpp"

#include <cmath>
#include <cstdio>

#include "core/error.hpp"
#include "io/image_resize.hpp"
#include "model/clip_vision.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

namespace vinf::pipeline {

namespace {

std::vector<float> condition_to_host(Runtime& rt, const Tensor& t) {
  std::vector<float> h(static_cast<std::size_t>(t.numel()));
  ops::copy(rt.ctx(), t, Tensor::wrap(h.data(), DType::f32, Device::cpu(), t.shape));
  rt.synchronize();
  return h;
}

// The images' CLIP states: CLIPImageProcessor, then the vision tower's hidden_states[-2] (all
// layers but the last), one batch of all images.
void condition_clip_states(Runtime& rt, const std::string& model, const std::vector<io::RgbFrames>& images,
                           WanImageCondition& out) {
  const model::ClipImageProcessor processor =
      model::load_clip_image_processor(model + "/image_processor/preprocessor_config.json");
  const model::ClipVisionModel clip = model::ClipVisionModel::load(model + "/image_encoder", rt, false, "--image");
  const model::ClipVisionConfig& c = clip.config();
  VINF_INPUT_CHECK(processor.crop_height == c.image_size && processor.crop_width == c.image_size, model,
                   "/image_processor crops ", processor.crop_height, "x", processor.crop_width, " but ", model,
                   "/image_encoder takes ", c.image_size, "x", c.image_size, " images");
  VINF_INPUT_CHECK(c.encoder.layers >= 2, model, "/image_encoder has ", c.encoder.layers,
                   " layer(s); the pipeline reads the second-to-last layer's states");
  const auto n = static_cast<std::int64_t>(images.size());
  const std::int64_t s = c.image_size;
  for (const io::RgbFrames& im : images) {
    const std::vector<float> px = model::clip_image_pixels(im.frames[0].data(), im.width, im.height, processor);
    out.clip_pixels.insert(out.clip_pixels.end(), px.begin(), px.end());
  }
  OwnedTensor pixels = rt.arena().empty(DType::f32, {n, 3, s, s});
  ops::copy(rt.ctx(), Tensor::wrap(out.clip_pixels.data(), DType::f32, Device::cpu(), pixels.shape), pixels);
  OwnedTensor states = rt.arena().empty(DType::f32, {n, c.tokens(), c.encoder.hidden_size});
  clip.hidden_state(rt.ctx(), pixels, c.encoder.layers - 1, states);
  out.image_states = condition_to_host(rt, states);
  out.image_tokens = n * c.tokens();
  out.image_dim = c.encoder.hidden_size;
}

}  // namespace

std::vector<float> wan_pixels(const std::uint8_t* hwc, std::int64_t w, std::int64_t h, std::int64_t width,
                              std::int64_t height) {
  std::vector<std::uint8_t> resized;
  if (w != width || h != height) {
    resized = io::resize_rgb8(hwc, w, h, width, height, io::ResizeFilter::lanczos);
    hwc = resized.data();
  }
  std::vector<float> out(static_cast<std::size_t>(3 * height * width));
  for (std::int64_t i = 0; i < height * width; ++i)
    for (int c = 0; c < 3; ++c) {
      const float x = static_cast<float>(hwc[i * 3 + c]) / 255.f;
      out[static_cast<std::size_t>(c * height * width + i)] = 2.f * x - 1.f;
    }
  return out;
}

WanImageCondition wan_image_condition(Runtime& rt, const std::string& model, const std::vector<io::RgbFrames>& images,
                                      std::int64_t frames, std::int64_t height, std::int64_t width) {
  VINF_CHECK(images.size() == 1 || images.size() == 2, "wan_image_condition: ", images.size(), " images");
  WanImageCondition out;
  condition_clip_states(rt, model, images, out);
  const model::WanVae vae = model::WanVae::load(model + "/vae", rt, DType::f32, model::WanVae::encoder);
  const model::WanVaeConfig& vc = vae.config();
  // The condition video [1, 3, frames, height, width]: the images where they go, zeros between.
  const std::int64_t plane = height * width;
  std::vector<float> video(static_cast<std::size_t>(3 * frames * plane), 0.f);
  auto place = [&](const io::RgbFrames& im, std::int64_t f) {
    const std::vector<float> px = wan_pixels(im.frames[0].data(), im.width, im.height, width, height);
    for (int c = 0; c < 3; ++c)
      std::copy(px.begin() + c * plane, px.begin() + (c + 1) * plane, video.begin() + (c * frames + f) * plane);
  };
  place(images[0], 0);
  if (images.size() == 2) place(images[1], frames - 1);
  out.latent_frames = vc.latent_frames(frames);
  out.lh = height / vc.spatial_ratio();
  out.lw = width / vc.spatial_ratio();
  const std::int64_t lf = out.latent_frames, lplane = out.lh * out.lw, z = vc.z_dim;
  OwnedTensor v = rt.arena().empty(DType::f32, {1, 3, frames, height, width});
  ops::copy(rt.ctx(), Tensor::wrap(video.data(), DType::f32, Device::cpu(), v.shape), v);
  OwnedTensor mean = rt.arena().empty(DType::f32, {1, z, lf, out.lh, out.lw});
  vae.encode(rt.ctx(), v, mean, nullptr);
  const std::vector<float> m = condition_to_host(rt, mean);
  out.channels = 4 + z;
  out.condition.assign(static_cast<std::size_t>(out.channels * lf * lplane), 0.f);
  // The mask: pixel frame 0 counted four times, so latent frame f's channel c stands for pixel
  // frame 4 f + c - 3 (frame 0 for the first latent frame's four).
  for (std::int64_t f = 0; f < lf; ++f)
    for (int c = 0; c < 4; ++c) {
      const std::int64_t pixel = std::max<std::int64_t>(0, 4 * f + c - 3);
      const bool given = pixel == 0 || (images.size() == 2 && pixel == frames - 1);
      if (given) std::fill_n(out.condition.begin() + (c * lf + f) * lplane, lplane, 1.f);
    }
  for (std::int64_t c = 0; c < z; ++c) {
    const float shift = vc.latents_mean[static_cast<std::size_t>(c)];
    const float scale = 1.f / vc.latents_std[static_cast<std::size_t>(c)];
    for (std::int64_t i = 0; i < lf * lplane; ++i)
      out.condition[static_cast<std::size_t>((4 + c) * lf * lplane + i)] =
          (m[static_cast<std::size_t>(c * lf * lplane + i)] - shift) * scale;
  }
  return out;
}

WanPosterior wan_video_posterior(Runtime& rt, const model::WanVae& vae, const io::RgbFrames& video, std::int64_t frames,
                                 std::int64_t height, std::int64_t width) {
  const model::WanVaeConfig& vc = vae.config();
  VINF_CHECK(static_cast<std::int64_t>(video.frames.size()) >= frames, "wan_video_posterior: ", video.frames.size(),
             " frames for ", frames);
  const std::int64_t plane = height * width;
  std::vector<float> pixels(static_cast<std::size_t>(3 * frames * plane));
  for (std::int64_t f = 0; f < frames; ++f) {
    const std::vector<float> px =
        wan_pixels(video.frames[static_cast<std::size_t>(f)].data(), video.width, video.height, width, height);
    for (int c = 0; c < 3; ++c)
      std::copy(px.begin() + c * plane, px.begin() + (c + 1) * plane, pixels.begin() + (c * frames + f) * plane);
  }
  WanPosterior p;
  p.latent_frames = vc.latent_frames(frames);
  p.lh = height / vc.spatial_ratio();
  p.lw = width / vc.spatial_ratio();
  OwnedTensor v = rt.arena().empty(DType::f32, {1, 3, frames, height, width});
  ops::copy(rt.ctx(), Tensor::wrap(pixels.data(), DType::f32, Device::cpu(), v.shape), v);
  const Shape latent{1, vc.z_dim, p.latent_frames, p.lh, p.lw};
  OwnedTensor mean = rt.arena().empty(DType::f32, latent), logvar = rt.arena().empty(DType::f32, latent);
  const Tensor lv = logvar.view();
  vae.encode(rt.ctx(), v, mean, &lv);
  p.mean = condition_to_host(rt, mean);
  p.logvar = condition_to_host(rt, logvar);
  return p;
}

std::vector<float> wan_video_start(const model::WanVaeConfig& vae, const WanPosterior& posterior,
                                   const std::vector<float>& eps, const std::vector<float>& noise, float sigma) {
  const std::size_t n = posterior.mean.size();
  VINF_CHECK(eps.size() == n && noise.size() == n, "wan_video_start: draws of ", eps.size(), " and ", noise.size(),
             " values for ", n);
  const std::size_t per_channel = n / static_cast<std::size_t>(vae.z_dim);
  const float alpha = 1.f - sigma;
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = i / per_channel;
    const float sampled = posterior.mean[i] + std::exp(0.5f * posterior.logvar[i]) * eps[i];
    const float normalised = (sampled - vae.latents_mean[c]) * (1.f / vae.latents_std[c]);
    x[i] = alpha * normalised + sigma * noise[i];
  }
  return x;
}

int wan_strength_first_step(int steps, double strength) {
  VINF_INPUT_CHECK(std::isfinite(strength) && strength > 0 && strength <= 1, "--strength ", strength,
                   " must be in (0, 1]: the share of the schedule that runs on the given video");
  const int run = std::min(static_cast<int>(steps * strength), steps);
  VINF_INPUT_CHECK(run >= 1, "--strength ", strength, " of ", steps, " steps runs int(", steps, " x ", strength,
                   ") = 0 steps; raise --strength or --sampler.steps");
  return steps - run;
}

std::string frames_fingerprint(const io::RgbFrames& frames) {
  std::uint64_t h = 1469598103934665603ULL;
  auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ULL;
    }
  };
  mix(static_cast<std::uint64_t>(frames.width));
  mix(static_cast<std::uint64_t>(frames.height));
  for (const std::vector<std::uint8_t>& f : frames.frames)
    for (std::uint8_t b : f) {
      h ^= b;
      h *= 1099511628211ULL;
    }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

}  // namespace vinf::pipeline
