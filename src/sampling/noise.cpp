#include "sampling/noise.hpp"

#include "core/error.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"

namespace vinf::sampling {

const char* noise_mode_name(NoiseMode m) { return m == NoiseMode::compat ? "compat" : "invariant"; }

NoiseSource::NoiseSource(NoiseMode mode, std::uint64_t seed, int clip, std::int64_t first_frame)
    : mode_(mode), seed_(seed), clip_(clip), first_frame_(first_frame) {}

void NoiseSource::frame_major(ExecContext& ctx, Arena& arena, const Tensor& out, std::uint64_t key,
                              std::uint64_t stream, std::uint64_t offset) const {
  VINF_CHECK(out.rank() == 5 && out.size(0) == 1, "noise: latents must be (1, C, F, H, W), got ", out.shape.str());
  const std::int64_t c = out.size(1), f = out.size(2), h = out.size(3), w = out.size(4);
  OwnedTensor scratch = arena.empty(DType::f32, {1, f, c, h, w});
  ops::normal(ctx, scratch, key, stream, offset);
  ops::copy(ctx, scratch, out.permute({0, 2, 1, 3, 4}));
}

void NoiseSource::initial(ExecContext& ctx, Arena& arena, const Tensor& latents) const {
  if (mode_ == NoiseMode::compat) {
    ops::normal(ctx, latents, seed_ + static_cast<std::uint64_t>(clip_), 0, 0);
    return;
  }
  const std::int64_t frame = latents.size(1) * latents.size(3) * latents.size(4);
  frame_major(ctx, arena, latents, seed_, 0, static_cast<std::uint64_t>(first_frame_ * frame));
}

void NoiseSource::step(ExecContext& ctx, Arena& arena, int i, const Tensor& out) const {
  VINF_CHECK(i >= 0, "noise: step ", i);
  if (mode_ == NoiseMode::compat) {
    const auto n = static_cast<std::uint64_t>(out.numel());
    frame_major(ctx, arena, out, seed_ + static_cast<std::uint64_t>(clip_), 0, n * (static_cast<std::uint64_t>(i) + 1));
    return;
  }
  const std::int64_t frame = out.size(1) * out.size(3) * out.size(4);
  frame_major(ctx, arena, out, seed_, static_cast<std::uint64_t>(i) + 1, static_cast<std::uint64_t>(first_frame_ * frame));
}

}  // namespace vinf::sampling
