// The HDF5 files of a run (design.md §6): `latents.h5` (the final latents) and the checkpoints
// `checkpoints/step-NNNNNN.h5` (latents, solver state, cached text embeddings) from which a run
// continues, in invariant mode also on another number of ranks.
//
// Layout (format_version 2): /latents F32 [F_total, C, H, W] (chunked per frame); /run/config
// (the run's configuration, JSON) and /run/numerics (JSON: the settings a resume must share), each
// one UTF-8 string [1] of any length; latents.h5 may add /run/boundaries I64 [B] (the frames
// where a clip or window starts); checkpoints add /state (attribute `step`: completed steps)
// with /state/timesteps I64 [S], /state/sigmas F32 [S + 1], /state/previous_x0 F32
// [F_total, C, H, W] (the multistep solver's memory), and /text with /text/prompt_embeds F32
// [P, L, D] and /text/negative_prompt_embeds F32 [1, L, D]. Root attributes: format,
// format_version, vinf_version, model_fingerprint, noise_mode, scheduler, seed, world_size,
// cfg_size, clip_size, layout. Every dataset carries a Fletcher-32 checksum per chunk (h5file.hpp),
// checked on every read.
//
// Version 1 (read, not written) held config and numerics as root attributes, which an object
// header limits to 64 KiB in all, and had no checksums.
//
// Every file is written collectively under PATH.partial, synced and renamed by rank 0 after every
// rank closed it: a file under its final name is complete, and a crash while writing leaves the
// previous checkpoint as it was.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace vinf::io {

inline constexpr const char* kLatentsFormat = "vinf-latents";
inline constexpr const char* kCheckpointFormat = "vinf-checkpoint";
inline constexpr int kRunFileVersion = 2;

// What identifies the run a file belongs to.
class H5File;

struct RunStamp {
  std::string config_json, numerics_json, model_fingerprint, noise_mode, scheduler;
  std::int64_t seed = 0, world_size = 1, cfg_size = 1, clip_size = 1;
};

// The video's latent shape [F_total, C, H, W] and this rank's frames [first, first + count).
// count = 0 for ranks that hold a copy another rank writes (the second guidance branch).
struct FramePart {
  Shape full;
  std::int64_t first = 0, count = 0;
};

struct SolverState {
  std::int64_t step = 0;  // completed steps
  std::vector<std::int64_t> timesteps;
  std::vector<double> sigmas;
};

// Text embeddings in the one layout they keep from the encoder (or file) to the device and the
// checkpoint, which caches rank 0's (the other ranks' are not used).
struct TextEmbeddings {
  std::int64_t prompts = 0, tokens = 0, width = 0;
  std::vector<float> prompt_embeds, negative_prompt_embeds;  // [P, L, D], [1, L, D] or empty
  std::string source;  // where they came from, for run.json and messages (not stored)
  // Prompt p's rows: tokens x width values.
  const float* prompt(std::int64_t p) const { return prompt_embeds.data() + p * tokens * width; }
};
using TextCache = TextEmbeddings;  // as a checkpoint caches them

// Collective over comm. `latents` holds this rank's frames, frame-major. `boundaries`, when given,
// are the frames where a new clip or window of the run starts (0 < b < F_total, increasing; none
// for a video made in one piece), stored as the root attribute boundary_count and, when there are
// any, /run/boundaries I64 [B], for `vinf evaluate`.
void write_latents(MPI_Comm comm, const std::string& path, const RunStamp& stamp, const FramePart& part,
                   const float* latents, const std::optional<std::vector<std::int64_t>>& boundaries = std::nullopt);
// latents.h5 written as the video is made (a diffusion-forcing run, window by window): PATH.partial
// holds the run's stamp and the whole /latents from the start, its frames written in order as each
// becomes final, every append flushed to disk and counted in the root attribute frames_written;
// finish() records the boundaries and renames it to PATH. One process writes it.
class LatentsStream {
 public:
  // A new PATH.partial; or, with `resume_frames` > 0, the one an earlier start of the run left,
  // which must be this run's (numerics and model) and hold at least that many frames (throws
  // vinf::InputError naming the file and what to do otherwise).
  LatentsStream(const std::string& path, const RunStamp& stamp, const Shape& full, std::int64_t resume_frames);
  ~LatentsStream();
  LatentsStream(const LatentsStream&) = delete;
  LatentsStream& operator=(const LatentsStream&) = delete;
  std::int64_t frames() const { return frames_; }  // the final frames written so far
  // `count` frames, frame-major, from frame `first` (at most frames(): a resumed run writes again
  // frames it had written after its checkpoint).
  void append(std::int64_t first, std::int64_t count, const float* data);
  // Frames written, read back (their checksums checked).
  void read(std::int64_t first, std::int64_t count, float* data) const;
  void finish(const std::vector<std::int64_t>& boundaries);

 private:
  std::string path_, partial_;
  Shape full_;
  RunStamp stamp_;
  std::int64_t frames_ = 0;
  std::unique_ptr<H5File> file_;
};

// The boundaries a run recorded in its latents.h5 (one process; MPI must be running), or none when
// it recorded none (a file written before they were). Throws vinf::InputError naming the file when
// it cannot be read.
std::optional<std::vector<std::int64_t>> read_run_boundaries(const std::string& path);
std::optional<std::vector<std::int64_t>> recorded_boundaries(const H5File& f);
// A solver memory beyond previous_x0, in the latents' frame layout (UniPC keeps three): written as
// /state/<name> with the same chunks and checksums.
struct StateFrames {
  std::string name;
  float* data;  // this rank's frames; read into on resume
};
void write_checkpoint(MPI_Comm comm, const std::string& path, const RunStamp& stamp, const FramePart& part,
                      const float* latents, const float* previous_x0, const SolverState& state, const TextCache& text,
                      const std::vector<StateFrames>& extra = {});

struct CheckpointInfo {
  std::string path;
  std::int64_t format_version = kRunFileVersion;  // 1: no checksums
  RunStamp stamp;
  SolverState state;
  Shape full;
  TextCache text;
};

// The stamp of a run file (latents.h5 or a checkpoint), one process: what a finished run is
// compared with. Throws vinf::InputError naming the file when it is not one of vinf's run files.
RunStamp read_run_stamp(const std::string& path);

// Reads and checks a checkpoint's metadata and text cache (one process). Throws vinf::InputError
// naming the file for a missing, damaged, truncated or foreign file.
CheckpointInfo read_checkpoint_info(const std::string& path);
// Collective open: this rank's frames of /latents and /state/previous_x0, their checksums checked.
// The reads themselves are independent, so a rank that throws vinf::InputError (a damaged chunk)
// leaves no other rank waiting; the caller makes the ranks agree.
void read_checkpoint_frames(MPI_Comm comm, const std::string& path, std::int64_t first, std::int64_t count,
                            float* latents, float* previous_x0, const std::vector<StateFrames>& extra = {});

// Collective, before a run computes anything: writes a file with the run's stamp in `dir` (as
// every checkpoint and latents.h5 will carry it) and removes it, so that whatever keeps these files
// from being written (the directory, the file system, the stamp itself) fails now, not after the
// first steps.
void check_run_files(MPI_Comm comm, const std::string& dir, const RunStamp& stamp);

// "step-000012.h5"; the complete checkpoints of a directory, oldest first; removing all but the
// newest `keep` of them and any leftover partial file (one process).
std::string checkpoint_name(std::int64_t step);
std::vector<std::string> list_checkpoints(const std::string& dir);
void prune_checkpoints(const std::string& dir, int keep);

}  // namespace vinf::io
