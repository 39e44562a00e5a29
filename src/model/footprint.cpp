#include "model/footprint.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "core/arena.hpp"
#include "ops/attention.hpp"

namespace vinf::model {

double arena_bytes(double bytes) {
  return bytes <= 0 ? 0.0 : static_cast<double>(Arena::round_size(static_cast<std::size_t>(std::ceil(bytes))));
}

TemporalBytes TemporalCost::attention(std::int64_t rows, std::int64_t frames, std::int64_t x_width, std::int64_t inner,
                                      std::size_t elt, bool stacked) const {
  (void)x_width;
  // self_attention: Q, K and V of the clip, then plain attention over its frames.
  TemporalBytes b;
  const double one = static_cast<double>(rows * frames * inner) * static_cast<double>(elt);
  b.buffers = stacked ? arena_bytes(3 * one) : 3 * arena_bytes(one);
  b.full_frames = frames;
  return b;
}

TemporalBytes TemporalCost::conv_halo(double frame_bytes) const {
  (void)frame_bytes;
  return {};
}

double TemporalCost::norm_received(std::int64_t batch, int groups) const {
  (void)batch;
  (void)groups;
  return 0;
}

namespace {

// The arena hands a request a cached block of up to twice its size class (Arena::allocate), and
// counts the whole block: which blocks are cached depends on the run's history (the weights'
// loading leaves blocks of their sizes). At the peak of a UNet call that added up to 19% to the
// exact sizes (tiny and small presets, 1 to 64 frames, 4x4 to 40x64 latents, 1 or 2 tensor ranks,
// measured against ArenaStats::peak_in_use), and 26% for the tiny preset in bf16 at 16 frames of
// 4x4 once the feed-forward's projection was no longer held (the temporal attention's scratch then
// took a block 27% larger than itself); the bound allows 28%. Not more: where no block is reused
// (the tiny preset in f32 at 8 frames of 8x8, since the CPU projects Q, K and V into one block),
// the walk's own sizes come out 1.4% above the arena's exact peak, and an estimate should stay
// within 30% of what a call takes.
constexpr double kBlockReuse = 1.28;
// The VAE's full-resolution convolutions took blocks of twice their size more often: up to 17%
// over the exact sizes (the small preset's decoder, 32x32 to 128x128 images, measured alike).
constexpr double kVaeBlockReuse = 1.3;
// On CUDA cuDNN picks each convolution's algorithm, and its workspace, by speed (up to 2 GiB,
// cuda/conv.cpp): more than the larger of input and output that the walk assumes. Measured on an
// H200 (builtin:small, 16-24 frames of 128x128 and 256x256, one rank) against the arena's peak:
// the whole estimate reached 1.08-1.17x of it in bf16 but 0.75x in f32 (algorithms without
// tensor cores, with large workspaces), and 0.90x with VAE decoding in bf16. These factors make those
// cases upper bounds again (1.08x, 1.25x and 1.05x of the measured peaks); they are calibrated on
// that one machine and preset.
constexpr double kCudaF32Calls = 1.6, kCuda16BitCalls = 1.1, kCudaVae = 1.25;
// oneDNN's matmul scratchpad (cpu/blas.cpp hands it an arena block): its brgemm kernels on
// AVX-512 copy a block of 64 columns of B per thread, K x 64 floats, plus about 1 KiB (measured
// on a Zen 4 for K 32 to 256 at 2 threads: exactly 256 K + 1280 bytes per thread pair); the AVX2
// kernels take none (ForwardShape::cpu_matmul_scratch). Counted as 64 K floats + 4 KiB per thread.
double cpu_gemm_scratch(double k, double threads) { return threads * (64 * k * 4 + 4096); }
// With the input read transposed (the transformers' proj_in over the normalised frames) oneDNN also
// packs blocks of its rows, about as much again.
double cpu_gemm_scratch_transposed(double k, double threads) { return cpu_gemm_scratch(k, threads) + threads * 64 * k * 4; }

// The memory of one moment of the call beyond what the walk holds.
struct Extra {
  double act = 0, ws = 0, comm = 0;
};

// The forward pass of unet3d.cpp as allocations: held_ is what the caller keeps alive (skip stack,
// text, the module's input); every module reports its moments of most memory through peak().
class Walker {
 public:
  Walker(const UNetConfig& c, const ForwardShape& s, const TemporalCost& t)
      : c_(c), s_(s), t_(t), n_(static_cast<double>(s.batch * s.frames)), elt_(static_cast<double>(s.elt)) {}

  ForwardFootprint run();

 private:
  double act(double ch, double pixels) const { return arena_bytes(n_ * ch * pixels * elt_); }
  double bytes(double elements, double elt) const { return arena_bytes(elements * elt); }
  void peak(const Extra& e);
  // The heads of `heads` this rank holds: the largest share of a tensor group.
  double local(double heads) const { return std::ceil(heads / s_.tensor_size); }
  // A row-parallel output summed in f32 (CommTensorGroup widens 16-bit tensors).
  double widened(double elements) const { return s_.tensor_size > 1 && elt_ < 4 ? bytes(elements, 4) : 0; }
  double conv_staging(double in, double out, double weight_elements) const;
  double conv(double in, double out, double weight_elements);
  double kernel_workspace(double head_dim) const;
  double gemm_workspace(double k, double rows, bool transposed_input = false) const;
  double attend_workspace(double heads, double lq, double lk, double head_dim) const;
  void feed_forward(double width, double m);
  double resnet(double cin, double cout, double pixels);
  void temporal_conv(double ch, double pixels);
  void spatial_transformer(double ch, double pixels);
  void temporal_transformer(double ch, double pixels, double inner, double heads);
  void layer(double cin, double cout, double pixels, bool cross);

  const UNetConfig& c_;
  const ForwardShape& s_;
  const TemporalCost& t_;
  double n_, elt_;
  double held_ = 0;
  ForwardFootprint f_;
};

void Walker::peak(const Extra& e) {
  if (held_ + e.act + e.ws + e.comm <= f_.total()) return;
  f_.activations = held_ + e.act;
  f_.workspace = e.ws;
  f_.comm_buffers = e.comm;
}

// oneDNN reorders the input, output and weights of most convolutions into blocked layouts (arena
// copies); cuDNN's workspace depends on the algorithm it picks (up to 2 GiB): taken as the larger
// of input and output, a guess the CPU cannot check.
double Walker::conv_staging(double in, double out, double weight_elements) const {
  if (s_.cuda) return std::max(in, out);
  return in + out + bytes(weight_elements, 4);
}

// A 2-D convolution of an input the caller holds: its output and staging; returns the output.
double Walker::conv(double in, double out, double weight_elements) {
  peak({out, conv_staging(in, out, weight_elements)});
  return out;
}

// The streaming attention kernel: scratch per thread on the CPU, none on CUDA.
double Walker::kernel_workspace(double head_dim) const {
  if (s_.cuda) return 0;
  const auto d = static_cast<std::int64_t>(head_dim);
  return arena_bytes(s_.cpu_threads * static_cast<double>(ops::cpu_attention_scratch_bytes(d, d)));
}

// A matrix product's scratch with inner dimension k over `rows` rows: oneDNN's on the CPU, and
// with bf16 weights the input rounded to bf16 (cpu/gemm.cpp); cuBLAS keeps its own.
double Walker::gemm_workspace(double k, double rows, bool transposed_input) const {
  if (s_.cuda) return 0;
  const double scratch = !s_.cpu_matmul_scratch ? 0.0
                         : transposed_input  ? cpu_gemm_scratch_transposed(k, s_.cpu_threads)
                                             : cpu_gemm_scratch(k, s_.cpu_threads);
  return arena_bytes(scratch) + (s_.cpu_bf16 ? bytes(rows * k, 2) : 0);
}

// model::attend: on CUDA, plain attention over long sequences runs as GEMMs with f32 scores and
// probabilities in the compute dtype for one sequence at a time; else the streaming kernel.
double Walker::attend_workspace(double heads, double lq, double lk, double head_dim) const {
  if (s_.cuda && lq * lk >= 4096) return bytes(heads * lq * lk, 4) + bytes(heads * lq * lk, elt_);
  return kernel_workspace(head_dim);
}

// GEGLU feed-forward over the m rows of `width` it adds to, in chunks: the rows, their LayerNorm,
// a chunk's projection (CUDA: both halves; the CPU: the f32 gate its second product multiplies
// by), the gated activations (in bf16 on the CPU with bf16 weights) and the output.
void Walker::feed_forward(double width, double m) {
  const double ff = std::ceil(4 * width / s_.tensor_size);
  const double rows = std::max(1.0, std::min(m, std::floor(static_cast<double>(kFeedForwardChunkElements) / (2 * ff))));
  // The chunk's output only under tensor parallelism: otherwise the product adds itself onto the rows.
  const double partials = s_.tensor_size > 1 ? bytes(rows * width, elt_) : 0;
  const double projection = s_.cuda ? bytes(rows * 2 * ff, elt_) : bytes(rows * ff, 4);
  const double gated = bytes(rows * ff, s_.cpu_bf16 ? 2 : elt_);
  peak({2 * bytes(m * width, elt_) + projection + gated + partials + widened(rows * width),
        std::max(gemm_workspace(width, rows), gemm_workspace(ff, 0))});  // the gated rows are bf16 already
}

double Walker::resnet(double cin, double cout, double pixels) {
  const double a_in = act(cin, pixels), a_out = act(cout, pixels);
  peak({a_in + a_out, conv_staging(a_in, a_out, cout * cin * 9)});    // norm1, conv1
  peak({2 * a_out, conv_staging(a_out, a_out, cout * cout * 9)});     // norm2, conv2
  if (cin != cout) peak({2 * a_out, conv_staging(a_in, a_out, cout * cin)});  // the shortcut
  return a_out;
}

// Four GroupNorm -> SiLU -> Conv3d stages over the clip and its halo frames.
void Walker::temporal_conv(double ch, double pixels) {
  const double halo = static_cast<double>(t_.conv_halo_frames());
  const double frame = static_cast<double>(s_.batch) * ch * pixels * elt_;
  const double padded = arena_bytes(frame * (static_cast<double>(s_.frames) + halo));
  if (halo > 0) {
    const TemporalBytes h = t_.conv_halo(frame);
    peak({padded + h.buffers, 0, h.comm_buffers});
    f_.clip_received += h.received;
  }
  f_.clip_received += 4 * t_.norm_received(s_.batch, c_.norm_num_groups);
  // The stage's input, norm, output; packed weights (on the CPU oneDNN's convolution, staged as
  // the 2-D ones are).
  peak({3 * padded, s_.cuda ? bytes(ch * ch * 3, elt_) : conv_staging(padded, padded, ch * ch * 3)});
  peak({padded + act(ch, pixels)});
}

void Walker::spatial_transformer(double ch, double pixels) {
  const double heads = local(transformer_heads(c_, static_cast<int>(ch))), hd = c_.attention_head_dim;
  const double a = act(ch, pixels), ai = act(heads * hd, pixels), rows = n_ * pixels;
  const double l = static_cast<double>(s_.text_tokens);
  const double in_ws = gemm_workspace(ch, rows), out_ws = gemm_workspace(heads * hd, rows);
  // The GroupNorm's output and proj_in's beside it (on CUDA also the transposed rows' copy).
  const double transposed_copy = s_.cuda ? a : 0;
  peak({2 * a + transposed_copy, gemm_workspace(ch, rows, true)});
  // attn1: LayerNorm, Q, K, V (on the CPU one block: self_attention's stacked product), out
  const double qkv = s_.cuda ? 3 * ai : act(3 * heads * hd, pixels);
  peak({2 * a + qkv + ai, std::max(in_ws, attend_workspace(heads, pixels, pixels, hd))});
  peak({3 * a + ai + widened(rows * ch), out_ws});
  const double text_kv = 2 * bytes(static_cast<double>(s_.batch) * l * heads * hd, elt_);
  const double text_ws = gemm_workspace(c_.cross_attention_dim, static_cast<double>(s_.batch) * l);
  peak({2 * a + 2 * ai, std::max(in_ws, text_ws)});  // attn2: LayerNorm, Q, out
  peak({a + 2 * ai + text_kv, attend_workspace(heads, pixels, l, hd)});
  peak({2 * a + 2 * ai + widened(rows * ch), out_ws});
  feed_forward(ch, rows);
  peak({2 * a + transposed_copy, in_ws});  // the rows and the output proj_out adds itself onto (CUDA: via a copy)
  if (s_.tensor_size > 1) f_.tensor_received += 3 * rows * ch * 4;
}

void Walker::temporal_transformer(double ch, double pixels, double inner, double heads) {
  const double shard = local(heads) * (inner / heads), rows = static_cast<double>(s_.batch) * pixels;
  const double a = act(ch, pixels), ai = act(inner, pixels), as = act(shard, pixels);
  f_.clip_received += t_.norm_received(s_.batch, c_.norm_num_groups);
  const double inner_ws = gemm_workspace(inner, n_ * pixels);
  // proj_in reads the GroupNorm's output as sequences (on CUDA through a contiguous copy).
  const double transposed_copy = s_.cuda ? a : 0;
  peak({a + ai + transposed_copy, gemm_workspace(ch, n_ * pixels, true)});
  for (int k = 0; k < 2; ++k) {
    const TemporalBytes tb = t_.attention(static_cast<std::int64_t>(rows), s_.frames, static_cast<std::int64_t>(inner),
                                          static_cast<std::int64_t>(shard), s_.elt, !s_.cuda);
    const double lk = tb.full_frames > 0 ? static_cast<double>(tb.full_frames) : static_cast<double>(s_.frames);
    const double ws = tb.full_frames > 0 ? attend_workspace(local(heads), lk, lk, inner / heads)
                                         : kernel_workspace(inner / heads);
    peak({2 * ai + as + tb.buffers, std::max(ws, inner_ws), tb.comm_buffers});
    peak({2 * ai + as + widened(n_ * pixels * inner), inner_ws});
    f_.clip_received += tb.received;
  }
  feed_forward(inner, n_ * pixels);
  peak({ai + a + transposed_copy, inner_ws});  // proj_out writes onto the residual in the frames' layout
  if (s_.tensor_size > 1) f_.tensor_received += 3 * n_ * pixels * inner * 4;
}

// resnet -> temporal conv -> (spatial -> temporal transformer), the layer's input held by the
// caller; leaves its output held.
void Walker::layer(double cin, double cout, double pixels, bool cross) {
  held_ += resnet(cin, cout, pixels);
  temporal_conv(cout, pixels);
  if (!cross) return;
  spatial_transformer(cout, pixels);
  temporal_transformer(cout, pixels, cout, transformer_heads(c_, static_cast<int>(cout)));
}

ForwardFootprint Walker::run() {
  const double c0 = c_.block_out_channels.front();
  std::int64_t h = s_.height, w = s_.width;
  auto px = [&] { return static_cast<double>(h * w); };
  held_ = bytes(static_cast<double>(s_.batch * s_.text_tokens * c_.cross_attention_dim), elt_);
  const double sample = act(c_.in_channels, px());
  held_ += sample;
  held_ += conv(sample, act(c0, px()), c0 * c_.in_channels * 9) - sample;
  const double hd = c_.attention_head_dim, heads_in = UNetConfig::kTransformerInHeads;
  temporal_transformer(c0, px(), heads_in * hd, heads_in);
  const UNetLayout l = unet_layout(c_);
  std::vector<std::pair<double, std::pair<std::int64_t, std::int64_t>>> skips{{act(c0, px()), {h, w}}};
  for (const BlockLayout& b : l.down) {
    for (int cin : b.resnet_in) {
      layer(cin, b.out_channels, px(), b.cross);
      skips.push_back({act(b.out_channels, px()), {h, w}});
    }
    if (b.resample) {
      h = (h + 1) / 2;
      w = (w + 1) / 2;
      held_ += conv(act(b.out_channels, 4 * px()), act(b.out_channels, px()), b.out_channels * b.out_channels * 9.0);
      skips.push_back({act(b.out_channels, px()), {h, w}});
    }
  }
  const double mid = l.mid_channels;
  layer(mid, mid, px(), true);
  resnet(mid, mid, px());
  temporal_conv(mid, px());
  double x = act(mid, px()), ch = mid;
  for (const BlockLayout& b : l.up) {
    for (std::size_t j = 0; j < b.resnet_in.size(); ++j) {
      const double cat = act(b.resnet_in[j], px());
      peak({cat});  // the concatenation beside the current tensor and the skip
      held_ += cat - x - skips.back().first;
      skips.pop_back();
      layer(b.resnet_in[j], b.out_channels, px(), b.cross);
      held_ -= cat;
      x = act(b.out_channels, px());
      ch = b.out_channels;
    }
    if (b.resample) {
      std::tie(h, w) = skips.back().second;
      const double up = act(ch, px());
      peak({up});
      held_ += up - x;
      held_ += conv(up, act(ch, px()), ch * ch * 9) - up;
      x = act(ch, px());
    }
  }
  peak({act(ch, px())});  // conv_norm_out
  conv(act(ch, px()), act(c_.out_channels, px()), c_.out_channels * ch * 9);
  return f_;
}

// VaeDecoder::decode_images as allocations, for one call of `images` frames: whole images, or
// (tile > 0) every 3x3 convolution over tiles with whole-image activations between layers.
class VaeWalker {
 public:
  VaeWalker(const VaeConfig& c, double images, std::size_t elt, std::int64_t tile, bool cuda)
      : c_(c), n_(images), elt_(static_cast<double>(elt)), tile_(static_cast<double>(tile)), cuda_(cuda) {}

  double run(double held, std::int64_t h, std::int64_t w);

 private:
  double act(double ch, double pixels) const { return arena_bytes(n_ * ch * pixels * elt_); }
  void peak(double extra) { peak_ = std::max(peak_, held_ + extra); }
  double staging(double in, double out, double weight_elements) const {
    return cuda_ ? std::max(in, out) : in + out + arena_bytes(weight_elements * 4);
  }
  // A 3x3 convolution ci -> co as it runs: over the whole image, or one tile with its halo.
  double conv3(double ci, double co, double pixels) const {
    if (tile_ <= 0) return act(co, pixels) + staging(act(ci, pixels), act(co, pixels), co * ci * 9);
    const double in = act(ci, (tile_ + 2) * (tile_ + 2)), out = act(co, tile_ * tile_);
    return in + out + staging(in, out, co * ci * 9);
  }
  void resnet(double ci, double co, double pixels) {
    const double a_in = act(ci, pixels), a_out = act(co, pixels);
    if (tile_ > 0) {
      peak(a_out + (ci == co ? 0 : a_out) + conv3(ci, co, pixels));
    } else {
      peak(a_in + conv3(ci, co, pixels));       // norm1, conv1
      peak(2 * a_out + conv3(co, co, pixels));  // conv1's output, norm2, conv2
      if (ci != co) peak(2 * a_out + a_out + staging(a_in, a_out, co * ci));
    }
    held_ += a_out - a_in;
  }

  const VaeConfig& c_;
  double n_, elt_, tile_;
  bool cuda_;
  double held_ = 0, peak_ = 0;
};

double VaeWalker::run(double held, std::int64_t h, std::int64_t w) {
  held_ = held;
  double px = static_cast<double>(h * w), ch = c_.latent_channels;
  const double top = c_.block_out_channels.back();
  held_ += act(ch, px);
  if (c_.use_post_quant_conv) peak(act(ch, px) + staging(act(ch, px), act(ch, px), ch * ch));
  // conv_in runs whole, as does the mid block's attention.
  peak(act(top, px) + staging(act(ch, px), act(top, px), top * ch * 9));
  held_ += act(top, px) - act(ch, px);
  resnet(top, top, px);
  if (c_.mid_block_attention) peak(5 * act(top, px));  // tokens, Q, K, V, the output
  resnet(top, top, px);
  ch = top;
  const int blocks = static_cast<int>(c_.block_out_channels.size());
  for (int i = 0; i < blocks; ++i) {
    const double co = c_.block_out_channels[static_cast<std::size_t>(blocks - 1 - i)];
    for (int j = 0; j <= c_.layers_per_block; ++j) {
      resnet(ch, co, px);
      ch = co;
    }
    if (i + 1 == blocks) break;
    if (tile_ > 0) tile_ *= 2;
    const double up = act(ch, 4 * px);
    peak(up + conv3(ch, ch, 4 * px));
    held_ += up - act(ch, px);
    px *= 4;
  }
  peak(act(ch, px) + conv3(ch, c_.out_channels, px));  // conv_norm_out, conv_out
  return peak_;
}

}  // namespace

double vae_decode_footprint(const VaeConfig& c, std::int64_t frames, std::int64_t height, std::int64_t width,
                            std::size_t elt, std::int64_t tile, bool cuda) {
  if (frames <= 0) return 0;
  // pipeline/video_files: the clip's latents in f32, one call's decoded images in f32, 4 frames a call.
  constexpr std::int64_t kFramesPerCall = 4;
  const double images = static_cast<double>(std::min(frames, kFramesPerCall));
  const double out_px = static_cast<double>(height * width) * c.upscale() * c.upscale();
  const double held = arena_bytes(static_cast<double>(frames * c.latent_channels * height * width) * 4) +
                      arena_bytes(images * c.out_channels * out_px * 4);
  const bool tiled = tile > 0 && (height > tile || width > tile);
  return kVaeBlockReuse * (cuda ? kCudaVae : 1.0) * VaeWalker(c, images, elt, tiled ? tile : 0, cuda).run(held, height, width);
}

ForwardFootprint unet_footprint(const UNetConfig& c, const ForwardShape& s, const TemporalCost& temporal) {
  ForwardFootprint f = Walker(c, s, temporal).run();
  const double cuda = !s.cuda ? 1.0 : s.elt == 4 ? kCudaF32Calls : kCuda16BitCalls;
  f.activations *= kBlockReuse * cuda;
  f.workspace *= kBlockReuse * cuda;
  f.comm_buffers *= kBlockReuse * cuda;
  return f;
}

}  // namespace vinf::model
