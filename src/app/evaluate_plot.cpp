// evaluate.png: each series of vinf evaluate as a line plot in its own panel (top to bottom:
// frame_difference, motion, then the CLIP similarities), drawn pixel by pixel: a light grid with
// the value of each horizontal line and the pair index under the vertical ones, the boundaries as
// red vertical lines. A 3 x 5 bitmap font writes the numbers.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "app/evaluate.hpp"

namespace vinf::app {

namespace {

using Color = std::array<std::uint8_t, 3>;

constexpr std::int64_t kWidth = 800, kPanelHeight = 170, kLeft = 56, kRight = 12, kTop = 10, kBottom = 22;
constexpr int kGlyphScale = 2;
constexpr Color kGrid{225, 225, 225}, kAxis{120, 120, 120}, kText{40, 40, 40}, kBoundary{220, 40, 40};
constexpr Color kLines[] = {{31, 90, 180}, {20, 140, 60}, {150, 70, 170}, {200, 120, 20}};

// Rows of 3 bits, top first, for the characters numbers need.
int glyph_row(char c, int row) {
  static const char* const kChars = "0123456789.-e";
  static const int kRows[][5] = {{7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7}, {5, 5, 7, 1, 1},
                                 {7, 4, 7, 1, 7}, {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1}, {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7},
                                 {0, 0, 0, 0, 2}, {0, 0, 7, 0, 0}, {0, 7, 5, 6, 3}};
  for (int i = 0; kChars[i]; ++i)
    if (kChars[i] == c) return kRows[i][row];
  return 0;
}

class Canvas {
 public:
  Canvas(std::int64_t width, std::int64_t height)
      : width_(width), height_(height), rgb_(static_cast<std::size_t>(width * height * 3), 255) {}
  void set(std::int64_t x, std::int64_t y, const Color& c) {
    if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
    std::copy(c.begin(), c.end(), rgb_.begin() + (y * width_ + x) * 3);
  }
  // Bresenham's line.
  void line(std::int64_t x0, std::int64_t y0, std::int64_t x1, std::int64_t y1, const Color& c) {
    const std::int64_t dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    std::int64_t err = dx + dy;
    for (;;) {
      set(x0, y0, c);
      if (x0 == x1 && y0 == y1) return;
      const std::int64_t e2 = 2 * err;
      if (e2 >= dy) err += dy, x0 += sx;
      if (e2 <= dx) err += dx, y0 += sy;
    }
  }
  // Text whose right edge (align_right) or centre is at x, top at y.
  void text(const std::string& s, std::int64_t x, std::int64_t y, bool align_right) {
    const std::int64_t w = static_cast<std::int64_t>(s.size()) * 4 * kGlyphScale;
    std::int64_t left = align_right ? x - w : x - w / 2;
    for (char ch : s) {
      for (int row = 0; row < 5; ++row)
        for (int col = 0; col < 3; ++col)
          if (glyph_row(ch, row) & (4 >> col))
            for (int k = 0; k < kGlyphScale * kGlyphScale; ++k)
              set(left + col * kGlyphScale + k % kGlyphScale, y + row * kGlyphScale + k / kGlyphScale, kText);
      left += 4 * kGlyphScale;
    }
  }
  std::vector<std::uint8_t>& pixels() { return rgb_; }

 private:
  std::int64_t width_, height_;
  std::vector<std::uint8_t> rgb_;
};

std::string label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// A step of 1, 2 or 5 times a power of ten that gives at most `most` intervals over `span`.
double nice_step(double span, int most) {
  const double raw = span / most, p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

void draw_panel(Canvas& canvas, std::int64_t top, const std::vector<double>& v,
                const std::vector<std::int64_t>& boundaries, const Color& color) {
  const std::int64_t x0 = kLeft, x1 = kWidth - kRight, y0 = top + kTop, y1 = top + kPanelHeight - kBottom;
  double lo = std::min(0.0, *std::min_element(v.begin(), v.end()));
  double hi = std::max(lo, *std::max_element(v.begin(), v.end()));
  if (hi - lo < 1e-12) hi = lo + 1;
  const double ystep = nice_step(hi - lo, 4);
  lo = std::floor(lo / ystep) * ystep;
  hi = std::ceil(hi / ystep) * ystep;
  const auto n = static_cast<std::int64_t>(v.size());
  auto px = [&](double i) { return x0 + std::llround(n > 1 ? i * static_cast<double>(x1 - x0) / static_cast<double>(n - 1) : 0.0); };
  auto py = [&](double y) { return y1 - std::llround((y - lo) / (hi - lo) * static_cast<double>(y1 - y0)); };
  for (double y = lo; y <= hi + ystep * 1e-6; y += ystep) {
    canvas.line(x0, py(y), x1, py(y), kGrid);
    canvas.text(label(std::fabs(y) < ystep * 1e-6 ? 0.0 : y), x0 - 6, py(y) - 5, true);
  }
  const double xstep = std::max(1.0, nice_step(static_cast<double>(std::max<std::int64_t>(n - 1, 1)), 10));
  for (double i = 0; i <= static_cast<double>(n - 1); i += xstep) {
    canvas.line(px(i), y0, px(i), y1, kGrid);
    canvas.text(label(i), px(i), y1 + 6, false);
  }
  canvas.line(x0, y0, x0, y1, kAxis);
  canvas.line(x0, y1, x1, y1, kAxis);
  for (std::int64_t b : boundaries)  // pair b - 1 crosses into the clip that starts at b
    canvas.line(px(static_cast<double>(b - 1)), y0, px(static_cast<double>(b - 1)), y1, kBoundary);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t x = px(static_cast<double>(i)), y = py(v[static_cast<std::size_t>(i)]);
    if (i > 0)
      canvas.line(px(static_cast<double>(i - 1)), py(v[static_cast<std::size_t>(i - 1)]), x, y, color);
    for (int d = -1; d <= 1; ++d) canvas.set(x + d, y, color), canvas.set(x, y + d, color);
  }
}

}  // namespace

std::vector<std::uint8_t> plot_series(const Series& s, const std::vector<std::int64_t>& boundaries,
                                      std::int64_t& width, std::int64_t& height) {
  std::vector<const std::vector<double>*> panels;
  for (const auto* v : {&s.frame_difference, &s.motion, &s.clip_frame_similarity, &s.clip_first_frame_similarity})
    if (!v->empty()) panels.push_back(v);
  width = kWidth;
  height = std::max<std::int64_t>(1, static_cast<std::int64_t>(panels.size())) * kPanelHeight;
  Canvas canvas(width, height);
  for (std::size_t p = 0; p < panels.size(); ++p)
    draw_panel(canvas, static_cast<std::int64_t>(p) * kPanelHeight, *panels[p], boundaries, kLines[p % 4]);
  return std::move(canvas.pixels());
}

}  // namespace vinf::app
