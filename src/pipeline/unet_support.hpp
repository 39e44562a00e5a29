// The pieces of `vinf generate` around the UNet's denoising loop: the prompts' encoding on rank 0,
// --debug's watch and the activation dumps. The run's directory, checkpoints and run.json's shared
// parts are in pipeline/run_dir, the run control in pipeline/step_control.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pipeline/generate_spec.hpp"
#include "core/arena.hpp"
#include "io/checkpoint.hpp"
#include "io/h5file.hpp"
#include "model/config.hpp"
#include "job/job.hpp"
#include "mpi/communicator.hpp"
#include "mpi/session.hpp"
#include "ops/context.hpp"
#include "pipeline/run_dir.hpp"
#include "pipeline/step_control.hpp"
#include "sampling/conditioning.hpp"

namespace vinf::pipeline {

using json = nlohmann::ordered_json;

// The prompts (and with guidance the negative prompt) through the tokenizer and text encoder:
// --model.tokenizer / --model.text-encoder, or the built-in model's byte-level tokenizer and random
// encoder. Rank 0 encodes and every rank gets the embeddings; `warnings` (rank 0) gets truncated
// prompts and defaults the tokenizer files left open. Throws vinf::InputError on every rank.
sampling::TextEmbeddings encode_prompts_on_root(const GenerateSpec& o, std::int64_t width, bool guided, job::Job& job,
                                                std::vector<std::string>& warnings);

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
void check_dump_modules(const GenerateSpec& o, const model::UNetConfig& c);

// --dump.modules: the outputs of the selected modules over the whole video, collected on the
// dump steps and written collectively to OUT/activations.h5 as /activations/step<k>/<module>.
class ActivationDump {
 public:
  ActivationDump(const GenerateSpec& o, std::int64_t batch, std::int64_t clip_frames, std::int64_t first_frame,
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

}  // namespace vinf::pipeline
