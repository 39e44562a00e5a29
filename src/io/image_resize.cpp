#include "io/image_resize.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace vinf::io {

namespace {

constexpr int kPilPrecisionBits = 32 - 8 - 2;

// The bicubic kernel with a = -0.5.
double pil_bicubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double pil_sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return std::sin(x) / x;
}

// Lanczos with three lobes.
double pil_lanczos(double x) { return -3.0 <= x && x < 3.0 ? pil_sinc(x) * pil_sinc(x / 3) : 0.0; }

// One axis's taps: for each output sample the first input sample, the count, and the fixed-point
// weights (ksize per sample).
struct PilTaps {
  std::vector<std::int64_t> first, count;
  std::vector<std::int32_t> weights;
  std::int64_t ksize = 0;
};

PilTaps pil_taps(std::int64_t in_size, std::int64_t out_size, ResizeFilter filter) {
  const double support_unit = filter == ResizeFilter::bicubic ? 2.0 : 3.0;
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filterscale = std::max(scale, 1.0), support = support_unit * filterscale;
  PilTaps t;
  t.ksize = static_cast<std::int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(static_cast<std::size_t>(out_size));
  t.count.resize(static_cast<std::size_t>(out_size));
  t.weights.assign(static_cast<std::size_t>(out_size * t.ksize), 0);
  std::vector<double> k(static_cast<std::size_t>(t.ksize));
  for (std::int64_t o = 0; o < out_size; ++o) {
    const double center = (static_cast<double>(o) + 0.5) * scale, ss = 1.0 / filterscale;
    // Truncation toward zero, as C's (int) cast.
    auto xmin = static_cast<std::int64_t>(center - support + 0.5);
    xmin = std::max<std::int64_t>(xmin, 0);
    auto xmax = static_cast<std::int64_t>(center + support + 0.5);
    xmax = std::min(xmax, in_size) - xmin;
    double total = 0;
    for (std::int64_t x = 0; x < xmax; ++x) {
      const double arg = (static_cast<double>(x + xmin) - center + 0.5) * ss;
      k[static_cast<std::size_t>(x)] = filter == ResizeFilter::bicubic ? pil_bicubic(arg) : pil_lanczos(arg);
      total += k[static_cast<std::size_t>(x)];
    }
    for (std::int64_t x = 0; x < xmax; ++x) {
      double w = k[static_cast<std::size_t>(x)];
      if (total != 0.0) w /= total;
      const double fixed = w * static_cast<double>(1 << kPilPrecisionBits);
      t.weights[static_cast<std::size_t>(o * t.ksize + x)] =
          static_cast<std::int32_t>(w < 0 ? -0.5 + fixed : 0.5 + fixed);
    }
    t.first[static_cast<std::size_t>(o)] = xmin;
    t.count[static_cast<std::size_t>(o)] = xmax;
  }
  return t;
}

std::uint8_t pil_clip8(std::int32_t v) {
  const std::int32_t shifted = v >> kPilPrecisionBits;
  return static_cast<std::uint8_t>(std::clamp<std::int32_t>(shifted, 0, 255));
}

// One pass along an axis: `lines` lines of `n_in` pixels, `pixel_in` bytes apart along the axis and
// `line_in` between lines; the output alike with the taps' out size.
void pil_resample(const std::uint8_t* in, std::int64_t lines, std::int64_t line_in, std::int64_t pixel_in,
                  const PilTaps& t, std::uint8_t* out, std::int64_t line_out, std::int64_t pixel_out) {
  const auto out_size = static_cast<std::int64_t>(t.first.size());
  for (std::int64_t l = 0; l < lines; ++l)
    for (std::int64_t o = 0; o < out_size; ++o) {
      const std::int32_t* w = t.weights.data() + o * t.ksize;
      const std::int64_t first = t.first[static_cast<std::size_t>(o)], count = t.count[static_cast<std::size_t>(o)];
      for (int c = 0; c < 3; ++c) {
        std::int32_t sum = 1 << (kPilPrecisionBits - 1);
        for (std::int64_t x = 0; x < count; ++x) sum += in[l * line_in + (first + x) * pixel_in + c] * w[x];
        out[l * line_out + o * pixel_out + c] = pil_clip8(sum);
      }
    }
}

}  // namespace

std::vector<std::uint8_t> resize_rgb8(const std::uint8_t* hwc, std::int64_t width, std::int64_t height,
                                      std::int64_t out_width, std::int64_t out_height, ResizeFilter filter) {
  VINF_CHECK(width > 0 && height > 0 && out_width > 0 && out_height > 0, "resize_rgb8: ", width, "x", height, " to ",
             out_width, "x", out_height);
  std::vector<std::uint8_t> current(hwc, hwc + width * height * 3);
  std::int64_t w = width;
  if (out_width != width) {
    const PilTaps t = pil_taps(width, out_width, filter);
    std::vector<std::uint8_t> next(static_cast<std::size_t>(out_width * height * 3));
    pil_resample(current.data(), height, width * 3, 3, t, next.data(), out_width * 3, 3);
    current.swap(next);
    w = out_width;
  }
  if (out_height != height) {
    const PilTaps t = pil_taps(height, out_height, filter);
    std::vector<std::uint8_t> next(static_cast<std::size_t>(out_width * out_height * 3));
    // Columns as lines: pixel x of every row, rows w * 3 bytes apart.
    pil_resample(current.data(), w, 3, w * 3, t, next.data(), 3, out_width * 3);
    current.swap(next);
  }
  return current;
}

}  // namespace vinf::io
