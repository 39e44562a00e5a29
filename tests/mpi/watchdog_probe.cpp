// A group in which one rank never comes: rank 0 of a two-thread group waits in a barrier that
// rank 1 never enters, with a 1 s communication timeout, so that the watchdog ends the process.
// `watchdog_probe SETTING` passes SETTING as the way the user changes the timeout; without an
// argument the timeout is set without one.
#include <cstdio>

#include "mpi/communicator.hpp"
#include "ops/runtime.hpp"

int main(int argc, char** argv) {
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
