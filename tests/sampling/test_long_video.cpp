// The arithmetic of the long-video methods (sampling/long_video.hpp): which frames each window
// covers and with which weight, how the windows are shared by the ranks, and FIFO-Diffusion's
// queue: the kept parts of its windows, the order in which frames leave, the steps each one sees.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <vector>

#include "core/error.hpp"
#include "sampling/long_video.hpp"

using namespace vinf;
using sampling::FrameSpan;

TEST_CASE("sliding windows cover every frame, the last one ends at the video's end") {
  CHECK(sampling::sliding_windows(24, 8, 4) == std::vector<FrameSpan>{{0, 8}, {4, 8}, {8, 8}, {12, 8}, {16, 8}});
  CHECK(sampling::sliding_windows(22, 8, 4) == std::vector<FrameSpan>{{0, 8}, {4, 8}, {8, 8}, {12, 8}, {14, 8}});
  CHECK(sampling::sliding_windows(16, 16, 8) == std::vector<FrameSpan>{{0, 16}});
  CHECK(sampling::sliding_windows(5, 16, 8) == std::vector<FrameSpan>{{0, 5}});  // one window: the whole video
  CHECK(sampling::sliding_windows(20, 8, 8) == std::vector<FrameSpan>{{0, 8}, {8, 8}, {12, 8}});
}

TEST_CASE("blend weights sum to one on every frame, ramp linearly across overlaps, are flat where one window covers") {
  for (sampling::Blend blend : {sampling::Blend::linear, sampling::Blend::uniform})
    for (auto [frames, window, stride] : {std::tuple{24, 8, 4}, std::tuple{22, 8, 4}, std::tuple{40, 16, 8},
                                          std::tuple{30, 16, 3}, std::tuple{17, 4, 4}, std::tuple{9, 16, 8}}) {
      CAPTURE(frames);
      CAPTURE(window);
      CAPTURE(stride);
      const auto w = sampling::sliding_windows(frames, window, stride);
      const auto a = sampling::blend_weights(w, blend);
      std::vector<double> sum(static_cast<std::size_t>(frames), 0.0);
      for (std::size_t i = 0; i < w.size(); ++i) {
        REQUIRE(a[i].size() == static_cast<std::size_t>(w[i].count));
        for (std::int64_t j = 0; j < w[i].count; ++j) {
          CHECK(a[i][static_cast<std::size_t>(j)] > 0.f);
          sum[static_cast<std::size_t>(w[i].first + j)] += a[i][static_cast<std::size_t>(j)];
        }
      }
      for (double s : sum) CHECK(s == doctest::Approx(1.0).epsilon(1e-6));
    }
  // 16 frames, windows [0, 8) and [4, 12) and [8, 16): in [4, 8) the first window's weight falls
  // 4/5 .. 1/5 as the second's rises 1/5 .. 4/5; frames covered by one window weigh 1.
  const auto w = sampling::sliding_windows(16, 8, 4);
  const auto a = sampling::blend_weights(w, sampling::Blend::linear);
  for (int j = 0; j < 4; ++j) {
    CHECK(a[0][static_cast<std::size_t>(j)] == 1.f);
    CHECK(a[0][static_cast<std::size_t>(4 + j)] == doctest::Approx((4.0 - j) / 5.0));
    CHECK(a[1][static_cast<std::size_t>(j)] == doctest::Approx((j + 1.0) / 5.0));
  }
  const auto u = sampling::blend_weights(w, sampling::Blend::uniform);
  CHECK(u[1][0] == 0.5f);
  CHECK(u[0][0] == 1.f);
}

TEST_CASE("shares of the windows: contiguous, in rank order, sizes within one") {
  for (int items : {1, 5, 8, 13})
    for (int ranks = 1; ranks <= std::min(items, 4); ++ranks) {
      std::int64_t next = 0, fewest = items, most = 0;
      for (int r = 0; r < ranks; ++r) {
        const FrameSpan s = sampling::share(items, ranks, r);
        CHECK(s.first == next);
        next = s.end();
        fewest = std::min(fewest, s.count);
        most = std::max(most, s.count);
      }
      CHECK(next == items);
      CHECK(most - fewest <= 1);
      CHECK(fewest >= 1);
    }
}

TEST_CASE("FIFO: the kept parts of the windows cover the queue's levels once, the context never") {
  for (bool lookahead : {false, true})
    for (auto [f, n] : {std::pair{4, 1}, std::pair{4, 4}, std::pair{16, 4}, std::pair{2, 3}}) {
      const sampling::FifoPlan plan(f, n, lookahead);
      CHECK(plan.steps() == f * n);
      CHECK(plan.queue_length() == f * n + (lookahead ? f / 2 : 0));
      CHECK(plan.windows().size() == static_cast<std::size_t>(lookahead ? 2 * n : n));
      std::vector<int> covered(static_cast<std::size_t>(plan.queue_length()), 0);
      for (std::size_t w = 0; w < plan.windows().size(); ++w) {
        const FrameSpan win = plan.windows()[w], kept = plan.kept()[w];
        CHECK(win.count == f);
        CHECK(win.end() <= plan.queue_length());
        CHECK(kept.first >= win.first);
        CHECK(kept.end() == win.end());
        for (std::int64_t q = kept.first; q < kept.end(); ++q) ++covered[static_cast<std::size_t>(q)];
      }
      for (int q = 0; q < plan.queue_length(); ++q)
        CHECK(covered[static_cast<std::size_t>(q)] == (q < plan.context() ? 0 : 1));
    }
  CHECK_THROWS_AS(sampling::FifoPlan(5, 2, true), InputError);  // lookahead halves the window
  CHECK_NOTHROW(sampling::FifoPlan(5, 2, false));
  CHECK_THROWS_AS(sampling::FifoPlan(1, 2, false), InputError);
  CHECK_THROWS_AS(sampling::FifoPlan(4, 0, false), InputError);
  // f x n levels are the schedule's steps: at most 1000, refused before any window is made.
  CHECK_NOTHROW(sampling::FifoPlan(2, 500, true));
  CHECK_THROWS_AS(sampling::FifoPlan(2, 600, true), InputError);
  CHECK_THROWS_AS(sampling::FifoPlan(2, 2000000000, true), InputError);
}

TEST_CASE(
    "FIFO: frames leave in order, and every frame that enters as noise sees each step of the schedule once, in order") {
  for (bool lookahead : {false, true}) {
    const sampling::FifoPlan plan(4, 3, lookahead);
    const int S = plan.steps(), Q = plan.queue_length(), L = plan.context();
    const std::int64_t frames = 20;
    // Labels instead of latents: the queue starts with the base video's frames (label -1 - b),
    // then frame k enters at the tail at iteration k (label k).
    std::deque<int> queue;
    for (int q = 0; q < Q; ++q) queue.push_back(-1 - plan.base_frame(q));
    std::map<int, std::vector<int>> seen;  // label -> the step indices applied to it, in order
    std::vector<int> left;  // labels of the video's frames, in the order they left
    const std::int64_t iterations = plan.iterations(frames);
    for (std::int64_t i = 0; i < iterations; ++i) {
      for (std::size_t w = 0; w < plan.windows().size(); ++w)
        for (std::int64_t q = plan.kept()[w].first; q < plan.kept()[w].end(); ++q)
          seen[queue[static_cast<std::size_t>(q)]].push_back(plan.step_index(static_cast<int>(q)));
      const std::int64_t out = plan.output_frame(i);
      if (out >= 0 && out < frames) left.push_back(queue[static_cast<std::size_t>(L)]);
      queue.pop_front();
      queue.push_back(static_cast<int>(i));
    }
    REQUIRE(static_cast<std::int64_t>(left.size()) == frames);
    // The first f frames of the video are the base video's, re-denoised; then frames that entered
    // as noise, in the order they entered.
    for (int k = 0; k < plan.window(); ++k) CHECK(left[static_cast<std::size_t>(k)] == -1 - k);
    for (std::int64_t k = plan.window(); k < frames; ++k) {
      const int label = left[static_cast<std::size_t>(k)];
      CHECK(label == k - plan.window());
      std::vector<int> want(static_cast<std::size_t>(S));
      for (int s = 0; s < S; ++s) want[static_cast<std::size_t>(s)] = s;
      CHECK(seen[label] == want);
    }
  }
}

TEST_CASE("multi-prompt FIFO: each prompt's frames, and the prompt of the frame that leaves at an iteration") {
  // Frame o takes prompt int(o / 10 x 3): frames 0-3, 4-6, 7-9.
  CHECK(sampling::fifo_prompt_ends(10, 3, {}) == std::vector<std::int64_t>{4, 7, 10});
  CHECK(sampling::fifo_prompt_ends(5, 1, {}) == std::vector<std::int64_t>{5});
  CHECK(sampling::fifo_prompt_ends(3, 3, {}) == std::vector<std::int64_t>{1, 2, 3});
  // The released code's lengths, as cumulative ends.
  const std::vector<std::int64_t> ends = sampling::fifo_prompt_ends(10, 3, {2, 5, 3});
  CHECK(ends == std::vector<std::int64_t>{2, 7, 10});
  CHECK(sampling::fifo_prompt(ends, -3) == 0);  // the warm-up
  CHECK(sampling::fifo_prompt(ends, 0) == 0);
  CHECK(sampling::fifo_prompt(ends, 1) == 0);
  CHECK(sampling::fifo_prompt(ends, 2) == 1);
  CHECK(sampling::fifo_prompt(ends, 6) == 1);
  CHECK(sampling::fifo_prompt(ends, 7) == 2);
  CHECK(sampling::fifo_prompt(ends, 9) == 2);
  CHECK_THROWS_WITH_AS(sampling::fifo_prompt_ends(10, 2, {2, 5, 3}), doctest::Contains("3 length(s) for 2 prompt(s)"),
                       InputError);
  CHECK_THROWS_WITH_AS(sampling::fifo_prompt_ends(10, 2, {2, 5}), doctest::Contains("adds up to 7 frames"), InputError);
  CHECK_THROWS_WITH_AS(sampling::fifo_prompt_ends(10, 2, {0, 10}), doctest::Contains("at least 1 frame"), InputError);
}
