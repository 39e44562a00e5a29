// A group in which one rank never comes: rank 0 of a two-thread group waits in a barrier that
// rank 1 never enters, with a 1 s communication timeout, so that the watchdog ends the process.
// `watchdog_probe SETTING` passes SETTING as the way the user changes the timeout; without an
// argument the timeout is set without one.
//
// `watchdog_probe unsettled`: a barrier of the manual transport that finish() left running (as
// NCCL's on a GPU) and that never ends, with a 1 s timeout; `watchdog_probe async`: one whose
// transport then reports an asynchronous failure, with a 60 s timeout. The watchdog ends both.
// `watchdog_probe ended`: one whose transfer ends at once but is never settled, with a 1 s
// timeout: the watchdog lets it be (the process exits 0 after 3 s).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "mpi/communicator.hpp"
#include "manual_transport.hpp"
#include "ops/runtime.hpp"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "ended") == 0) {
    vinf::mpi::set_comm_timeout(1);
    vinf::testing::ManualCommunicator comm(0, 2);
    comm.set_label("probe group");
    vinf::Runtime rt(vinf::Device::cpu());
    comm.barrier(rt.ctx());
    comm.issued[0]->done = true;
    std::this_thread::sleep_for(std::chrono::seconds(3));
    std::fprintf(stderr, "the watchdog let the ended barrier be\n");
    comm.settle();
    return 0;
  }
  if (argc > 1 && (std::strcmp(argv[1], "unsettled") == 0 || std::strcmp(argv[1], "async") == 0)) {
    const bool async = std::strcmp(argv[1], "async") == 0;
    vinf::mpi::set_comm_timeout(async ? 60 : 1);
    vinf::testing::ManualCommunicator comm(0, 2);
    comm.set_label("probe group");
    vinf::Runtime rt(vinf::Device::cpu());
    comm.barrier(rt.ctx());
    if (async) comm.broken = true;
    std::this_thread::sleep_for(std::chrono::seconds(10));
    std::fprintf(stderr, "the watchdog let the unsettled barrier be\n");
    return 0;
  }
  if (argc > 1)
    vinf::mpi::set_comm_timeout(1, argv[1]);
  else
    vinf::mpi::set_comm_timeout(1);
  auto group = vinf::mpi::make_thread_group(2);
  group[0]->set_label("probe group");
  vinf::Runtime rt(vinf::Device::cpu());
  group[0]->barrier(rt.ctx());
  std::fprintf(stderr, "the barrier returned without rank 1\n");
  return 0;
}
