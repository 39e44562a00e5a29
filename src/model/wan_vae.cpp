#include "model/wan_vae.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstring>
#include <map>
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

namespace {

// A VAE directory's files: dir itself, or dir/vae when dir is a pipeline root.
ModelFiles wan_vae_files(const std::string& dir_arg) {
  std::string dir = dir_arg;
  if (!io::path_exists(fs::path(dir) / "config.json") && io::path_exists(fs::path(dir) / "vae" / "config.json"))
    dir += "/vae";
  return find_model_files(dir);
}

using Act = std::shared_ptr<OwnedTensor>;

// dst = src clamped to [lo, hi], through host memory (there is no clamp op; diffusers clamps the
// decoded video and the log-variance).
void clamped_copy(ExecContext& ctx, const Tensor& src, const Tensor& dst, float lo, float hi) {
  std::vector<float> host(static_cast<std::size_t>(src.numel()));
  const Tensor h = Tensor::wrap(host.data(), DType::f32, Device::cpu(), src.shape);
  ops::copy(ctx, src, h);
  for (float& v : host) v = std::clamp(v, lo, hi);
  ops::copy(ctx, h, dst);
}

// (frames, channels, H, W) as temporal_conv's (1, channels, frames, H * W).
Tensor as_time_series(const Tensor& t) {
  return t.reshape({t.size(0), t.size(1), t.size(2) * t.size(3)}).permute({1, 0, 2}).unsqueeze(0);
}

// One video through one half: the layers over chunks of frames (frame-major, (T, C, H, W)) and
// what each causal layer keeps from one chunk for the next.
class VaePass {
 public:
  VaePass(const Weights& w, ExecContext& ctx) : w_(w), ctx_(ctx), dtype_(w.dtype()) {}

  Act empty(const Shape& s) const { return std::make_shared<OwnedTensor>(ctx_.arena->empty(dtype_, s)); }
  const Tensor& w(const std::string& name) const { return w_.get(name); }

  // The 1x1x1 convolution p of every frame.
  Act pointwise(const Tensor& x, const std::string& p) const {
    const Tensor& wt = w(p + ".weight");
    Act y = empty({x.size(0), wt.size(0), x.size(2), x.size(3)});
    ops::conv2d(ctx_, x, wt.reshape({wt.size(0), wt.size(1), 1, 1}), &w(p + ".bias"), *y, {1, 0});
    return y;
  }

  // [the n frames before x, x] along frames: the last n frames of the layer's input so far, zeros
  // before the video's first frame. The layer then remembers the last n frames of the result.
  Act with_history(const Tensor& x, const std::string& key, std::int64_t n) {
    Act& hist = history_[key];
    const std::int64_t t = x.size(0);
    if (!hist) {
      hist = empty({n, x.size(1), x.size(2), x.size(3)});
      ops::fill(ctx_, *hist, 0.0);
    }
    Act in = empty({n + t, x.size(1), x.size(2), x.size(3)});
    ops::copy(ctx_, *hist, in->view().slice(0, 0, n));
    ops::copy(ctx_, x, in->view().slice(0, n, t));
    ops::copy(ctx_, in->view().slice(0, t, n), *hist);
    return in;
  }

  // diffusers' WanCausalConv3d p with a kt x k x k kernel (padding k / 2 along H and W) on a chunk
  // x: the input frames are the kt - 1 before the chunk and the chunk's.
  Act causal_conv(const Tensor& x, const std::string& p) {
    const Tensor& wt = w(p + ".weight");
    const std::int64_t kt = wt.size(2);
    const Act in = with_history(x, p, kt - 1);
    Act y = empty({x.size(0), wt.size(0), x.size(2), x.size(3)});
    causal_taps(*in, p, y->view(), static_cast<int>(wt.size(3) / 2));
    return y;
  }

  // y (T, cout, H', W') = the causal convolution p over in (kt - 1 + T frames), as a sum over the
  // temporal taps of 2-D convolutions over frames with padding pad.
  void causal_taps(const Tensor& in, const std::string& p, const Tensor& y, int pad) const {
    const Tensor& wt = w(p + ".weight");
    const std::int64_t kt = wt.size(2), t = y.size(0);
    const ops::Conv2dParams cp{1, pad};
    ops::conv2d(ctx_, in.slice(0, 0, t), wt.select(2, 0), &w(p + ".bias"), y, cp);
    Act part;
    for (std::int64_t k = 1; k < kt; ++k) {
      if (!part) part = empty(y.shape);
      ops::conv2d(ctx_, in.slice(0, k, t), wt.select(2, k), nullptr, *part, cp);
      ops::add(ctx_, y, *part, y);
    }
  }

  // The (kt, 1, 1) convolution p along the frames of `in`, without padding.
  Act time_conv(const Tensor& in, const std::string& p) const {
    const Tensor& wt = w(p + ".weight");
    const std::int64_t kt = wt.size(2);
    Act y = empty({in.size(0) - kt + 1, wt.size(0), in.size(2), in.size(3)});
    ops::temporal_conv(ctx_, as_time_series(in), wt.reshape({wt.size(0), wt.size(1), kt}), &w(p + ".bias"),
                       as_time_series(*y), 0);
    return y;
  }

  // diffusers' WanRMS_norm p over the channels of every pixel, x / max(|x|, 1e-12) * sqrt(C) *
  // gamma, channels-last: (T, H*W, 2C) whose first C channels are the result. As a LayerNorm of
  // the 2C values [x, -x] of each pixel: their mean is 0 and their variance |x|^2 / C, so the
  // normalised first half is x * sqrt(C) / |x|.
  Act rms_norm_channels_last(const Tensor& x, const std::string& p) const {
    const std::int64_t t = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3);
    const Tensor xl = x.reshape({t, c, hw}).permute({0, 2, 1});  // (T, HW, C)
    Act both = empty({t, hw, 2 * c}), normed = empty({t, hw, 2 * c});
    ops::copy(ctx_, xl, both->view().slice(2, 0, c));
    ops::scale(ctx_, xl, -1.f, both->view().slice(2, c, c));
    Act gamma = empty({2 * c}), beta = empty({2 * c});
    ops::copy(ctx_, w(p + ".gamma").reshape({c}), gamma->view().slice(0, 0, c));
    ops::fill(ctx_, gamma->view().slice(0, c, c), 0.0);
    ops::fill(ctx_, *beta, 0.0);
    // eps: sqrt(|x|^2 + C eps) = sqrt(|x|^2 + 1e-24), F.normalize's floor of 1e-12 on |x|.
    ops::layer_norm(ctx_, both->reshape({t * hw, 2 * c}), *gamma, *beta, normed->reshape({t * hw, 2 * c}),
                    1e-24f / static_cast<float>(c));
    return normed;
  }

  // The RMS norm p of x, then act, frame-major like x.
  Act rms_norm(const Tensor& x, const std::string& p, ops::Activation act) const {
    const std::int64_t t = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3);
    const Act normed = rms_norm_channels_last(x, p);
    Act y = empty(x.shape);
    ops::activation(ctx_, act, normed->view().slice(2, 0, c).permute({0, 2, 1}), y->reshape({t, c, hw}));
    return y;
  }

  // WanResidualBlock: RMS norm, SiLU, causal conv, twice, plus the input (through a 1x1x1
  // convolution when the channels change). Dropout is the identity at inference.
  Act resnet(const Tensor& x, const std::string& p) {
    Act h = causal_conv(*rms_norm(x, p + ".norm1", ops::Activation::silu), p + ".conv1");
    h = causal_conv(*rms_norm(*h, p + ".norm2", ops::Activation::silu), p + ".conv2");
    if (w_.find(p + ".conv_shortcut.weight")) {
      ops::add(ctx_, *h, *pointwise(x, p + ".conv_shortcut"), *h);
    } else {
      ops::add(ctx_, *h, x, *h);
    }
    return h;
  }

  // WanAttentionBlock: single-head self-attention over the H*W pixels of each frame, plus the input.
  Act attention(const Tensor& x, const std::string& p) const {
    const std::int64_t t = x.size(0), ch = x.size(1), hw = x.size(2) * x.size(3);
    Act tokens = empty({t, hw, ch});
    ops::copy(ctx_, rms_norm_channels_last(x, p + ".norm")->view().slice(2, 0, ch), *tokens);
    Act qkv = empty({t, hw, 3 * ch});
    ops::linear(ctx_, *tokens, w(p + ".to_qkv.weight"), &w(p + ".to_qkv.bias"), *qkv);
    auto head = [&](int i) { return qkv->view().slice(2, i * ch, ch).unsqueeze(1); };  // (t, 1, hw, ch)
    ops::AttentionParams ap;
    ap.scale = 1.f / std::sqrt(static_cast<float>(ch));
    ap.bf16_products = w(p + ".to_qkv.weight").dtype == DType::bf16;
    ops::attention(ctx_, head(0), head(1), head(2), nullptr, nullptr, tokens->reshape({t, 1, hw, ch}), ap);
    Act proj = empty({t, hw, ch});
    ops::linear(ctx_, *tokens, w(p + ".proj.weight"), &w(p + ".proj.bias"), *proj);
    Act y = empty(x.shape);
    ops::copy(ctx_, proj->permute({0, 2, 1}), y->reshape({t, ch, hw}));
    ops::add(ctx_, *y, x, *y);
    return y;
  }

  Act mid_block(const Tensor& x, const std::string& p) {
    Act h = resnet(x, p + ".resnets.0");
    h = attention(*h, p + ".attentions.0");
    return resnet(*h, p + ".resnets.1");
  }

  // WanResample downsample2d / downsample3d: zero padding of one row below and one column right,
  // the 3x3 convolution at stride 2 per frame; in 3-D then the (3, 1, 1) convolution at stride 2
  // along frames over [the previous chunk's last frame, this chunk], except on the first chunk,
  // which passes through.
  Act downsample(const Tensor& x, const std::string& p, bool temporal, bool first) {
    const std::int64_t t = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
    Act padded = empty({t, c, h + 1, wd + 1});
    ops::fill(ctx_, *padded, 0.0);
    ops::copy(ctx_, x, padded->view().slice(2, 0, h).slice(3, 0, wd));
    const Tensor& wt = w(p + ".resample.1.weight");
    const ops::Conv2dParams cp{2, 0};
    std::int64_t ho = 0, wo = 0;
    ops::conv2d_output_size(*padded, wt, cp, ho, wo);
    Act y = empty({t, wt.size(0), ho, wo});
    ops::conv2d(ctx_, *padded, wt, &w(p + ".resample.1.bias"), *y, cp);
    padded.reset();
    if (!temporal) return y;
    const std::string tc = p + ".time_conv";
    if (first) {
      Act& hist = history_[tc];
      hist = empty({1, y->size(1), ho, wo});
      ops::copy(ctx_, y->view().slice(0, t - 1, 1), *hist);
      return y;
    }
    const Act in = with_history(*y, tc, 1);
    const Act full = time_conv(*in, tc);  // every start; the stride-2 output keeps the even ones
    const std::int64_t frames = (full->size(0) + 1) / 2;
    Tensor even = full->view().slice(0, 0, frames);
    even.strides[0] *= 2;
    Act out = empty(even.shape);
    ops::copy(ctx_, even, *out);
    return out;
  }

  // WanResample upsample2d / upsample3d: in 3-D first the causal (3, 1, 1) convolution to twice the
  // channels, whose two halves become two consecutive frames (skipped on the first chunk, whose
  // one frame stays one frame); then nearest x2 along H and W and the 3x3 convolution per frame.
  Act upsample(const Tensor& x, const std::string& p, bool temporal, bool first) {
    Tensor src = x;
    Act doubled;
    if (temporal && !first) {
      const std::string tc = p + ".time_conv";
      doubled = time_conv(*with_history(x, tc, 2), tc);  // (T, 2C, H, W) = (T, 2, C, H, W)
      src = doubled->reshape({2 * x.size(0), x.size(1), x.size(2), x.size(3)});
    }
    Act up = empty({src.size(0), src.size(1), 2 * src.size(2), 2 * src.size(3)});
    ops::upsample_nearest(ctx_, src, *up);
    doubled.reset();
    const Tensor& wt = w(p + ".resample.1.weight");
    Act y = empty({up->size(0), wt.size(0), up->size(2), up->size(3)});
    ops::conv2d(ctx_, *up, wt, &w(p + ".resample.1.bias"), *y, {1, 1});
    return y;
  }

  Act layer(const Tensor& x, const WanVaeLayer& l, bool first) {
    switch (l.kind) {
      case WanVaeLayer::resnet: return resnet(x, l.name);
      case WanVaeLayer::downsample2d: return downsample(x, l.name, false, first);
      case WanVaeLayer::downsample3d: return downsample(x, l.name, true, first);
      case WanVaeLayer::upsample2d: return upsample(x, l.name, false, first);
      case WanVaeLayer::upsample3d: return upsample(x, l.name, true, first);
    }
    VINF_FAIL("unknown Wan VAE layer kind");
  }

  // The decoder's tiled path (decode with tile > 0). Every causal convolution with a 3x3 kernel
  // after conv_in runs over tiles of its output, its input (the tile plus a one-pixel halo, zeros
  // beyond the frame) made on the spot from whole-frame tensors. The RMS norm before a convolution
  // works pixel by pixel, so it is applied to that input alone; such a convolution keeps the last
  // frames of its input before the norm (whose norm is the normed input the whole-frame path keeps:
  // the zeros before the video stay zeros). The numbers are those of whole-frame decoding to float
  // rounding; the tile bounds the convolutions' working memory, while two or three whole-frame
  // activations of a chunk stay alive between layers.

  // The causal convolution p (kt x 3 x 3) of pre(x) over tiles, pre the RMS norm `norm` and SiLU
  // (none when norm is empty). Each output tile y goes to write(region, y).
  template <class Write>
  void causal_conv_tiled(const Tensor& x, const std::string& p, const std::string& norm, std::int64_t tile,
                         Write&& write) {
    const Tensor& wt = w(p + ".weight");
    VINF_CHECK(wt.size(3) == 3 && wt.size(4) == 3, "the Wan VAE's tiled path takes 3x3 kernels; ", p, " has ",
               wt.shape.str());
    const std::int64_t kt = wt.size(2), n = kt - 1, t = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
    Act& hist = history_[p];
    if (!hist) {
      hist = empty({n, c, h, wd});
      ops::fill(ctx_, *hist, 0.0);
    }
    // [the n frames before x, x] at image region r, normed when norm is given.
    const TileFill frames = [&](const Tensor& dst, TileRegion r) {
      Act raw = empty({n + t, c, r.h, r.w});
      ops::copy(ctx_, hist->view().slice(2, r.r0, r.h).slice(3, r.c0, r.w), raw->view().slice(0, 0, n));
      ops::copy(ctx_, x.slice(2, r.r0, r.h).slice(3, r.c0, r.w), raw->view().slice(0, n, t));
      ops::copy(ctx_, norm.empty() ? *raw : *rms_norm(*raw, norm, ops::Activation::silu), dst);
    };
    for_tiles(h, wd, tile, [&](TileRegion r) {
      const OwnedTensor in = halo_input(ctx_, dtype_, n + t, c, h, wd, r, frames);
      Act y = empty({t, wt.size(0), r.h, r.w});
      causal_taps(in, p, *y, 0);
      write(r, *y);
    });
    // The last n frames of [hist, x] (n <= t: those of x; else hist's last n - t, then x).
    if (t >= n) {
      ops::copy(ctx_, x.slice(0, t - n, n), *hist);
    } else {
      Act kept = empty(hist->shape);
      ops::copy(ctx_, hist->view().slice(0, t, n - t), kept->view().slice(0, 0, n - t));
      ops::copy(ctx_, x, kept->view().slice(0, n - t, t));
      hist = kept;
    }
  }

  // causal_conv_tiled into a new tensor.
  Act causal_conv_tiled(const Tensor& x, const std::string& p, const std::string& norm, std::int64_t tile) {
    Act y = empty({x.size(0), w(p + ".weight").size(0), x.size(2), x.size(3)});
    causal_conv_tiled(x, p, norm, tile, [&](TileRegion r, const Tensor& yt) { ops::copy(ctx_, yt, region(*y, r)); });
    return y;
  }

  static Tensor region(const Tensor& t, TileRegion r) { return t.slice(2, r.r0, r.h).slice(3, r.c0, r.w); }

  // resnet on tiles. The residual is added tile by tile; without a shortcut the output overwrites
  // x (each output tile reads x's own tile only).
  Act resnet_tiled(Act x, const std::string& p, std::int64_t tile) {
    const Act hid = causal_conv_tiled(*x, p + ".conv1", p + ".norm1", tile);
    const std::string sc = p + ".conv_shortcut";
    const bool shortcut = w_.find(sc + ".weight") != nullptr;
    const Act out = shortcut ? empty({x->size(0), hid->size(1), x->size(2), x->size(3)}) : x;
    causal_conv_tiled(*hid, p + ".conv2", p + ".norm2", tile, [&](TileRegion r, const Tensor& yt) {
      const Tensor xt = region(*x, r);
      ops::add(ctx_, yt, shortcut ? pointwise(xt, sc)->view() : xt, region(*out, r));
    });
    return out;
  }

  // upsample on tiles: the temporal part on whole frames (a (3, 1, 1) convolution), then the 3x3
  // convolution over tiles of the nearest x2 upsampling.
  Act upsample_tiled(const Tensor& x, const std::string& p, bool temporal, bool first, std::int64_t tile) {
    Tensor src = x;
    Act doubled;
    if (temporal && !first) {
      const std::string tc = p + ".time_conv";
      doubled = time_conv(*with_history(x, tc, 2), tc);
      src = doubled->reshape({2 * x.size(0), x.size(1), x.size(2), x.size(3)});
    }
    const std::int64_t t = src.size(0), c = src.size(1), h = 2 * src.size(2), wd = 2 * src.size(3);
    const std::string cp = p + ".resample.1";
    Act y = empty({t, w(cp + ".weight").size(0), h, wd});
    const TileFill upsampled = [&](const Tensor& dst, TileRegion r) { upsampled_region(ctx_, src, r, dst); };
    for_tiles(h, wd, tile, [&](TileRegion r) {
      const OwnedTensor in = halo_input(ctx_, dtype_, t, c, h, wd, r, upsampled);
      const Act yt = empty({t, y->size(1), r.h, r.w});
      ops::conv2d(ctx_, in, w(cp + ".weight"), &w(cp + ".bias"), *yt, {1, 0});
      ops::copy(ctx_, *yt, region(*y, r));
    });
    return y;
  }

  // WanDecoder3d on one latent frame over tiles of `tile` latent pixels (doubling with every
  // upsampling); conv_in (whose input has only the latent channels) and the mid block's attention
  // on whole frames.
  Act decoder_chunk_tiled(const Tensor& x, const std::vector<WanVaeLayer>& layers, bool first, std::int64_t tile) {
    Act h = causal_conv(x, "decoder.conv_in");
    h = resnet_tiled(h, "decoder.mid_block.resnets.0", tile);
    h = attention(*h, "decoder.mid_block.attentions.0");
    h = resnet_tiled(h, "decoder.mid_block.resnets.1", tile);
    for (const WanVaeLayer& l : layers) {
      const bool temporal = l.kind == WanVaeLayer::upsample3d;
      switch (l.kind) {
        case WanVaeLayer::resnet: h = resnet_tiled(h, l.name, tile); break;
        case WanVaeLayer::upsample2d:
        case WanVaeLayer::upsample3d:
          h = upsample_tiled(*h, l.name, temporal, first, 2 * tile);
          tile *= 2;
          break;
        default: VINF_FAIL("the Wan VAE's decoder has no layer ", l.name, " of this kind");
      }
    }
    return causal_conv_tiled(*h, "decoder.conv_out", "decoder.norm_out", tile);
  }

  // WanEncoder3d on one chunk: conv_in, the down blocks, the mid block, RMS norm, SiLU, conv_out
  // (2 z_dim channels).
  Act encoder_chunk(const Tensor& x, const std::vector<WanVaeLayer>& layers, bool first) {
    Act h = causal_conv(x, "encoder.conv_in");
    for (const WanVaeLayer& l : layers) h = layer(*h, l, first);
    h = mid_block(*h, "encoder.mid_block");
    return causal_conv(*rms_norm(*h, "encoder.norm_out", ops::Activation::silu), "encoder.conv_out");
  }

  // WanDecoder3d on one latent frame: conv_in, the mid block, the up blocks, RMS norm, SiLU,
  // conv_out.
  Act decoder_chunk(const Tensor& x, const std::vector<WanVaeLayer>& layers, bool first) {
    Act h = causal_conv(x, "decoder.conv_in");
    h = mid_block(*h, "decoder.mid_block");
    for (const WanVaeLayer& l : layers) h = layer(*h, l, first);
    return causal_conv(*rms_norm(*h, "decoder.norm_out", ops::Activation::silu), "decoder.conv_out");
  }

  // The causal memory (every layer's remembered frames), taken from or given to this pass.
  std::map<std::string, Act> release_history() { return std::move(history_); }
  void take_history(std::map<std::string, Act> h) { history_ = std::move(h); }

 private:
  const Weights& w_;
  ExecContext& ctx_;
  DType dtype_;
  std::map<std::string, Act> history_;  // per causal layer: its last input frames
};

}  // namespace

WanVae::WanVae(WanVaeConfig config, Weights weights, Parts parts)
    : config_(std::move(config)), weights_(std::move(weights)), parts_(parts) {}

WanVaeConfig WanVae::read_config(const std::string& dir) { return load_wan_vae_config(wan_vae_files(dir).config); }

WanVae WanVae::load(const std::string& dir, Runtime& rt, DType dtype, Parts parts) {
  const ModelFiles files = wan_vae_files(dir);
  WanVaeConfig c = load_wan_vae_config(files.config);
  std::vector<ParamSpec> params;
  if (parts & encoder) params = wan_vae_encoder_parameters(c);
  if (parts & decoder)
    for (ParamSpec& p : wan_vae_decoder_parameters(c)) params.push_back(std::move(p));
  const WeightFiles wf(files);
  Weights w(wf, params, rt, dtype, parts != both, nullptr);
  return WanVae(std::move(c), std::move(w), parts);
}

void WanVae::encode(ExecContext& ctx, const Tensor& video, const Tensor& mean, const Tensor* logvar) const {
  const WanVaeConfig& c = config_;
  VINF_CHECK(parts_ & encoder, "the Wan VAE was loaded without its encoder");
  VINF_INPUT_CHECK(video.rank() == 5 && video.size(1) == c.in_channels, "the Wan VAE encodes videos (N, ",
                   c.in_channels, ", frames, H, W); got ", video.shape.str());
  const std::int64_t n = video.size(0), frames = video.size(2), h = video.size(3), wd = video.size(4);
  const int ratio = c.spatial_ratio();
  VINF_INPUT_CHECK(frames >= 1 && (frames - 1) % WanVaeConfig::kChunkFrames == 0, "the Wan VAE encodes 1 + ",
                   WanVaeConfig::kChunkFrames, "k frames; got ", frames);
  VINF_INPUT_CHECK(h > 0 && wd > 0 && h % ratio == 0 && wd % ratio == 0, "the Wan VAE encodes frames whose H and W are ",
                   "multiples of ", ratio, "; got ", h, "x", wd);
  const Shape want{n, c.z_dim, c.latent_frames(frames), h / ratio, wd / ratio};
  VINF_CHECK(mean.shape == want, "WanVae::encode: mean must be ", want.str(), ", got ", mean.shape.str());
  VINF_CHECK(!logvar || logvar->shape == want, "WanVae::encode: logvar must be ", want.str(), ", got ",
             logvar->shape.str());
  const std::vector<WanVaeLayer> layers = wan_vae_encoder_layers(c);
  for (std::int64_t i = 0; i < n; ++i) {
    VaePass pass(weights_, ctx);
    Act x = pass.empty({frames, c.in_channels, h, wd});
    ops::copy(ctx, video.select(0, i).permute({1, 0, 2, 3}), *x);
    Act enc = pass.empty({want[2], 2 * static_cast<std::int64_t>(c.z_dim), want[3], want[4]});
    std::int64_t done = 0;
    for (std::int64_t f0 = 0; f0 < frames;) {
      const std::int64_t len = f0 == 0 ? 1 : WanVaeConfig::kChunkFrames;
      const Act out = pass.encoder_chunk(x->view().slice(0, f0, len), layers, f0 == 0);
      VINF_CHECK(done + out->size(0) <= want[2], "WanVae::encode: the chunks gave more latent frames than ", want[2]);
      ops::copy(ctx, *out, enc->view().slice(0, done, out->size(0)));
      done += out->size(0);
      f0 += len;
    }
    VINF_CHECK(done == want[2], "WanVae::encode: the chunks gave ", done, " latent frames, not ", want[2]);
    x.reset();
    const Act q = pass.pointwise(*enc, "quant_conv");
    ops::copy(ctx, q->view().slice(1, 0, c.z_dim), mean.select(0, i).permute({1, 0, 2, 3}));
    if (logvar)  // clamped to [-30, 20] as diffusers' DiagonalGaussianDistribution does
      clamped_copy(ctx, q->view().slice(1, c.z_dim, c.z_dim), logvar->select(0, i).permute({1, 0, 2, 3}), -30.f,
                   20.f);
  }
}

void WanVae::decode(ExecContext& ctx, const Tensor& latents, const Tensor& out, std::int64_t tile) const {
  VINF_INPUT_CHECK(latents.rank() == 5 && latents.size(0) >= 1, "the Wan VAE decodes latents (N, ", config_.z_dim,
                   ", frames, h, w); got ", latents.shape.str());
  for (std::int64_t i = 0; i < latents.size(0); ++i) {
    Memory memory;
    decode_part(ctx, latents.slice(0, i, 1), 0, memory, out.slice(0, i, 1), tile);
  }
}

std::int64_t WanVae::part_frames(std::int64_t first, std::int64_t count) const {
  return first == 0 ? config_.video_frames(count) : WanVaeConfig::kChunkFrames * count;
}

void WanVae::decode_part(ExecContext& ctx, const Tensor& latents, std::int64_t first, Memory& memory, const Tensor& out,
                         std::int64_t tile) const {
  const WanVaeConfig& c = config_;
  VINF_CHECK(parts_ & decoder, "the Wan VAE was loaded without its decoder");
  VINF_INPUT_CHECK(latents.rank() == 5 && latents.size(0) == 1 && latents.size(1) == c.z_dim && latents.size(2) >= 1,
                   "the Wan VAE decodes latents (1, ", c.z_dim, ", frames, h, w) a part at a time; got ",
                   latents.shape.str());
  const std::int64_t lf = latents.size(2), h = latents.size(3), wd = latents.size(4);
  const int ratio = c.spatial_ratio();
  const Shape want{1, c.out_channels, part_frames(first, lf), h * ratio, wd * ratio};
  VINF_CHECK(out.shape == want, "WanVae::decode: out must be ", want.str(), ", got ", out.shape.str());
  VINF_CHECK(first >= 0 && (first == 0) == memory.frames.empty(), "WanVae::decode_part: a part after the first ",
             "(latent frame ", first, ") needs the memory of the one before it, and only it");
  VINF_INPUT_CHECK(tile >= 0, "the VAE tile must be 0 (off) or a positive number of latent pixels, got ", tile);
  const bool tiled = tile > 0 && (h > tile || wd > tile);
  const std::vector<WanVaeLayer> layers = wan_vae_decoder_layers(c);
  VaePass pass(weights_, ctx);
  pass.take_history(std::move(memory.frames));
  Act z = pass.empty({lf, c.z_dim, h, wd});
  ops::copy(ctx, latents.select(0, 0).permute({1, 0, 2, 3}), *z);
  const Tensor video = out.select(0, 0).permute({1, 0, 2, 3});  // (frames, C, H, W)
  std::int64_t done = 0;
  for (std::int64_t f = 0; f < lf; ++f) {
    // Every computation a frame at a time, post_quant_conv included: a video decoded in parts of
    // any sizes runs the same calls on the same shapes as one decode, so its frames are the same.
    const Act xa = pass.pointwise(z->view().slice(0, f, 1), "post_quant_conv");
    const Tensor xf = *xa;
    const bool opening = first + f == 0;
    const Act y = tiled ? pass.decoder_chunk_tiled(xf, layers, opening, tile) : pass.decoder_chunk(xf, layers, opening);
    VINF_CHECK(done + y->size(0) <= want[2], "WanVae::decode: the chunks gave more frames than ", want[2]);
    clamped_copy(ctx, *y, video.slice(0, done, y->size(0)), -1.f, 1.f);
    done += y->size(0);
  }
  VINF_CHECK(done == want[2], "WanVae::decode: the chunks gave ", done, " frames, not ", want[2]);
  memory.frames = pass.release_history();
}

// Per layer, in key order: its key's length and characters, dtype, four dimensions, the elements.
std::string WanVae::save_memory(ExecContext& ctx, const Memory& memory) {
  std::size_t total = 0;
  for (const auto& [key, act] : memory.frames)
    total += sizeof(std::uint64_t) + key.size() + 1 + 4 * sizeof(std::int64_t) +
             static_cast<std::size_t>(act->numel()) * dtype_size(act->dtype);
  std::string out;
  out.reserve(total);
  auto put = [&](const void* p, std::size_t n) { out.append(static_cast<const char*>(p), n); };
  for (const auto& [key, act] : memory.frames) {
    const std::uint64_t len = key.size();
    put(&len, sizeof len);
    put(key.data(), key.size());
    const auto dt = static_cast<std::uint8_t>(act->dtype);
    put(&dt, 1);
    VINF_CHECK(act->shape.rank() == 4, "WanVae: a remembered activation of rank ", act->shape.rank());
    for (int d = 0; d < 4; ++d) {
      const std::int64_t n = act->size(d);
      put(&n, sizeof n);
    }
    const std::size_t at = out.size(), bytes = static_cast<std::size_t>(act->numel()) * dtype_size(act->dtype);
    out.resize(at + bytes);  // within the reserved size: no reallocation
    ops::copy(ctx, *act, Tensor::wrap(out.data() + at, act->dtype, Device::cpu(), act->shape));
  }
  synchronize(ctx);
  return out;
}

WanVae::Memory WanVae::load_memory(ExecContext& ctx, const std::string& in) const {
  Memory memory;
  const DType dtype = weights_.dtype();
  std::size_t at = 0;
  auto get = [&](void* p, std::size_t n) {
    VINF_CHECK(at + n <= in.size(), "WanVae: the causal memory handed over is cut short");
    std::memcpy(p, in.data() + at, n);
    at += n;
  };
  while (at < in.size()) {
    std::uint64_t len = 0;
    get(&len, sizeof len);
    VINF_CHECK(len < 4096, "WanVae: the causal memory handed over is not one");
    std::string key(len, '\0');
    get(key.data(), len);
    std::uint8_t dt = 0;
    get(&dt, 1);
    VINF_CHECK(static_cast<DType>(dt) == dtype, "WanVae: the causal memory handed over has another dtype");
    Shape shape{0, 0, 0, 0};
    for (int d = 0; d < 4; ++d) get(&shape[d], sizeof(std::int64_t));
    Act act = std::make_shared<OwnedTensor>(ctx.arena->empty(dtype, shape));
    const std::size_t bytes = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
    VINF_CHECK(at + bytes <= in.size(), "WanVae: the causal memory handed over is cut short");
    ops::copy(ctx, Tensor::wrap(const_cast<char*>(in.data() + at), dtype, Device::cpu(), shape), *act);
    at += bytes;
    memory.frames[key] = std::move(act);
  }
  synchronize(ctx);
  return memory;
}

}  // namespace vinf::model
