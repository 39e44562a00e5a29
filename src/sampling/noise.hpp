// The noise of a generation run: the initial latents and the fresh draws of the stochastic
// schedulers, from the counter-based Philox generator (core/philox.hpp).
//   invariant: element (channel c, global frame g, pixel p) of draw k (0: the initial latents,
//              i + 1: step i) is value (g C + c) H W + p of stream k under the run's seed, so the
//              video does not depend on how many ranks share it;
//   compat:    the released code's layout: one generator per clip seeded seed + clip, drawn in
//              sequence (the initial latents as (C, F, H, W), then each step's noise as
//              (F, C, H, W)). The numbers are not PyTorch's (model-spec §6.4.7).
#pragma once

#include <cstdint>
#include <string>

#include "core/arena.hpp"
#include "ops/context.hpp"

namespace vinf::sampling {

enum class NoiseMode { invariant, compat };
const char* noise_mode_name(NoiseMode m);

class NoiseSource {
 public:
  // clip: this rank's clip index; first_frame: the global index of its first frame.
  NoiseSource(NoiseMode mode, std::uint64_t seed, int clip, std::int64_t first_frame);

  // latents: (1, C, F, H, W) f32, this clip's frames.
  void initial(ExecContext& ctx, Arena& arena, const Tensor& latents) const;
  // The standard normal draw of step i into out (1, C, F, H, W) f32.
  void step(ExecContext& ctx, Arena& arena, int i, const Tensor& out) const;

 private:
  // Fills out from a frame-major run of the stream starting at `offset`.
  void frame_major(ExecContext& ctx, Arena& arena, const Tensor& out, std::uint64_t key, std::uint64_t stream,
                   std::uint64_t offset) const;
  NoiseMode mode_;
  std::uint64_t seed_;
  int clip_;
  std::int64_t first_frame_;
};

}  // namespace vinf::sampling
