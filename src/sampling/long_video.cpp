#include "sampling/long_video.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace vinf::sampling {

const char* long_mode_name(LongMode m) {
  switch (m) {
    case LongMode::clips: return "clips";
    case LongMode::windows: return "windows";
    case LongMode::fifo: return "fifo";
  }
  return "?";
}

LongMode parse_long_mode(const std::string& name) {
  for (LongMode m : {LongMode::clips, LongMode::windows, LongMode::fifo})
    if (name == long_mode_name(m)) return m;
  VINF_INPUT_FAIL("--long.mode must be clips (Video-Infinity), windows (sliding windows with blended overlaps) or ",
                  "fifo (FIFO-Diffusion), got '", name, "'");
}

const char* fifo_grid_name(FifoGrid g) { return g == FifoGrid::released ? "released" : "config"; }

FifoGrid parse_fifo_grid(const std::string& name) {
  if (name == "released") return FifoGrid::released;
  if (name == "config") return FifoGrid::config;
  VINF_INPUT_FAIL("--long.fifo-grid must be released (the FIFO-Diffusion code's DDIM grid) or config (the model's ",
                  "scheduler config's), got '", name, "'");
}

const char* blend_name(Blend b) { return b == Blend::linear ? "linear" : "uniform"; }

Blend parse_blend(const std::string& name) {
  if (name == "linear") return Blend::linear;
  if (name == "uniform") return Blend::uniform;
  VINF_INPUT_FAIL("--long.blend must be linear or uniform, got '", name, "'");
}

std::vector<FrameSpan> sliding_windows(std::int64_t frames, std::int64_t window, std::int64_t stride) {
  VINF_CHECK(frames >= 1 && window >= 1 && stride >= 1 && stride <= window, "sliding_windows: ", frames,
             " frames, window ", window, ", stride ", stride);
  if (frames <= window) return {{0, frames}};
  std::vector<FrameSpan> w;
  std::int64_t first = 0;
  for (; first + window < frames; first += stride) w.push_back({first, window});
  w.push_back({frames - window, window});
  return w;
}

std::vector<std::vector<float>> blend_weights(const std::vector<FrameSpan>& windows, Blend blend) {
  std::int64_t frames = 0;
  for (const FrameSpan& w : windows) frames = std::max(frames, w.end());
  std::vector<std::vector<double>> raw(windows.size());
  std::vector<double> total(static_cast<std::size_t>(frames), 0.0);
  for (std::size_t i = 0; i < windows.size(); ++i) {
    const FrameSpan& w = windows[i];
    const std::int64_t before = i > 0 ? std::max<std::int64_t>(0, windows[i - 1].end() - w.first) : 0;
    const std::int64_t after = i + 1 < windows.size() ? std::max<std::int64_t>(0, w.end() - windows[i + 1].first) : 0;
    raw[i].resize(static_cast<std::size_t>(w.count));
    for (std::int64_t j = 0; j < w.count; ++j) {
      double a = 1.0;
      if (blend == Blend::linear) {
        if (j < before) a = std::min(a, static_cast<double>(j + 1) / static_cast<double>(before + 1));
        if (j >= w.count - after) a = std::min(a, static_cast<double>(w.count - j) / static_cast<double>(after + 1));
      }
      raw[i][static_cast<std::size_t>(j)] = a;
      total[static_cast<std::size_t>(w.first + j)] += a;
    }
  }
  std::vector<std::vector<float>> weights(windows.size());
  for (std::size_t i = 0; i < windows.size(); ++i) {
    weights[i].resize(raw[i].size());
    for (std::size_t j = 0; j < raw[i].size(); ++j)
      weights[i][j] = static_cast<float>(raw[i][j] / total[static_cast<std::size_t>(windows[i].first) + j]);
  }
  return weights;
}

FrameSpan share(std::int64_t items, int ranks, int rank) {
  const auto at = [&](int r) { return items * r / ranks; };
  return {at(rank), at(rank + 1) - at(rank)};
}

FifoPlan::FifoPlan(int window, int partitions, bool lookahead) : f_(window), n_(partitions), lookahead_(lookahead) {
  VINF_INPUT_CHECK(window >= 2, "--long.fifo-window must be at least 2 frames, got ", window);
  VINF_INPUT_CHECK(partitions >= 1, "--long.fifo-partitions must be at least 1, got ", partitions);
  VINF_INPUT_CHECK(!lookahead || window % 2 == 0, "--long.fifo-lookahead overlaps the partitions by half a window: ",
                   "--long.fifo-window must be even, got ", window);
  // One schedule step per queue level: f x n steps, as many as --sampler.steps allows.
  const std::int64_t levels = std::int64_t{window} * partitions;
  VINF_INPUT_CHECK(levels <= kMaxFifoLevels, "--long.fifo-window ", window, " x --long.fifo-partitions ", partitions,
                   " = ", levels, " queue levels, each a step of the schedule: at most ", kMaxFifoLevels);
  const int half = f_ / 2;
  if (lookahead_) {
    for (int p = 0; p < 2 * n_; ++p) {
      windows_.push_back({p * half, f_});
      kept_.push_back({p * half + half, f_ - half});
    }
  } else {
    for (int p = 0; p < n_; ++p) {
      windows_.push_back({p * f_, f_});
      kept_.push_back({p * f_, f_});
    }
  }
}

int FifoPlan::base_frame(int q) const { return std::max(0, level(q) - (steps() - f_)); }

std::vector<std::int64_t> fifo_prompt_ends(std::int64_t frames, int prompts, const std::vector<std::int64_t>& lengths) {
  std::vector<std::int64_t> ends;
  if (lengths.empty()) {
    // Frame o takes prompt int(o / frames x prompts): prompt p ends at the first frame past it.
    for (int p = 0; p < prompts; ++p) {
      std::int64_t end = p == 0 ? 0 : ends.back();
      while (end < frames && end * prompts / frames <= p) ++end;
      ends.push_back(end);
    }
    return ends;
  }
  VINF_INPUT_CHECK(static_cast<std::int64_t>(lengths.size()) == prompts, "--long.fifo-prompt-frames gives ",
                   lengths.size(), " length(s) for ", prompts, " prompt(s): give one per prompt");
  std::int64_t end = 0;
  for (std::int64_t l : lengths) {
    VINF_INPUT_CHECK(l >= 1, "--long.fifo-prompt-frames: every prompt needs at least 1 frame, got ", l);
    ends.push_back(end += l);
  }
  VINF_INPUT_CHECK(end == frames, "--long.fifo-prompt-frames adds up to ", end, " frames; the video has ", frames,
                   " (--video.frames)");
  return ends;
}

int fifo_prompt(const std::vector<std::int64_t>& ends, std::int64_t frame) {
  int p = 0;
  while (p + 1 < static_cast<int>(ends.size()) && frame >= ends[static_cast<std::size_t>(p)]) ++p;
  return p;
}

void check_prompts_used(std::int64_t prompts, std::int64_t parts, const std::string& part_name,
                        const std::string& from) {
  // P <= N reaches every prompt: int(r / N * P) steps by P / N <= 1 as r counts up.
  VINF_INPUT_CHECK(prompts <= parts, from, ": ", prompts, " prompts for ", parts, " ", part_name, parts == 1 ? "" : "s",
                   ": ", part_name, " r of ", parts, " takes prompt int(r / ", parts, " x ", prompts, "), so ",
                   prompts - parts, " prompt(s) would never be used; give at most ", parts, " (one per ", part_name,
                   "), or run on more ranks. A prompt with spaces is one value: quote it");
}

}  // namespace vinf::sampling
