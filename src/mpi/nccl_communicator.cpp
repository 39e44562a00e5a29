// The NCCL transport (CUDA builds). Collectives are queued on the context's stream; each call then
// waits for the stream while polling NCCL's asynchronous error state, so a failed peer surfaces as
// an error here, and a stuck one as the watchdog's message, never as a silent hang.
#include <nccl.h>

#include <chrono>
#include <thread>

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

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size) : Communicator(rank, size), comm_(comm) {}
  ~NcclCommunicator() override { ncclCommDestroy(comm_); }
  const char* backend() const override { return "nccl"; }

 protected:
  void do_all_gather_v(ExecContext& ctx, const Tensor& send, const Tensor& recv,
                       const std::vector<std::int64_t>& counts) override {
    const std::size_t es = dtype_size(send.dtype);
    bool equal = true;
    for (std::int64_t c : counts) equal = equal && c == counts.front();
    if (equal) {
      VINF_CHECK_NCCL(ncclAllGather(send.data, recv.data, send.nbytes(), ncclChar, comm_, stream(ctx)));
    } else {
      // Varying counts: one broadcast per rank into its slot, grouped into one launch.
      VINF_CHECK_NCCL(ncclGroupStart());
      std::size_t off = 0;
      for (int p = 0; p < size(); ++p) {
        const std::size_t n = static_cast<std::size_t>(counts[static_cast<std::size_t>(p)]) * es;
        VINF_CHECK_NCCL(ncclBroadcast(p == rank() ? send.data : nullptr, static_cast<char*>(recv.data) + off, n,
                                      ncclChar, p, comm_, stream(ctx)));
        off += n;
      }
      VINF_CHECK_NCCL(ncclGroupEnd());
    }
    wait(ctx);
  }
  void do_exchange(ExecContext& ctx, std::span<const Transfer> transfers) override {
    VINF_CHECK_NCCL(ncclGroupStart());
    for (const Transfer& t : transfers) {
      if (t.peer < 0) continue;
      if (t.send.data && t.send.numel() > 0)
        VINF_CHECK_NCCL(ncclSend(t.send.data, t.send.nbytes(), ncclChar, t.peer, comm_, stream(ctx)));
      if (t.recv.data && t.recv.numel() > 0)
        VINF_CHECK_NCCL(ncclRecv(t.recv.data, t.recv.nbytes(), ncclChar, t.peer, comm_, stream(ctx)));
    }
    VINF_CHECK_NCCL(ncclGroupEnd());
    wait(ctx);
  }
  void do_all_reduce_sum(ExecContext& ctx, const Tensor& buf) override {
    VINF_CHECK_NCCL(ncclAllReduce(buf.data, buf.data, static_cast<std::size_t>(buf.numel()),
                                  buf.dtype == DType::f64 ? ncclDouble : ncclFloat, ncclSum, comm_, stream(ctx)));
    wait(ctx);
  }
  void do_broadcast(ExecContext& ctx, const Tensor& buf, int root) override {
    VINF_CHECK_NCCL(ncclBroadcast(buf.data, buf.data, buf.nbytes(), ncclChar, root, comm_, stream(ctx)));
    wait(ctx);
  }
  void do_barrier(ExecContext& ctx) override {
    OwnedTensor one = ctx.arena->empty(DType::f32, {1});
    VINF_CHECK_NCCL(ncclAllReduce(one.data, one.data, 1, ncclFloat, ncclSum, comm_, stream(ctx)));
    wait(ctx);
  }

 private:
  static cudaStream_t stream(ExecContext& ctx) {
    VINF_CHECK(ctx.device.is_cuda() && ctx.cuda, "the NCCL communicator needs a CUDA context");
    return ctx.cuda->stream();
  }
  // Waits for the stream; an asynchronous NCCL error (a peer failed) aborts the communicator and
  // becomes an exception. The watchdog bounds the wait.
  void wait(ExecContext& ctx) {
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream(ctx));
      if (e == cudaSuccess) return;
      VINF_CHECK(e == cudaErrorNotReady, "CUDA error while waiting for NCCL: ", cudaGetErrorString(e));
      ncclResult_t async = ncclSuccess;
      VINF_CHECK_NCCL(ncclCommGetAsyncError(comm_, &async));
      if (async != ncclSuccess && async != ncclInProgress) {
        ncclCommAbort(comm_);
        VINF_FAIL("NCCL reported an asynchronous error on the ", label(), ": ", ncclGetErrorString(async),
                  " (a peer rank failed or the network broke)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  ncclComm_t comm_;
};

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
