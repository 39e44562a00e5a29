// Checks of the all-reduce's max and min and of the started sums (all-reduce, reduce-scatter), run
// by every rank of a group on any transport: the MPI tests at 1-4 ranks and the thread transport in
// the unit tests.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "mpi/communicator.hpp"

namespace vinf::test {

// Rank r of n holds, at element i, a value whose rank order changes from element to element (the
// order rotates by one rank per element, and odd elements are negated), so that the result shows
// each element reduced on its own. Most i64 values lie beyond 2^53, where a trip through double
// would round them.
template <class T>
T reduction_value(int r, int n, int i) {
  const std::int64_t order = (r + i) % n, sign = i % 2 == 0 ? 1 : -1;
  if constexpr (std::is_integral_v<T>)
    return sign * (order * (std::int64_t{1} << 54) + r + 1);
  else
    return static_cast<T>(sign * (order * 100 + r) + 0.25);
}

template <class T>
void check_reduction(int r, mpi::Communicator& comm, ExecContext& ctx, DType dtype, mpi::ReduceOp op) {
  const int n = comm.size(), elements = 5;
  std::vector<T> buf, expect;
  for (int i = 0; i < elements; ++i) {
    buf.push_back(reduction_value<T>(r, n, i));
    T e = reduction_value<T>(0, n, i);
    for (int q = 1; q < n; ++q) {
      const T v = reduction_value<T>(q, n, i);
      e = op == mpi::ReduceOp::max ? std::max(e, v) : std::min(e, v);
    }
    expect.push_back(e);
  }
  comm.all_reduce(ctx, Tensor::wrap(buf.data(), dtype, Device::cpu(), {elements}), op);
  const std::string what = std::string(mpi::reduce_op_name(op)) + " of " + dtype_name(dtype);
  CAPTURE(what);
  for (int i = 0; i < elements; ++i) {  // a max or min is one rank's value, exactly
    CAPTURE(i);
    CHECK(buf[static_cast<std::size_t>(i)] == expect[static_cast<std::size_t>(i)]);
  }
}

inline void check_reductions(int r, mpi::Communicator& comm, ExecContext& ctx) {
  const int n = comm.size();
  const mpi::CommCounters before = comm.counters();
  std::vector<mpi::CommRecord> trace;
  comm.set_trace(&trace);
  for (mpi::ReduceOp op : {mpi::ReduceOp::max, mpi::ReduceOp::min}) {
    check_reduction<float>(r, comm, ctx, DType::f32, op);
    check_reduction<double>(r, comm, ctx, DType::f64, op);
    check_reduction<std::int64_t>(r, comm, ctx, DType::i64, op);
  }
  comm.set_trace(nullptr);

  // Counted as all-reduces, with the buffer's bytes (none on one rank).
  const auto ar = static_cast<std::size_t>(mpi::CommOp::all_reduce);
  const mpi::CommCounters after = comm.counters();
  CHECK(after.calls[ar] - before.calls[ar] == 6);
  CHECK(after.bytes[ar] - before.bytes[ar] == (n > 1 ? 2u * 5u * (4u + 8u + 8u) : 0u));
  // The trace keeps the operation, and replays it (an i64 sum would be refused).
  REQUIRE(trace.size() == 6);
  CHECK(trace[2].dtype == DType::i64);
  CHECK(trace[2].reduce == mpi::ReduceOp::max);
  CHECK(trace[5].reduce == mpi::ReduceOp::min);
  CHECK(mpi::replay_trace(comm, ctx, trace) >= 0);
  CHECK(comm.counters().calls[ar] - after.calls[ar] == 6);

  // A sum stays floating-point only; every rank refuses it before anything is sent.
  std::int64_t ids[2] = {1, 2};
  std::string msg;
  try {
    comm.all_reduce(ctx, Tensor::wrap(ids, DType::i64, Device::cpu(), {2}), mpi::ReduceOp::sum);
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("a contiguous f32 or f64 tensor expected") != std::string::npos);
}

// The started sums: an all-reduce and a reduce-scatter in flight together, with pieces of unequal
// sizes (one empty, on groups of more than one rank). Rank r contributes (r + 1) * (i + 1) to
// element i, small integers whose sums are exact in any order.
template <class T>
void check_started_sums(int r, mpi::Communicator& comm, ExecContext& ctx, DType dtype) {
  const int n = comm.size();
  std::vector<std::int64_t> counts;
  for (int q = 0; q < n; ++q) counts.push_back(q == 1 ? 0 : 3 + q);  // rank 1's piece is empty
  std::int64_t total = 0, first = 0;
  for (int q = 0; q < n; ++q) {
    if (q < r) first += counts[static_cast<std::size_t>(q)];
    total += counts[static_cast<std::size_t>(q)];
  }
  const auto value = [](int q, std::int64_t i) { return static_cast<T>((q + 1) * (i + 1)); };
  const T ranks_sum = static_cast<T>(n * (n + 1) / 2);
  std::vector<T> send, all, piece(static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]), T(-1));
  for (std::int64_t i = 0; i < total; ++i) send.push_back(value(r, i));
  all = send;
  const mpi::CommCounters before = comm.counters();
  mpi::Pending a = comm.start_all_reduce(ctx, Tensor::wrap(all.data(), dtype, Device::cpu(), {total}), mpi::ReduceOp::sum);
  mpi::Pending b = comm.start_reduce_scatter_v(ctx, Tensor::wrap(send.data(), dtype, Device::cpu(), {total}),
                                               Tensor::wrap(piece.data(), dtype, Device::cpu(), {counts[static_cast<std::size_t>(r)]}),
                                               counts);
  comm.finish(b);
  comm.finish(a);
  CAPTURE(dtype_name(dtype));
  for (std::int64_t i = 0; i < total; ++i) CHECK(all[static_cast<std::size_t>(i)] == ranks_sum * static_cast<T>(i + 1));
  for (std::size_t i = 0; i < piece.size(); ++i)
    CHECK(piece[i] == ranks_sum * static_cast<T>(first + static_cast<std::int64_t>(i) + 1));
  const auto rs = static_cast<std::size_t>(mpi::CommOp::reduce_scatter);
  CHECK(comm.counters().calls[rs] - before.calls[rs] == 1);
  CHECK(comm.counters().bytes[rs] - before.bytes[rs] == static_cast<std::uint64_t>(n - 1) * piece.size() * sizeof(T));
}

inline void check_started_sums(int r, mpi::Communicator& comm, ExecContext& ctx) {
  check_started_sums<float>(r, comm, ctx, DType::f32);
  check_started_sums<double>(r, comm, ctx, DType::f64);
  // Replayed from a trace, as the step benchmark does.
  std::vector<mpi::CommRecord> trace;
  comm.set_trace(&trace);
  check_started_sums<float>(r, comm, ctx, DType::f32);
  comm.set_trace(nullptr);
  REQUIRE(trace.size() == 2);
  CHECK(trace[1].op == mpi::CommOp::reduce_scatter);
  CHECK(mpi::replay_trace(comm, ctx, trace) >= 0);
}

}  // namespace vinf::test
