// A training run's checkpoint, RUN/checkpoints/step-NNNNNN.h5 (the names and the pruning of
// io/checkpoint.hpp): what `vinf train --resume` needs to go on exactly where the run stopped.
//
//   /params, /adam_m, /adam_v  F32 [K, kShardChunk]  the trainable parameters (in ParamGrads' order,
//                                                   flattened, zero-padded to K whole chunks) and
//                                                   AdamW's two moments, one chunk per HDF5 chunk
//   /train/state               text (JSON)          step, optimizer_steps, trained (elements),
//                                                   world_size and zero of the run that wrote it
//   /train/settings            text (JSON)          the settings a resumed run must share
//   /train/log                 text                 log.csv up to this step
//   attributes on /            format "vinf-train-checkpoint", format_version, vinf_version
//
// The data order and the noise need no state of their own: the clip, timestep and noise of the
// run's k-th sample are functions of (seed, k), and k follows from the step. Every dataset carries
// a Fletcher-32 checksum per chunk, checked on every read (io/h5file.hpp), so a damaged file is
// refused; the scalars are in a checksummed dataset, not in attributes, for the same reason.
//
// The ranks write collectively, each its shard (whole chunks: train/data_parallel.hpp), under
// PATH.partial, renamed by rank 0 once complete. A reader takes any range of elements, so a run
// resumes on any number of ranks and re-shards the optimizer state.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

#include "train/data_parallel.hpp"

namespace vinf::train {

inline constexpr const char* kTrainCheckpointFormat = "vinf-train-checkpoint";
inline constexpr int kTrainCheckpointVersion = 1;

struct TrainCheckpoint {
  std::string path;
  std::int64_t step = 0;             // completed steps
  std::int64_t optimizer_steps = 0;  // AdamW's step count
  std::int64_t trained = 0;          // elements of the flat parameter buffer
  std::int64_t world_size = 1, zero = 0;
  std::string settings_json, log_csv;
};

// Collective over comm. This rank's shard of each buffer: params, m and v point at the shard's
// first element (shard.first a multiple of kShardChunk; the shards of all ranks cover the buffer).
void write_train_checkpoint(MPI_Comm comm, const std::string& path, const TrainCheckpoint& c, const Shard& shard,
                            const float* params, const float* m, const float* v);

// The checkpoint's scalars and texts (one process). Throws vinf::InputError naming the file for a
// missing, foreign, damaged or inconsistent one.
TrainCheckpoint read_train_checkpoint_info(const std::string& path);

// Elements [part.first, part.first + part.count) of the parameters and of the moments (either of
// m, v may be null: not read), in this process; the checksums of every chunk read are checked.
// Throws vinf::InputError naming the file and dataset.
void read_train_checkpoint_part(const std::string& path, const Shard& part, float* params, float* m, float* v);

}  // namespace vinf::train
