#include "pipeline/run_dir.hpp"

#include <sys/resource.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <type_traits>
#include <variant>

#include "core/error.hpp"
#include "core/progress.hpp"
#include "io/atomic_file.hpp"
#include "io/safetensors.hpp"
#include "model/weights.hpp"

namespace fs = std::filesystem;

namespace vinf::pipeline {

std::string default_out_dir(const std::string& name) {
  std::string id;
  if (const char* job = std::getenv("SLURM_ARRAY_JOB_ID"); job && *job) {
    const char* task = std::getenv("SLURM_ARRAY_TASK_ID");
    id = std::string(job) + "_" + (task ? task : "0");
  } else if (const char* j = std::getenv("SLURM_JOB_ID"); j && *j) {
    id = j;
  } else {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &local);
    id = buf;
  }
  return "outputs/" + name + "-" + id;
}

namespace {

// "a.b.c" -> value for every leaf of a JSON object.
void flatten(const json& j, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
  } else {
    out[prefix] = j.dump();
  }
}

}  // namespace

std::string decided_by_root(const mpi::Session& mpi, const std::function<std::string()>& fn) {
  std::string value, error;
  if (mpi.rank() == 0) {
    try {
      value = fn();
    } catch (const InputError& e) {
      error = e.what();
    }
  }
  mpi.broadcast(value);
  mpi.broadcast(error);
  VINF_INPUT_CHECK(error.empty(), error);
  return value;
}

std::string choose_out_dir(const GenerateSpec& o, const mpi::Session& mpi) {
  return decided_by_root(mpi, [&] {
    std::string dir = o.out;
    if (dir.empty() && !o.resume.empty() && o.resume != "auto") {
      // checkpoints live in OUT/checkpoints/
      dir = fs::path(o.resume).parent_path().parent_path().string();
      if (dir.empty()) dir = ".";
    }
    if (dir.empty()) dir = default_out_dir(o.name);
    std::error_code ec;
    if (fs::exists(dir, ec)) {
      VINF_INPUT_CHECK(fs::is_directory(dir, ec), "--out ", dir, " exists and is not a directory");
      VINF_INPUT_CHECK(o.overwrite || !o.resume.empty(), "the output directory ", dir, " exists (",
                       fs::exists(dir + "/run.json") ? "a finished run" : "an unfinished or failed run",
                       "); continue it with --resume auto, choose another --out, or --overwrite to replace its files");
    }
    return dir;
  });
}

std::string first_rank_error(const mpi::Session& mpi, const std::string& mine) {
  const int first = mpi.min(mine.empty() ? mpi.size() : mpi.rank());
  if (first == mpi.size()) return "";
  std::string message = mine;
  mpi.broadcast(message, first);
  return message;
}

namespace {

void warn(const mpi::Session& mpi, const std::string& line) { Reporter("vinf generate:", mpi.rank() == 0).warn(line); }

}  // namespace

std::vector<std::string> checkpoint_candidates(const mpi::Session& mpi, const std::string& resume,
                                               const std::string& dir) {
  if (resume != "auto") return resume.empty() ? std::vector<std::string>{} : std::vector<std::string>{resume};
  const std::string listed = decided_by_root(mpi, [&] {
    std::string names;
    for (const std::string& c : io::list_checkpoints(dir)) names += c + "\n";
    return names;
  });
  std::vector<std::string> candidates;  // newest first
  for (std::size_t pos = 0, end; (end = listed.find('\n', pos)) != std::string::npos; pos = end + 1)
    candidates.insert(candidates.begin(), listed.substr(pos, end - pos));
  return candidates;
}

AgreedCheckpoint agree_on_checkpoint(
    const mpi::Session& mpi, const std::vector<std::string>& candidates,
    const std::function<std::string(const std::string& path)>& open,
    const std::function<void(const std::string& path, const std::string& why)>& skipped) {
  AgreedCheckpoint agreed;
  for (const std::string& path : candidates) {
    const std::string why = first_rank_error(mpi, open(path));
    if (why.empty()) {
      agreed.path = path;
      break;
    }
    agreed.skipped.emplace_back(path, why);
    if (skipped) skipped(path, why);
  }
  return agreed;
}

ResumePoint choose_checkpoint(const GenerateSpec& o, const std::string& out_dir, const mpi::Session& mpi,
                              const io::RunStamp& stamp, const std::vector<std::int64_t>& timesteps, const Shape& full,
                              std::int64_t first, std::int64_t count, const std::vector<std::string>& memories) {
  ResumePoint point;
  const bool automatic = o.resume == "auto";
  const std::string dir = out_dir + "/checkpoints";
  const std::vector<std::string> candidates = checkpoint_candidates(mpi, o.resume, dir);
  bool damaged = false;  // the last one tried was readable but its frames failed their checks
  const AgreedCheckpoint agreed = agree_on_checkpoint(
      mpi, candidates,
      [&](const std::string& path) -> std::string {
        // The metadata and text (rank 0 first, so that a damaged file is reported once).
        damaged = false;
        const std::string unreadable = decided_by_root(mpi, [&]() -> std::string {
          try {
            io::read_checkpoint_info(path);
            return "";
          } catch (const InputError& e) {
            return e.what();
          }
        });
        if (!unreadable.empty()) return unreadable;
        point.info = std::make_unique<io::CheckpointInfo>(io::read_checkpoint_info(path));
        check_resumable(*point.info, stamp, timesteps);  // another run's checkpoint is refused, not skipped
        VINF_INPUT_CHECK(point.info->full == full, "checkpoint ", path, " holds latents ", point.info->full.str(),
                         "; this run's are ", full.str());
        // This rank's frames, their checksums checked; every rank learns whether any chunk failed.
        const auto n = static_cast<std::size_t>(count * full[1] * full[2] * full[3]);
        point.latents.assign(n, 0.f);
        point.previous_x0.assign(n, 0.f);
        point.memories.assign(memories.size(), std::vector<float>(n, 0.f));
        std::vector<io::StateFrames> extra;
        for (std::size_t k = 0; k < memories.size(); ++k) extra.push_back({memories[k], point.memories[k].data()});
        damaged = true;
        try {
          io::read_checkpoint_frames(mpi.world(), path, first, count, point.latents.data(), point.previous_x0.data(),
                                     extra);
        } catch (const InputError& e) {
          return e.what();
        }
        return "";
      },
      [&](const std::string& path, const std::string& why) {
        if (automatic) warn(mpi, "skipping checkpoint " + path + ": " + why);  // said as it happens
      });
  if (!automatic && agreed.path.empty() && !agreed.skipped.empty())
    VINF_INPUT_FAIL(
        agreed.skipped.front().second,
        damaged ? "; resume from another checkpoint (--resume auto takes the newest one that passes its checks)" : "");
  VINF_INPUT_CHECK(!agreed.path.empty() || candidates.empty(), "--resume auto: none of the ", candidates.size(),
                   " checkpoint(s) in ", dir, " can be used (see the warnings above), and the run does not start ",
                   "again from the beginning on its own; remove them, or run without --resume and with --overwrite, ",
                   "which starts over");
  if (agreed.path.empty()) return {};
  if (agreed.path != candidates.front())
    warn(mpi, "falling back to the older checkpoint " + agreed.path + ": the newer one(s) in " + dir +
                  " could not be used (see above)");
  if (point.info->format_version < 2)
    warn(mpi, "checkpoint " + agreed.path + " is in format version " + std::to_string(point.info->format_version) +
                  " (an older vinf), which has no checksums: its data cannot be verified");
  return point;
}

json numerics_json(const GenerateSpec& o, int clips, DType dtype, const Device& device) {
  json vi = vi_json(o.vi);
  vi.erase("halo");  // x and kv give the same numbers
  vi.erase("exchange");  // so do the exchange patterns
  if (o.vi.mode == infinity::Mode::exact) vi = {{"mode", "exact"}};  // the window settings do not apply
  json j = {{"video", {{"frames", o.frames}, {"height", o.height}, {"width", o.width}, {"fps", o.fps}}},
            {"sampler", sampler_json(o)},
            {"prompt", {{"text", o.prompts}, {"negative", o.negative}}},
            {"vi", vi},
            // "bf16" on CUDA, "bf16 weights, f32 activations" on the CPU: other numbers.
            {"dtype", model::precision_name(dtype, device)}};
  // Invariant and exact modes give the same video on any number of clips (and tensor ranks); the
  // others do not.
  // Windows and FIFO give the same video on any number of ranks too; their settings change it.
  if (!o.long_clips()) {
    j["long"] = long_json(o.long_video);
    return j;
  }
  if (o.vi.mode != infinity::Mode::invariant && o.vi.mode != infinity::Mode::exact) j["parallel"] = {{"clips", clips}};
  return j;
}

json sampler_json(const GenerateSpec& o) {
  json j = {{"scheduler", sampling::scheduler_name(o.scheduler)},
            {"steps", o.steps},
            {"guidance", o.guidance},
            {"seed", o.seed},
            {"eta", o.eta},
            {"noise", sampling::noise_mode_name(o.noise)}};
  // Only when it can scale a step, so that the records of the other runs stay what they were.
  if (o.scheduler == sampling::SchedulerKind::ddim && o.use_scale != UseScale::automatic)
    j["use_scale"] = use_scale_name(o.use_scale);
  return j;
}

json long_json(const sampling::LongVideoConfig& l) {
  json j = {{"mode", sampling::long_mode_name(l.mode)}};
  if (l.mode == sampling::LongMode::windows)
    j.update({{"window", l.window}, {"stride", l.stride}, {"blend", sampling::blend_name(l.blend)}});
  if (l.mode == sampling::LongMode::fifo) {
    j.update(
        {{"fifo-window", l.fifo_window}, {"fifo-partitions", l.fifo_partitions}, {"fifo-lookahead", l.fifo_lookahead}});
    // Only where they differ from what FIFO runs recorded before (the config grid, one prompt), so
    // that --long.fifo-grid config continues such a run.
    if (l.fifo_grid != sampling::FifoGrid::config) j["fifo-grid"] = sampling::fifo_grid_name(l.fifo_grid);
    if (!l.fifo_prompt_frames.empty()) j["fifo-prompt-frames"] = l.fifo_prompt_frames;
  }
  return j;
}

std::string settings_differences(const io::RunStamp& there, const io::RunStamp& here, const std::string& path) {
  if (there.model_fingerprint != here.model_fingerprint)
    return "written for another model (fingerprint " + there.model_fingerprint + " there, " + here.model_fingerprint +
           " here)";
  std::map<std::string, std::string> old_values, new_values;
  try {
    flatten(json::parse(there.numerics_json), "", old_values);
  } catch (const json::exception& e) {
    VINF_INPUT_FAIL(path, ": its 'numerics' record is not JSON: ", e.what());
  }
  flatten(json::parse(here.numerics_json), "", new_values);
  std::string diffs;
  int n = 0;
  for (const auto& [key, value] : new_values) {
    const auto it = old_values.find(key);
    const std::string old = it == old_values.end() ? "(not set)" : it->second;
    if (old != value && n++ < 4) diffs += (diffs.empty() ? "" : "; ") + key + " " + old + " there, " + value + " here";
  }
  for (const auto& [key, value] : old_values)
    if (!new_values.count(key) && n++ < 4)
      diffs += (diffs.empty() ? "" : "; ") + key + " " + value + " there, not set here";
  if (n > 4) diffs += "; and " + std::to_string(n - 4) + " more";
  return diffs;
}

void check_resumable(const io::CheckpointInfo& info, const io::RunStamp& now,
                     const std::vector<std::int64_t>& timesteps) {
  const std::string diffs = settings_differences(info.stamp, now, "checkpoint " + info.path);
  VINF_INPUT_CHECK(diffs.empty(), "checkpoint ", info.path, " belongs to a run with other settings (", diffs,
                   "); resume with the settings it was written with, or start a new run in another --out");
  VINF_INPUT_CHECK(info.state.timesteps == timesteps, "checkpoint ", info.path,
                   " was written with another schedule (a different scheduler config?)");
}

void check_finished_run(const std::string& out_dir, const io::RunStamp& now, const mpi::Session& mpi) {
  const std::string problem = decided_by_root(mpi, [&]() -> std::string {
    const std::string latents = out_dir + "/latents.h5";
    std::string diffs;
    try {
      diffs = settings_differences(io::read_run_stamp(latents), now, latents);
    } catch (const InputError& e) {
      return out_dir + " holds a finished run (run.json) whose settings cannot be read (" + e.what() +
             "), so this run cannot tell whether it is the same one; choose another --out, or --overwrite to replace "
             "it";
    }
    if (diffs.empty()) return "";
    return out_dir + " holds a finished run with other settings (" + diffs + "): its video is not the one asked for; " +
           "choose another --out, or add --overwrite to replace it";
  });
  VINF_INPUT_CHECK(problem.empty(), problem);
}

std::vector<std::string> remove_run_outputs(const std::string& out_dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  // run.json first: from here on the directory holds no finished run.
  for (const char* name : {"run.json", "latents.h5", "latents.h5.partial", "video.mp4", "contact.png", "evaluate.json",
                           "evaluate.png", "activations.h5", "frames"}) {
    const std::string path = out_dir + "/" + name;
    if (!fs::exists(path, ec)) continue;
    if (fs::remove_all(path, ec) > 0 && !ec) removed.push_back(name);
  }
  for (const std::string& c : io::list_checkpoints(out_dir + "/checkpoints"))
    if (fs::remove(c, ec)) removed.push_back("checkpoints/" + fs::path(c).filename().string());
  return removed;
}

json counters_json(const mpi::CommCounters& c) {
  json j = json::object();
  for (int i = 0; i < mpi::kCommOps; ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (c.calls[k] == 0) continue;
    j[mpi::comm_op_name(static_cast<mpi::CommOp>(i))] = {
        {"calls", c.calls[k]}, {"bytes", c.bytes[k]}, {"seconds", c.seconds[k]}};
  }
  return j;
}

json vi_json(const infinity::Config& v) {
  json j = json::object();
  infinity::Config c = v;
  for (const infinity::Field& f : infinity::fields())
    std::visit(
        [&](auto* p) {
          if constexpr (std::is_arithmetic_v<std::remove_pointer_t<decltype(p)>>)
            j[f.name] = *p;
          else
            j[f.name] = infinity::choice_name(f, v);
        },
        f.ref(c));
  return j;
}

void check_latents_init(const std::string& path, const Shape& want, const std::string& layout, const std::string& key) {
  const io::SafetensorsFile f(path);
  const auto* e = f.find(key);
  VINF_INPUT_CHECK(e != nullptr, "--latents-init ", path, " has no tensor '", key, "' (F32 [1,C,F,H,W])");
  VINF_INPUT_CHECK(e->opaque.empty() && e->dtype == DType::f32 && e->shape == want, "--latents-init ", path, ": '", key,
                   "' is ", e->opaque.empty() ? io::safetensors_dtype_name(e->dtype) : e->opaque.c_str(),
                   e->shape.str(), " but this video's latents are F32", want.str(), " ", layout);
  f.tensor(key);  // a NaN or infinity is refused now, before any output exists
}

double max_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;  // Linux reports KiB
}

void write_run_json(const RunRecord& r) {
  json run = {{"format", "vinf-run"},
              {"format_version", 1},
              {"vinf_version", VINF_VERSION},
              {"status", "complete"},
              {"out", r.out_dir},
              {"config", r.config},
              {"resumed_from", r.resumed_from.empty() ? json(nullptr) : json(r.resumed_from)},
              {"start_step", r.start_step}};
  if (r.boundaries) run["boundaries"] = *r.boundaries;
  run["schedule"] = r.schedule;
  run["times_s"] = r.times;
  run["frame_steps_per_s"] = r.frame_steps_per_s;
  run["ranks"] = r.ranks;
  run["outputs"] = r.outputs;
  write_run_file(r.out_dir, run);
}

void write_run_file(const std::string& out_dir, const json& run) {
  io::write_file_atomically(out_dir + "/run.json", run.dump(2) + "\n");
}

}  // namespace vinf::pipeline
