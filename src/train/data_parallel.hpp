// Data-parallel training over the ranks of a communicator, with ZeRO's stages of sharding (Rajbhandari
// et al., "ZeRO: memory optimizations toward training trillion parameter models"):
//
//   stage 0  gradients all-reduced; every rank keeps the whole optimizer state and steps all of it
//   stage 1  gradients all-reduced; rank r keeps the optimizer state of its shard alone, steps its
//            shard of the parameters, and the ranks all-gather the parameters after the step
//   stage 2  as 1, but the gradients are reduce-scattered: rank r receives only its shard's sums
//            (half an all-reduce's traffic)
//
// The trainable parameters and their gradients are one flat buffer each, in the order of
// ParamGrads: the gradients in f32, the parameters in the dtype the model computes with (f32, or
// bf16 with f32 master weights of this rank's part beside them: FlatParams). A shard is a run of whole chunks of kShardChunk elements (the last one cut at the end),
// the same chunks that a training checkpoint stores, so that any number of ranks reads its shards
// back. The gradients go in buckets of consecutive parameters, each started as soon as the backward
// pass has completed every gradient in it (ParamGrads' ready hook), so that the reduction overlaps
// the rest of the backward pass; only the last micro-batch of a step sends anything (gradient
// accumulation sums locally first). Frozen parameters have no gradient and are never sent.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.hpp"
#include "train/graph.hpp"

namespace vinf::mpi {
class Communicator;
class Pending;
}  // namespace vinf::mpi

namespace vinf::train {

// A part [first, first + count) of the flat buffer.
struct Shard {
  std::int64_t first = 0, count = 0;
};
inline constexpr std::int64_t kShardChunk = 16384;  // elements (64 KiB of f32)
// Rank r's shard of n elements over `ranks`: chunks [r K / ranks, (r + 1) K / ranks) of the K chunks.
Shard shard_of(std::int64_t n, int rank, int ranks);

// The trainable parameters in one buffer laid out as the gradients: what the model computes with
// (find), what the optimizer updates and the ranks all-gather; and their f32 master weights over
// the part this rank's optimizer steps. In f32 the master weights are that part of the buffer
// itself; with bf16 (mixed precision) the buffer holds bf16 values and the f32 master weights of
// the part are a buffer of their own, which the optimizer steps and rounds into the bf16 one.
class FlatParams {
 public:
  // Copies each parameter of `layout` from `source`.
  FlatParams(Arena& arena, ExecContext& ctx, const ParamGrads& layout, const ParamLookup& source,
             DType dtype = DType::f32, Shard master = {0, -1});
  const Tensor* find(const std::string& name) const;
  const Tensor& all() const { return buffer_; }  // the model's values, in dtype()
  DType dtype() const { return buffer_.dtype; }
  Shard master_part() const { return part_; }
  const Tensor& master() const { return master_; }  // f32, part_.count elements
  // The model's values of the master part, for the optimizer to round its result into: null in f32
  // (the master weights are those values).
  const Tensor* master_copy() const { return dtype() == DType::f32 ? nullptr : &part_values_; }
  // Sets the values (every element, f32, in any memory) and the master weights from them.
  void set(ExecContext& ctx, const Tensor& values);
  // Copies `values` (f32, every element laid out as the buffer; all() when not given) into the
  // tensors `dest` gives (the model's, for exporting it).
  void copy_to(ExecContext& ctx, const ParamLookup& dest, const Tensor* values = nullptr) const;

 private:
  OwnedTensor buffer_, own_master_;
  Tensor master_, part_values_;
  Shard part_;
  std::map<std::string, Tensor> by_name_;
  std::vector<std::pair<std::string, std::int64_t>> offsets_;  // each parameter's first element
};

class DataParallel {
 public:
  // bucket_elements: the smallest bucket (a parameter larger than that is a bucket of its own).
  // values: the dtype of the parameters the model computes with (FlatParams::dtype), which gather
  // sends.
  DataParallel(Arena& arena, ExecContext& ctx, mpi::Communicator& comm, ParamGrads& grads, int zero,
               std::int64_t bucket_elements, DType values = DType::f32);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int zero() const { return zero_; }
  int ranks() const;
  std::size_t buckets() const { return buckets_.size(); }
  // Before the forward pass of a micro-batch: armed (the step's last one), the buckets start as the
  // backward pass completes them; not armed, nothing is sent.
  void arm(bool armed);
  // After the step's last backward pass: starts the buckets not started yet, then waits for all.
  void finish_reduction();
  // The part of the flat buffer this rank's optimizer steps (stage 0: all of it; else its shard),
  // and the summed gradients of that part.
  Shard optimizer_part() const { return part_; }
  Tensor part_grads() const;
  // The global L2 norm of the summed gradients (the same on every rank).
  double global_norm(ExecContext& ctx);
  // After this rank's optimizer stepped its part of `params`: the ranks all-gather them (stages 1, 2),
  // in the model's dtype (bf16 with mixed precision: half the bytes).
  void gather(ExecContext& ctx, FlatParams& params);
  // Every element's f32 master weight into `out` (f32, the whole buffer, on the context's device):
  // gathered from the ranks' shards at stages 1 and 2. For exporting the trained model.
  void gather_master(ExecContext& ctx, const FlatParams& params, const Tensor& out);
  // Bytes this rank holds for: the optimizer state (two moments of its part), the summed gradients
  // it keeps apart from the local ones (stage 2: its shard), the parameters.
  std::int64_t optimizer_bytes() const { return 2 * part_.count * 4; }
  std::int64_t shard_grad_bytes() const { return scatter_ ? shard_.count * 4 : 0; }
  // Seconds the caller waited for the gradients (finish_reduction) and the parameters (gather).
  double reduce_wait_seconds() const { return reduce_wait_; }
  // Buckets the backward pass started (as it completed them), and all buckets started, so far.
  std::int64_t buckets_started_in_backward() const { return started_in_backward_; }
  std::int64_t buckets_started() const { return started_; }
  double gather_seconds() const { return gather_wait_; }

 private:
  struct Bucket {
    std::int64_t first = 0, count = 0;
    int waiting = 0;  // gradients not complete yet
    bool started = false;
  };
  void on_ready(std::size_t param);
  void start(std::size_t bucket);

  ExecContext& ctx_;
  mpi::Communicator& comm_;
  ParamGrads& grads_;
  int zero_;
  bool scatter_ = false;  // stage 2 over more than one rank: the sums are reduce-scattered
  Shard shard_, part_;
  std::vector<Shard> shards_;  // every rank's
  OwnedTensor shard_grads_;    // scatter_: this rank's summed gradients
  OwnedTensor send_;           // stages 1, 2: this rank's shard of the parameters, sent by gather
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;  // parameter index -> bucket
  std::vector<std::unique_ptr<mpi::Pending>> pending_;
  double reduce_wait_ = 0, gather_wait_ = 0;
  std::int64_t started_in_backward_ = 0, started_ = 0;
};

}  // namespace vinf::train
