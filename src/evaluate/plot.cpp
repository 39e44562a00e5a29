// evaluate.png: each series of vinf evaluate as a line plot in its own panel (top to bottom:
// frame_difference, motion, then the CLIP similarities), drawn pixel by pixel: a title naming the
// series and its unit, a light grid with the value of each horizontal line and the pair index under
// the vertical ones, the boundaries as red vertical lines (with a legend in the first panel). A 3 x 5
// bitmap font writes the titles and numbers.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "evaluate/evaluate.hpp"

namespace vinf::evaluate {

namespace {

using Color = std::array<std::uint8_t, 3>;

constexpr std::int64_t kWidth = 800, kPanelHeight = 190, kLeft = 56, kRight = 12, kTop = 30, kBottom = 22;
constexpr std::int64_t kTitleTop = 8;  // the title strip: rows kTitleTop .. kTitleTop + 5 * kGlyphScale of a panel
constexpr int kGlyphScale = 2;
constexpr Color kGrid{225, 225, 225}, kAxis{120, 120, 120}, kText{40, 40, 40}, kBoundary{220, 40, 40};
constexpr Color kLines[] = {{31, 90, 180}, {20, 140, 60}, {150, 70, 170}, {200, 120, 20}};

// Rows of 3 bits (4 = left column), top first: digits and the rest of what "%.3g" writes, and
// the letters and punctuation of the titles. Lowercase letters are 4 rows high, ascenders reach the top row.
struct Glyph {
  char c;
  int rows[5];
};
constexpr Glyph kFont[] = {
    {'0', {7, 5, 5, 5, 7}}, {'1', {2, 6, 2, 2, 7}}, {'2', {7, 1, 7, 4, 7}}, {'3', {7, 1, 7, 1, 7}},
    {'4', {5, 5, 7, 1, 1}}, {'5', {7, 4, 7, 1, 7}}, {'6', {7, 4, 7, 5, 7}}, {'7', {7, 1, 1, 1, 1}},
    {'8', {7, 5, 7, 5, 7}}, {'9', {7, 5, 7, 1, 7}}, {'.', {0, 0, 0, 0, 2}}, {'-', {0, 0, 7, 0, 0}},
    {'+', {0, 2, 7, 2, 0}}, {'e', {0, 7, 5, 6, 3}}, {'a', {0, 6, 1, 7, 7}}, {'b', {4, 6, 5, 5, 6}},
    {'c', {0, 3, 4, 4, 3}}, {'d', {1, 3, 5, 5, 3}}, {'f', {1, 2, 7, 2, 2}}, {'h', {4, 6, 5, 5, 5}},
    {'i', {2, 0, 2, 2, 2}}, {'l', {2, 2, 2, 2, 1}}, {'m', {0, 7, 7, 5, 5}}, {'n', {0, 6, 5, 5, 5}},
    {'o', {0, 2, 5, 5, 2}}, {'p', {0, 6, 5, 6, 4}}, {'r', {0, 5, 6, 4, 4}}, {'s', {0, 3, 6, 1, 6}},
    {'t', {2, 7, 2, 2, 1}}, {'u', {0, 5, 5, 5, 3}}, {'w', {0, 5, 5, 7, 7}}, {'x', {0, 5, 2, 2, 5}},
    {'y', {0, 5, 5, 2, 4}}, {'C', {7, 4, 4, 4, 7}}, {'I', {7, 2, 2, 2, 7}}, {'L', {4, 4, 4, 4, 7}},
    {'P', {6, 5, 6, 4, 4}}, {'(', {1, 2, 2, 2, 1}}, {')', {4, 2, 2, 2, 4}}, {',', {0, 0, 0, 2, 4}},
    {'/', {1, 1, 2, 4, 4}}, {':', {0, 2, 0, 2, 0}}};

// A character the font lacks draws as a space.
int glyph_row(char c, int row) {
  for (const Glyph& g : kFont)
    if (g.c == c) return g.rows[row];
  return 0;
}

enum class Align { left, centre, right };

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
  // Text whose left edge, centre or right edge (align) is at x, top at y.
  void text(const std::string& s, std::int64_t x, std::int64_t y, Align align) {
    const std::int64_t w = static_cast<std::int64_t>(s.size()) * 4 * kGlyphScale;
    std::int64_t left = align == Align::left ? x : align == Align::right ? x - w : x - w / 2;
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

struct Panel {
  const std::vector<double>* values;
  std::string title;
};

// The series that are not empty, each with a title that names its measure and unit.
std::vector<Panel> panels_of(const Series& s, const std::string& space) {
  const bool latents = space == "latents";
  std::vector<Panel> all = {
      {&s.frame_difference, latents ? "frame difference (mean abs, latents)" : "frame difference (mean abs, 0-255)"},
      {&s.motion, latents ? "motion (latent px)" : "motion (px)"},
      {&s.clip_frame_similarity, "CLIP similarity, frame to frame"},
      {&s.clip_first_frame_similarity, "CLIP similarity to frame 0"}};
  std::vector<Panel> panels;
  for (Panel& p : all)
    if (!p.values->empty()) panels.push_back(std::move(p));
  return panels;
}

// A red tick and what it means, at the right of the title strip.
void draw_boundary_legend(Canvas& canvas, std::int64_t top) {
  const std::string legend = "clip/window boundaries";
  const std::int64_t x1 = kWidth - kRight, y = top + kTitleTop;
  canvas.text(legend, x1, y, Align::right);
  const std::int64_t tick = x1 - static_cast<std::int64_t>(legend.size()) * 4 * kGlyphScale - 8;
  for (std::int64_t d = 0; d < 2; ++d) canvas.line(tick + d, y - 1, tick + d, y + 5 * kGlyphScale, kBoundary);
}

// x_first: the number the first value's column is labelled with.
void draw_panel(Canvas& canvas, std::int64_t top, const std::vector<double>& v,
                const std::vector<std::int64_t>& boundaries, const Color& color, double x_first = 0) {
  const std::int64_t x0 = kLeft, x1 = kWidth - kRight, y0 = top + kTop, y1 = top + kPanelHeight - kBottom;
  // (Values that are not finite are left out of the scale and the line.)
  double lo = 0, hi = 0;
  for (double x : v)
    if (std::isfinite(x)) lo = std::min(lo, x), hi = std::max(hi, x);
  if (hi - lo < 1e-12) hi = lo + 1;
  const double ystep = nice_step(hi - lo, 4);
  lo = std::floor(lo / ystep) * ystep;
  hi = std::ceil(hi / ystep) * ystep;
  const auto n = static_cast<std::int64_t>(v.size());
  auto px = [&](double i) {
    return x0 + std::llround(n > 1 ? i * static_cast<double>(x1 - x0) / static_cast<double>(n - 1) : 0.0);
  };
  auto py = [&](double y) { return y1 - std::llround((y - lo) / (hi - lo) * static_cast<double>(y1 - y0)); };
  for (double y = lo; y <= hi + ystep * 1e-6; y += ystep) {
    canvas.line(x0, py(y), x1, py(y), kGrid);
    canvas.text(label(std::fabs(y) < ystep * 1e-6 ? 0.0 : y), x0 - 6, py(y) - 5, Align::right);
  }
  const double xstep = std::max(1.0, nice_step(static_cast<double>(std::max<std::int64_t>(n - 1, 1)), 10));
  for (double i = 0; i <= static_cast<double>(n - 1); i += xstep) {
    canvas.line(px(i), y0, px(i), y1, kGrid);
    canvas.text(label(i + x_first), px(i), y1 + 6, Align::centre);
  }
  canvas.line(x0, y0, x0, y1, kAxis);
  canvas.line(x0, y1, x1, y1, kAxis);
  for (std::int64_t b : boundaries)  // pair b - 1 crosses into the clip that starts at b
    canvas.line(px(static_cast<double>(b - 1)), y0, px(static_cast<double>(b - 1)), y1, kBoundary);
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[static_cast<std::size_t>(i)])) continue;
    const std::int64_t x = px(static_cast<double>(i)), y = py(v[static_cast<std::size_t>(i)]);
    if (i > 0 && std::isfinite(v[static_cast<std::size_t>(i - 1)]))
      canvas.line(px(static_cast<double>(i - 1)), py(v[static_cast<std::size_t>(i - 1)]), x, y, color);
    for (int d = -1; d <= 1; ++d) canvas.set(x + d, y, color), canvas.set(x, y + d, color);
  }
}

}  // namespace

std::vector<std::uint8_t> plot_series(const Series& s, const std::string& space,
                                      const std::vector<std::int64_t>& boundaries, std::int64_t& width,
                                      std::int64_t& height) {
  const std::vector<Panel> panels = panels_of(s, space);
  width = kWidth;
  height = std::max<std::int64_t>(1, static_cast<std::int64_t>(panels.size())) * kPanelHeight;
  Canvas canvas(width, height);
  for (std::size_t p = 0; p < panels.size(); ++p) {
    const std::int64_t top = static_cast<std::int64_t>(p) * kPanelHeight;
    canvas.text(panels[p].title, kLeft, top + kTitleTop, Align::left);
    draw_panel(canvas, top, *panels[p].values, boundaries, kLines[p % 4]);
  }
  if (!panels.empty() && !boundaries.empty()) draw_boundary_legend(canvas, 0);
  return std::move(canvas.pixels());
}

std::vector<std::uint8_t> plot_curve(const std::string& title, const std::vector<double>& values, double x_first,
                                     std::int64_t& width, std::int64_t& height) {
  width = kWidth;
  height = kPanelHeight;
  Canvas canvas(width, height);
  canvas.text(title, kLeft, kTitleTop, Align::left);
  draw_panel(canvas, 0, values, {}, kLines[0], x_first);
  return std::move(canvas.pixels());
}

}  // namespace vinf::evaluate
