// The interface's side of every collective: checks of the arguments, the counters, the trace, the
// watchdog around the call, and the split into start and finish. The transports (MPI, NCCL,
// threads) live in files of their own and only issue the transfers.
#include "mpi/communicator.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "core/error.hpp"
#include "mpi/watchdog.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

namespace vinf::mpi {

using Clock = std::chrono::steady_clock;

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_gather: return "all-gather";
    case CommOp::exchange: return "exchange";
    case CommOp::all_reduce: return "all-reduce";
    case CommOp::broadcast: return "broadcast";
    case CommOp::barrier: return "barrier";
    case CommOp::all_to_all: return "all-to-all";
    case CommOp::reduce_scatter: return "reduce-scatter";
  }
  return "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

void CommCounters::add(const CommCounters& o) {
  for (int i = 0; i < kCommOps; ++i) {
    calls[i] += o.calls[i];
    bytes[i] += o.bytes[i];
    seconds[i] += o.seconds[i];
  }
}

std::string CommCounters::summary() const {
  std::string line;
  for (int i = 0; i < kCommOps; ++i) {
    if (calls[i] == 0) continue;
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s%s %llu B in %llu calls (%.3f s)", line.empty() ? "" : ", ",
                  comm_op_name(static_cast<CommOp>(i)), static_cast<unsigned long long>(bytes[i]),
                  static_cast<unsigned long long>(calls[i]), seconds[i]);
    line += buf;
  }
  return line.empty() ? "no communication" : line;
}

namespace {

class CompletedRequest final : public CommRequest {
 public:
  double wait(ExecContext&) override { return 0; }
};

// --profile's op kinds of a collective: its start ("comm all-gather") and the wait for its end
// ("comm all-gather wait").
std::string_view comm_profile_kind(CommOp op, bool wait) {
  static const std::array<std::string, 2 * kCommOps> names = [] {
    std::array<std::string, 2 * kCommOps> n;
    for (int i = 0; i < kCommOps; ++i) {
      n[static_cast<std::size_t>(2 * i)] = std::string("comm ") + comm_op_name(static_cast<CommOp>(i));
      n[static_cast<std::size_t>(2 * i + 1)] = n[static_cast<std::size_t>(2 * i)] + " wait";
    }
    return n;
  }();
  return names[static_cast<std::size_t>(2 * static_cast<int>(op) + (wait ? 1 : 0))];
}

std::string call_description(CommOp op, const std::string& label, int rank, int size, const char* backend) {
  std::string what = std::string(comm_op_name(op)) + " on the " + label + " (rank " + std::to_string(rank) + " of " +
                     std::to_string(size) + ", " + backend + ")";
  const int wr = world_rank_or_minus_one();
  if (wr >= 0) what = "world rank " + std::to_string(wr) + ": " + what;
  return what;
}

}  // namespace

Communicator::Request Communicator::completed() { return std::make_unique<CompletedRequest>(); }

Communicator::~Communicator() {
  // A transport that settled in its destructor left nothing; otherwise the watchdog forgets the
  // calls (their requests go with this).
  for (const Unsettled& u : unsettled_) unwatch_call(u.watch);
}

void Communicator::settle_unsettled(bool block) const {
  for (;;) {
    for (auto it = unsettled_.begin(); it != unsettled_.end();) {
      std::optional<double> held;
      try {
        held = it->request->poll();
      } catch (const std::exception& e) {
        const CommOp op = it->op;
        unwatch_call(it->watch);
        unsettled_.erase(it);
        VINF_FAIL(call_description(op, label_, rank_, size_, backend()), ", finished earlier, failed: ", e.what());
      }
      if (!held) {
        ++it;
        continue;
      }
      unwatch_call(it->watch);
      counters_.seconds[static_cast<std::size_t>(it->op)] += it->seconds + *held;
      it = unsettled_.erase(it);
    }
    if (!block || unsettled_.empty()) return;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void Communicator::settle_before_destruction() noexcept {
  try {
    settle();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vinf: warning: while closing the %s: %s\n", label_.c_str(), e.what());
  }
  // What a failure left: no longer watched (the watchdog would ask a transport that is going).
  for (const Unsettled& u : unsettled_) unwatch_call(u.watch);
  unsettled_.clear();
}

void Communicator::check_placement(const ExecContext& ctx, CommOp op, const char* arg, const Tensor& t) const {
  // Every transport reads and writes the buffers where the context computes: NCCL device memory
  // only; MPI and threads stage device tensors through host buffers, which needs to know which.
  VINF_CHECK(t.device == ctx.device, comm_op_name(op), " on the ", label_, " (", backend(), "): ", arg, " ",
             t.describe(), " is in ", t.device.name(), " memory, but the collective runs on ", ctx.device.name(),
             "; the caller must hand it a tensor on ", ctx.device.name());
}

Pending& Pending::operator=(Pending&& o) noexcept {
  if (this != &o) {
    settle();
    comm_ = o.comm_;
    ctx_ = o.ctx_;
    request_ = std::move(o.request_);
    op_ = o.op_;
    watch_ = o.watch_;
    seconds_ = o.seconds_;
  }
  return *this;
}

Pending::~Pending() { settle(); }

void Pending::settle() noexcept {
  if (!request_) return;
  // Reached when the caller left early (an exception between start and finish): the transport
  // may still write into the buffers, so wait for it before they go.
  try {
    comm_->finish(*this);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vinf: warning: while unwinding, a started collective failed: %s\n", e.what());
  }
  request_.reset();
}

template <class Issue>
Pending Communicator::start(ExecContext& ctx, CommOp op, std::uint64_t bytes, Issue&& issue) {
  const ProfileOp profile_op(ctx, comm_profile_kind(op, false));
  settle_unsettled(false);  // counts what has finished since, and raises an earlier call's failure
  check_fault_injection(world_rank_or_minus_one());
  Pending p;
  p.comm_ = this;
  p.ctx_ = &ctx;
  p.op_ = op;
  p.watch_ = watch_call(call_description(op, label_, rank_, size_, backend()), async_probe());
  const auto i = static_cast<std::size_t>(op);
  ++counters_.calls[i];
  counters_.bytes[i] += bytes;
  const auto t0 = Clock::now();
  try {
    p.request_ = issue();
  } catch (...) {
    unwatch_call(p.watch_);
    throw;
  }
  p.seconds_ = std::chrono::duration<double>(Clock::now() - t0).count();
  return p;
}

void Communicator::progress(Pending& p) {
  if (p.request_) p.request_->progress();
}

void Communicator::finish(Pending& p) {
  if (!p.request_) return;
  VINF_CHECK(p.comm_ == this, "finish: the collective was started on another communicator");
  const ProfileOp profile_op(*p.ctx_, comm_profile_kind(p.op_, true));
  std::unique_ptr<CommRequest> request = std::move(p.request_);
  const auto t0 = Clock::now();
  double held = -1;
  try {
    held = request->wait(*p.ctx_);
  } catch (...) {
    unwatch_call(p.watch_);
    throw;
  }
  if (std::isnan(held)) {
    // The transfer may still run (the compute stream waits for it, not the host): watched until
    // it has ended (the request lives until it is unwatched), its seconds counted when settled.
    const CommRequest* r = request.get();
    watch_until(p.watch_, [r] { return r->passed(); });
    unsettled_.push_back({std::move(request), p.op_, p.watch_, p.seconds_});
    return;
  }
  unwatch_call(p.watch_);
  if (held < 0) held = std::chrono::duration<double>(Clock::now() - t0).count();
  counters_.seconds[static_cast<std::size_t>(p.op_)] += p.seconds_ + held;
}

void Communicator::all_gather(ExecContext& ctx, const Tensor& send, const Tensor& recv) {
  all_gather_v(ctx, send, recv, std::vector<std::int64_t>(static_cast<std::size_t>(size_), send.numel()));
}

void Communicator::all_gather_v(ExecContext& ctx, const Tensor& send, const Tensor& recv,
                                const std::vector<std::int64_t>& counts) {
  Pending p = start_all_gather_v(ctx, send, recv, counts);
  finish(p);
}

Pending Communicator::start_all_gather_v(ExecContext& ctx, const Tensor& send, const Tensor& recv,
                                         const std::vector<std::int64_t>& counts) {
  VINF_CHECK(static_cast<int>(counts.size()) == size_, "all_gather_v: ", counts.size(), " counts for a group of ",
             size_);
  VINF_CHECK(send.is_contiguous() && recv.is_contiguous() && send.dtype == recv.dtype,
             "all_gather_v: contiguous tensors of one dtype expected");
  std::int64_t total = 0;
  for (std::int64_t n : counts) total += n;
  VINF_CHECK(send.numel() == counts[static_cast<std::size_t>(rank_)] && recv.numel() == total, "all_gather_v: send ",
             send.describe(), " / recv ", recv.describe(), " do not match the counts");
  check_placement(ctx, CommOp::all_gather, "send", send);
  check_placement(ctx, CommOp::all_gather, "recv", recv);
  const std::uint64_t received = static_cast<std::uint64_t>(total - send.numel()) * dtype_size(send.dtype);
  if (trace_) trace_->push_back({CommOp::all_gather, send.dtype, counts, {}, 0});
  // A group of one: the copy on the context's stream, no transport (no host staging, no wait).
  return start(ctx, CommOp::all_gather, received, [&] {
    if (size_ > 1) return do_all_gather_v(ctx, send, recv, counts);
    if (recv.numel() > 0 && recv.data != send.data)
      ops::copy(ctx, send.reshape({send.numel()}), recv.reshape({recv.numel()}));
    return completed();
  });
}

void Communicator::exchange(ExecContext& ctx, std::span<const Transfer> transfers) {
  Pending p = start_exchange(ctx, transfers);
  finish(p);
}

Pending Communicator::start_exchange(ExecContext& ctx, std::span<const Transfer> transfers) {
  return start_pairwise(ctx, CommOp::exchange, transfers);
}

Pending Communicator::start_all_to_all(ExecContext& ctx, std::span<const Transfer> transfers) {
  return start_pairwise(ctx, CommOp::all_to_all, transfers);
}

Pending Communicator::start_pairwise(ExecContext& ctx, CommOp op, std::span<const Transfer> transfers) {
  std::uint64_t received = 0;
  const char* name = comm_op_name(op);
  for (const Transfer& t : transfers) {
    if (t.peer < 0) continue;
    VINF_CHECK(t.peer < size_ && t.peer != rank_, name, ": bad peer ", t.peer, " for rank ", rank_, " of ", size_);
    VINF_CHECK((t.send.data == nullptr || t.send.is_contiguous()) && (t.recv.data == nullptr || t.recv.is_contiguous()),
               name, ": contiguous tensors expected");
    if (t.send.data) check_placement(ctx, op, "send", t.send);
    if (t.recv.data) check_placement(ctx, op, "recv", t.recv);
    if (t.recv.data) received += t.recv.nbytes();
  }
  if (trace_) {
    CommRecord r{op, DType::f32, {}, {}, 0};
    for (const Transfer& t : transfers) {
      if (t.peer < 0) continue;
      r.dtype = t.send.data ? t.send.dtype : t.recv.dtype;
      r.pairs.push_back({t.peer, t.send.data ? t.send.numel() : 0, t.recv.data ? t.recv.numel() : 0});
    }
    trace_->push_back(std::move(r));
  }
  return start(ctx, op, received, [&] { return do_exchange(ctx, transfers); });
}

void Communicator::all_reduce(ExecContext& ctx, const Tensor& buf, ReduceOp op) {
  check_all_reduce(ctx, buf, op);
  Pending p = start(ctx, CommOp::all_reduce, size_ > 1 ? buf.nbytes() : 0,
                    [&] { return size_ > 1 ? do_all_reduce(ctx, buf, op) : completed(); });
  finish(p);
}

void Communicator::check_all_reduce(ExecContext& ctx, const Tensor& buf, ReduceOp op) {
  // A sum of integers is left out: nothing needs it, and it could overflow.
  const bool floating = buf.dtype == DType::f32 || buf.dtype == DType::f64;
  if (op == ReduceOp::sum)
    VINF_CHECK(buf.is_contiguous() && floating, "all_reduce_sum: a contiguous f32 or f64 tensor expected, got ",
               buf.describe());
  else
    VINF_CHECK(buf.is_contiguous() && (floating || buf.dtype == DType::i64), "all_reduce (", reduce_op_name(op),
               "): a contiguous f32, f64 or i64 tensor expected, got ", buf.describe());
  check_placement(ctx, CommOp::all_reduce, "buffer", buf);
  if (trace_) trace_->push_back({CommOp::all_reduce, buf.dtype, {buf.numel()}, {}, 0, op});
}

Pending Communicator::start_all_reduce(ExecContext& ctx, const Tensor& buf, ReduceOp op) {
  check_all_reduce(ctx, buf, op);
  return start(ctx, CommOp::all_reduce, size_ > 1 ? buf.nbytes() : 0,
               [&] { return size_ > 1 ? do_start_all_reduce(ctx, buf, op) : completed(); });
}

Pending Communicator::start_reduce_scatter_v(ExecContext& ctx, const Tensor& send, const Tensor& recv,
                                             const std::vector<std::int64_t>& counts) {
  VINF_CHECK(static_cast<int>(counts.size()) == size_, "reduce_scatter_v: ", counts.size(), " counts for a group of ",
             size_);
  VINF_CHECK(send.is_contiguous() && recv.is_contiguous() && send.dtype == recv.dtype &&
                 (send.dtype == DType::f32 || send.dtype == DType::f64),
             "reduce_scatter_v: contiguous f32 or f64 tensors of one dtype expected, got ", send.describe(), " and ",
             recv.describe());
  std::int64_t total = 0;
  for (std::int64_t n : counts) {
    VINF_CHECK(n >= 0, "reduce_scatter_v: a negative count");
    total += n;
  }
  VINF_CHECK(send.numel() == total && recv.numel() == counts[static_cast<std::size_t>(rank_)],
             "reduce_scatter_v: send ", send.describe(), " / recv ", recv.describe(), " do not match the counts");
  check_placement(ctx, CommOp::reduce_scatter, "send", send);
  check_placement(ctx, CommOp::reduce_scatter, "recv", recv);
  const std::uint64_t received = static_cast<std::uint64_t>(size_ - 1) * recv.nbytes();
  if (trace_) trace_->push_back({CommOp::reduce_scatter, send.dtype, counts, {}, 0});
  return start(ctx, CommOp::reduce_scatter, received, [&] {
    if (size_ > 1) return do_reduce_scatter_v(ctx, send, recv, counts);
    if (recv.numel() > 0) ops::copy(ctx, send, recv);
    return completed();
  });
}

Communicator::Request Communicator::do_reduce_scatter_v(ExecContext& ctx, const Tensor& send, const Tensor& recv,
                                                        const std::vector<std::int64_t>& counts) {
  std::int64_t first = 0;
  for (int r = 0; r < rank_; ++r) first += counts[static_cast<std::size_t>(r)];
  OwnedTensor all = ctx.arena->empty(send.dtype, send.shape);
  ops::copy(ctx, send, all);
  Request req = do_all_reduce(ctx, all, ReduceOp::sum);
  const double held = req->wait(ctx);
  if (recv.numel() > 0) ops::copy(ctx, all.reshape({send.numel()}).slice(0, first, recv.numel()), recv);
  synchronize(ctx);
  // The compute stream has waited for the transfer, so a later-settled request is done by now.
  if (std::isnan(held))
    while (!req->poll()) std::this_thread::yield();
  return completed();
}

void Communicator::broadcast(ExecContext& ctx, const Tensor& buf, int root) {
  VINF_CHECK(buf.is_contiguous() && root >= 0 && root < size_, "broadcast: bad arguments");
  check_placement(ctx, CommOp::broadcast, "buffer", buf);
  if (trace_) trace_->push_back({CommOp::broadcast, buf.dtype, {buf.numel()}, {}, root});
  Pending p = start(ctx, CommOp::broadcast, size_ > 1 && rank_ != root ? buf.nbytes() : 0,
                    [&] { return size_ > 1 ? do_broadcast(ctx, buf, root) : completed(); });
  finish(p);
}

void Communicator::barrier(ExecContext& ctx) {
  if (trace_) trace_->push_back({CommOp::barrier, DType::f32, {}, {}, 0});
  Pending p = start(ctx, CommOp::barrier, 0, [&] { return size_ > 1 ? do_barrier(ctx) : completed(); });
  finish(p);
}

double replay_trace(Communicator& comm, ExecContext& ctx, const std::vector<CommRecord>& trace) {
  // One scratch buffer, as large as the largest call needs, carved into send and receive parts.
  std::int64_t most = 1;
  for (const CommRecord& r : trace) {
    std::int64_t n = 0;
    for (std::int64_t c : r.counts) n += c;
    for (const CommRecord::Pair& p : r.pairs) n += p.send + p.recv;
    if (r.op == CommOp::all_gather || r.op == CommOp::reduce_scatter)
      n += r.counts[static_cast<std::size_t>(comm.rank())];
    most = std::max(most, n * static_cast<std::int64_t>(dtype_size(r.dtype)));
  }
  Allocation scratch = ctx.arena->allocate(static_cast<std::size_t>(most));
  char* base = static_cast<char*>(scratch.data());
  auto view = [&](std::int64_t& offset, DType dt, std::int64_t n) {
    const Tensor t = Tensor::wrap(base + offset, dt, ctx.device, {n});
    offset += n * static_cast<std::int64_t>(dtype_size(dt));
    return t;
  };
  const auto t0 = Clock::now();
  for (const CommRecord& r : trace) {
    std::int64_t off = 0;
    switch (r.op) {
      case CommOp::all_gather: {
        std::int64_t total = 0;
        for (std::int64_t c : r.counts) total += c;
        const Tensor send = view(off, r.dtype, r.counts[static_cast<std::size_t>(comm.rank())]);
        comm.all_gather_v(ctx, send, view(off, r.dtype, total), r.counts);
        break;
      }
      case CommOp::exchange:
      case CommOp::all_to_all: {
        std::vector<Transfer> ts;
        for (const CommRecord::Pair& p : r.pairs) {
          Transfer t;
          t.peer = p.peer;
          if (p.send > 0) t.send = view(off, r.dtype, p.send);
          if (p.recv > 0) t.recv = view(off, r.dtype, p.recv);
          ts.push_back(t);
        }
        Pending p = r.op == CommOp::exchange ? comm.start_exchange(ctx, ts) : comm.start_all_to_all(ctx, ts);
        comm.finish(p);
        break;
      }
      case CommOp::all_reduce: comm.all_reduce(ctx, view(off, r.dtype, r.counts[0]), r.reduce); break;
      case CommOp::reduce_scatter: {
        std::int64_t total = 0;
        for (std::int64_t c : r.counts) total += c;
        const Tensor send = view(off, r.dtype, total);
        Pending p = comm.start_reduce_scatter_v(
            ctx, send, view(off, r.dtype, r.counts[static_cast<std::size_t>(comm.rank())]), r.counts);
        comm.finish(p);
        break;
      }
      case CommOp::broadcast: comm.broadcast(ctx, view(off, r.dtype, r.counts[0]), r.root); break;
      case CommOp::barrier: comm.barrier(ctx); break;
    }
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace vinf::mpi
