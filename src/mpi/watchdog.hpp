// What watches every communicator call from its start to its finish: the watchdog, whose thread
// ends the job when a call outlives the communication timeout, and the fault hook of the tests.
// Internal to the communicators; the settings that callers use (set_comm_timeout,
// check_fault_injection) are declared in communicator.hpp.
#pragma once

#include <cstdint>
#include <string>

namespace vinf::mpi {

// This process's rank in MPI_COMM_WORLD, or -1 outside MPI_Init ... MPI_Finalize.
int world_rank_or_minus_one();

// Starts watching a call; `what` names it in the message should it outlive the timeout ("world
// rank 2: exchange on the clip group (rank 1 of 3, mpi)"). Returns its entry for unwatch_call.
std::uint64_t watch_call(std::string what);
// Stops watching the call (it finished, or failed with an error of its own).
void unwatch_call(std::uint64_t id);

}  // namespace vinf::mpi
