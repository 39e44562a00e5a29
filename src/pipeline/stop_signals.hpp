// The stop signals of a run: what Slurm sends before a time limit (SIGUSR1, with --signal) or a
// preemption (SIGTERM) asks the run to stop after its current step, with a checkpoint.
#pragma once

namespace vinf::pipeline {

// The exit status of a run that stopped on SIGTERM/SIGUSR1 after writing a checkpoint: the job
// script requeues it, and `--resume auto` continues.
inline constexpr int kExitStopped = 75;

// SIGTERM and SIGUSR1 (what Slurm sends before a time limit or a preemption) set a flag that the
// loop checks after every step; SIGXFSZ is ignored so that a full quota is an error message.
// hold_stop_signals, first thing, blocks them in the calling thread, and every thread started
// after it (MPI's, OpenMP's) inherits the block: one that comes while MPI starts (a preemption or
// a time limit's warning right after a start) waits. install_stop_signals starts the one thread
// that takes them (sigwait); the others keep them blocked, so no handler ever interrupts a
// kernel (oneDNN 2.x's JIT GEMM moves the stack pointer into the heap while it runs).
void hold_stop_signals();
void install_stop_signals();
int stop_signal();  // 0, or the signal that arrived
// Seconds since the first stop signal arrived (0 without one): how long stopping took.
double seconds_since_stop_signal();
const char* signal_name(int sig);
// Test hook VINF_FAULT_STEP="rank=R,step=K,signal=TERM|USR1|KILL|NAN": world rank R sends itself
// the signal after step K, or (NAN) is told to spoil its latents. Used by the tests only.
// Returns true for NAN at this rank and step.
bool step_fault(int world_rank, int completed_steps);

}  // namespace vinf::pipeline
