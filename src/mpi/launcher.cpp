#include "mpi/launcher.hpp"

#include <cstdlib>
#include <initializer_list>

namespace vinf::mpi {

namespace {

// The leading positive integer of the first of `names` that has one, or 0.
int first_count(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (v != nullptr && std::atoi(v) > 0) return std::atoi(v);
  }
  return 0;
}

}  // namespace

int launcher_world_size() { return first_count({"SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}); }

int launcher_ranks_per_node() { return first_count({"SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE"}); }

}  // namespace vinf::mpi
