#!/usr/bin/env bash
# slurm/lib.sh's CPU-mode layout (vinf_cpu_layout) on described nodes, no Slurm needed: the ranks
# per node and threads per rank for socket, numa and a number, on a 2-socket node with
# hyperthreads, a 1-socket node with 4 NUMA domains (an EPYC in NPS4), a job confined to part of a
# node, and this 2-core machine; refusals with a message.
#   test_cpu_layout.sh SOURCE_DIR
set -u
src=$1
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
SLURM_JOB_ID=0
# shellcheck disable=SC1091
. "$src/slurm/lib.sh"

# node FILE SOCKETS NUMA_PER_SOCKET CORES_PER_NUMA THREADS: lscpu -p=CPU,CORE,SOCKET,NODE of such a
# node, hyperthread siblings numbered after all first threads (as Linux does).
node() {
  local file=$1 s=$2 n=$3 c=$4 t=$5 cores cpu=0 k th
  cores=$((s * n * c))
  echo "# CPU,Core,Socket,Node" >"$file"
  for th in $(seq 0 $((t - 1))); do
    for k in $(seq 0 $((cores - 1))); do
      echo "$cpu,$k,$((k / (n * c))),$((k / c))" >>"$file"
      cpu=$((cpu + 1))
    done
  done
}
# expect WHAT POLICY ALLOWED RANKS THREADS PER_TASK
expect() {
  local what=$1 policy=$2 allowed=$3 got
  if ! VINF_CPUS_ALLOWED=$allowed vinf_cpu_layout "$policy" >"$tmp/out" 2>&1; then
    echo "FAIL: $what: refused: $(cat "$tmp/out")"
    fails=$((fails + 1))
    return
  fi
  got="$vinf_cpu_ranks $vinf_cpu_threads $vinf_cpu_per_task"
  if [ "$got" = "$4 $5 $6" ]; then echo "ok: $what: $4 rank(s) x $5 thread(s), $6 CPU(s) per task ($vinf_cpu_facts)"; else
    echo "FAIL: $what: got ranks threads cpus-per-task '$got', expected '$4 $5 $6'"
    fails=$((fails + 1))
  fi
}
# refuse WHAT POLICY ALLOWED PATTERN
refuse() {
  if VINF_CPUS_ALLOWED=$3 vinf_cpu_layout "$2" >"$tmp/out" 2>&1; then
    echo "FAIL: $1: accepted"
    fails=$((fails + 1))
  elif grep -q "$4" "$tmp/out"; then echo "ok: $1 refused: $(sed 's/^\[[^]]*\] //' "$tmp/out")"; else
    echo "FAIL: $1: message '$(cat "$tmp/out")' lacks '$4'"
    fails=$((fails + 1))
  fi
}

node "$tmp/two-socket" 2 1 32 2  # 2 sockets x 32 cores x 2 threads: 128 CPUs
export VINF_LSCPU_FILE=$tmp/two-socket
expect "2-socket node, socket" socket 0-127 2 32 64
expect "2-socket node, numa (one domain per socket)" numa 0-127 2 32 64
expect "2-socket node, 8 ranks" 8 0-127 8 8 16
expect "2-socket node, one rank" 1 0-127 1 64 128
expect "2-socket node, the job given socket 1 only (cores 32-63 and their siblings)" socket 32-63,96-127 1 32 64
refuse "more ranks than cores" 65 0-127 "at most 64"
refuse "a word that is no policy" sockets 0-127 "must be socket, numa or a number"
refuse "zero ranks" 0 0-127 "must be socket, numa or a number"
refuse "a number with a leading zero" 08 0-127 "must be socket, numa or a number"
refuse "a cpuset outside the node" socket 500-501 "none of lscpu's CPUs"

node "$tmp/nps4" 1 4 16 2  # 1 socket, 4 NUMA domains x 16 cores, 2 threads
export VINF_LSCPU_FILE=$tmp/nps4
expect "1-socket NPS4 node, socket" socket 0-127 1 64 128
expect "1-socket NPS4 node, numa" numa 0-127 4 16 32
expect "1-socket NPS4 node, 3 ranks (64 cores: one idle)" 3 0-127 3 21 42

unset VINF_LSCPU_FILE
if lscpu -p=CPU,CORE,SOCKET,NODE >/dev/null 2>&1; then
  VINF_CPUS_ALLOWED= vinf_cpu_layout socket >"$tmp/out" 2>&1 && echo "ok: this machine, socket: $vinf_cpu_ranks rank(s) x $vinf_cpu_threads thread(s) ($vinf_cpu_facts)" ||
    { echo "FAIL: this machine: $(cat "$tmp/out")"; fails=$((fails + 1)); }
fi

[ $fails -eq 0 ] && echo "PASS" || { echo "$fails failure(s)"; exit 1; }
