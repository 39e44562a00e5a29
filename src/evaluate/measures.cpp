// The measures of vinf evaluate on plain arrays: frame differences, block-matching motion, the
// boundaries and the seams at them.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "evaluate/evaluate.hpp"
#include "core/error.hpp"

namespace vinf::evaluate {

Plane gray_from_rgb8(const std::uint8_t* hwc, std::int64_t width, std::int64_t height) {
  Plane p{width, height, std::vector<float>(static_cast<std::size_t>(width * height))};
  for (std::int64_t i = 0; i < width * height; ++i)
    p.values[static_cast<std::size_t>(i)] = 0.299f * hwc[3 * i] + 0.587f * hwc[3 * i + 1] + 0.114f * hwc[3 * i + 2];
  return p;
}

Plane gray_from_chw(const float* chw, std::int64_t channels, std::int64_t height, std::int64_t width) {
  const std::int64_t n = height * width;
  Plane p{width, height, std::vector<float>(static_cast<std::size_t>(n), 0.f)};
  for (std::int64_t c = 0; c < channels; ++c)
    for (std::int64_t i = 0; i < n; ++i) p.values[static_cast<std::size_t>(i)] += chw[c * n + i];
  for (float& v : p.values) v /= static_cast<float>(channels);
  return p;
}

double mean_abs_difference(const float* a, const float* b, std::int64_t n) {
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += std::fabs(static_cast<double>(a[i]) - b[i]);
  return n > 0 ? sum / static_cast<double>(n) : 0.0;
}

double mean_abs_difference(const std::uint8_t* a, const std::uint8_t* b, std::int64_t n) {
  std::int64_t sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += std::abs(static_cast<int>(a[i]) - static_cast<int>(b[i]));
  return n > 0 ? static_cast<double>(sum) / static_cast<double>(n) : 0.0;
}

std::int64_t motion_factor(const Plane& p, const MotionSettings& s) {
  const std::int64_t side = std::max(p.width, p.height);
  return std::max<std::int64_t>(1, (side + s.max_side - 1) / s.max_side);
}

Plane downscale(const Plane& p, std::int64_t factor) {
  if (factor == 1) return p;
  Plane d{p.width / factor, p.height / factor, {}};
  d.values.assign(static_cast<std::size_t>(d.width * d.height), 0.f);
  const float scale = 1.f / static_cast<float>(factor * factor);
  for (std::int64_t y = 0; y < d.height; ++y)
    for (std::int64_t x = 0; x < d.width; ++x) {
      float sum = 0;
      for (std::int64_t dy = 0; dy < factor; ++dy)
        for (std::int64_t dx = 0; dx < factor; ++dx)
          sum += p.values[static_cast<std::size_t>((y * factor + dy) * p.width + x * factor + dx)];
      d.values[static_cast<std::size_t>(y * d.width + x)] = sum * scale;
    }
  return d;
}

double block_motion(const Plane& a_in, const Plane& b_in, const MotionSettings& s) {
  VINF_CHECK(a_in.width == b_in.width && a_in.height == b_in.height, "block_motion: planes of different sizes");
  const std::int64_t factor = motion_factor(a_in, s);
  const Plane a = downscale(a_in, factor), b = downscale(b_in, factor);
  const std::int64_t bs = s.block, r = s.search;
  double total = 0;
  std::int64_t blocks = 0;
  // Blocks on a grid that keeps every displacement of their search window inside the frame.
  for (std::int64_t y0 = r; y0 + bs + r <= a.height; y0 += bs)
    for (std::int64_t x0 = r; x0 + bs + r <= a.width; x0 += bs) {
      double best = std::numeric_limits<double>::infinity();
      std::int64_t best_len2 = 0;
      for (std::int64_t dy = -r; dy <= r; ++dy)
        for (std::int64_t dx = -r; dx <= r; ++dx) {
          double sad = 0;
          for (std::int64_t y = 0; y < bs; ++y) {
            const float* pa = a.values.data() + (y0 + y) * a.width + x0;
            const float* pb = b.values.data() + (y0 + y + dy) * b.width + x0 + dx;
            for (std::int64_t x = 0; x < bs; ++x) sad += std::fabs(pa[x] - pb[x]);
          }
          const std::int64_t len2 = dx * dx + dy * dy;
          if (sad < best || (sad == best && len2 < best_len2)) {
            best = sad;
            best_len2 = len2;
          }
        }
      total += std::sqrt(static_cast<double>(best_len2)) * static_cast<double>(factor);
      ++blocks;
    }
  return blocks > 0 ? total / static_cast<double>(blocks) : 0.0;
}

void check_boundaries(const std::vector<std::int64_t>& boundaries, std::int64_t frames, const std::string& source) {
  for (std::size_t i = 0; i < boundaries.size(); ++i) {
    const std::int64_t b = boundaries[i];
    VINF_INPUT_CHECK(b > 0 && b < frames, source, ": boundary ", b, " is outside 1..", frames - 1, " (the video has ",
                     frames, " frames; a boundary is the first frame of a new clip)");
    VINF_INPUT_CHECK(i == 0 || b > boundaries[i - 1], source, ": boundary ", b, " does not follow ", boundaries[i - 1],
                     "; give the boundaries strictly increasing");
  }
}

std::vector<std::int64_t> parse_boundaries(const std::string& list, std::int64_t frames) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    const std::string range =
        frames > 0 ? " in 1.." + std::to_string(frames - 1) + " (the video has " + std::to_string(frames) + " frames)"
                   : " (frames where a new clip starts)";
    VINF_INPUT_CHECK(!item.empty() && used == item.size() && item.find_first_of(" \t+") == std::string::npos,
                     "--boundaries: '", item, "' is not a frame number; give comma-separated integers", range,
                     ", e.g. --boundaries 16,32");
    out.push_back(v);
    start = comma + 1;
  }
  if (frames > 0) {
    check_boundaries(out, frames, "--boundaries");
  } else {  // the frame count is not known yet: what does not depend on it
    for (std::size_t i = 0; i < out.size(); ++i) {
      VINF_INPUT_CHECK(out[i] > 0, "--boundaries: boundary ", out[i], " is not a frame after the first (b > 0)");
      VINF_INPUT_CHECK(i == 0 || out[i] > out[i - 1], "--boundaries: boundary ", out[i], " does not follow ",
                       out[i - 1], "; give the boundaries strictly increasing");
    }
  }
  return out;
}

SeamValue seam_value(const std::vector<double>& series, const std::vector<std::int64_t>& boundaries, std::int64_t b) {
  SeamValue s;
  s.value = series.at(static_cast<std::size_t>(b - 1));
  double sum = 0;
  std::int64_t count = 0;
  for (std::size_t i = 0; i < series.size(); ++i) {
    // Pair i (frames i -> i + 1) crosses boundary c when i + 1 == c.
    if (std::binary_search(boundaries.begin(), boundaries.end(), static_cast<std::int64_t>(i) + 1)) continue;
    sum += series[i];
    ++count;
  }
  if (count > 0) s.inside_mean = sum / static_cast<double>(count);
  if (s.inside_mean && *s.inside_mean != 0) s.ratio = s.value / *s.inside_mean;
  return s;
}

}  // namespace vinf::evaluate
