#include "sampling/diffusion_forcing.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace vinf::sampling {

DfSchedule df_schedule(std::int64_t frames, const std::vector<std::int64_t>& timesteps, std::int64_t prefix_frames,
                       int ar_step, std::int64_t block) {
  VINF_CHECK(block >= 1 && frames >= 1 && frames % block == 0 && prefix_frames % block == 0 &&
                 prefix_frames >= 0 && prefix_frames < frames && ar_step >= 0 && !timesteps.empty(),
             "df_schedule: ", frames, " frames, prefix ", prefix_frames, ", blocks of ", block, ", ar_step ", ar_step);
  DfSchedule s;
  s.steps = static_cast<int>(timesteps.size());
  s.frames = frames;
  const int S = s.steps;
  std::vector<std::int64_t> T{999};
  T.insert(T.end(), timesteps.begin(), timesteps.end());
  T.push_back(0);
  const std::int64_t blocks = frames / block, prefix_blocks = prefix_frames / block;
  std::vector<int> counter(static_cast<std::size_t>(blocks), 0);
  for (std::int64_t b = 0; b < prefix_blocks; ++b) counter[static_cast<std::size_t>(b)] = S + 1;
  const auto done = [&] { return std::all_of(counter.begin(), counter.end(), [&](int c) { return c >= S; }); };
  while (!done()) {
    const std::vector<int> before = counter;
    for (std::size_t b = 0; b < counter.size(); ++b) {
      const int next = b == 0 || before[b - 1] >= S ? before[b] + 1 : counter[b - 1] - ar_step;
      counter[b] = std::clamp(next, 0, S + 1);
    }
    std::vector<int> row_counters;
    std::vector<std::int64_t> row_t;
    std::vector<bool> row_update;
    for (std::int64_t f = 0; f < frames; ++f) {
      const auto b = static_cast<std::size_t>(f / block);
      row_counters.push_back(counter[b]);
      row_t.push_back(T[static_cast<std::size_t>(counter[b])]);
      row_update.push_back(counter[b] != before[b] && counter[b] != S + 1);
    }
    s.counters.push_back(std::move(row_counters));
    s.timesteps.push_back(std::move(row_t));
    s.update.push_back(std::move(row_update));
    VINF_CHECK(s.counters.size() <= static_cast<std::size_t>((blocks + 1) * (S + 2) * (ar_step + 1) + 4),
               "df_schedule: the rows do not end");
  }
  return s;
}

std::vector<DfWindow> df_windows(std::int64_t latent_frames, std::int64_t base, std::int64_t overlap,
                                 std::int64_t block) {
  VINF_CHECK(base >= 1 && overlap >= 0 && overlap < base && block >= 1, "df_windows: base ", base, ", overlap ",
             overlap);
  std::vector<DfWindow> w;
  w.push_back({0, std::min(base, latent_frames), 0, 0});
  std::int64_t made = w.back().frames;
  while (made < latent_frames) {
    DfWindow k;
    k.first = made - overlap;
    k.frames = std::min(latent_frames - made + overlap, base);
    k.prefix = overlap - overlap % block;
    k.keep_from = overlap;
    made += k.frames - overlap;
    w.push_back(k);
  }
  return w;
}

}  // namespace vinf::sampling
