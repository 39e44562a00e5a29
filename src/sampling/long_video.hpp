// Long videos by methods other than Video-Infinity's clips, on the same model (design.md §5):
//   windows: sliding windows with blended overlaps (chunked inference, co-denoising): at every
//            step the plain model runs on overlapping windows of its training length and the
//            predictions are blended where windows overlap;
//   fifo:    FIFO-Diffusion (arXiv 2405.11473): diagonal denoising of a queue of frames at
//            increasing noise levels, one step per iteration with a timestep per frame; the clean
//            frame at the head leaves, fresh noise enters at the tail; latent partitioning splits
//            the queue into blocks of the model's length, lookahead denoising overlaps them by half.
// This file holds their arithmetic only (which frames each model call sees, at which step, with
// which weight), so that it can be checked without a model; pipeline/long_methods runs them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vinf::sampling {

enum class LongMode { clips, windows, fifo };
const char* long_mode_name(LongMode m);
// "clips" | "windows" | "fifo"; throws vinf::InputError naming them.
LongMode parse_long_mode(const std::string& name);

enum class Blend { linear, uniform };
const char* blend_name(Blend b);
Blend parse_blend(const std::string& name);

// FIFO's DDIM grid. released: the FIFO-Diffusion code's, round(linspace(0, T - 1, S)), each step
// to the grid's next timestep and the last, at t = 0, an identity-like step: fresh noise enters
// the queue at t = T - 1. config: the DDIM grid of the model's scheduler config (VideoCrafter's
// k (T // S) + 1 by default), each step t - T / S, so fresh frames enter below T - 1; kept to
// continue and reproduce runs made with it.
enum class FifoGrid { released, config };
const char* fifo_grid_name(FifoGrid g);
FifoGrid parse_fifo_grid(const std::string& name);

struct LongVideoConfig {
  LongMode mode = LongMode::clips;
  // windows
  int window = 16, stride = 8;
  Blend blend = Blend::linear;
  // fifo
  int fifo_window = 16, fifo_partitions = 4;
  bool fifo_lookahead = true;
  FifoGrid fifo_grid = FifoGrid::released;
  std::vector<std::int64_t> fifo_prompt_frames;  // frames per prompt; empty: an even split
};

// Frames [first, first + count).
struct FrameSpan {
  std::int64_t first = 0, count = 0;
  std::int64_t end() const { return first + count; }
  bool operator==(const FrameSpan&) const = default;
};

// Windows of `window` frames every `stride` frames, the last one ending at the video's end so that
// every frame is covered; one window of the whole video when it is not longer than `window`.
std::vector<FrameSpan> sliding_windows(std::int64_t frames, std::int64_t window, std::int64_t stride);

// Each window's weight for each of its frames (weights[w][j] for frame windows[w].first + j); over
// the windows that cover a frame they sum to one. linear: a window's weight ramps down across its
// overlap with the next window and up across the overlap with the previous one (j + 1 steps in,
// out of overlap + 1), so the blend moves from one window's prediction to the next; uniform: the
// plain mean of the windows that cover the frame.
std::vector<std::vector<float>> blend_weights(const std::vector<FrameSpan>& windows, Blend blend);

// Items [first, first + count) of `items` that rank `rank` of `ranks` takes: contiguous shares
// whose sizes differ by at most one.
FrameSpan share(std::int64_t items, int ranks, int rank);

// FIFO-Diffusion's queue, with `window` = f frames per partition and n partitions: the schedule
// has S = f n steps and the queue S positions at noise levels 0 (head, cleanest) to S - 1 (tail,
// pure noise), plus with lookahead L = f / 2 positions of context before the head, which hold the
// frames that left last and are seen by the model at level 0 but never updated.
//   Position q's level is k = max(0, q - L); the scheduler's step index of level k is S - 1 - k
//   (timesteps()[S - 1 - k], the step that takes it to level k - 1, or to clean after level 0).
//   Each iteration runs the model on windows of f positions: n disjoint partitions, or with
//   lookahead 2n windows every f / 2 positions whose second halves are kept; the kept parts cover
//   [L, L + S) once. Then the frame at the head (position L) is clean and leaves, the queue moves
//   one position towards the head, and fresh noise enters at the tail.
//   The queue starts from a base video of f frames made by the plain model with the same schedule:
//   position q holds base frame max(0, k - (S - f)) noised to level k. Of the frames that leave,
//   the first S - f are the warm-up; the rest are the video, whose first f frames are the base
//   video's, denoised again.
inline constexpr std::int64_t kMaxFifoLevels = 1000;  // the schedule's steps, as --sampler.steps allows

class FifoPlan {
 public:
  // Throws vinf::InputError for f < 2, n < 1, an odd f with lookahead, or f n > kMaxFifoLevels.
  FifoPlan(int window, int partitions, bool lookahead);

  int window() const { return f_; }
  int partitions() const { return n_; }
  bool lookahead() const { return lookahead_; }
  int steps() const { return f_ * n_; }
  int context() const { return lookahead_ ? f_ / 2 : 0; }
  int queue_length() const { return steps() + context(); }

  int level(int q) const { return q < context() ? 0 : q - context(); }
  int step_index(int q) const { return steps() - 1 - level(q); }
  // The model calls of one iteration (queue positions) and the part of each whose update is kept.
  const std::vector<FrameSpan>& windows() const { return windows_; }
  const std::vector<FrameSpan>& kept() const { return kept_; }

  // Iterations for a video of `frames` frames (>= f), and the video frame that leaves the queue at
  // iteration i (negative during the warm-up).
  std::int64_t iterations(std::int64_t frames) const { return frames + steps() - f_; }
  std::int64_t output_frame(std::int64_t i) const { return i - (steps() - f_); }
  // The base video's frame that position q starts from.
  int base_frame(int q) const;

 private:
  int f_, n_;
  bool lookahead_;
  std::vector<FrameSpan> windows_, kept_;
};

// Multi-prompt FIFO, as the released code runs it: prompt p covers the video's frames
// [ends[p - 1], ends[p]) (ends[-1] = 0), and every model call of an iteration takes the prompt of
// the frame that leaves the queue at it (the warm-up's and the base video's: the first prompt).
// `lengths`: the frames of each prompt (summing to `frames`); empty: frame o takes prompt
// int(o / frames x prompts), as the parts of the other methods do. Throws vinf::InputError.
std::vector<std::int64_t> fifo_prompt_ends(std::int64_t frames, int prompts, const std::vector<std::int64_t>& lengths);
// The prompt of video frame `frame` (negative: the warm-up, prompt 0).
int fifo_prompt(const std::vector<std::int64_t>& ends, std::int64_t frame);

// The prompts over the parts of a video (clips, windows, FIFO's one queue): part r of N takes
// prompt int(r / N * P), as the released code maps prompts to clips. Every prompt must reach a part:
// with more prompts than parts some would be dropped without a word. Throws vinf::InputError saying
// how many parts there are; `from` says where the prompts come from ("--prompt.text", a file).
void check_prompts_used(std::int64_t prompts, std::int64_t parts, const std::string& part_name,
                        const std::string& from);

}  // namespace vinf::sampling
