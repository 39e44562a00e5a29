// The pieces of `vinf generate` around the denoising loop: where the outputs go, which checkpoint a
// run continues from and whether it may, stop signals, activation dumps, run.json's parts.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/stop_signals.hpp"
#include "app/generate_options.hpp"
#include "core/arena.hpp"
#include "io/checkpoint.hpp"
#include "io/h5file.hpp"
#include "model/config.hpp"
#include "job/job.hpp"
#include "mpi/communicator.hpp"
#include "mpi/session.hpp"
#include "ops/context.hpp"
#include "sampling/conditioning.hpp"

namespace vinf::app {

using json = nlohmann::ordered_json;

// Runs fn on rank 0; its result, or the message of the vinf::InputError it threw, reaches every
// rank (which then all throw it), so a decision that reads the file system is the same everywhere.
std::string decided_by_root(const mpi::Session& mpi, const std::function<std::string()>& fn);

// The prompts (and with guidance the negative prompt) through the tokenizer and text encoder:
// --model.tokenizer / --model.text-encoder, or the built-in model's byte-level tokenizer and random
// encoder. Rank 0 encodes and every rank gets the embeddings; `warnings` (rank 0) gets truncated
// prompts and defaults the tokenizer files left open. Throws vinf::InputError on every rank.
sampling::TextEmbeddings encode_prompts_on_root(const RunPlan& o, std::int64_t width, bool guided, job::Job& job,
                                                std::vector<std::string>& warnings);

// outputs/<name>-<Slurm job id (array: <array job id>_<task>), or the date and time>.
std::string default_out_dir(const std::string& name);
// The output directory: --out, or the run a --resume PATH belongs to, or outputs/<name>-<id>.
// Refused when it exists, unless --overwrite or --resume.
std::string choose_out_dir(const RunPlan& o, const mpi::Session& mpi);
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
ResumePoint choose_checkpoint(const RunPlan& o, const std::string& out_dir, const mpi::Session& mpi,
                              const io::RunStamp& stamp, const std::vector<std::int64_t>& timesteps,
                              const Shape& full, std::int64_t first, std::int64_t count,
                              const std::vector<std::string>& memories = {});

// The settings that change the numbers, which a resumed run must share with the checkpoint (the
// number of clips only outside invariant mode).
json numerics_json(const RunPlan& o, int clips, DType dtype, const Device& device);
// Throws vinf::InputError naming the checkpoint and the first differences.
void check_resumable(const io::CheckpointInfo& info, const io::RunStamp& now, const std::vector<std::int64_t>& timesteps);
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
// The [long] settings that apply to the mode, for run.json and the numerics a resume must share.
json long_json(const sampling::LongVideoConfig& l);

// Test hook: VINF_TEST_STEP_SECONDS=S makes every step last at least S seconds, so that a test of a
// Slurm time limit or preemption knows the run is still going when Slurm acts, however fast the
// machine is at the moment. 0 when unset.
double test_step_seconds();

// --debug: watches the module outputs of a UNet call and keeps the name of the first one that holds
// a NaN or infinity. Each output is read back to the host, so a step is slower; the run stays the same.
class FiniteWatch {
 public:
  // The observer for one UNet call (forgets the previous call's finding).
  std::function<void(const std::string&, const Tensor&)> observer(ExecContext& ctx);
  // The first module of the last call whose output was not finite; empty when all were.
  const std::string& first_bad() const { return first_bad_; }

 private:
  std::string first_bad_;
  std::vector<float> host_;
};

// --dump.modules against the model, before anything is computed or created: every glob must match
// a module the UNet reports (a typo would otherwise give an empty activations.h5), and the ranks
// must hold both guidance branches. Throws vinf::InputError naming the glob and the module names.
void check_dump_modules(const RunPlan& o, const model::UNetConfig& c);

// --dump.modules: the outputs of the selected modules over the whole video, collected on the
// dump steps and written collectively to OUT/activations.h5 as /activations/step<k>/<module>.
class ActivationDump {
 public:
  ActivationDump(const RunPlan& o, std::int64_t batch, std::int64_t clip_frames, std::int64_t first_frame,
                 std::int64_t frames);
  bool enabled() const { return !globs_.empty(); }
  bool wanted(int step) const;  // 1-based
  // The observer for the UNet call of a dump step: copies matching outputs to the host.
  std::function<void(const std::string&, const Tensor&)> observer(ExecContext& ctx);
  // Collective: writes what the observer collected under step<k>.
  void write_step(const mpi::Session& mpi, const std::string& path, int step);
  // Collective: renames the file into place.
  void finish(const mpi::Session& mpi, const std::string& path);

 private:
  struct Captured {
    std::string name;
    Shape shape;
    std::vector<float> data;
  };
  std::vector<std::string> globs_;
  std::vector<int> steps_;
  std::int64_t batch_, clip_frames_, first_frame_, frames_;
  std::vector<Captured> captured_;
  std::unique_ptr<io::H5File> file_;
};

}  // namespace vinf::app
