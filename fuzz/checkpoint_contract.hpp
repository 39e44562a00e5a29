// What both checkpoint targets check: reading a file as a checkpoint ends in vinf::InputError, or in
// a CheckpointInfo whose parts agree (4-D latents, one sigma more than timesteps, a text cache as
// large as its sizes say). Anything else aborts, and libFuzzer reports the input.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <string>

#include "fuzz_support.hpp"
#include "io/checkpoint.hpp"

namespace vinf::fuzz {

inline void read_checkpoint_checked(const std::string& path) {
  expect_input_errors_only([&] {
    const io::CheckpointInfo info = io::read_checkpoint_info(path);
    if (info.full.rank() != 4 || info.state.sigmas.size() != info.state.timesteps.size() + 1) std::abort();
    if (info.text.prompt_embeds.size() != static_cast<std::size_t>(info.text.prompts * info.text.tokens * info.text.width))
      std::abort();
  });
}

}  // namespace vinf::fuzz
