// A transport whose collectives end when the test says so. Its finish() leaves them running, as
// NCCL's does on a GPU (the compute stream waits, the host does not), so that the communicator's
// side of that design (settling later, the watchdog's watch until then, the transport's
// asynchronous failures) is checked on the CPU.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "mpi/communicator.hpp"

namespace vinf::testing {

// One collective of the manual transport: the test sets `exposed`, then `done` (or `failed`).
struct ManualTransfer {
  std::atomic<bool> done{false}, failed{false};
  std::atomic<double> exposed{0};
  std::atomic<int> waits{0};
};

class ManualRequest final : public mpi::CommRequest {
 public:
  explicit ManualRequest(std::shared_ptr<ManualTransfer> t) : t_(std::move(t)) {}
  double wait(ExecContext&) override {
    ++t_->waits;
    return later;
  }
  std::optional<double> poll() override {
    if (t_->failed) VINF_FAIL("the manual transfer failed");
    if (!t_->done) return std::nullopt;
    return t_->exposed.load();
  }
  bool passed() const override { return t_->done; }

 private:
  std::shared_ptr<ManualTransfer> t_;
};

class ManualCommunicator final : public mpi::Communicator {
 public:
  ManualCommunicator(int rank, int size) : Communicator(rank, size) {}
  const char* backend() const override { return "manual"; }
  // Every collective issued so far, in order.
  std::vector<std::shared_ptr<ManualTransfer>> issued;
  // What the transport's probe answers the watchdog ("" while all is well).
  std::atomic<bool> broken{false};

 protected:
  mpi::AsyncProbe async_probe() override {
    return [this] { return broken ? std::string("the manual transport broke") : std::string(); };
  }
  Request do_all_gather_v(ExecContext&, const Tensor&, const Tensor&, const std::vector<std::int64_t>&) override {
    return next();
  }
  Request do_exchange(ExecContext&, std::span<const mpi::Transfer>) override { return next(); }
  Request do_all_reduce(ExecContext&, const Tensor&, mpi::ReduceOp) override { return next(); }
  Request do_broadcast(ExecContext&, const Tensor&, int) override { return next(); }
  Request do_barrier(ExecContext&) override { return next(); }

 private:
  Request next() {
    issued.push_back(std::make_shared<ManualTransfer>());
    return std::make_unique<ManualRequest>(issued.back());
  }
};

}  // namespace vinf::testing
