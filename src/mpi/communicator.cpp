#include "mpi/communicator.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "core/error.hpp"
#include "mpi/check.hpp"
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

int world_rank_or_minus_one() {
  int initialized = 0, finalized = 0, rank = -1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

[[noreturn]] void end_job(const std::string& message, int code) {
  std::fprintf(stderr, "vinf: error: %s\n", message.c_str());
  std::fflush(stderr);
  int initialized = 0, finalized = 0, size = 1, level = MPI_THREAD_SINGLE;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Query_thread(&level);
    // MPI_Abort from the watchdog's thread needs MPI_THREAD_MULTIPLE; without it, leaving the
    // process without MPI_Finalize makes mpirun/srun end the other ranks just the same.
    if (size > 1 && level == MPI_THREAD_MULTIPLE) MPI_Abort(MPI_COMM_WORLD, code);
  }
  std::_Exit(code);
}

// Communicator calls in flight in this process, watched by one thread that ends the job when one
// of them outlives the timeout. Never destroyed: the thread may outlive static destructors.
class Watchdog {
 public:
  static Watchdog& get() {
    static Watchdog* w = new Watchdog;
    return *w;
  }
  std::uint64_t arm(std::string what) {
    std::lock_guard lock(m_);
    if (!started_ && timeout_ > 0) {
      started_ = true;
      std::thread([this] { loop(); }).detach();
    }
    const std::uint64_t id = next_++;
    active_.emplace(id, Active{Clock::now(), std::move(what)});
    return id;
  }
  void disarm(std::uint64_t id) {
    std::lock_guard lock(m_);
    active_.erase(id);
  }
  void set_timeout(double s) {
    std::lock_guard lock(m_);
    timeout_ = s;
  }
  double timeout() {
    std::lock_guard lock(m_);
    return timeout_;
  }

 private:
  struct Active {
    Clock::time_point start;
    std::string what;
  };
  void loop() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::string message;
      {
        std::lock_guard lock(m_);
        if (timeout_ <= 0) continue;
        for (const auto& [id, a] : active_) {
          const double waited = std::chrono::duration<double>(Clock::now() - a.start).count();
          if (waited > timeout_) {
            char secs[32];
            std::snprintf(secs, sizeof secs, "%.1f", waited);
            message = a.what + " has waited " + secs + " s, longer than the communication timeout (--comm-timeout " +
                      std::to_string(static_cast<long long>(timeout_)) +
                      " s): another rank of the group has died or hangs (see its log); ending the job";
            break;
          }
        }
      }
      if (!message.empty()) end_job(message, 3);
    }
  }
  std::mutex m_;
  std::map<std::uint64_t, Active> active_;
  std::uint64_t next_ = 0;
  double timeout_ = 300;
  bool started_ = false;
};

struct FaultPlan {
  int rank = -1;
  long call = -1;
  bool hang = false;
};

FaultPlan fault_plan() {
  FaultPlan f;
  const char* env = std::getenv("VINF_FAULT");
  if (!env) return f;
  char action[16] = {};
  if (std::sscanf(env, "rank=%d,call=%ld,action=%15s", &f.rank, &f.call, action) != 3) {
    std::fprintf(stderr, "vinf: warning: ignoring VINF_FAULT='%s' (want rank=R,call=K,action=abort|hang)\n", env);
    return {};
  }
  f.hang = std::strcmp(action, "hang") == 0;
  return f;
}

std::atomic<long> g_calls{0};

}  // namespace

void set_comm_timeout(double seconds) { Watchdog::get().set_timeout(seconds); }
double comm_timeout() { return Watchdog::get().timeout(); }

void check_fault_injection(int world_rank) {
  static const FaultPlan plan = fault_plan();
  if (plan.rank < 0 || plan.rank != world_rank) return;
  if (g_calls.fetch_add(1) + 1 != plan.call) return;
  std::fprintf(stderr, "vinf: rank %d: fault injection (VINF_FAULT): %s at communicator call %ld\n", world_rank,
               plan.hang ? "stops answering" : "aborts", plan.call);
  std::fflush(stderr);
  if (!plan.hang) std::abort();
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
}

namespace {

class CompletedRequest final : public CommRequest {
 public:
  double wait(ExecContext&) override { return 0; }
};

std::string call_description(CommOp op, const std::string& label, int rank, int size, const char* backend) {
  std::string what = std::string(comm_op_name(op)) + " on the " + label + " (rank " + std::to_string(rank) + " of " +
                     std::to_string(size) + ", " + backend + ")";
  const int wr = world_rank_or_minus_one();
  if (wr >= 0) what = "world rank " + std::to_string(wr) + ": " + what;
  return what;
}

}  // namespace

Communicator::Request Communicator::completed() { return std::make_unique<CompletedRequest>(); }

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
  check_fault_injection(world_rank_or_minus_one());
  Pending p;
  p.comm_ = this;
  p.ctx_ = &ctx;
  p.op_ = op;
  p.watch_ = Watchdog::get().arm(call_description(op, label_, rank_, size_, backend()));
  const auto i = static_cast<std::size_t>(op);
  ++counters_.calls[i];
  counters_.bytes[i] += bytes;
  const auto t0 = Clock::now();
  try {
    p.request_ = issue();
  } catch (...) {
    Watchdog::get().disarm(p.watch_);
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
  std::unique_ptr<CommRequest> request = std::move(p.request_);
  const auto t0 = Clock::now();
  double held = -1;
  try {
    held = request->wait(*p.ctx_);
  } catch (...) {
    Watchdog::get().disarm(p.watch_);
    throw;
  }
  Watchdog::get().disarm(p.watch_);
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
  VINF_CHECK(static_cast<int>(counts.size()) == size_, "all_gather_v: ", counts.size(), " counts for a group of ", size_);
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
  return start(ctx, CommOp::all_gather, received, [&] { return do_all_gather_v(ctx, send, recv, counts); });
}

void Communicator::exchange(ExecContext& ctx, std::span<const Transfer> transfers) {
  Pending p = start_exchange(ctx, transfers);
  finish(p);
}

Pending Communicator::start_exchange(ExecContext& ctx, std::span<const Transfer> transfers) {
  std::uint64_t received = 0;
  for (const Transfer& t : transfers) {
    if (t.peer < 0) continue;
    VINF_CHECK(t.peer < size_ && t.peer != rank_, "exchange: bad peer ", t.peer, " for rank ", rank_, " of ", size_);
    VINF_CHECK((t.send.data == nullptr || t.send.is_contiguous()) && (t.recv.data == nullptr || t.recv.is_contiguous()),
               "exchange: contiguous tensors expected");
    if (t.send.data) check_placement(ctx, CommOp::exchange, "send", t.send);
    if (t.recv.data) check_placement(ctx, CommOp::exchange, "recv", t.recv);
    if (t.recv.data) received += t.recv.nbytes();
  }
  if (trace_) {
    CommRecord r{CommOp::exchange, DType::f32, {}, {}, 0};
    for (const Transfer& t : transfers) {
      if (t.peer < 0) continue;
      r.dtype = t.send.data ? t.send.dtype : t.recv.dtype;
      r.pairs.push_back({t.peer, t.send.data ? t.send.numel() : 0, t.recv.data ? t.recv.numel() : 0});
    }
    trace_->push_back(std::move(r));
  }
  return start(ctx, CommOp::exchange, received, [&] { return do_exchange(ctx, transfers); });
}

void Communicator::all_reduce_sum(ExecContext& ctx, const Tensor& buf) {
  VINF_CHECK(buf.is_contiguous() && (buf.dtype == DType::f32 || buf.dtype == DType::f64),
             "all_reduce_sum: a contiguous f32 or f64 tensor expected, got ", buf.describe());
  check_placement(ctx, CommOp::all_reduce, "buffer", buf);
  if (trace_) trace_->push_back({CommOp::all_reduce, buf.dtype, {buf.numel()}, {}, 0});
  Pending p = start(ctx, CommOp::all_reduce, size_ > 1 ? buf.nbytes() : 0,
                    [&] { return size_ > 1 ? do_all_reduce_sum(ctx, buf) : completed(); });
  finish(p);
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
    if (r.op == CommOp::all_gather) n += r.counts[static_cast<std::size_t>(comm.rank())];
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
      case CommOp::exchange: {
        std::vector<Transfer> ts;
        for (const CommRecord::Pair& p : r.pairs) {
          Transfer t;
          t.peer = p.peer;
          if (p.send > 0) t.send = view(off, r.dtype, p.send);
          if (p.recv > 0) t.recv = view(off, r.dtype, p.recv);
          ts.push_back(t);
        }
        comm.exchange(ctx, ts);
        break;
      }
      case CommOp::all_reduce: comm.all_reduce_sum(ctx, view(off, r.dtype, r.counts[0])); break;
      case CommOp::broadcast: comm.broadcast(ctx, view(off, r.dtype, r.counts[0]), r.root); break;
      case CommOp::barrier: comm.barrier(ctx); break;
    }
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

namespace {

// Host buffers for the images of device tensors: page-locked memory where the CUDA runtime gives
// it (the copies then run at the link's full speed), cached like any arena; plain host memory,
// with one warning, where pinning fails (a locked-memory limit, or a build without CUDA).
class Staging {
 public:
  Allocation allocate(std::size_t bytes) {
    std::lock_guard lock(m_);
    if (!pinned_ && !fallback_) {
      std::unique_ptr<RawMemory> raw = pinned_host_memory();
      if (raw) pinned_ = std::make_unique<Arena>(std::move(raw));
      else fallback_ = true;
    }
    if (pinned_ && !fallback_) {
      try {
        return pinned_->allocate(bytes);
      } catch (const Error& e) {
        std::fprintf(stderr,
                     "vinf: warning: %s; the MPI transport stages device buffers through pageable memory instead "
                     "(slower copies; raise 'ulimit -l' to pin)\n",
                     e.what());
        fallback_ = true;
      }
    }
    if (!pageable_) pageable_ = std::make_unique<Arena>(host_memory());
    return pageable_->allocate(bytes);
  }

 private:
  std::mutex m_;
  std::unique_ptr<Arena> pinned_, pageable_;
  bool fallback_ = false;
};

// A host image of a tensor: the tensor itself when it is in host memory, else a staged copy.
class HostImage {
 public:
  HostImage(ExecContext& ctx, Staging& staging, const Tensor& t, bool load) : ctx_(ctx), t_(t) {
    if (!t.device.is_cuda()) {
      ptr_ = static_cast<char*>(t.data);
      return;
    }
    buf_ = staging.allocate(t.nbytes());
    ptr_ = static_cast<char*>(buf_.data());
    if (load) ops::copy(ctx, t, host());  // a device-to-host copy returns with the data in place
  }
  char* data() const { return ptr_; }
  Tensor host() const { return Tensor::wrap(ptr_, t_.dtype, Device::cpu(), t_.shape); }
  // Writes the image back to the tensor (device tensors only) and, unless told otherwise, waits
  // for the copy: from page-locked memory it is asynchronous, and the buffer must not go back to
  // the cache before it is done (a caller that stores several images waits once, after the last).
  void store(bool wait = true) {
    if (!t_.device.is_cuda()) return;
    ops::copy(ctx_, host(), t_);
    if (wait) synchronize(ctx_);
  }

 private:
  ExecContext& ctx_;
  Tensor t_;
  Allocation buf_;
  char* ptr_ = nullptr;
};

int int_count(std::uint64_t bytes) {
  VINF_CHECK(bytes <= static_cast<std::uint64_t>(INT_MAX), "a message of ", bytes,
             " bytes is larger than MPI's int count; use more ranks or smaller frames");
  return static_cast<int>(bytes);
}

// Nonblocking MPI requests with the host images they read and fill.
class MpiRequest final : public CommRequest {
 public:
  std::vector<MPI_Request> reqs;
  std::vector<std::unique_ptr<HostImage>> keep, fill;  // sent from / received into (stored at the end)
  std::vector<int> bytes, displs;  // an all-gather's counts, which MPI may read until completion
  void progress() override {
    if (reqs.empty()) return;
    int done = 0;
    VINF_CHECK_MPI(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE));
  }
  double wait(ExecContext& ctx) override {
    VINF_CHECK_MPI(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE));
    for (auto& r : fill) r->store(false);
    if (!fill.empty()) synchronize(ctx);
    return -1;
  }
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int size) : Communicator(rank, size), comm_(comm) {}
  const char* backend() const override { return "mpi"; }

 protected:
  Request do_all_gather_v(ExecContext& ctx, const Tensor& send, const Tensor& recv,
                          const std::vector<std::int64_t>& counts) override {
    auto req = std::make_unique<MpiRequest>();
    req->keep.push_back(std::make_unique<HostImage>(ctx, staging_, send, true));
    req->fill.push_back(std::make_unique<HostImage>(ctx, staging_, recv, false));
    const std::size_t es = dtype_size(send.dtype);
    req->bytes.assign(counts.size(), 0);
    req->displs.assign(counts.size(), 0);
    std::uint64_t off = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      req->bytes[i] = int_count(static_cast<std::uint64_t>(counts[i]) * es);
      req->displs[i] = int_count(off);
      off += static_cast<std::uint64_t>(req->bytes[i]);
    }
    req->reqs.emplace_back();
    VINF_CHECK_MPI(MPI_Iallgatherv(req->keep.back()->data(), req->bytes[static_cast<std::size_t>(rank())], MPI_BYTE,
                                   req->fill.back()->data(), req->bytes.data(), req->displs.data(), MPI_BYTE, comm_,
                                   &req->reqs.back()));
    return req;
  }
  Request do_exchange(ExecContext& ctx, std::span<const Transfer> transfers) override {
    // Every size is checked before anything is posted: a throw between posts would leave a posted
    // receive writing into a buffer that is handed out again.
    for (const Transfer& t : transfers) {
      if (t.peer < 0) continue;
      if (t.recv.data) int_count(t.recv.nbytes());
      if (t.send.data) int_count(t.send.nbytes());
    }
    auto req = std::make_unique<MpiRequest>();
    for (const Transfer& t : transfers) {
      if (t.peer < 0 || !t.recv.data || t.recv.numel() == 0) continue;
      req->fill.push_back(std::make_unique<HostImage>(ctx, staging_, t.recv, false));
      req->reqs.emplace_back();
      VINF_CHECK_MPI(MPI_Irecv(req->fill.back()->data(), int_count(t.recv.nbytes()), MPI_BYTE, t.peer, kTag, comm_,
                               &req->reqs.back()));
    }
    for (const Transfer& t : transfers) {
      if (t.peer < 0 || !t.send.data || t.send.numel() == 0) continue;
      req->keep.push_back(std::make_unique<HostImage>(ctx, staging_, t.send, true));
      req->reqs.emplace_back();
      VINF_CHECK_MPI(MPI_Isend(req->keep.back()->data(), int_count(t.send.nbytes()), MPI_BYTE, t.peer, kTag, comm_,
                               &req->reqs.back()));
    }
    return req;
  }
  Request do_all_reduce_sum(ExecContext& ctx, const Tensor& buf) override {
    HostImage h(ctx, staging_, buf, true);
    VINF_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, h.data(), int_count(static_cast<std::uint64_t>(buf.numel())),
                                 buf.dtype == DType::f64 ? MPI_DOUBLE : MPI_FLOAT, MPI_SUM, comm_));
    h.store();
    return completed();
  }
  Request do_broadcast(ExecContext& ctx, const Tensor& buf, int root) override {
    HostImage h(ctx, staging_, buf, rank() == root);
    VINF_CHECK_MPI(MPI_Bcast(h.data(), int_count(buf.nbytes()), MPI_BYTE, root, comm_));
    h.store();
    return completed();
  }
  Request do_barrier(ExecContext&) override {
    VINF_CHECK_MPI(MPI_Barrier(comm_));
    return completed();
  }

 private:
  static constexpr int kTag = 7001;
  MPI_Comm comm_;
  Staging staging_;
};

// The in-process transport: buffered point-to-point mailboxes between the threads of one group,
// FIFO per (source, destination, operation kind); collectives are built from them in a fixed
// order. Sends never wait, so a started collective has sent everything and finishing it receives.
class Hub {
 public:
  explicit Hub(int n) : n_(n) {}
  void send(CommOp op, int src, int dst, const char* p, std::size_t bytes) {
    {
      std::lock_guard lock(m_);
      box_[{op, src, dst}].emplace_back(p, p + bytes);
    }
    cv_.notify_all();
  }
  std::vector<char> recv(CommOp op, int src, int dst) {
    std::unique_lock lock(m_);
    auto& q = box_[{op, src, dst}];
    cv_.wait(lock, [&] { return !q.empty(); });
    std::vector<char> v = std::move(q.front());
    q.pop_front();
    return v;
  }
  int size() const { return n_; }

 private:
  int n_;
  std::mutex m_;
  std::condition_variable cv_;
  std::map<std::tuple<CommOp, int, int>, std::deque<std::vector<char>>> box_;
};

// Finishing an in-process collective: runs the receiving half.
class ThreadRequest final : public CommRequest {
 public:
  explicit ThreadRequest(std::function<void(ExecContext&)> receive) : receive_(std::move(receive)) {}
  double wait(ExecContext& ctx) override {
    receive_(ctx);
    return -1;
  }

 private:
  std::function<void(ExecContext&)> receive_;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Hub> hub, int rank) : Communicator(rank, hub->size()), hub_(std::move(hub)) {}
  const char* backend() const override { return "threads"; }

 protected:
  Request do_all_gather_v(ExecContext& ctx, const Tensor& send, const Tensor& recv,
                          const std::vector<std::int64_t>& counts) override {
    HostImage s(ctx, staging_, send, true);
    for (int p = 0; p < size(); ++p)
      if (p != rank()) hub_->send(CommOp::all_gather, rank(), p, s.data(), send.nbytes());
    std::vector<char> mine(s.data(), s.data() + send.nbytes());
    return std::make_unique<ThreadRequest>([this, recv, counts, mine = std::move(mine)](ExecContext& ctx) {
      HostImage r(ctx, staging_, recv, false);
      const std::size_t es = dtype_size(recv.dtype);
      std::size_t off = 0;
      for (int p = 0; p < size(); ++p) {
        const std::size_t n = static_cast<std::size_t>(counts[static_cast<std::size_t>(p)]) * es;
        if (p == rank()) {
          std::memcpy(r.data() + off, mine.data(), n);
        } else {
          const std::vector<char> m = hub_->recv(CommOp::all_gather, p, rank());
          VINF_CHECK(m.size() == n, "all-gather: rank ", p, " sent ", m.size(), " bytes, expected ", n);
          std::memcpy(r.data() + off, m.data(), n);
        }
        off += n;
      }
      r.store();
    });
  }
  Request do_exchange(ExecContext& ctx, std::span<const Transfer> transfers) override {
    std::vector<Transfer> incoming;
    for (const Transfer& t : transfers) {
      if (t.peer < 0) continue;
      if (t.send.data) {
        HostImage s(ctx, staging_, t.send, true);
        hub_->send(CommOp::exchange, rank(), t.peer, s.data(), t.send.nbytes());
      }
      if (t.recv.data) incoming.push_back(t);
    }
    return std::make_unique<ThreadRequest>([this, incoming = std::move(incoming)](ExecContext& ctx) {
      for (const Transfer& t : incoming) {
        HostImage r(ctx, staging_, t.recv, false);
        const std::vector<char> m = hub_->recv(CommOp::exchange, t.peer, rank());
        VINF_CHECK(m.size() == t.recv.nbytes(), "exchange: rank ", t.peer, " sent ", m.size(), " bytes, expected ",
                   t.recv.nbytes());
        std::memcpy(r.data(), m.data(), m.size());
        r.store();
      }
    });
  }
  Request do_all_reduce_sum(ExecContext& ctx, const Tensor& buf) override {
    HostImage h(ctx, staging_, buf, true);
    for (int p = 0; p < size(); ++p)
      if (p != rank()) hub_->send(CommOp::all_reduce, rank(), p, h.data(), buf.nbytes());
    // Sum in rank order on every thread, so that every rank gets bitwise the same result.
    std::vector<char> mine(h.data(), h.data() + buf.nbytes()), acc;
    for (int p = 0; p < size(); ++p) {
      std::vector<char> part = p == rank() ? mine : hub_->recv(CommOp::all_reduce, p, rank());
      if (p == 0) {
        acc = std::move(part);
        continue;
      }
      if (buf.dtype == DType::f64)
        add_into<double>(acc, part);
      else
        add_into<float>(acc, part);
    }
    std::memcpy(h.data(), acc.data(), acc.size());
    h.store();
    return completed();
  }
  Request do_broadcast(ExecContext& ctx, const Tensor& buf, int root) override {
    HostImage h(ctx, staging_, buf, rank() == root);
    if (rank() == root) {
      for (int p = 0; p < size(); ++p)
        if (p != root) hub_->send(CommOp::broadcast, root, p, h.data(), buf.nbytes());
    } else {
      const std::vector<char> m = hub_->recv(CommOp::broadcast, root, rank());
      std::memcpy(h.data(), m.data(), m.size());
    }
    h.store();
    return completed();
  }
  Request do_barrier(ExecContext&) override {
    for (int p = 0; p < size(); ++p)
      if (p != rank()) hub_->send(CommOp::barrier, rank(), p, nullptr, 0);
    for (int p = 0; p < size(); ++p)
      if (p != rank()) hub_->recv(CommOp::barrier, p, rank());
    return completed();
  }

 private:
  template <class T>
  static void add_into(std::vector<char>& acc, const std::vector<char>& part) {
    T* a = reinterpret_cast<T*>(acc.data());
    const T* b = reinterpret_cast<const T*>(part.data());
    for (std::size_t i = 0; i < acc.size() / sizeof(T); ++i) a[i] += b[i];
  }
  std::shared_ptr<Hub> hub_;
  Staging staging_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm) {
  int rank = 0, size = 1;
  VINF_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  VINF_CHECK_MPI(MPI_Comm_size(comm, &size));
  return std::make_unique<MpiCommunicator>(comm, rank, size);
}

std::vector<std::unique_ptr<Communicator>> make_thread_group(int n) {
  VINF_CHECK(n >= 1, "a thread group needs at least one rank");
  auto hub = std::make_shared<Hub>(n);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<ThreadCommunicator>(hub, r));
  return out;
}

#if !VINF_WITH_CUDA
std::string nccl_version() { return ""; }

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, const Device&) {
  VINF_FAIL("NCCL needs a CUDA build of vinf; this one has the CPU path only");
}
#endif

}  // namespace vinf::mpi
