#include "model/conv_tiles.hpp"

#include "core/arena.hpp"
#include "ops/elementwise.hpp"
#include "ops/resample.hpp"

namespace vinf::model {

OwnedTensor halo_input(ExecContext& ctx, DType dtype, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                       TileRegion t, const TileFill& fill) {
  OwnedTensor in = ctx.arena->empty(dtype, {n, c, t.h + 2, t.w + 2});
  const std::int64_t a0 = std::max<std::int64_t>(t.r0 - 1, 0), a1 = std::min(t.r0 + t.h + 1, h);
  const std::int64_t b0 = std::max<std::int64_t>(t.c0 - 1, 0), b1 = std::min(t.c0 + t.w + 1, w);
  if (a1 - a0 < t.h + 2 || b1 - b0 < t.w + 2) ops::fill(ctx, in, 0.0);
  fill(in.view().slice(2, a0 - (t.r0 - 1), a1 - a0).slice(3, b0 - (t.c0 - 1), b1 - b0), TileRegion{a0, a1 - a0, b0, b1 - b0});
  return in;
}

void upsampled_region(ExecContext& ctx, const Tensor& src, TileRegion r, const Tensor& dst) {
  const std::int64_t sr = r.r0 / 2, sc = r.c0 / 2;
  const std::int64_t sh = (r.r0 + r.h + 1) / 2 - sr, sw = (r.c0 + r.w + 1) / 2 - sc;
  const OwnedTensor u = ctx.arena->empty(src.dtype, {src.size(0), src.size(1), 2 * sh, 2 * sw});
  ops::upsample_nearest(ctx, src.slice(2, sr, sh).slice(3, sc, sw), u);
  ops::copy(ctx, u.view().slice(2, r.r0 - 2 * sr, r.h).slice(3, r.c0 - 2 * sc, r.w), dst);
}

}  // namespace vinf::model
