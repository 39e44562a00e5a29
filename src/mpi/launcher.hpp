// What the launcher (Slurm's srun, mpirun) tells a process through its environment before MPI
// starts: how many ranks the job has and how many of them share a node. For planning a job
// without starting it (vinf plan); a running job asks MPI.
#pragma once

namespace vinf::mpi {

// SLURM_NTASKS (in a Slurm allocation), OMPI_COMM_WORLD_SIZE or PMI_SIZE; 0 when none is set.
int launcher_world_size();
// The first number of SLURM_NTASKS_PER_NODE ("4(x2)", "4,2"), or OMPI_COMM_WORLD_LOCAL_SIZE; 0 when
// none is set.
int launcher_ranks_per_node();

}  // namespace vinf::mpi
