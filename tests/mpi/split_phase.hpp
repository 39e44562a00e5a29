// One check of the split collectives (start_*, progress, finish), run by every rank of a group on
// any transport: the MPI tests at 1-4 ranks and the thread transport in the unit tests.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "mpi/communicator.hpp"

namespace vinf::test {

// Rank r of n: an all-gather with varying counts and the two halo rounds with both neighbours
// are in flight at once; they are finished in the reverse order, and one more exchange is left
// to the destructor. The data, calls and bytes come out as the blocking calls give them.
inline void check_split_phase(int r, mpi::Communicator& comm, ExecContext& ctx) {
  const int n = comm.size();
  const auto wrap = [](float* p, std::int64_t count) { return Tensor::wrap(p, DType::f32, Device::cpu(), {count}); };
  const mpi::CommCounters before = comm.counters();

  // Rank q contributes q + 1 values 10 q + i.
  std::vector<float> mine(static_cast<std::size_t>(r + 1)), all(static_cast<std::size_t>(n * (n + 1) / 2), -1.f);
  std::vector<std::int64_t> counts;
  for (int q = 0; q < n; ++q) counts.push_back(q + 1);
  for (int i = 0; i <= r; ++i) mine[static_cast<std::size_t>(i)] = float(10 * r + i);
  mpi::Pending gather = comm.start_all_gather_v(ctx, wrap(mine.data(), r + 1), wrap(all.data(), n * (n + 1) / 2), counts);

  // Round 2 with the right neighbour on even ranks (left on odd ones), round 3 with the other.
  std::vector<float> to_left{float(100 + r), 1.f}, to_right{float(200 + r), 2.f}, from_left(2, -1.f),
      from_right(2, -1.f);
  std::vector<mpi::Transfer> left, right;
  if (r > 0) left.push_back({r - 1, wrap(to_left.data(), 2), wrap(from_left.data(), 2)});
  if (r < n - 1) right.push_back({r + 1, wrap(to_right.data(), 2), wrap(from_right.data(), 2)});
  const bool even = r % 2 == 0;
  mpi::Pending round2 = comm.start_exchange(ctx, even ? right : left);
  mpi::Pending round3 = comm.start_exchange(ctx, even ? left : right);
  CHECK(gather.active());
  comm.progress(gather);
  comm.progress(round3);
  comm.finish(round3);
  comm.finish(round2);
  comm.finish(gather);
  CHECK_FALSE(gather.active());
  comm.finish(gather);  // a finished one is left alone

  std::vector<float> expect;
  for (int q = 0; q < n; ++q)
    for (int i = 0; i <= q; ++i) expect.push_back(float(10 * q + i));
  CHECK(all == expect);
  if (r > 0) CHECK(from_left == std::vector<float>{float(200 + r - 1), 2.f});
  if (r < n - 1) CHECK(from_right == std::vector<float>{float(100 + r + 1), 1.f});

  // An exchange never finished by hand: leaving its scope waits for it.
  float out = float(r), in = -1.f;
  {
    std::vector<mpi::Transfer> ring;
    if (n > 1) ring.push_back({(r + 1) % n, wrap(&out, 1), Tensor{}});
    if (n > 1) ring.push_back({(r + n - 1) % n, Tensor{}, wrap(&in, 1)});
    if (n == 2) ring = {{1 - r, wrap(&out, 1), wrap(&in, 1)}};
    mpi::Pending dropped = comm.start_exchange(ctx, ring);
  }
  if (n > 1) CHECK(in == float((r + n - 1) % n));

  const mpi::CommCounters& c = comm.counters();
  const auto ag = static_cast<std::size_t>(mpi::CommOp::all_gather), ex = static_cast<std::size_t>(mpi::CommOp::exchange);
  CHECK(c.calls[ag] - before.calls[ag] == 1);
  CHECK(c.bytes[ag] - before.bytes[ag] == 4u * static_cast<std::uint64_t>(n * (n + 1) / 2 - (r + 1)));
  CHECK(c.calls[ex] - before.calls[ex] == 3);
  CHECK(c.bytes[ex] - before.bytes[ex] == 8u * static_cast<std::uint64_t>((r > 0) + (r < n - 1)) + (n > 1 ? 4u : 0u));
  CHECK(c.seconds[ex] >= before.seconds[ex]);
}

}  // namespace vinf::test
