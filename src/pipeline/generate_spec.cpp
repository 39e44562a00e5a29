#include "pipeline/generate_spec.hpp"

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

}  // namespace vinf::pipeline
