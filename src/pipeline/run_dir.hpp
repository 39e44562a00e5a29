// A run's directory, for every family: where the outputs go, which checkpoint a run continues from
// and whether it may (every rank agreeing), what a finished run there means, the removal of a
// previous run's outputs, and the parts of run.json the families share.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"
#include "infinity/config.hpp"
#include "io/checkpoint.hpp"
#include "mpi/communicator.hpp"
#include "mpi/session.hpp"
#include "pipeline/generate_spec.hpp"
#include "sampling/long_video.hpp"

namespace vinf::pipeline {

using json = nlohmann::ordered_json;

// Runs fn on rank 0; its result, or the message of the vinf::InputError it threw, reaches every
// rank (which then all throw it), so a decision that reads the file system is the same everywhere.
std::string decided_by_root(const mpi::Session& mpi, const std::function<std::string()>& fn);

// outputs/<name>-<Slurm job id (array: <array job id>_<task>), or the date and time>.
std::string default_out_dir(const std::string& name);
// The output directory: --out, or the run a --resume PATH belongs to, or outputs/<name>-<id>.
// Refused when it exists, unless --overwrite or --resume.
std::string choose_out_dir(const GenerateSpec& o, const mpi::Session& mpi);
// The checkpoints a run may continue from, newest first, the same list on every rank: --resume
// PATH alone, with --resume auto every checkpoint in `dir` as rank 0 lists it, none without --resume.
std::vector<std::string> checkpoint_candidates(const mpi::Session& mpi, const std::string& resume,
                                               const std::string& dir);
// The checkpoint every rank agrees on, for generation and training alike: the first of `candidates`
// that `open` reads on every rank. `open` is called on every rank with the same path (it may be
// collective) and returns "" or why this rank cannot use it; the lowest rank's reason is everyone's,
// and the next candidate is tried. An InputError it throws on every rank ends the choice.
struct AgreedCheckpoint {
  std::string path;  // "" when none could be used
  std::vector<std::pair<std::string, std::string>> skipped;  // the ones passed over: path, why
};
// `skipped` (optional) hears of each one passed over as it happens (path, why).
AgreedCheckpoint agree_on_checkpoint(
    const mpi::Session& mpi, const std::vector<std::string>& candidates,
    const std::function<std::string(const std::string& path)>& open,
    const std::function<void(const std::string& path, const std::string& why)>& skipped = {});
// The checkpoint a run continues from, with this rank's frames already read and their checksums
// checked (none: a fresh start).
struct ResumePoint {
  std::unique_ptr<io::CheckpointInfo> info;
  std::vector<float> latents, previous_x0;  // frames [first, first + count), frame-major
  std::vector<std::vector<float>> memories;  // the extra solver memories asked for, in that order
};
// Collective. --resume PATH: that checkpoint, which must be readable, belong to this run
// (check_resumable) and pass its checksums, else vinf::InputError on every rank. --resume auto:
// the newest checkpoint in OUT/checkpoints that does; a damaged one is skipped with a warning that
// names the file and what failed (the dataset whose checksum does not match), and the next older
// one is tried, with a warning that says so. Checkpoints present but none usable: InputError
// (never a silent start from the beginning); none present: a fresh start.
// `memories` names the solver's datasets under /state beyond previous_x0 (the flow UniPC's).
ResumePoint choose_checkpoint(const GenerateSpec& o, const std::string& out_dir, const mpi::Session& mpi,
                              const io::RunStamp& stamp, const std::vector<std::int64_t>& timesteps, const Shape& full,
                              std::int64_t first, std::int64_t count, const std::vector<std::string>& memories = {});

// The settings that change the numbers, which a resumed run must share with the checkpoint (the
// number of clips only outside invariant mode).
json numerics_json(const GenerateSpec& o, int clips, DType dtype, const Device& device);
// Throws vinf::InputError naming the checkpoint and the first differences.
void check_resumable(const io::CheckpointInfo& info, const io::RunStamp& now,
                     const std::vector<std::int64_t>& timesteps);
// What differs between the settings of a run file (`there`, read from path) and this run's: the
// model, or up to four numerics keys with both values; "" when they are the same run.
std::string settings_differences(const io::RunStamp& there, const io::RunStamp& here, const std::string& path);
// --resume auto over a finished run: "nothing to do" only when it is the same run (its latents.h5
// has this run's model and numerics); otherwise an InputError listing the differences, on every rank.
void check_finished_run(const std::string& out_dir, const io::RunStamp& now, const mpi::Session& mpi);

// --overwrite: removes every output a previous run left in out_dir (run.json first, then latents.h5,
// video.mp4, contact.png, frames/, evaluate.*, activations.h5 and the checkpoints), so that nothing
// of it stays beside the new run's files. One process. Returns the names removed.
std::vector<std::string> remove_run_outputs(const std::string& out_dir);

json counters_json(const mpi::CommCounters& c);
json vi_json(const infinity::Config& v);
// The UNet family's [sampler] settings, as run.json and the numerics a resume must share record them.
json sampler_json(const GenerateSpec& o);
// The [long] settings that apply to the mode, for run.json and the numerics a resume must share.
json long_json(const sampling::LongVideoConfig& l);

// What run.json records of a finished video, whichever family made it (jobs/summarize reads them
// alike): the settings, where it resumed, the video's boundaries (the UNet family's), the schedule,
// the times, the rate, each rank's record and the outputs.
struct RunRecord {
  std::string out_dir;
  json config;
  std::string resumed_from;  // "" when it started from the beginning
  int start_step = 0;
  std::optional<std::vector<std::int64_t>> boundaries;
  json schedule, times, ranks, outputs;
  double frame_steps_per_s = 0;
};
// Writes OUT/run.json atomically (last of a run's files: its presence marks a finished run).
void write_run_json(const RunRecord& r);
// This process's peak resident memory so far (getrusage), in bytes: what run.json reports beside
// the device arena's peak.
double max_rss_bytes();
// OUT/run.json, written atomically: the one writer of the file, for a video's record and a
// training run's (whose record is train.json's with the layout, memory and throughput).
void write_run_file(const std::string& out_dir, const json& run);

// --latents-init FILE: its tensor `key` ('latents_init', or a video-to-video draw) is F32 of the
// video's latent shape `want` (`layout` says how it is made), with finite values; checked before any
// output exists. Throws InputError.
void check_latents_init(const std::string& path, const Shape& want, const std::string& layout,
                        const std::string& key = "latents_init");

// The message of the lowest rank whose `mine` is not empty, on every rank ("" when none): what
// every rank reports when some could not read a file.
std::string first_rank_error(const mpi::Session& mpi, const std::string& mine);

}  // namespace vinf::pipeline
