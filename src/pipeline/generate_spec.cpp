#include "pipeline/generate_spec.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "job/plan.hpp"

namespace vinf::pipeline {

const char* use_scale_name(UseScale u) {
  switch (u) {
    case UseScale::automatic: return "auto";
    case UseScale::on: return "on";
    case UseScale::off: return "off";
  }
  return "?";
}

PromptParts prompt_parts(const GenerateSpec& o, int clips) {
  const sampling::LongVideoConfig& l = o.long_video;
  if (o.long_clips()) return {clips, "clip"};
  if (l.mode == sampling::LongMode::windows)
    return {static_cast<std::int64_t>(sampling::sliding_windows(o.frames, l.window, l.stride).size()), "window"};
  return {o.frames, "frame"};  // FIFO: a prompt per span of frames
}

std::string imported_fields_note(const GenerateSpec& o, const std::string& run_dtype, int clips) {
  if (o.vi_import.empty()) return "";
  std::vector<std::string> items;
  const int devices = o.imported.devices;
  if (devices > 0)
    items.push_back(devices == clips ? std::string("devices")
                                     : "devices (" + std::to_string(devices) + " listed, this run has " +
                                           std::to_string(clips) + " clip rank" + (clips == 1 ? "" : "s") + ")");
  if (!o.imported.dtype.empty() && o.imported.dtype != run_dtype)
    items.push_back("dtype (" + o.imported.dtype + "; this run computes in " + run_dtype + ", --dtype chooses)");
  items.insert(items.end(), o.imported.ignored.begin(), o.imported.ignored.end());
  if (items.empty()) return "";
  std::string line = "--import-vi-config " + o.vi_import + ": ignored: ";
  for (std::size_t i = 0; i < items.size(); ++i) line += (i ? ", " : "") + items[i];
  return line;
}

namespace {

// Windows and FIFO partitions spread over the ranks: no rank may be left without one.
void check_long_ranks(const GenerateSpec& o, int ranks) {
  const sampling::LongVideoConfig& l = o.long_video;
  if (l.mode == sampling::LongMode::windows) {
    const auto windows = static_cast<int>(sampling::sliding_windows(o.frames, l.window, l.stride).size());
    VINF_INPUT_CHECK(ranks <= windows, "--long.mode windows: ", o.frames, " frames make ", windows, " window(s) of ",
                     std::min<std::int64_t>(l.window, o.frames), " every ", l.stride, " frames, fewer than the ", ranks,
                     " ranks; use at most ", windows, " rank(s), or more frames or a smaller --long.stride");
    return;
  }
  // Every iteration's model calls: n partitions, or with lookahead 2n windows.
  const auto windows =
      static_cast<int>(sampling::FifoPlan(l.fifo_window, l.fifo_partitions, l.fifo_lookahead).windows().size());
  VINF_INPUT_CHECK(ranks <= windows, "--long.mode fifo: ", ranks, " ranks for ", windows,
                   " model call(s) per iteration (", l.fifo_partitions, " partitions (--long.fifo-partitions)",
                   l.fifo_lookahead ? ", twice that with --long.fifo-lookahead" : "", "); use at most ", windows,
                   " rank(s), or more partitions");
  VINF_INPUT_CHECK(o.frames >= l.fifo_window, "--long.mode fifo makes at least --long.fifo-window = ", l.fifo_window,
                   " frames (its base video); got --video.frames ", o.frames);
}

}  // namespace

void check_unet_job(GenerateSpec& o, int world_size) {
  VINF_INPUT_CHECK(world_size % o.cfg() == 0, "--parallel.cfg 2 needs an even number of ranks (2 x clips), got ",
                   world_size);
  const int clips = job::make_layout(o.job, world_size).clips;
  if (o.frames == 0) o.frames = o.frames_per_clip * clips;
  if (!o.long_clips()) check_long_ranks(o, clips);
  if (!o.wan) {
    const PromptParts parts = prompt_parts(o, clips);
    sampling::check_prompts_used(static_cast<std::int64_t>(o.prompts.size()), parts.count, parts.name,
                                 o.prompts_source);
  }
  if (o.long_video.mode == sampling::LongMode::fifo && !o.long_video.fifo_prompt_frames.empty() && !o.prompts.empty())
    sampling::fifo_prompt_ends(o.frames, static_cast<int>(o.prompts.size()), o.long_video.fifo_prompt_frames);
  if (!o.long_clips()) return;
  VINF_INPUT_CHECK(o.frames >= clips, "--video.frames ", o.frames, " is fewer than the ", clips,
                   " clip ranks; use at most ", o.frames, " ranks or more frames");
  try {
    infinity::check_partition(o.vi, o.frames, clips);
  } catch (const InputError& e) {
    if (o.vi_import.empty()) throw;
    // The options named may come from the file: say which fields they are.
    VINF_INPUT_FAIL(e.what(), " (--import-vi-config ", o.vi_import,
                    ": plugin_configs.attn.padding is --vi.local-frames, attn.top_k --vi.global-frames, "
                    "conv_layer.padding --vi.conv-halo, and the frames are pipe_configs.num_frames x clip ranks, "
                    "unless the options are given)");
  }
}

}  // namespace vinf::pipeline
