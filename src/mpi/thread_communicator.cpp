// The in-process transport: one process emulating a group of N ranks, one thread each (the
// single-process oracle of the tests and of `vinf forward --vi.emulate-clips`). Device tensors go
// through host staging buffers like MPI's.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/error.hpp"
#include "mpi/communicator.hpp"
#include "mpi/host_staging.hpp"

namespace vinf::mpi {

namespace {

// Buffered point-to-point mailboxes between the threads of one group, FIFO per (source,
// destination, operation kind); collectives are built from them in a fixed order. Sends never
// wait, so a started collective has sent everything and finishing it receives.
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
        // (An empty piece may have no buffer at all: no copy, memcpy takes no null pointer.)
        if (p == rank()) {
          if (n > 0) std::memcpy(r.data() + off, mine.data(), n);
        } else {
          const std::vector<char> m = hub_->recv(CommOp::all_gather, p, rank());
          VINF_CHECK(m.size() == n, "all-gather: rank ", p, " sent ", m.size(), " bytes, expected ", n);
          if (n > 0) std::memcpy(r.data() + off, m.data(), n);
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
        if (!m.empty()) std::memcpy(r.data(), m.data(), m.size());
        r.store();
      }
    });
  }
  Request do_all_reduce(ExecContext& ctx, const Tensor& buf, ReduceOp op) override {
    HostImage h(ctx, staging_, buf, true);
    for (int p = 0; p < size(); ++p)
      if (p != rank()) hub_->send(CommOp::all_reduce, rank(), p, h.data(), buf.nbytes());
    // Combine in rank order on every thread, so that every rank gets bitwise the same result.
    std::vector<char> mine(h.data(), h.data() + buf.nbytes()), acc;
    for (int p = 0; p < size(); ++p) {
      std::vector<char> part = p == rank() ? mine : hub_->recv(CommOp::all_reduce, p, rank());
      if (p == 0) {
        acc = std::move(part);
        continue;
      }
      switch (buf.dtype) {
        case DType::f32: combine_into<float>(acc, part, op); break;
        case DType::f64: combine_into<double>(acc, part, op); break;
        case DType::i64: combine_into<std::int64_t>(acc, part, op); break;
        default: VINF_FAIL("the thread transport reduces no ", dtype_name(buf.dtype), " tensors");
      }
    }
    if (!acc.empty()) std::memcpy(h.data(), acc.data(), acc.size());
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
      if (!m.empty()) std::memcpy(h.data(), m.data(), m.size());
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
  static void combine_into(std::vector<char>& acc, const std::vector<char>& part, ReduceOp op) {
    T* a = reinterpret_cast<T*>(acc.data());
    const T* b = reinterpret_cast<const T*>(part.data());
    const std::size_t n = acc.size() / sizeof(T);
    switch (op) {
      case ReduceOp::sum:
        for (std::size_t i = 0; i < n; ++i) a[i] += b[i];
        break;
      case ReduceOp::max:
        for (std::size_t i = 0; i < n; ++i) a[i] = std::max(a[i], b[i]);
        break;
      case ReduceOp::min:
        for (std::size_t i = 0; i < n; ++i) a[i] = std::min(a[i], b[i]);
        break;
    }
  }
  std::shared_ptr<Hub> hub_;
  Staging staging_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_thread_group(int n) {
  VINF_CHECK(n >= 1, "a thread group needs at least one rank");
  auto hub = std::make_shared<Hub>(n);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<ThreadCommunicator>(hub, r));
  return out;
}

}  // namespace vinf::mpi
