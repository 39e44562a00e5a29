// Diffusion forcing's schedule against the reference pipeline's (tests/fixtures/skyreels-df-tiny):
// the windows, every row's counters, timesteps and update mask, exactly, for the synchronous and
// the asynchronous cases.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../support.hpp"
#include "io/safetensors.hpp"
#include "sampling/diffusion_forcing.hpp"

using namespace vinf;

namespace {

struct DfCase {
  const char* name;
  std::int64_t latent_frames, base, overlap, block;
  int ar_step;
};

void check_df_case(const DfCase& k) {
  std::ifstream in(test::fixture("skyreels-df-tiny/windows.json"));
  const nlohmann::json windows = nlohmann::json::parse(in)[k.name];
  const io::SafetensorsFile ref(test::fixture(std::string("skyreels-df-tiny/ref_") + k.name + ".safetensors"));
  const Tensor ts = ref.tensor("timesteps");
  const std::vector<std::int64_t> timesteps(ts.ptr<std::int64_t>(), ts.ptr<std::int64_t>() + ts.numel());
  const std::vector<sampling::DfWindow> w = sampling::df_windows(k.latent_frames, k.base, k.overlap, k.block);
  REQUIRE(w.size() == windows.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    INFO(k.name << " window " << i);
    CHECK(w[i].frames == windows[i]["frames"].get<std::int64_t>());
    CHECK(w[i].prefix == windows[i]["prefix"].get<std::int64_t>());
    const sampling::DfSchedule s = sampling::df_schedule(w[i].frames, timesteps, w[i].prefix, k.ar_step, k.block);
    REQUIRE(s.rows() == windows[i]["rows"].get<std::size_t>());
    const std::string key = "window" + std::to_string(i);
    const Tensor index = ref.tensor(key + ".step_index");
    const std::string_view mask = ref.raw(key + ".step_update_mask");
    for (std::size_t r = 0; r < s.rows(); ++r)
      for (std::int64_t f = 0; f < w[i].frames; ++f) {
        const auto at = static_cast<std::size_t>(f);
        CHECK(s.timesteps[r][at] == windows[i]["step_matrix"][r][at].get<std::int64_t>());
        CHECK(s.counters[r][at] == index.ptr<std::int64_t>()[static_cast<std::int64_t>(r) * w[i].frames + f]);
        CHECK(s.update[r][at] == (mask[r * static_cast<std::size_t>(w[i].frames) + at] != 0));
      }
  }
}

}  // namespace

TEST_CASE("diffusion forcing: windows, counters, timesteps and update masks equal the reference's") {
  check_df_case({"sync", 7, 4, 2, 1, 0});
  check_df_case({"sync_addnoise", 7, 4, 2, 1, 0});
  check_df_case({"async", 9, 6, 3, 2, 1});
}
