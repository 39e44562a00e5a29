// The device memory and the traffic of one UNet call, counted from the config and the input shape
// by walking the same layout the forward pass runs (as flops.hpp counts its FLOPs), without any
// tensor: what `vinf plan` reports and what a run checks before it loads weights.
//
// Memory is the peak of what the forward pass holds at once beyond its weights: the skip stack,
// the layer at work and its temporaries, as the arena hands them out (rounded to its size
// classes), the copies a backend stages (oneDNN's reordered layouts on the CPU, cuDNN's workspace
// on CUDA), the attention workspace and the temporal context's buffers. Traffic is the bytes this
// rank receives, counted as the communicators count them (mpi/communicator.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/config.hpp"
#include "model/vae_config.hpp"

namespace vinf::model {

// What a temporal module's context allocates and receives beyond the model's own tensors.
struct TemporalBytes {
  double buffers = 0;             // computed in the module: projections, keys, padded frames
  double comm_buffers = 0;        // sent and received pieces
  double received = 0;            // bytes received from other ranks
  std::int64_t full_frames = 0;   // > 0: plain full attention over this many keys (model::attend)
};

// The temporal layers' share of a call, as the context behind them runs them. This base is the
// plain model (`--vi.mode off`): self-attention over the clip, no halos, no traffic;
// infinity::ExchangeCost is Video-Infinity's.
class TemporalCost {
 public:
  virtual ~TemporalCost() = default;
  // One temporal self-attention over `rows` sequences of the clip's `frames`: x (rows, frames,
  // x_width) in, the shard's `inner` projection width, elements of `elt` bytes. `stacked`: Q, K
  // and V come from one product into one block where the context projects them (the CPU's).
  virtual TemporalBytes attention(std::int64_t rows, std::int64_t frames, std::int64_t x_width, std::int64_t inner,
                                  std::size_t elt, bool stacked = false) const;
  // Frames a TemporalConvLayer pads its clip with (both sides together).
  virtual std::int64_t conv_halo_frames() const { return 0; }
  // Filling that halo: `frame_bytes` = batch x channels x pixels x elt of one frame.
  virtual TemporalBytes conv_halo(double frame_bytes) const;
  // One temporal GroupNorm's statistics over `batch` x `groups`.
  virtual double norm_received(std::int64_t batch, int groups) const;
};

struct ForwardShape {
  std::int64_t batch = 1, frames = 1, height = 1, width = 1, text_tokens = 77;
  std::size_t elt = 4;      // bytes of the compute dtype
  int tensor_size = 1;      // --parallel.tensor: this rank holds 1/T of the heads
  bool cuda = false;        // the backend's staging: cuDNN workspace and GEMM attention, else oneDNN's copies
  int cpu_threads = 1;      // the CPU attention kernel's scratch is per thread
  bool cpu_bf16 = false;    // --dtype bf16 on the CPU: products and convolutions copy their input in bf16
  bool cpu_matmul_scratch = true;  // oneDNN's AVX-512 matrix products pack weights per thread (AVX2: none)
};

struct ForwardFootprint {
  // At the peak: activations (skip stack, layer tensors), workspace (attention, convolution
  // staging), the temporal context's communication buffers. Bytes.
  double activations = 0, workspace = 0, comm_buffers = 0;
  double total() const { return activations + workspace + comm_buffers; }
  // Bytes received per call: the temporal layers over the clip group, the row-parallel
  // projections' all-reduces over the tensor group (in f32, as CommTensorGroup sums).
  double clip_received = 0, tensor_received = 0;
};

ForwardFootprint unet_footprint(const UNetConfig& c, const ForwardShape& s, const TemporalCost& temporal);

// Peak bytes of decoding `frames` latents (h x w) in calls of 4 frames (pipeline/video_files),
// beyond the VAE's weights; tile > 0: the convolutions over tile x tile latent pixels.
double vae_decode_footprint(const VaeConfig& c, std::int64_t frames, std::int64_t height, std::int64_t width,
                            std::size_t elt, std::int64_t tile, bool cuda);

// A tensor's bytes as the arena hands them out (Arena::round_size).
double arena_bytes(double bytes);

}  // namespace vinf::model
