// Spatial tiles for the VAEs' tiled decoding: the regions of an image, row by row, and the input
// of a 3x3 convolution (padding 1) over one output region, made on the spot from whole-image
// tensors. Both VAEs (VideoCrafter2's and Wan2.1's) run their 3x3 convolutions over these tiles, so
// that the convolutions' working memory is bounded by the tile and not by the frame.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

#include "core/arena.hpp"
#include "core/tensor.hpp"
#include "ops/context.hpp"

namespace vinf::model {

// Rows [r0, r0 + h) and columns [c0, c0 + w) of an image.
struct TileRegion {
  std::int64_t r0 = 0, h = 0, c0 = 0, w = 0;
};

// Calls f(region) for the tiles of an h x w image, row by row; the last row and column of tiles
// may be smaller than tile.
template <class F>
void for_tiles(std::int64_t h, std::int64_t w, std::int64_t tile, F&& f) {
  for (std::int64_t r0 = 0; r0 < h; r0 += tile)
    for (std::int64_t c0 = 0; c0 < w; c0 += tile) f(TileRegion{r0, std::min(tile, h - r0), c0, std::min(tile, w - c0)});
}

// Writes into dst the image's values at region r (dst has r's height and width, dims 2 and 3).
using TileFill = std::function<void(const Tensor& dst, TileRegion r)>;

// The input of a 3x3 convolution with padding 1 whose output is region t of an h x w image:
// (n, c, t.h + 2, t.w + 2) of `dtype`, the tile and a one-pixel halo. fill writes the part inside
// the image; the halo beyond it is zeros.
OwnedTensor halo_input(ExecContext& ctx, DType dtype, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                       TileRegion t, const TileFill& fill);

// Region r of the nearest x2 upsampling of src (n, c, h, w) into dst (n, c, r.h, r.w): the source
// rows and columns that cover it, upsampled and cropped.
void upsampled_region(ExecContext& ctx, const Tensor& src, TileRegion r, const Tensor& dst);

}  // namespace vinf::model
