// The NCCL transport (CUDA builds). Collectives run on a stream of the communicator's own, after
// the work already queued on the compute stream; finishing one makes the compute stream wait for
// it, so the compute queued in between overlaps the transfer, and returns at once: the host does
// not wait. How long the compute stream sat idle waiting (the exposed communication time) is read
// later from two timed events, when the communicator settles the call. Until then the watchdog
// watches it: a stuck peer ends the job with the watchdog's message, and NCCL's asynchronous error
// state, which the watchdog's thread reads through async_probe(), ends it with NCCL's; never a
// silent hang.
#include <nccl.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include "core/error.hpp"
#include "cuda/context.hpp"
#include "mpi/check.hpp"
#include "mpi/communicator.hpp"

namespace vinf::mpi {

namespace {

#define VINF_CHECK_NCCL(stmt)                                                                                   \
  do {                                                                                                          \
    const ncclResult_t nccl_status_ = (stmt);                                                                   \
    VINF_CHECK(nccl_status_ == ncclSuccess || nccl_status_ == ncclInProgress, "NCCL: ", #stmt, " failed: ",    \
               ncclGetErrorString(nccl_status_));                                                               \
  } while (0)

#define VINF_CHECK_CUDA_RT(stmt)                                                                            \
  do {                                                                                                      \
    const cudaError_t cuda_status_ = (stmt);                                                                \
    VINF_CHECK(cuda_status_ == cudaSuccess, "CUDA: ", #stmt, " failed: ", cudaGetErrorString(cuda_status_)); \
  } while (0)

// An event that is destroyed with its owner; timed ones can be measured against each other.
class Event {
 public:
  explicit Event(bool timed = false) {
    VINF_CHECK_CUDA_RT(cudaEventCreateWithFlags(&e_, timed ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~Event() { cudaEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// ncclGroupStart ... ncclGroupEnd as a scope: leaving it by an exception still ends the group
// (otherwise every later NCCL call of the process would silently join the open group and never
// be issued). What was queued in the group is then incomplete for the peers, so the caller marks
// the communicator unusable (see NcclCommunicator::grouped).
class NcclGroup {
 public:
  NcclGroup() { VINF_CHECK_NCCL(ncclGroupStart()); }
  ~NcclGroup() {
    if (open_) (void)ncclGroupEnd();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  void end() {
    open_ = false;
    VINF_CHECK_NCCL(ncclGroupEnd());
  }

 private:
  bool open_ = true;
};

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat;
    case DType::f64: return ncclDouble;
    case DType::i64: return ncclInt64;
    default: VINF_FAIL("the NCCL transport reduces no ", dtype_name(dtype), " tensors");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  VINF_FAIL("unknown reduction");
}

class NcclCommunicator;

// One collective queued on the communication stream; `done` follows it there.
class NcclRequest final : public CommRequest {
 public:
  double wait(ExecContext& ctx) override;
  std::optional<double> poll() override;
  bool passed() const override { return cudaEventQuery(done.get()) == cudaSuccess; }
  Event done{true};     // the transfer's end, on the communication stream
  Event reached{true};  // where the compute stream starts waiting for it
  OwnedTensor scratch;  // a buffer of the collective's own, kept until the compute stream waited for it
};

class NcclCommunicator final : public Communicator {
 public:
  // Takes ownership of comm, also when the constructor fails.
  NcclCommunicator(ncclComm_t comm, int rank, int size) : Communicator(rank, size), comm_(comm) {
    try {
      int least = 0, greatest = 0;
      VINF_CHECK_CUDA_RT(cudaDeviceGetStreamPriorityRange(&least, &greatest));
      VINF_CHECK_CUDA_RT(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
    } catch (...) {
      ncclCommDestroy(comm_);
      throw;
    }
  }
  ~NcclCommunicator() override {
    settle_before_destruction();  // after it, no call of this group is watched: no probe runs
    if (comm_) {
      cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
      comm_ = nullptr;
    }
    cudaStreamDestroy(stream_);
  }
  const char* backend() const override { return "nccl"; }

  // Raises the asynchronous error of a failed peer (aborting the communicator first).
  void check_async_error() {
    std::string failed;
    ncclComm_t aborted = nullptr;
    {
      std::lock_guard lock(m_);
      VINF_CHECK(comm_, "NCCL: the ", label(), " was aborted after an earlier error");
      failed = async_failure();
      if (!failed.empty()) aborted = std::exchange(comm_, nullptr);
    }
    // Outside the lock: an abort that hangs must not hold the watchdog's probe (and with it the
    // watchdog) as well.
    if (aborted) ncclCommAbort(aborted);
    if (!failed.empty()) VINF_FAIL(failed);
  }
  static cudaStream_t compute_stream(ExecContext& ctx) {
    VINF_CHECK(ctx.device.is_cuda() && ctx.cuda, "the NCCL communicator needs a CUDA context");
    return ctx.cuda->stream();
  }

 protected:
  AsyncProbe async_probe() override {
    return [this] {
      std::lock_guard lock(m_);
      return comm_ ? async_failure() : std::string{};
    };
  }
  Request do_all_gather_v(ExecContext& ctx, const Tensor& send, const Tensor& recv,
                          const std::vector<std::int64_t>& counts) override {
    return enqueue(ctx, [&] {
      const std::size_t es = dtype_size(send.dtype);
      bool equal = true;
      for (std::int64_t c : counts) equal = equal && c == counts.front();
      if (equal) {
        VINF_CHECK_NCCL(ncclAllGather(send.data, recv.data, send.nbytes(), ncclChar, comm_, stream_));
        return;
      }
      // Varying counts: one broadcast per rank into its slot, grouped into one launch.
      grouped([&] {
        std::size_t off = 0;
        for (int p = 0; p < size(); ++p) {
          const std::size_t n = static_cast<std::size_t>(counts[static_cast<std::size_t>(p)]) * es;
          VINF_CHECK_NCCL(ncclBroadcast(p == rank() ? send.data : nullptr, static_cast<char*>(recv.data) + off, n,
                                        ncclChar, p, comm_, stream_));
          off += n;
        }
      });
    });
  }
  Request do_exchange(ExecContext& ctx, std::span<const Transfer> transfers) override {
    return enqueue(ctx, [&] {
      grouped([&] {
        for (const Transfer& t : transfers) {
          if (t.peer < 0) continue;
          if (t.send.data && t.send.numel() > 0)
            VINF_CHECK_NCCL(ncclSend(t.send.data, t.send.nbytes(), ncclChar, t.peer, comm_, stream_));
          if (t.recv.data && t.recv.numel() > 0)
            VINF_CHECK_NCCL(ncclRecv(t.recv.data, t.recv.nbytes(), ncclChar, t.peer, comm_, stream_));
        }
      });
    });
  }
  Request do_all_reduce(ExecContext& ctx, const Tensor& buf, ReduceOp op) override {
    return enqueue(ctx, [&] {
      VINF_CHECK_NCCL(ncclAllReduce(buf.data, buf.data, static_cast<std::size_t>(buf.numel()), nccl_type(buf.dtype),
                                    nccl_op(op), comm_, stream_));
    });
  }
  Request do_broadcast(ExecContext& ctx, const Tensor& buf, int root) override {
    return enqueue(ctx, [&] {
      VINF_CHECK_NCCL(ncclBroadcast(buf.data, buf.data, buf.nbytes(), ncclChar, root, comm_, stream_));
    });
  }
  Request do_barrier(ExecContext& ctx) override {
    // The buffer lives in the request, so that it goes back to the arena only after the compute
    // stream has waited for the transfer (the arena reuses blocks in compute-stream order).
    OwnedTensor one = ctx.arena->empty(DType::f32, {1});
    void* p = one.data;
    return enqueue(
        ctx, [&] { VINF_CHECK_NCCL(ncclAllReduce(p, p, 1, ncclFloat, ncclSum, comm_, stream_)); }, std::move(one));
  }

 private:
  // NCCL's asynchronous error, as a message ("" while none). Called with m_ held on a live comm_.
  std::string async_failure() {
    ncclResult_t async = ncclSuccess;
    const ncclResult_t got = ncclCommGetAsyncError(comm_, &async);
    if (got != ncclSuccess) return std::string("NCCL could not report its state: ") + ncclGetErrorString(got);
    if (async == ncclSuccess || async == ncclInProgress) return {};
    return "NCCL reported an asynchronous error on the " + label() + ": " + ncclGetErrorString(async) +
           " (a peer rank failed or the network broke)";
  }
  // Runs `calls` inside one NCCL group. When one of them throws, the group is ended (NcclGroup)
  // and the communicator aborted: the peers were promised operations that never came, so a later
  // collective could only hang; it fails with a message instead.
  template <class Calls>
  void grouped(Calls&& calls) {
    try {
      NcclGroup group;
      calls();
      group.end();
    } catch (...) {
      ncclComm_t aborted = nullptr;
      {
        std::lock_guard lock(m_);
        aborted = std::exchange(comm_, nullptr);
      }
      if (aborted) ncclCommAbort(aborted);
      throw;
    }
  }
  // Queues `issue` on the communication stream behind everything queued so far on the compute
  // stream (the data it sends is written there).
  template <class Issue>
  Request enqueue(ExecContext& ctx, Issue&& issue, OwnedTensor scratch = {}) {
    check_async_error();
    auto req = std::make_unique<NcclRequest>();
    req->scratch = std::move(scratch);
    Event ready;
    VINF_CHECK_CUDA_RT(cudaEventRecord(ready.get(), compute_stream(ctx)));
    VINF_CHECK_CUDA_RT(cudaStreamWaitEvent(stream_, ready.get(), 0));
    issue();
    VINF_CHECK_CUDA_RT(cudaEventRecord(req->done.get(), stream_));
    return req;
  }
  std::mutex m_;  // comm_ against the watchdog's probe: aborting it sets it null
  ncclComm_t comm_;
  cudaStream_t stream_ = nullptr;
};

double NcclRequest::wait(ExecContext& ctx) {
  // The compute stream waits for the transfer; `reached` marks where it starts waiting. The host
  // returns at once: poll() tells the exposed time once both events have passed.
  const cudaStream_t compute = NcclCommunicator::compute_stream(ctx);
  VINF_CHECK_CUDA_RT(cudaEventRecord(reached.get(), compute));
  VINF_CHECK_CUDA_RT(cudaStreamWaitEvent(compute, done.get(), 0));
  return later;
}

std::optional<double> NcclRequest::poll() {
  const cudaError_t e = cudaEventQuery(done.get());
  if (e == cudaErrorNotReady) return std::nullopt;
  VINF_CHECK(e == cudaSuccess, "CUDA error while waiting for NCCL: ", cudaGetErrorString(e));
  const cudaError_t r = cudaEventQuery(reached.get());
  // The transfer ended before the compute stream came to its wait: nothing was exposed.
  if (r == cudaErrorNotReady) return 0.0;
  VINF_CHECK(r == cudaSuccess, "CUDA error while waiting for NCCL: ", cudaGetErrorString(r));
  float ms = 0;
  VINF_CHECK_CUDA_RT(cudaEventElapsedTime(&ms, reached.get(), done.get()));
  return std::max(0.0, static_cast<double>(ms) * 1e-3);
}

}  // namespace

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch; older ones major * 1000 + minor * 100.
  const int major = v >= 10000 ? v / 10000 : v / 1000, minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(v % 100);
}

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, const Device& device) {
  VINF_CHECK(device.is_cuda(), "NCCL needs a CUDA device, got ", device.name());
  int rank = 0, size = 1;
  VINF_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  VINF_CHECK_MPI(MPI_Comm_size(comm, &size));
  ncclUniqueId id{};
  if (rank == 0) VINF_CHECK_NCCL(ncclGetUniqueId(&id));
  VINF_CHECK_MPI(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm));
  VINF_CHECK(cudaSetDevice(device.index) == cudaSuccess, "cudaSetDevice(", device.index, ") failed");
  ncclComm_t nc = nullptr;
  VINF_CHECK_NCCL(ncclCommInitRank(&nc, size, id, rank));
  return std::make_unique<NcclCommunicator>(nc, rank, size);
}

}  // namespace vinf::mpi
