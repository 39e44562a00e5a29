// A process group's collectives, behind one interface with three transports: MPI (host memory; the
// CPU path and a fallback on GPUs), NCCL (device memory, CUDA builds), and an in-process group of
// threads (one process emulating N ranks: the single-process oracle of the tests and of
// `vinf forward --vi.emulate-clips`).
//
// Every call is counted (calls, payload bytes, seconds) per operation kind and guarded by the
// watchdog (a call that does not finish within the timeout ends the job with a message instead of
// hanging it). The plain calls block: when they return, the received data is in place (for the
// host, or on a GPU for the work queued after them). All-gathers and exchanges also come split in
// two (start_*, then finish), so that the caller computes while the data moves: MPI's nonblocking
// requests, or NCCL on a stream of its own that the compute stream waits for. The seconds counted
// are the exposed ones: the time the caller (or, on a GPU, the compute stream) was held up by
// communication, not the time the transfer took.
//
// On a GPU, finish() does not hold the host: it queues the compute stream's wait and returns. The
// collective stays "unsettled" until its transfer is done; its exposed time is read from events
// then, at a later call or when the counters are read (settle()), and the watchdog keeps watching
// it (the timeout, and the transport's asynchronous errors) until then.
//
// Payload bytes are what this rank receives from other ranks: an all-gather of n bytes per rank
// counts (size - 1) n, an exchange the bytes received from the peers, an all-reduce and a broadcast
// the buffer's bytes (0 on a one-rank group), an all-to-all the pieces received from the others, a
// reduce-scatter the other ranks' contributions to this rank's piece ((size - 1) x its bytes).
#pragma once

#include <mpi.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "ops/context.hpp"

namespace vinf::mpi {

enum class CommOp { all_gather, exchange, all_reduce, broadcast, barrier, all_to_all, reduce_scatter };
inline constexpr int kCommOps = 7;
const char* comm_op_name(CommOp op);

// What an all-reduce combines the ranks' elements with.
enum class ReduceOp { sum, max, min };
const char* reduce_op_name(ReduceOp op);  // "sum", "max", "min"

struct CommCounters {
  std::array<std::uint64_t, kCommOps> calls{}, bytes{};
  std::array<double, kCommOps> seconds{};
  void add(const CommCounters& o);
  // "all-gather 123 B in 4 calls (0.012 s), exchange ..." or "no communication".
  std::string summary() const;
};

// One pairwise transfer of an exchange: send `send` to `peer` and receive `recv` from it (either
// may be empty when only one direction carries data). peer < 0: nothing.
struct Transfer {
  int peer = -1;
  Tensor send, recv;
};

// A piece of an all-to-all with peer: an empty side (no elements) travels as nothing, the same on
// both ranks.
inline Transfer piece_transfer(int peer, const Tensor& send, const Tensor& recv) {
  Transfer t;
  t.peer = peer;
  if (send.numel() > 0) t.send = send;
  if (recv.numel() > 0) t.recv = recv;
  return t;
}

// One collective as issued, in elements of `dtype`: enough to issue the same traffic again
// without the compute around it (replay_trace; the step benchmark's raw exchange time).
struct CommRecord {
  CommOp op = CommOp::barrier;
  DType dtype = DType::f32;
  std::vector<std::int64_t> counts;  // all-gather, reduce-scatter: per rank; all-reduce, broadcast: {elements}
  struct Pair {
    int peer;
    std::int64_t send, recv;
  };
  std::vector<Pair> pairs;          // exchange, all-to-all
  int root = 0;                     // broadcast
  ReduceOp reduce = ReduceOp::sum;  // all-reduce
};

// A backend's collective in flight.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  // Lets the transport move data while the caller computes (MPI progresses only inside MPI calls).
  virtual void progress() {}
  // Returns once the data is in place: for the host, or (NCCL) for work queued on the compute
  // stream after this call. Returns the seconds the computation was held up, a negative number
  // when that is the wall time of this call, or `later` when the transfer may still be running and
  // poll() tells the seconds once it is done.
  virtual double wait(ExecContext& ctx) = 0;
  static constexpr double later = std::numeric_limits<double>::quiet_NaN();
  // After wait() returned `later`: the seconds the computation was held up once the transfer is
  // done, nothing while it runs. Never blocks; throws the transport's error.
  virtual std::optional<double> poll() { return 0.0; }
  // After wait() returned `later`: whether the transfer has ended, asked from the watchdog's
  // thread (a call that has ended does not time out while it waits to be settled). Never blocks.
  virtual bool passed() const { return false; }
};

// Asks a transport, from the watchdog's thread, whether it has failed on its own (NCCL's
// asynchronous errors): "" while all is well, else what happened. Must be quick and thread-safe.
using AsyncProbe = std::function<std::string()>;

class Communicator;

// A collective that was started and is not finished yet (Communicator::start_all_gather_v,
// start_exchange). Its tensors belong to it until Communicator::finish: the caller neither frees
// nor touches them. Destroying an unfinished one finishes it first (the watchdog bounds the wait).
class Pending {
 public:
  Pending() = default;
  Pending(Pending&& o) noexcept { *this = std::move(o); }
  Pending& operator=(Pending&& o) noexcept;
  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;
  ~Pending();
  bool active() const { return request_ != nullptr; }

 private:
  friend class Communicator;
  void settle() noexcept;  // finishes an unfinished one, reporting (not throwing) a failure
  Communicator* comm_ = nullptr;
  ExecContext* ctx_ = nullptr;
  std::unique_ptr<CommRequest> request_;
  CommOp op_ = CommOp::barrier;
  std::uint64_t watch_ = 0;  // the watchdog's entry
  double seconds_ = 0;       // exposed so far (the start)
};

class Communicator {
 public:
  virtual ~Communicator();
  int rank() const { return rank_; }
  int size() const { return size_; }
  // "mpi", "nccl" or "threads".
  // What the group is, for messages ("clip group", "cfg group").
  void set_label(std::string label) { label_ = std::move(label); }
  const std::string& label() const { return label_; }
  virtual const char* backend() const = 0;

  // recv holds size() pieces of send's bytes, in rank order. Both contiguous.
  void all_gather(ExecContext& ctx, const Tensor& send, const Tensor& recv);
  // counts[r] elements from rank r (send holds counts[rank()]), concatenated in rank order.
  void all_gather_v(ExecContext& ctx, const Tensor& send, const Tensor& recv, const std::vector<std::int64_t>& counts);
  // Pairwise exchanges, all posted at once (one or two peers: the halo rounds, or both
  // neighbours in the fused form). The peers must call with the mirrored transfers.
  void exchange(ExecContext& ctx, std::span<const Transfer> transfers);
  // The split forms of all_gather_v and exchange: post the transfers and return; the data is in
  // place after finish(). Several may be in flight; every rank starts them in the same order.
  Pending start_all_gather_v(ExecContext& ctx, const Tensor& send, const Tensor& recv,
                             const std::vector<std::int64_t>& counts);
  Pending start_exchange(ExecContext& ctx, std::span<const Transfer> transfers);
  // An all-to-all as pairwise transfers with every other rank (one Transfer per peer; pieces of
  // any size, empty ones included): the same traffic as an exchange, counted as all-to-all.
  Pending start_all_to_all(ExecContext& ctx, std::span<const Transfer> transfers);
  // Moves data of a started collective along, without waiting (call it between pieces of compute).
  void progress(Pending& p);
  // Waits for a started collective; a finished or empty one is left alone.
  void finish(Pending& p);
  // Element-wise over ranks, in place; every rank gets bitwise the same result. Contiguous; sum
  // takes f32 or f64, max and min also i64. Counted as an all-reduce.
  void all_reduce(ExecContext& ctx, const Tensor& buf, ReduceOp op);
  void all_reduce_sum(ExecContext& ctx, const Tensor& buf) { all_reduce(ctx, buf, ReduceOp::sum); }
  // The split form of all_reduce (the same result, the same bitwise agreement): buf belongs to the
  // collective until finish().
  Pending start_all_reduce(ExecContext& ctx, const Tensor& buf, ReduceOp op);
  // Sums send (sum of counts elements, f32 or f64, the same on every rank) over the ranks and
  // leaves piece r (counts[r] elements, in rank order; empty pieces allowed) in rank r's recv.
  // Every rank gets its piece as the sum in one fixed order, the same for equal inputs. Both
  // belong to the collective until finish().
  Pending start_reduce_scatter_v(ExecContext& ctx, const Tensor& send, const Tensor& recv,
                                 const std::vector<std::int64_t>& counts);
  void broadcast(ExecContext& ctx, const Tensor& buf, int root);
  void barrier(ExecContext& ctx);

  // The counts so far; settles the finished collectives first (see settle()).
  const CommCounters& counters() const {
    settle();
    return counters_;
  }
  void reset_counters() {
    settle();
    counters_ = {};
  }
  // Waits on the host for the collectives that finish() left running (NCCL: the compute stream
  // waits for them, the host did not) and counts their exposed seconds. Throws the first one's
  // error, naming it. MPI and thread transports never leave any.
  void settle() const { settle_unsettled(true); }
  // How many finished collectives are not settled yet.
  std::size_t unsettled() const { return unsettled_.size(); }
  // Appends every later collective to *trace (nullptr: stop recording).
  void set_trace(std::vector<CommRecord>* trace) { trace_ = trace; }

 protected:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}
  // The transports: each posts its collective and returns what finishes it (a transport that
  // completes inside the call returns completed()).
  using Request = std::unique_ptr<CommRequest>;
  virtual Request do_all_gather_v(ExecContext& ctx, const Tensor& send, const Tensor& recv,
                                  const std::vector<std::int64_t>& counts) = 0;
  virtual Request do_exchange(ExecContext& ctx, std::span<const Transfer> transfers) = 0;
  // Called on groups of more than one rank with a dtype that all_reduce accepts for op.
  virtual Request do_all_reduce(ExecContext& ctx, const Tensor& buf, ReduceOp op) = 0;
  // start_all_reduce's: do_all_reduce unless the transport can leave it in flight (MPI).
  virtual Request do_start_all_reduce(ExecContext& ctx, const Tensor& buf, ReduceOp op) {
    return do_all_reduce(ctx, buf, op);
  }
  // Called on groups of more than one rank. This one reduces all of send with do_all_reduce in a
  // scratch buffer and copies this rank's piece out (the thread and NCCL transports); MPI has its own.
  virtual Request do_reduce_scatter_v(ExecContext& ctx, const Tensor& send, const Tensor& recv,
                                      const std::vector<std::int64_t>& counts);
  virtual Request do_broadcast(ExecContext& ctx, const Tensor& buf, int root) = 0;
  virtual Request do_barrier(ExecContext& ctx) = 0;
  static Request completed();
  // The transport's probe for asynchronous failures, handed to the watchdog with every call (none
  // by default).
  virtual AsyncProbe async_probe() { return {}; }
  // For a transport's destructor, before the requests lose what they refer to: settles what is
  // left, reporting (not throwing) a failure, and forgets what could not be settled.
  void settle_before_destruction() noexcept;
  // An internal error (naming the collective and the group) unless t is on the context's device.
  void check_placement(const ExecContext& ctx, CommOp op, const char* arg, const Tensor& t) const;

 private:
  // Counts the call, arms the watchdog, issues it and times the issue.
  template <class Issue>
  Pending start(ExecContext& ctx, CommOp op, std::uint64_t bytes, Issue&& issue);
  // all_reduce's arguments checked, and the call traced.
  void check_all_reduce(ExecContext& ctx, const Tensor& buf, ReduceOp op);
  // Pairwise transfers (exchange, all-to-all): checked, traced and counted as op.
  Pending start_pairwise(ExecContext& ctx, CommOp op, std::span<const Transfer> transfers);
  // Polls the unsettled collectives in order, counting those that are done; with `block`, until
  // none is left.
  void settle_unsettled(bool block) const;
  struct Unsettled {
    std::unique_ptr<CommRequest> request;
    CommOp op;
    std::uint64_t watch;  // the watchdog's entry, kept until settled
    double seconds;       // exposed at the start
  };
  int rank_, size_;
  std::string label_ = "group";
  mutable CommCounters counters_;
  mutable std::vector<Unsettled> unsettled_;
  std::vector<CommRecord>* trace_ = nullptr;
};

// Issues the recorded collectives again, in order, on scratch buffers from ctx.arena; every rank of
// the group must replay its own trace of the same calls. Returns the seconds it took.
double replay_trace(Communicator& comm, ExecContext& ctx, const std::vector<CommRecord>& trace);

// Over an MPI communicator (not owned; it must outlive this). Device tensors go through host
// staging buffers (Open MPI here is not CUDA-aware).
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm);

// NCCL on `device` (the rank's GPU), bootstrapped over `comm`: its rank 0 makes the ncclUniqueId
// and broadcasts it. Collective over comm. Throws vinf::Error in builds without CUDA.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, const Device& device);

// The NCCL library's version ("2.18.5"), or "" in builds without CUDA.
std::string nccl_version();

// One process, n ranks: element r is rank r's communicator, to be used from its own thread.
std::vector<std::unique_ptr<Communicator>> make_thread_group(int n);

// The watchdog: a communicator call that has not finished after `seconds` prints what it was
// waiting for (operation, group, rank) and ends the job (MPI_Abort on every rank). 0 disables it.
// The default is 300 s. `setting` is how the user changes the timeout (the application's option,
// say): the message shows the timeout as "(SETTING N s)", or as "(N s)" without one.
void set_comm_timeout(double seconds, std::string setting = {});
double comm_timeout();

// A test hook (environment variable VINF_FAULT="rank=R,call=K,action=abort|hang"): world rank R
// aborts, or stops answering, at its K-th communicator call. Used by the fault tests only.
void check_fault_injection(int world_rank);

}  // namespace vinf::mpi
