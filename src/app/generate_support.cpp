#include "app/generate_support.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <type_traits>
#include <variant>

#include "core/error.hpp"
#include "core/utf8.hpp"
#include "io/atomic_file.hpp"
#include "model/clip_text.hpp"
#include "model/presets.hpp"
#include "model/tokenizer.hpp"
#include "model/unet3d.hpp"
#include "model/weights.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

namespace fs = std::filesystem;

namespace vinf::app {

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
    for (auto it = j.begin(); it != j.end(); ++it) flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
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

sampling::TextEmbeddings encode_prompts_on_root(const RunPlan& o, std::int64_t width, bool guided, job::Job& job,
                                                std::vector<std::string>& warnings) {
  const mpi::Session& mpi = job.session();
  const Device device = job.device();
  std::vector<std::string> texts = o.prompts;
  if (guided) texts.push_back(o.negative);
  std::vector<float> hidden;
  std::int64_t tokens = 0;
  const std::string source = decided_by_root(mpi, [&] {
    const model::ClipTokenizer tokenizer =
        o.builtin() ? model::ClipTokenizer::byte_level() : model::ClipTokenizer::load(o.tokenizer);
    warnings.insert(warnings.end(), tokenizer.warnings().begin(), tokenizer.warnings().end());
    Runtime rt(device);
    std::string encoder_source = o.text_encoder;
    std::unique_ptr<model::ClipTextModel> encoder;
    if (o.builtin()) {
      const model::ClipTextConfig c = model::pipeline_text_config(o.builtin_preset());
      encoder = std::make_unique<model::ClipTextModel>(
          c, model::Weights::random(model::clip_text_parameters(c), rt, DType::f32,
                                    model::text_encoder_seed(static_cast<std::uint64_t>(o.model_seed))));
      encoder_source = "built-in (random)";
    } else {
      encoder = std::make_unique<model::ClipTextModel>(model::ClipTextModel::load(o.text_encoder, rt, DType::f32));
    }
    VINF_INPUT_CHECK(encoder->config().hidden_size == width, "the text encoder ", encoder_source, " has hidden_size ",
                     encoder->config().hidden_size, " but the UNet's cross_attention_dim is ", width,
                     ": they are not from the same model");
    std::vector<model::TokenizedText> ids;
    hidden = model::encode_prompts(rt, tokenizer, *encoder, texts, &ids);
    tokens = tokenizer.max_length();
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (ids[i].truncated())
        warnings.push_back((i < o.prompts.size() ? "prompt " + std::to_string(i) : std::string("the negative prompt")) +
                           " has " + std::to_string(ids[i].length) + " tokens; the text encoder takes " +
                           std::to_string(tokens) + ", so these are dropped: '" + excerpt(ids[i].dropped) + "'");
    return "tokenizer " + tokenizer.source() + ", text encoder " + encoder_source;
  });
  job.world().broadcast(job.host(), Tensor::wrap(&tokens, DType::i64, Device::cpu(), {1}), 0);
  const auto row = static_cast<std::size_t>(tokens * width);
  hidden.resize(row * texts.size());
  job.world().broadcast(job.host(), Tensor::wrap(hidden.data(), DType::f32, Device::cpu(), {static_cast<std::int64_t>(hidden.size())}), 0);
  sampling::TextEmbeddings text;
  text.prompts = static_cast<std::int64_t>(o.prompts.size());
  text.tokens = tokens;
  text.width = width;
  text.source = source;
  text.prompt_embeds.assign(hidden.begin(), hidden.begin() + static_cast<std::ptrdiff_t>(o.prompts.size() * row));
  if (guided) text.negative_prompt_embeds.assign(hidden.end() - static_cast<std::ptrdiff_t>(row), hidden.end());
  return text;
}

std::string choose_out_dir(const RunPlan& o, const mpi::Session& mpi) {
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

namespace {

// The message of the lowest rank whose `mine` is not empty, on every rank ("" when none).
std::string first_rank_error(const mpi::Session& mpi, const std::string& mine) {
  const int first = mpi.min(mine.empty() ? mpi.size() : mpi.rank());
  if (first == mpi.size()) return "";
  std::string message = mine;
  mpi.broadcast(message, first);
  return message;
}

void warn(const mpi::Session& mpi, const std::string& line) {
  if (mpi.rank() == 0) std::cerr << "vinf generate: warning: " << line << "\n" << std::flush;
}

}  // namespace

ResumePoint choose_checkpoint(const RunPlan& o, const std::string& out_dir, const mpi::Session& mpi,
                              const io::RunStamp& stamp, const std::vector<std::int64_t>& timesteps,
                              const Shape& full, std::int64_t first, std::int64_t count,
                              const std::vector<std::string>& memories) {
  ResumePoint point;
  if (o.resume.empty()) return point;
  const bool automatic = o.resume == "auto";
  const std::string dir = out_dir + "/checkpoints";
  std::vector<std::string> candidates;  // newest first
  if (automatic) {
    std::string listed = decided_by_root(mpi, [&] {
      std::string names;
      for (const std::string& c : io::list_checkpoints(dir)) names += c + "\n";
      return names;
    });
    for (std::size_t pos = 0, end; (end = listed.find('\n', pos)) != std::string::npos; pos = end + 1)
      candidates.insert(candidates.begin(), listed.substr(pos, end - pos));
  } else {
    candidates.push_back(o.resume);
  }
  for (const std::string& path : candidates) {
    // The metadata and text (rank 0 first, so that a damaged file is reported once).
    const std::string unreadable = decided_by_root(mpi, [&]() -> std::string {
      try {
        io::read_checkpoint_info(path);
        return "";
      } catch (const InputError& e) {
        return e.what();
      }
    });
    if (!unreadable.empty()) {
      VINF_INPUT_CHECK(automatic, unreadable);
      warn(mpi, "skipping checkpoint " + path + ": " + unreadable);
      continue;
    }
    auto info = std::make_unique<io::CheckpointInfo>(io::read_checkpoint_info(path));
    check_resumable(*info, stamp, timesteps);
    VINF_INPUT_CHECK(info->full == full, "checkpoint ", path, " holds latents ", info->full.str(), "; this run's are ",
                     full.str());
    // This rank's frames, their checksums checked; every rank learns whether any chunk failed.
    const auto n = static_cast<std::size_t>(count * full[1] * full[2] * full[3]);
    point.latents.assign(n, 0.f);
    point.previous_x0.assign(n, 0.f);
    point.memories.assign(memories.size(), std::vector<float>(n, 0.f));
    std::vector<io::StateFrames> extra;
    for (std::size_t k = 0; k < memories.size(); ++k) extra.push_back({memories[k], point.memories[k].data()});
    std::string damaged;
    try {
      io::read_checkpoint_frames(mpi.world(), path, first, count, point.latents.data(), point.previous_x0.data(), extra);
    } catch (const InputError& e) {
      damaged = e.what();
    }
    damaged = first_rank_error(mpi, damaged);
    if (!damaged.empty()) {
      VINF_INPUT_CHECK(automatic, damaged, "; resume from another checkpoint (--resume auto takes the newest one that ",
                       "passes its checks)");
      warn(mpi, "skipping checkpoint " + path + ": " + damaged);
      continue;
    }
    if (path != candidates.front())
      warn(mpi, "falling back to the older checkpoint " + path + ": the newer one(s) in " + dir +
                    " could not be used (see above)");
    if (info->format_version < 2)
      warn(mpi, "checkpoint " + path + " is in format version " + std::to_string(info->format_version) +
                    " (an older vinf), which has no checksums: its data cannot be verified");
    point.info = std::move(info);
    return point;
  }
  VINF_INPUT_CHECK(candidates.empty(), "--resume auto: none of the ", candidates.size(), " checkpoint(s) in ", dir,
                   " can be used (see the warnings above), and the run does not start again from the beginning on ",
                   "its own; remove them, or run without --resume and with --overwrite, which starts over");
  return point;
}

json numerics_json(const RunPlan& o, int clips, DType dtype, const Device& device) {
  json vi = vi_json(o.vi);
  vi.erase("halo");      // x and kv give the same numbers
  vi.erase("exchange");  // so do the exchange patterns
  if (o.vi.mode == infinity::Mode::exact) vi = {{"mode", "exact"}};  // the window settings do not apply
  json j = {{"video", {{"frames", o.frames}, {"height", o.height}, {"width", o.width}, {"fps", o.fps}}},
            {"sampler",
             {{"scheduler", sampling::scheduler_name(o.scheduler)}, {"steps", o.steps}, {"guidance", o.guidance},
              {"seed", o.seed}, {"eta", o.eta}, {"noise", sampling::noise_mode_name(o.noise)}}},
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

json long_json(const sampling::LongVideoConfig& l) {
  json j = {{"mode", sampling::long_mode_name(l.mode)}};
  if (l.mode == sampling::LongMode::windows)
    j.update({{"window", l.window}, {"stride", l.stride}, {"blend", sampling::blend_name(l.blend)}});
  if (l.mode == sampling::LongMode::fifo)
    j.update({{"fifo-window", l.fifo_window}, {"fifo-partitions", l.fifo_partitions}, {"fifo-lookahead", l.fifo_lookahead}});
  return j;
}

std::string settings_differences(const io::RunStamp& there, const io::RunStamp& here, const std::string& path) {
  if (there.model_fingerprint != here.model_fingerprint)
    return "written for another model (fingerprint " + there.model_fingerprint + " there, " + here.model_fingerprint + " here)";
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
    if (!new_values.count(key) && n++ < 4) diffs += (diffs.empty() ? "" : "; ") + key + " " + value + " there, not set here";
  if (n > 4) diffs += "; and " + std::to_string(n - 4) + " more";
  return diffs;
}

void check_resumable(const io::CheckpointInfo& info, const io::RunStamp& now, const std::vector<std::int64_t>& timesteps) {
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
             "), so this run cannot tell whether it is the same one; choose another --out, or --overwrite to replace it";
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
  for (const char* name : {"run.json", "latents.h5", "video.mp4", "contact.png", "evaluate.json", "evaluate.png",
                           "activations.h5", "frames"}) {
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

double test_step_seconds() {
  const char* s = std::getenv("VINF_TEST_STEP_SECONDS");
  return s ? std::max(0.0, std::atof(s)) : 0.0;
}

void check_dump_modules(const RunPlan& o, const model::UNetConfig& c) {
  if (o.dump_globs.empty()) return;
  VINF_INPUT_CHECK(o.cfg() == 1, "--dump.modules needs --parallel.cfg 1 (every rank then holds ",
                   "both guidance branches of its frames)");
  VINF_INPUT_CHECK(o.job.tensor == 1, "--dump.modules needs --parallel.tensor 1 (every rank then holds ",
                   "whole modules)");
  VINF_INPUT_CHECK(o.job.pipeline == 1, "--dump.modules needs --parallel.pipeline 1 (the dump steps would run on ",
                   "different stages)");
  const std::vector<std::string> names = model::observed_module_names(c);
  for (const std::string& glob : o.dump_globs) {
    const bool matches = std::any_of(names.begin(), names.end(),
                                     [&](const std::string& n) { return fnmatch(glob.c_str(), n.c_str(), 0) == 0; });
    if (matches) continue;
    // The block outputs in full, and the first temporal module of each kind for the inner names.
    std::string blocks, inner;
    for (const std::string& n : names) {
      if (n.find('.') == std::string::npos || (n.find('.') == n.rfind('.') && n.find("_blocks.") != std::string::npos))
        blocks += (blocks.empty() ? "" : ", ") + n;
      else if (inner.empty() && n.find(".temp_convs.") != std::string::npos)
        inner = n.substr(0, n.rfind('.')) + ".in/.out";
    }
    VINF_INPUT_FAIL("--dump.modules: '", glob, "' matches no module of this model; the modules are ", blocks,
                    ", and inside them the inputs and outputs of every temporal convolution, temporal transformer ",
                    "and temporal attention (e.g. ", inner, ", transformer_in.in, ",
                    "transformer_in.transformer_blocks.0.attn1.out); globs such as 'down_blocks.*' or '*.attn1.out' ",
                    "select several");
  }
}

ActivationDump::ActivationDump(const RunPlan& o, std::int64_t batch, std::int64_t clip_frames,
                               std::int64_t first_frame, std::int64_t frames)
    : globs_(o.dump_globs),
      steps_(o.dump_step_list),
      batch_(batch),
      clip_frames_(clip_frames),
      first_frame_(first_frame),
      frames_(frames) {}

std::function<void(const std::string&, const Tensor&)> FiniteWatch::observer(ExecContext& ctx) {
  first_bad_.clear();
  return [this, &ctx](const std::string& name, const Tensor& t) {
    if (!first_bad_.empty()) return;
    host_.resize(static_cast<std::size_t>(t.numel()));
    ops::copy(ctx, t, Tensor::wrap(host_.data(), DType::f32, Device::cpu(), t.shape));
    synchronize(ctx);
    for (float v : host_) {
      if (!std::isfinite(v)) {
        first_bad_ = name;
        return;
      }
    }
  };
}

bool ActivationDump::wanted(int step) const {
  return enabled() && std::find(steps_.begin(), steps_.end(), step) != steps_.end();
}

std::function<void(const std::string&, const Tensor&)> ActivationDump::observer(ExecContext& ctx) {
  captured_.clear();
  return [this, &ctx](const std::string& name, const Tensor& t) {
    bool match = false;
    for (const std::string& g : globs_) match = match || fnmatch(g.c_str(), name.c_str(), 0) == 0;
    if (!match) return;
    Captured c{name, t.shape, std::vector<float>(static_cast<std::size_t>(t.numel()))};
    ops::copy(ctx, t, Tensor::wrap(c.data.data(), DType::f32, Device::cpu(), t.shape));
    captured_.push_back(std::move(c));
  };
}

void ActivationDump::write_step(const mpi::Session& mpi, const std::string& path, int step) {
  const auto comm = mpi.world();
  if (!file_) {
    file_ = std::make_unique<io::H5File>(io::H5File::create(comm, path + ".partial"));
    file_->set_text("/", "format", "vinf-activations");
    file_->set_text("/", "layout",
                    "frame-major module outputs as [batch, frame, ...]; temporal attention internals as "
                    "[batch*height*width, frame, width]; others whole");
    file_->create_group("/activations");
  }
  const std::string group = "/activations/step" + std::to_string(step);
  file_->create_group(group);
  for (const Captured& c : captured_) {
    const std::string name = group + "/" + c.name;
    if (c.shape.rank() == 3 && c.shape[1] == clip_frames_) {
      // Temporal attention internals (B * H * W, F_clip, width).
      file_->write_frames(name, {c.shape[0], frames_, c.shape[2]}, 1, first_frame_, clip_frames_, c.data.data());
    } else if (c.shape.rank() >= 2 && c.shape[0] == batch_ * clip_frames_) {
      // (B * F_clip, ...) frame-major: [B, F, ...] over the whole video.
      Shape full{batch_, frames_};
      for (int d = 1; d < c.shape.rank(); ++d) full.push_back(c.shape[d]);
      file_->write_frames(name, full, 1, first_frame_, clip_frames_, c.data.data());
    } else {
      file_->write_small(name, DType::f32, c.shape, c.data.data());  // the same on every rank
    }
  }
  captured_.clear();
}

void ActivationDump::finish(const mpi::Session& mpi, const std::string& path) {
  const auto comm = mpi.world();
  if (!file_) return;
  file_->close();
  file_.reset();
  io::commit_partial(comm, path + ".partial", path);
}

}  // namespace vinf::app
