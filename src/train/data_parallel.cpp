#include "train/data_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.hpp"
#include "core/progress.hpp"
#include "mpi/communicator.hpp"
#include "ops/elementwise.hpp"
#include "ops/optim.hpp"
#include "ops/runtime.hpp"

namespace vinf::train {

FlatParams::FlatParams(Arena& arena, ExecContext& ctx, const ParamGrads& layout, const ParamLookup& source, DType dtype,
                       Shard master) {
  VINF_CHECK(dtype == DType::f32 || dtype == DType::bf16, "FlatParams: f32 or bf16 values, not ", dtype_name(dtype));
  const std::int64_t n = layout.all().numel();
  part_ = master.count < 0 ? Shard{0, n} : master;
  VINF_CHECK(part_.first >= 0 && part_.first + part_.count <= n, "FlatParams: the part [", part_.first, ", +",
             part_.count, ") is outside the ", n, " elements");
  buffer_ = arena.empty(dtype, {n});
  part_values_ = buffer_.slice(0, part_.first, part_.count);
  if (dtype == DType::f32) {
    master_ = part_values_;
  } else {
    own_master_ = arena.empty(DType::f32, {part_.count});
    master_ = own_master_;
  }
  std::int64_t at = 0;
  for (const auto& [name, g] : layout.list()) {
    const Tensor* p = source(name);
    VINF_CHECK(p != nullptr && p->shape == g.shape, "FlatParams: no parameter ", name, " of shape ", g.shape.str());
    const Tensor view = buffer_.slice(0, at, g.numel()).reshape(g.shape);
    ops::copy(ctx, *p, view);
    // The master weights from the source's own values (f32), not from their bf16 rounding.
    if (dtype != DType::f32) {
      const std::int64_t lo = std::max(at, part_.first), hi = std::min(at + g.numel(), part_.first + part_.count);
      if (lo < hi) ops::copy(ctx, p->reshape({g.numel()}).slice(0, lo - at, hi - lo), master_.slice(0, lo - part_.first, hi - lo));
    }
    by_name_.emplace(name, view);
    offsets_.emplace_back(name, at);
    at += g.numel();
  }
}

const Tensor* FlatParams::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &it->second;
}

void FlatParams::set(ExecContext& ctx, const Tensor& values) {
  VINF_CHECK(values.numel() == buffer_.numel() && values.dtype == DType::f32, "FlatParams::set: ", buffer_.numel(),
             " f32 values expected, got ", values.describe());
  const Tensor flat = values.reshape({values.numel()});
  ops::copy(ctx, flat, buffer_);
  if (dtype() != DType::f32) ops::copy(ctx, flat.slice(0, part_.first, part_.count), master_);
}

void FlatParams::copy_to(ExecContext& ctx, const ParamLookup& dest, const Tensor* values) const {
  const Tensor& from = values ? *values : buffer_.view();
  VINF_CHECK(from.numel() == buffer_.numel(), "FlatParams::copy_to: ", buffer_.numel(), " values expected, got ",
             from.describe());
  for (const auto& [name, at] : offsets_) {
    const Tensor& view = by_name_.at(name);
    const Tensor* p = dest(name);
    VINF_CHECK(p != nullptr && p->shape == view.shape, "FlatParams: no parameter ", name, " to copy into");
    ops::copy(ctx, from.slice(0, at, view.numel()).reshape(view.shape), *p);
  }
}

Shard shard_of(std::int64_t n, int rank, int ranks) {
  const std::int64_t chunks = (n + kShardChunk - 1) / kShardChunk;
  const std::int64_t c0 = rank * chunks / ranks, c1 = (rank + 1) * chunks / ranks;
  const std::int64_t first = std::min(n, c0 * kShardChunk), last = std::min(n, c1 * kShardChunk);
  return {first, last - first};
}

DataParallel::DataParallel(Arena& arena, ExecContext& ctx, mpi::Communicator& comm, ParamGrads& grads, int zero,
                           std::int64_t bucket_elements, DType values)
    : ctx_(ctx), comm_(comm), grads_(grads), zero_(zero) {
  VINF_CHECK(zero >= 0 && zero <= 2 && bucket_elements >= 1, "DataParallel: ZeRO stage ", zero, ", buckets of ",
             bucket_elements);
  const std::int64_t n = grads.all().numel();
  for (int r = 0; r < comm.size(); ++r) shards_.push_back(shard_of(n, r, comm.size()));
  shard_ = shards_[static_cast<std::size_t>(comm.rank())];
  part_ = zero == 0 ? Shard{0, n} : shard_;
  // One rank holds the sums already: nothing to scatter or gather.
  scatter_ = zero == 2 && comm.size() > 1;
  if (scatter_) shard_grads_ = arena.empty(DType::f32, {shard_.count});
  if (zero >= 1 && comm.size() > 1) send_ = arena.empty(values, {shard_.count});
  // Buckets of consecutive parameters, each at least bucket_elements unless it is the last.
  std::int64_t at = 0;
  for (const auto& [name, g] : grads.list()) {
    if (buckets_.empty() || buckets_.back().count >= bucket_elements) buckets_.push_back({at, 0, 0, false});
    buckets_.back().count += g.numel();
    ++buckets_.back().waiting;
    bucket_of_.push_back(buckets_.size() - 1);
    at += g.numel();
  }
}

DataParallel::~DataParallel() { grads_.set_ready_hook(nullptr); }

int DataParallel::ranks() const { return comm_.size(); }

void DataParallel::arm(bool armed) {
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b].started = false;
    buckets_[b].waiting = 0;
  }
  for (std::size_t b : bucket_of_) ++buckets_[b].waiting;
  grads_.set_ready_hook(armed ? std::function<void(std::size_t)>([this](std::size_t p) { on_ready(p); })
                              : std::function<void(std::size_t)>());
}

void DataParallel::on_ready(std::size_t param) {
  Bucket& b = buckets_[bucket_of_[param]];
  VINF_CHECK(!b.started && b.waiting > 0, "DataParallel: a gradient completed after its bucket was sent");
  if (--b.waiting == 0) {
    start(bucket_of_[param]);
    ++started_in_backward_;
  }
  for (auto& p : pending_) comm_.progress(*p);  // MPI moves data only inside its calls
}

void DataParallel::start(std::size_t index) {
  Bucket& b = buckets_[index];
  b.started = true;
  ++started_;
  if (b.count == 0) return;
  const Tensor g = grads_.all().slice(0, b.first, b.count);
  if (!scatter_) {
    pending_.push_back(std::make_unique<mpi::Pending>(comm_.start_all_reduce(ctx_, g, mpi::ReduceOp::sum)));
    return;
  }
  // Each rank receives the bucket's elements that fall in its shard.
  std::vector<std::int64_t> counts;
  for (const Shard& s : shards_)
    counts.push_back(std::max<std::int64_t>(
        0, std::min(s.first + s.count, b.first + b.count) - std::max(s.first, b.first)));
  const std::int64_t mine = counts[static_cast<std::size_t>(comm_.rank())];
  const std::int64_t at = mine > 0 ? std::max(shard_.first, b.first) - shard_.first : 0;
  const Tensor recv = shard_grads_.slice(0, at, mine);
  pending_.push_back(std::make_unique<mpi::Pending>(comm_.start_reduce_scatter_v(ctx_, g, recv, counts)));
}

void DataParallel::finish_reduction() {
  const auto t0 = std::chrono::steady_clock::now();
  grads_.set_ready_hook(nullptr);
  // Buckets the backward pass did not complete (a part of the model no gradient reached, or a
  // pass that was not armed), in order: every rank starts the same collectives in the same order.
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    if (!buckets_[b].started) start(b);
  for (auto& p : pending_) comm_.finish(*p);
  pending_.clear();
  reduce_wait_ += seconds_since(t0);
}

Tensor DataParallel::part_grads() const {
  if (scatter_) return shard_grads_;
  return grads_.all().slice(0, part_.first, part_.count);
}

double DataParallel::global_norm(ExecContext& ctx) {
  // Stages 0 and 1 hold every summed gradient; stage 2 sums its shard's squares with the others'.
  double sum = ops::sum_squares(ctx, scatter_ ? shard_grads_.view() : grads_.all());
  if (scatter_) {
    // Through the communicator's own memory (the device's, with NCCL).
    OwnedTensor total = ctx.arena->empty(DType::f64, {1});
    ops::copy(ctx, Tensor::wrap(&sum, DType::f64, Device::cpu(), {1}), total);
    comm_.all_reduce_sum(ctx, total);
    ops::copy(ctx, total, Tensor::wrap(&sum, DType::f64, Device::cpu(), {1}));
    synchronize(ctx);
  }
  return std::sqrt(sum);
}

void DataParallel::gather(ExecContext& ctx, FlatParams& params) {
  if (zero_ == 0 || comm_.size() == 1) return;  // every rank (the one) stepped everything
  const auto t0 = std::chrono::steady_clock::now();
  VINF_CHECK(send_.dtype == params.dtype(), "DataParallel: made for ", dtype_name(send_.dtype), " parameters, given ",
             dtype_name(params.dtype()));
  if (shard_.count > 0) ops::copy(ctx, params.all().slice(0, shard_.first, shard_.count), send_);
  std::vector<std::int64_t> counts;
  for (const Shard& s : shards_) counts.push_back(s.count);
  comm_.all_gather_v(ctx, send_, params.all(), counts);
  gather_wait_ += seconds_since(t0);
}

void DataParallel::gather_master(ExecContext& ctx, const FlatParams& params, const Tensor& out) {
  VINF_CHECK(out.numel() == grads_.all().numel() && out.dtype == DType::f32 && out.is_contiguous(),
             "DataParallel::gather_master: the whole f32 buffer expected, got ", out.describe());
  if (zero_ == 0 || comm_.size() == 1) {
    ops::copy(ctx, params.master(), out);
    return;
  }
  std::vector<std::int64_t> counts;
  for (const Shard& s : shards_) counts.push_back(s.count);
  comm_.all_gather_v(ctx, params.master(), out, counts);
}

}  // namespace vinf::train
