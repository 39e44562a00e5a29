// What watches every communicator call from its start to its finish: the watchdog, whose thread
// ends the job when a call outlives the communication timeout, and the fault hook of the tests.
// Internal to the communicators; the settings that callers use (set_comm_timeout,
// check_fault_injection) are declared in communicator.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace vinf::mpi {

// This process's rank in MPI_COMM_WORLD, or -1 outside MPI_Init ... MPI_Finalize.
int world_rank_or_minus_one();

// Starts watching a call; `what` names it in the message should it outlive the timeout ("world
// rank 2: exchange on the clip group (rank 1 of 3, mpi)"). Returns its entry for unwatch_call.
// `probe`, when given, is asked every watchdog tick whether the transport failed on its own; a
// non-empty answer ends the job with the call's name and that answer (exit status 3).
std::uint64_t watch_call(std::string what, std::function<std::string()> probe = {});
// Stops watching the call (it finished, or failed with an error of its own).
void unwatch_call(std::uint64_t id);
// From now on the call counts as finished (no timeout) once `ended` says so, though it stays
// watched (its probe asked) until unwatch_call. Asked from the watchdog's thread.
void watch_until(std::uint64_t id, std::function<bool()> ended);
// How many calls are watched now (for the tests).
std::size_t watched_calls();

}  // namespace vinf::mpi
