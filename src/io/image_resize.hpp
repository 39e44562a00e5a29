// 8-bit RGB resizing as Pillow's Image.resize does it, to the byte: a separable filter whose support
// widens by the scale when shrinking, the weights of each output pixel normalised to sum 1 and held
// in fixed point (22 fraction bits), the horizontal pass first, each pass rounded and clipped to a
// byte. The references' preprocessing (CLIPImageProcessor's bicubic, diffusers' Lanczos) runs
// through it, so vinf's conditioning pixels are theirs exactly.
#pragma once

#include <cstdint>
#include <vector>

namespace vinf::io {

enum class ResizeFilter { bicubic, lanczos };

// hwc: height x width x 3 bytes; returns out_height x out_width x 3 bytes (a copy when the size is
// unchanged, as Pillow returns one).
std::vector<std::uint8_t> resize_rgb8(const std::uint8_t* hwc, std::int64_t width, std::int64_t height,
                                      std::int64_t out_width, std::int64_t out_height, ResizeFilter filter);

}  // namespace vinf::io
