#include "io/checkpoint.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "io/h5file.hpp"
#include "mpi/check.hpp"

namespace fs = std::filesystem;

namespace vinf::io {

namespace {

// The attributes hold only short values of bounded size (an object header takes at most 64 KiB);
// the configuration, which grows with the prompt list, is a dataset.
void stamp_file(H5File& f, const char* format, const RunStamp& s) {
  f.set_text("/", "format", format);
  f.set_int("/", "format_version", kRunFileVersion);
  f.set_text("/", "vinf_version", VINF_VERSION);
  f.create_group("/run");
  f.write_text("/run/config", s.config_json);
  f.write_text("/run/numerics", s.numerics_json);
  f.set_text("/", "model_fingerprint", s.model_fingerprint);
  f.set_text("/", "noise_mode", s.noise_mode);
  f.set_text("/", "scheduler", s.scheduler);
  f.set_text("/", "layout", "[frame, channel, height, width]");
  f.set_int("/", "seed", s.seed);
  f.set_int("/", "world_size", s.world_size);
  f.set_int("/", "cfg_size", s.cfg_size);
  f.set_int("/", "clip_size", s.clip_size);
}

// Writes under PATH.partial with body(file), then commits; a failure removes the partial file.
template <class Body>
void write_atomically(MPI_Comm comm, const std::string& path, Body body) {
  const std::string partial = path + ".partial";
  try {
    H5File f = H5File::create(comm, partial);
    body(f);
    f.close();
  } catch (...) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    if (rank == 0) std::remove(partial.c_str());
    throw;
  }
  commit_partial(comm, partial, path);
}

}  // namespace

void write_latents(MPI_Comm comm, const std::string& path, const RunStamp& stamp, const FramePart& part,
                   const float* latents, const std::optional<std::vector<std::int64_t>>& boundaries) {
  write_atomically(comm, path, [&](H5File& f) {
    stamp_file(f, kLatentsFormat, stamp);
    f.write_frames("/latents", part.full, 0, part.first, part.count, latents);
    if (!boundaries) return;
    const auto count = static_cast<std::int64_t>(boundaries->size());
    f.set_int("/", "boundary_count", count);  // present also when there are none (FIFO: no seams)
    if (count > 0) f.write_small("/run/boundaries", DType::i64, {count}, boundaries->data());
  });
}

namespace {
RunStamp stored_stamp(const H5File& f, std::int64_t version);
}

LatentsStream::LatentsStream(const std::string& path, const RunStamp& stamp, const Shape& full,
                             std::int64_t resume_frames)
    : path_(path), partial_(path + ".partial"), full_(full), stamp_(stamp) {
  VINF_CHECK(full.rank() == 4 && resume_frames >= 0 && resume_frames <= full[0], "LatentsStream: ", full.str(),
             ", resuming after ", resume_frames, " frames");
  if (resume_frames == 0) {
    file_ = std::make_unique<H5File>(H5File::create(MPI_COMM_SELF, partial_));
    stamp_file(*file_, kLatentsFormat, stamp);
    file_->create_frames("/latents", full, 0);
    file_->set_int("/", "frames_written", 0);
    file_->flush();
    return;
  }
  const std::string again = ": the run cannot continue from its checkpoint (run again with --overwrite to start over)";
  VINF_INPUT_CHECK(std::filesystem::exists(partial_), partial_, ", the latents written so far, is missing", again);
  file_ = std::make_unique<H5File>(H5File::open_writable(partial_));
  const H5File& f = *file_;
  VINF_INPUT_CHECK(f.has_attribute("/", "format") && f.text("/", "format") == kLatentsFormat &&
                       f.has_attribute("/", "frames_written") && f.exists("/latents"),
                   partial_, " is not the latents of a run in the making", again);
  const RunStamp s = stored_stamp(f, f.integer("/", "format_version"));
  VINF_INPUT_CHECK(s.numerics_json == stamp.numerics_json && s.model_fingerprint == stamp.model_fingerprint, partial_,
                   " holds another run's latents (other settings or model)", again);
  VINF_INPUT_CHECK(f.shape("/latents") == full, partial_, " holds latents ", f.shape("/latents").str(),
                   "; this run's are ", full.str(), again);
  frames_ = f.integer("/", "frames_written");
  VINF_INPUT_CHECK(frames_ >= resume_frames, partial_, " holds ", frames_, " final frames; the checkpoint needs ",
                   resume_frames, again);
  frames_ = resume_frames;
}

LatentsStream::~LatentsStream() = default;

void LatentsStream::append(std::int64_t first, std::int64_t count, const float* data) {
  VINF_CHECK(file_ && first >= 0 && first <= frames_ && first + count <= full_[0], "LatentsStream: frames [", first,
             ", ", first + count, ") after ", frames_, " of ", full_[0]);
  file_->write_frames_at("/latents", 0, first, count, data);
  frames_ = std::max(frames_, first + count);
  file_->set_int("/", "frames_written", frames_);
  file_->flush();
}

void LatentsStream::read(std::int64_t first, std::int64_t count, float* data) const {
  VINF_CHECK(file_ && first >= 0 && first + count <= frames_, "LatentsStream: reading frames [", first, ", ",
             first + count, ") of ", frames_);
  file_->read_frames("/latents", 0, first, count, data);
}

void LatentsStream::finish(const std::vector<std::int64_t>& boundaries) {
  VINF_CHECK(file_ && frames_ == full_[0], "LatentsStream: finished after ", frames_, " of ", full_[0], " frames");
  const auto count = static_cast<std::int64_t>(boundaries.size());
  file_->set_int("/", "boundary_count", count);
  if (count > 0) file_->write_small("/run/boundaries", DType::i64, {count}, boundaries.data());
  // The layout of the start that finished it (a resumed run may run on other ranks).
  file_->set_int("/", "world_size", stamp_.world_size);
  file_->set_int("/", "cfg_size", stamp_.cfg_size);
  file_->set_int("/", "clip_size", stamp_.clip_size);
  file_->close();
  file_.reset();
  commit_partial(MPI_COMM_SELF, partial_, path_);
}

std::optional<std::vector<std::int64_t>> read_run_boundaries(const std::string& path) {
  const H5File f = H5File::open_serial(path);
  return recorded_boundaries(f);
}

std::optional<std::vector<std::int64_t>> recorded_boundaries(const H5File& f) {
  if (f.exists("/run/boundaries")) return f.read_i64("/run/boundaries");
  if (f.has_attribute("/", "boundary_count")) return std::vector<std::int64_t>{};
  return std::nullopt;
}

void write_checkpoint(MPI_Comm comm, const std::string& path, const RunStamp& stamp, const FramePart& part,
                      const float* latents, const float* previous_x0, const SolverState& state, const TextCache& text,
                      const std::vector<StateFrames>& extra) {
  write_atomically(comm, path, [&](H5File& f) {
    stamp_file(f, kCheckpointFormat, stamp);
    f.write_frames("/latents", part.full, 0, part.first, part.count, latents);
    f.create_group("/state");
    f.set_int("/state", "step", state.step);
    f.write_small("/state/timesteps", DType::i64, {static_cast<std::int64_t>(state.timesteps.size())},
                  state.timesteps.data());
    const std::vector<float> sigmas(state.sigmas.begin(), state.sigmas.end());
    f.write_small("/state/sigmas", DType::f32, {static_cast<std::int64_t>(sigmas.size())}, sigmas.data());
    f.write_frames("/state/previous_x0", part.full, 0, part.first, part.count, previous_x0);
    for (const StateFrames& e : extra) f.write_frames("/state/" + e.name, part.full, 0, part.first, part.count, e.data);
    f.create_group("/text");
    f.write_small("/text/prompt_embeds", DType::f32, {text.prompts, text.tokens, text.width},
                  text.prompt_embeds.data());
    if (!text.negative_prompt_embeds.empty())
      f.write_small("/text/negative_prompt_embeds", DType::f32, {1, text.tokens, text.width},
                    text.negative_prompt_embeds.data());
  });
}

namespace {

// The stamp stored by stamp_file. Version 1 kept the configuration in root attributes.
RunStamp stored_stamp(const H5File& f, std::int64_t version) {
  RunStamp s;
  s.config_json = version == 1 ? f.text("/", "config") : f.read_text("/run/config");
  s.numerics_json = version == 1 ? f.text("/", "numerics") : f.read_text("/run/numerics");
  s.model_fingerprint = f.text("/", "model_fingerprint");
  s.noise_mode = f.text("/", "noise_mode");
  s.scheduler = f.text("/", "scheduler");
  s.seed = f.integer("/", "seed");
  s.world_size = f.integer("/", "world_size");
  s.cfg_size = f.integer("/", "cfg_size");
  s.clip_size = f.integer("/", "clip_size");
  return s;
}

}  // namespace

RunStamp read_run_stamp(const std::string& path) {
  const H5File f = H5File::open(MPI_COMM_SELF, path);
  const std::string format = f.has_attribute("/", "format") ? f.text("/", "format") : "";
  VINF_INPUT_CHECK(format == kLatentsFormat || format == kCheckpointFormat, path, " is not a vinf run file (format '",
                   format, "')");
  return stored_stamp(f, f.integer("/", "format_version"));
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  const H5File f = H5File::open(MPI_COMM_SELF, path);
  VINF_INPUT_CHECK(f.has_attribute("/", "format") && f.text("/", "format") == kCheckpointFormat, path,
                   " is not a vinf checkpoint (no format attribute '", kCheckpointFormat, "')");
  const std::int64_t version = f.integer("/", "format_version");
  VINF_INPUT_CHECK(version >= 1 && version <= kRunFileVersion, path, " has checkpoint format version ", version,
                   "; this vinf reads versions 1 to ", kRunFileVersion);
  CheckpointInfo info;
  info.path = path;
  info.format_version = version;
  info.stamp = stored_stamp(f, version);  // version 1 has no checksums
  info.state.step = f.integer("/state", "step");
  info.state.timesteps = f.read_i64("/state/timesteps");
  const std::vector<float> sig = f.read_f32("/state/sigmas");
  info.state.sigmas.assign(sig.begin(), sig.end());
  info.full = f.shape("/latents");
  VINF_INPUT_CHECK(info.full.rank() == 4 && f.shape("/state/previous_x0") == info.full, path,
                   ": /latents and /state/previous_x0 must both be [F, C, H, W]");
  // (A FIFO run's step counts its iterations, which outnumber the schedule's steps: the run that
  // resumes checks the step against its own count.)
  VINF_INPUT_CHECK(info.state.step >= 1 && info.state.sigmas.size() == info.state.timesteps.size() + 1, path, ": step ",
                   info.state.step, " does not fit its schedule of ", info.state.timesteps.size(), " steps");
  const Shape emb = f.shape("/text/prompt_embeds");
  VINF_INPUT_CHECK(emb.rank() == 3, path, ": /text/prompt_embeds must be [P, L, D]");
  info.text.prompts = emb[0];
  info.text.tokens = emb[1];
  info.text.width = emb[2];
  info.text.prompt_embeds = f.read_f32("/text/prompt_embeds");
  if (f.exists("/text/negative_prompt_embeds"))
    info.text.negative_prompt_embeds = f.read_f32("/text/negative_prompt_embeds");
  // Reading the last frame's chunk of both arrays finds a file cut short.
  std::vector<float> probe(static_cast<std::size_t>(info.full[1] * info.full[2] * info.full[3]));
  f.read_frames("/latents", 0, info.full[0] - 1, 1, probe.data());
  f.read_frames("/state/previous_x0", 0, info.full[0] - 1, 1, probe.data());
  return info;
}

void read_checkpoint_frames(MPI_Comm comm, const std::string& path, std::int64_t first, std::int64_t count,
                            float* latents, float* previous_x0, const std::vector<StateFrames>& extra) {
  H5File f = H5File::open(comm, path);
  std::string error;
  try {
    f.read_frames("/latents", 0, first, count, latents);
    f.read_frames("/state/previous_x0", 0, first, count, previous_x0);
    for (const StateFrames& e : extra) {
      VINF_INPUT_CHECK(f.exists("/state/" + e.name), path, " has no /state/", e.name,
                       " (the solver memory this run needs to continue)");
      f.read_frames("/state/" + e.name, 0, first, count, e.data);
    }
  } catch (const InputError& e) {
    error = e.what();
  }
  f.close();  // on every rank (MPI-IO closes collectively), also where a read failed
  if (!error.empty()) throw InputError(error);
}

void check_run_files(MPI_Comm comm, const std::string& dir, const RunStamp& stamp) {
  const std::string probe = dir + "/probe.h5.partial";
  int rank = 0;
  VINF_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  const std::string before = "checked before the first step: ";
  try {
    H5File f = H5File::create(comm, probe);
    stamp_file(f, kCheckpointFormat, stamp);
    f.close();
  } catch (const InputError& e) {
    throw InputError(before + e.what());
  } catch (const Error& e) {
    throw Error(before + e.what());
  }
  VINF_CHECK_MPI(MPI_Barrier(comm));  // every rank closed it
  if (rank == 0) std::remove(probe.c_str());
}

std::string checkpoint_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%06lld.h5", static_cast<long long>(step));
  return buf;
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() == 14 && name.rfind("step-", 0) == 0 && name.substr(11) == ".h5" &&
        std::all_of(name.begin() + 5, name.begin() + 11, [](char c) { return c >= '0' && c <= '9'; }))
      found.push_back(e.path().string());
  }
  std::sort(found.begin(), found.end());  // zero-padded steps sort by name
  return found;
}

void prune_checkpoints(const std::string& dir, int keep) {
  const std::vector<std::string> all = list_checkpoints(dir);
  for (std::size_t i = 0; i + static_cast<std::size_t>(std::max(keep, 0)) < all.size(); ++i)
    std::remove(all[i].c_str());
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".partial") fs::remove(e.path(), ec);
}

}  // namespace vinf::io
