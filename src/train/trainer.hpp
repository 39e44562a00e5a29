// `vinf train`'s run as a library: fine-tuning the UNet on a prepare-data file with the
// epsilon-prediction loss, AdamW, a warm-up then cosine learning rate, gradient clipping and
// accumulation, data parallelism with ZeRO, LoRA adapters or some or all parameters trained;
// checkpoints, log.csv, loss.png, train.json, run.json and the trained model. The command line
// (app/train) fills a TrainSpec and starts the job; the loop's run control is pipeline::StepControl,
// as generation's.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.hpp"
#include "job/job.hpp"
#include "train/adamw.hpp"

namespace vinf::train {

// What one training run is to do, typed (the options of `vinf train --help`).
struct TrainSpec {
  std::string model_dir, data_path, out_dir, export_dir;
  std::string params = "all", schedule = "cosine", resume;  // resume: "", "auto" or a checkpoint
  std::int64_t steps = 1000, batch = 1, micro_batch = 0, warmup = 0, log_every = 10, lora = 0;
  std::int64_t zero = 2, checkpoint_every = 0, checkpoint_keep = 2;
  double lora_alpha = 0, bucket_mb = 25;
  std::uint64_t seed = 0;
  double fps = 24, min_lr_ratio = 0;
  bool quiet = false, checkpoint_activations = false;
  bool export_model = true;  // write the trained model to export_dir (with LoRA: only when asked)
  AdamWSettings adamw;
};

// Runs the training on the job's ranks (collective over job.session()) in `precision` (bf16:
// mixed precision). Returns the exit status: 0, or pipeline::kExitStopped after a stop signal
// (the model trained so far is exported). Throws vinf::InputError for bad input on every rank.
int run_training(TrainSpec spec, job::Job& job, DType precision);

}  // namespace vinf::train
