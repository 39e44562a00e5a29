// The MPI transport: nonblocking MPI requests on host memory. Device tensors go through host
// staging buffers (Open MPI here is not CUDA-aware); the started collectives progress only inside
// MPI calls, which Communicator::progress makes between pieces of compute.
#include <mpi.h>

#include <climits>
#include <memory>
#include <vector>

#include "core/error.hpp"
#include "mpi/check.hpp"
#include "mpi/communicator.hpp"
#include "mpi/host_staging.hpp"
#include "ops/runtime.hpp"

namespace vinf::mpi {

namespace {

int int_count(std::uint64_t bytes) {
  VINF_CHECK(bytes <= static_cast<std::uint64_t>(INT_MAX), "a message of ", bytes,
             " bytes is larger than MPI's int count; use more ranks or smaller frames");
  return static_cast<int>(bytes);
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i64: return MPI_INT64_T;
    default: VINF_FAIL("the MPI transport reduces no ", dtype_name(dtype), " tensors");
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  VINF_FAIL("unknown reduction");
}

// Nonblocking MPI requests with the host images they read and fill.
class MpiRequest final : public CommRequest {
 public:
  std::vector<MPI_Request> reqs;
  std::vector<std::unique_ptr<HostImage>> keep, fill;  // sent from / received into (stored at the end)
  std::vector<int> bytes, displs;  // an all-gather's (reduce-scatter's) counts, which MPI may read until completion
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
  Request do_all_reduce(ExecContext& ctx, const Tensor& buf, ReduceOp op) override {
    HostImage h(ctx, staging_, buf, true);
    VINF_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, h.data(), int_count(static_cast<std::uint64_t>(buf.numel())),
                                 mpi_type(buf.dtype), mpi_op(op), comm_));
    h.store();
    return completed();
  }
  Request do_start_all_reduce(ExecContext& ctx, const Tensor& buf, ReduceOp op) override {
    auto req = std::make_unique<MpiRequest>();
    req->fill.push_back(std::make_unique<HostImage>(ctx, staging_, buf, true));
    req->reqs.emplace_back();
    VINF_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, req->fill.back()->data(),
                                  int_count(static_cast<std::uint64_t>(buf.numel())), mpi_type(buf.dtype), mpi_op(op),
                                  comm_, &req->reqs.back()));
    return req;
  }
  Request do_reduce_scatter_v(ExecContext& ctx, const Tensor& send, const Tensor& recv,
                              const std::vector<std::int64_t>& counts) override {
    auto req = std::make_unique<MpiRequest>();
    for (std::int64_t c : counts) req->bytes.push_back(int_count(static_cast<std::uint64_t>(c)));  // element counts
    req->keep.push_back(std::make_unique<HostImage>(ctx, staging_, send, true));
    req->fill.push_back(std::make_unique<HostImage>(ctx, staging_, recv, false));
    req->reqs.emplace_back();
    VINF_CHECK_MPI(MPI_Ireduce_scatter(req->keep.back()->data(), req->fill.back()->data(), req->bytes.data(),
                                       mpi_type(send.dtype), MPI_SUM, comm_, &req->reqs.back()));
    return req;
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

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm) {
  int rank = 0, size = 1;
  VINF_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  VINF_CHECK_MPI(MPI_Comm_size(comm, &size));
  return std::make_unique<MpiCommunicator>(comm, rank, size);
}

}  // namespace vinf::mpi
