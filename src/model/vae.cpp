#include "model/vae.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include "core/arena.hpp"
#include "core/error.hpp"
#include "io/path_query.hpp"
#include "model/conv_tiles.hpp"
#include "ops/activation.hpp"
#include "ops/attention.hpp"
#include "ops/conv.hpp"
#include "ops/elementwise.hpp"
#include "ops/gemm.hpp"
#include "ops/norm.hpp"
#include "ops/resample.hpp"
#include "ops/runtime.hpp"

namespace fs = std::filesystem;

namespace vinf::model {

VaeDecoder::VaeDecoder(VaeConfig config, Weights weights) : config_(std::move(config)), weights_(std::move(weights)) {}
VaeEncoder::VaeEncoder(VaeConfig config, Weights weights) : config_(std::move(config)), weights_(std::move(weights)) {}

namespace {

// A VAE directory's files: dir itself, or dir/vae when dir is a pipeline root.
ModelFiles vae_files(const std::string& dir_arg) {
  std::string dir = dir_arg;
  if (!io::path_exists(fs::path(dir) / "config.json") && io::path_exists(fs::path(dir) / "vae" / "config.json")) dir += "/vae";
  return find_model_files(dir);
}

}  // namespace

VaeConfig VaeDecoder::read_config(const std::string& dir) { return load_vae_config(vae_files(dir).config); }

// One half of a VAE directory: its config and the half's weights (the file holds both halves;
// each reads only its own tensors).
template <class Half>
Half load_half(const std::string& dir_arg, Runtime& rt, DType dtype,
               std::vector<ParamSpec> (*parameters)(const VaeConfig&)) {
  const ModelFiles files = vae_files(dir_arg);
  VaeConfig c = load_vae_config(files.config);
  const WeightFiles wf(files);
  Weights w(wf, parameters(c), rt, dtype, true, nullptr);
  return Half(std::move(c), std::move(w));
}

VaeDecoder VaeDecoder::load(const std::string& dir, Runtime& rt, DType dtype) {
  return load_half<VaeDecoder>(dir, rt, dtype, vae_decoder_parameters);
}

VaeEncoder VaeEncoder::load(const std::string& dir, Runtime& rt, DType dtype) {
  return load_half<VaeEncoder>(dir, rt, dtype, vae_encoder_parameters);
}

namespace {

using Act = std::shared_ptr<OwnedTensor>;

// The layers of both halves over a batch of images (N, C, H, W), and the decoder's tiled path.
class Blocks {
 public:
  Blocks(const VaeConfig& c, const Weights& w, ExecContext& ctx) : c_(c), w_(w), ctx_(ctx), dtype_(w.dtype()) {}

  Act empty(const Shape& s) const { return std::make_shared<OwnedTensor>(ctx_.arena->empty(dtype_, s)); }
  const Tensor& w(const std::string& name) const { return w_.get(name); }

  Act conv(const Tensor& x, const std::string& p, int pad, int stride = 1) const {
    const Tensor& wt = w(p + ".weight");
    const ops::Conv2dParams cp{stride, pad};
    std::int64_t ho = 0, wo = 0;
    ops::conv2d_output_size(x, wt, cp, ho, wo);
    Act y = empty({x.size(0), wt.size(0), ho, wo});
    ops::conv2d(ctx_, x, wt, &w(p + ".bias"), *y, cp);
    return y;
  }

  Act norm(const Tensor& x, const std::string& p, ops::Activation act) const {
    Act y = empty(x.shape);
    const Shape s4{x.size(0), x.size(1), 1, x.size(2) * x.size(3)};
    ops::group_norm(ctx_, x.reshape(s4), w(p + ".weight"), w(p + ".bias"), y->reshape(s4),
                    {c_.norm_num_groups, VaeConfig::kNormEps, act});
    return y;
  }

  Act resnet(const Tensor& x, const std::string& p) const {
    Act h = conv(*norm(x, p + ".norm1", ops::Activation::silu), p + ".conv1", 1);
    h = conv(*norm(*h, p + ".norm2", ops::Activation::silu), p + ".conv2", 1);
    if (w_.find(p + ".conv_shortcut.weight")) {
      ops::add(ctx_, *h, *conv(x, p + ".conv_shortcut", 0), *h);
    } else {
      ops::add(ctx_, *h, x, *h);
    }
    return h;
  }

  // Single-head self-attention over the H*W positions of each image, plus the input.
  Act attention(const Tensor& x, const std::string& p) const {
    const std::int64_t n = x.size(0), ch = x.size(1), hw = x.size(2) * x.size(3);
    Act tokens = empty({n, hw, ch});
    ops::copy(ctx_, norm(x, p + ".group_norm", ops::Activation::none)->reshape({n, ch, hw}).permute({0, 2, 1}), *tokens);
    Act q = empty({n, hw, ch}), k = empty({n, hw, ch}), v = empty({n, hw, ch});
    ops::linear(ctx_, *tokens, w(p + ".to_q.weight"), &w(p + ".to_q.bias"), *q);
    ops::linear(ctx_, *tokens, w(p + ".to_k.weight"), &w(p + ".to_k.bias"), *k);
    ops::linear(ctx_, *tokens, w(p + ".to_v.weight"), &w(p + ".to_v.bias"), *v);
    const Shape heads{n, 1, hw, ch};
    ops::AttentionParams ap;
    ap.scale = 1.f / std::sqrt(static_cast<float>(ch));
    ap.bf16_products = w(p + ".to_q.weight").dtype == DType::bf16;  // --dtype bf16, as the UNet's
    ops::attention(ctx_, q->reshape(heads), k->reshape(heads), v->reshape(heads), nullptr, nullptr,
                   tokens->reshape(heads), ap);
    ops::linear(ctx_, *tokens, w(p + ".to_out.0.weight"), &w(p + ".to_out.0.bias"), *q);
    Act y = empty(x.shape);
    ops::copy(ctx_, q->permute({0, 2, 1}), y->reshape({n, ch, hw}));
    ops::add(ctx_, *y, x, *y);
    return y;
  }

  // The encoder's downsampler: zero padding of one row below and one column right, then the 3x3
  // convolution at stride 2 (diffusers' Downsample2D with padding 0).
  Act downsample(const Tensor& x, const std::string& p) const {
    Act padded = empty({x.size(0), x.size(1), x.size(2) + 1, x.size(3) + 1});
    ops::fill(ctx_, *padded, 0.0);
    ops::copy(ctx_, x, padded->view().slice(2, 0, x.size(2)).slice(3, 0, x.size(3)));
    return conv(*padded, p, 0, 2);
  }

  Act upsample(const Tensor& x, const std::string& p) const {
    Act y = empty({x.size(0), x.size(1), 2 * x.size(2), 2 * x.size(3)});
    ops::upsample_nearest(ctx_, x, *y);
    return conv(*y, p, 1);
  }

  // The tiled path (decode with tile > 0). Every 3x3 convolution runs over tiles of its output;
  // each tile's input (the tile plus a one-pixel halo, zeros beyond the image) is produced from
  // whole-image tensors on the spot, GroupNorm with the statistics of the whole image. The numbers
  // are those of decoding the image whole; what the tile bounds is the convolutions' working
  // memory (their inputs, outputs and oneDNN/cuDNN buffers), while one or two whole-image
  // activations stay alive between layers.
  using Region = TileRegion;

  // The 3x3 convolution p (padding 1) of an (n, ci, h, w) image on output region t, as a new
  // (n, cout, t.h, t.w) tensor; fill writes the convolution's input at an image region.
  Act conv_tile(const std::string& p, std::int64_t n, std::int64_t ci, std::int64_t h, std::int64_t w, Region t,
                const TileFill& fill) const {
    const OwnedTensor in = halo_input(ctx_, dtype_, n, ci, h, w, t, fill);
    return conv(in, p, 0);
  }

  // Whole-image GroupNorm sums of x: f64 [N, groups, 2].
  Act sums(const Tensor& x) const {
    Act s = std::make_shared<OwnedTensor>(ctx_.arena->empty(DType::f64, {x.size(0), c_.norm_num_groups, 2}));
    ops::group_norm_sums(ctx_, x.reshape({x.size(0), x.size(1), 1, x.size(2) * x.size(3)}), c_.norm_num_groups, *s);
    return s;
  }

  // A fill for conv_tile: GroupNorm p (statistics s of the whole x) and SiLU of x's region.
  auto normed(const Tensor& x, const Tensor& s, const std::string& p) const {
    const double count = static_cast<double>(x.size(1) / c_.norm_num_groups * x.size(2) * x.size(3));
    return [this, &x, &s, p, count](const Tensor& dst, Region r) {
      ops::group_norm_apply(ctx_, x.slice(2, r.r0, r.h).slice(3, r.c0, r.w), s, count, w(p + ".weight"),
                            w(p + ".bias"), dst, {c_.norm_num_groups, VaeConfig::kNormEps, ops::Activation::silu});
    };
  }

  Act resnet_tiled(Act x, const std::string& p, std::int64_t tile) const {
    const std::int64_t n = x->size(0), ci = x->size(1), h = x->size(2), wd = x->size(3);
    const std::int64_t co = w(p + ".conv1.weight").size(0);
    Act hid = empty({n, co, h, wd});
    {
      const Act s = sums(*x);
      for_tiles(h, wd, tile, [&](Region t) {
        const Act y = conv_tile(p + ".conv1", n, ci, h, wd, t, normed(*x, *s, p + ".norm1"));
        ops::copy(ctx_, *y, hid->view().slice(2, t.r0, t.h).slice(3, t.c0, t.w));
      });
    }
    // Each output tile reads only its own tile of x (the shortcut is 1x1), so an output of x's
    // shape overwrites x.
    const bool shortcut = w_.find(p + ".conv_shortcut.weight") != nullptr;
    Act out = ci == co ? x : empty({n, co, h, wd});
    const Act s = sums(*hid);
    for_tiles(h, wd, tile, [&](Region t) {
      const Act y = conv_tile(p + ".conv2", n, co, h, wd, t, normed(*hid, *s, p + ".norm2"));
      const Tensor xt = x->view().slice(2, t.r0, t.h).slice(3, t.c0, t.w);
      const Tensor ot = out->view().slice(2, t.r0, t.h).slice(3, t.c0, t.w);
      if (shortcut) {
        ops::add(ctx_, *y, *conv(xt, p + ".conv_shortcut", 0), ot);
      } else {
        ops::add(ctx_, *y, xt, ot);
      }
    });
    return out;
  }

  Act upsample_tiled(const Tensor& x, const std::string& p, std::int64_t tile) const {
    const std::int64_t n = x.size(0), c = x.size(1), h = 2 * x.size(2), wd = 2 * x.size(3);
    Act out = empty({n, w(p + ".weight").size(0), h, wd});
    auto upsampled = [&](const Tensor& dst, Region r) { upsampled_region(ctx_, x, r, dst); };
    for_tiles(h, wd, tile, [&](Region t) {
      const Act y = conv_tile(p, n, c, h, wd, t, upsampled);
      ops::copy(ctx_, *y, out->view().slice(2, t.r0, t.h).slice(3, t.c0, t.w));
    });
    return out;
  }

  // conv_out(SiLU(conv_norm_out(x))) into out, tile by tile.
  void output_tiled(const Tensor& x, const Tensor& out, std::int64_t tile) const {
    const std::int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
    const Act s = sums(x);
    for_tiles(h, wd, tile, [&](Region t) {
      const Act y = conv_tile("decoder.conv_out", n, c, h, wd, t, normed(x, *s, "decoder.conv_norm_out"));
      ops::copy(ctx_, *y, out.slice(2, t.r0, t.h).slice(3, t.c0, t.w));
    });
  }

 private:
  const VaeConfig& c_;
  const Weights& w_;
  ExecContext& ctx_;
  DType dtype_;
};

}  // namespace

void VaeDecoder::decode(ExecContext& ctx, const Tensor& latents, const Tensor& out, std::int64_t frames_per_call,
                        std::int64_t tile) const {
  const VaeConfig& c = config_;
  VINF_INPUT_CHECK(latents.rank() == 4 && latents.size(1) == c.latent_channels, "the VAE decodes latents (N, ",
                   c.latent_channels, ", h, w); got ", latents.shape.str());
  const std::int64_t n = latents.size(0), up = c.upscale(), h = latents.size(2), w = latents.size(3);
  VINF_INPUT_CHECK(out.rank() == 4 && out.size(0) == n && out.size(1) == c.out_channels && out.size(2) == h * up &&
                       out.size(3) == w * up,
                   "the VAE output must be (", n, ", ", c.out_channels, ", ", h * up, ", ", w * up, "); got ",
                   out.shape.str());
  VINF_CHECK(frames_per_call >= 1, "frames_per_call must be >= 1");
  VINF_INPUT_CHECK(tile >= 0, "the VAE tile must be 0 (off) or a positive number of latent pixels, got ", tile);
  const bool tiled = tile > 0 && (h > tile || w > tile);
  for (std::int64_t f0 = 0; f0 < n; f0 += frames_per_call) {
    const std::int64_t nb = std::min(frames_per_call, n - f0);
    decode_images(ctx, latents.slice(0, f0, nb), out.slice(0, f0, nb), tiled ? tile : 0);
  }
}

// tile 0: every op on whole images. tile > 0: every 3x3 convolution after conv_in (whose input has
// only the latent channels) tiled, Blocks' tiled path; the tile is `tile` latent pixels at the
// latent resolution and doubles with every upsampling, so it always covers the same part of the
// picture. The mid-block attention runs whole either way (at the latent resolution, flash-style).
void VaeDecoder::decode_images(ExecContext& ctx, const Tensor& latents, const Tensor& out, std::int64_t tile) const {
  const VaeConfig& c = config_;
  const Blocks d(c, weights_, ctx);
  const int blocks = static_cast<int>(c.block_out_channels.size());
  std::int64_t t = tile;
  auto resnet = [&](Act a, const std::string& p) { return t > 0 ? d.resnet_tiled(std::move(a), p, t) : d.resnet(*a, p); };
  Act x = d.empty(latents.shape);
  ops::copy(ctx, latents, *x);
  if (c.use_post_quant_conv) x = d.conv(*x, "post_quant_conv", 0);
  x = d.conv(*x, "decoder.conv_in", 1);
  x = resnet(x, "decoder.mid_block.resnets.0");
  if (c.mid_block_attention) x = d.attention(*x, "decoder.mid_block.attentions.0");
  x = resnet(x, "decoder.mid_block.resnets.1");
  for (int i = 0; i < blocks; ++i) {
    const std::string b = "decoder.up_blocks" + dot_index(static_cast<std::size_t>(i));
    for (int j = 0; j <= c.layers_per_block; ++j) x = resnet(x, b + ".resnets" + dot_index(static_cast<std::size_t>(j)));
    if (i + 1 < blocks) {
      t *= 2;
      x = t > 0 ? d.upsample_tiled(*x, b + ".upsamplers.0.conv", t) : d.upsample(*x, b + ".upsamplers.0.conv");
    }
  }
  if (t > 0) {
    d.output_tiled(*x, out, t);
  } else {
    x = d.norm(*x, "decoder.conv_norm_out", ops::Activation::silu);
    ops::copy(ctx, *d.conv(*x, "decoder.conv_out", 1), out);
  }
}

void VaeEncoder::encode(ExecContext& ctx, const Tensor& images, const Tensor& mean, const Tensor* logvar,
                        std::int64_t images_per_call) const {
  const VaeConfig& c = config_;
  const std::int64_t up = c.upscale();
  VINF_INPUT_CHECK(images.rank() == 4 && images.size(1) == c.in_channels && images.size(2) % up == 0 &&
                       images.size(3) % up == 0 && images.numel() > 0,
                   "the VAE encodes images (N, ", c.in_channels, ", H, W) with H and W multiples of ", up, "; got ",
                   images.shape.str());
  const Shape ls{images.size(0), c.latent_channels, images.size(2) / up, images.size(3) / up};
  VINF_INPUT_CHECK(mean.shape == ls && (logvar == nullptr || logvar->shape == ls), "the VAE encoder's outputs must be ",
                   ls.str(), "; got ", mean.shape.str());
  VINF_CHECK(images_per_call >= 1, "images_per_call must be >= 1");
  const Blocks d(c, weights_, ctx);
  const int blocks = static_cast<int>(c.block_out_channels.size());
  for (std::int64_t n0 = 0; n0 < images.size(0); n0 += images_per_call) {
    const std::int64_t nb = std::min(images_per_call, images.size(0) - n0);
    Act x = d.empty({nb, images.size(1), images.size(2), images.size(3)});
    ops::copy(ctx, images.slice(0, n0, nb), *x);
    x = d.conv(*x, "encoder.conv_in", 1);
    for (int i = 0; i < blocks; ++i) {
      const std::string b = "encoder.down_blocks" + dot_index(static_cast<std::size_t>(i));
      for (int j = 0; j < c.layers_per_block; ++j) x = d.resnet(*x, b + ".resnets" + dot_index(static_cast<std::size_t>(j)));
      if (i + 1 < blocks) x = d.downsample(*x, b + ".downsamplers.0.conv");
    }
    x = d.resnet(*x, "encoder.mid_block.resnets.0");
    if (c.mid_block_attention) x = d.attention(*x, "encoder.mid_block.attentions.0");
    x = d.resnet(*x, "encoder.mid_block.resnets.1");
    x = d.conv(*d.norm(*x, "encoder.conv_norm_out", ops::Activation::silu), "encoder.conv_out", 1);
    if (c.use_quant_conv) x = d.conv(*x, "quant_conv", 0);
    ops::copy(ctx, x->view().slice(1, 0, c.latent_channels), mean.slice(0, n0, nb));
    if (logvar == nullptr) continue;
    // logvar clamped to [-30, 20] as diffusers' DiagonalGaussianDistribution does, on the host.
    const Tensor lv = x->view().slice(1, c.latent_channels, c.latent_channels);
    std::vector<float> host(static_cast<std::size_t>(lv.numel()));
    const Tensor h = Tensor::wrap(host.data(), DType::f32, Device::cpu(), lv.shape);
    ops::copy(ctx, lv, h);
    for (float& v : host) v = std::clamp(v, -30.f, 20.f);
    ops::copy(ctx, h, logvar->slice(0, n0, nb));
  }
}

}  // namespace vinf::model
