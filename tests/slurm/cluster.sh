#!/usr/bin/env bash
# A private Slurm cluster on this machine for the slurm.* tests: one munged, one slurmctld and one
# slurmd per emulated node (node1..nodeN, all on 127.0.0.1), as root, without systemd or cgroups;
# partition 'debug' (default) is preempted, with requeue, by jobs of partition 'high'.
# Every daemon runs in the foreground under setsid with its PID recorded, so `stop` can end exactly
# what `start` began. Everything lives under DIR (keep it short: munge's socket path is limited).
#
#   cluster.sh start DIR [NODES] [CPUS] [GPUS] [PORT]   GPUS > 0: fake gpu GRES (character devices
#                                                       that are /dev/null); DIR/ctld-started: when
#                                                       slurmctld started (seconds since 1970)
#   cluster.sh env DIR                                  exports for clients (eval it)
#   cluster.sh wait DIR SECONDS JOBID                   until the job (every array task) has left
#                                                       the queue; prints "JOBID STATE EXIT", an
#                                                       array task's as "ARRAYJOBID_TASK STATE EXIT"
#   cluster.sh stop DIR                                 cancel jobs, end the daemons, keep DIR
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { sed -n '2,14p' "$0"; exit 2; }
conf=$dir/slurm.conf
sock=$dir/munge/socket

say() { printf '[cluster] %s\n' "$*" >&2; }
running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

launch() {  # NAME COMMAND...: detached, output to DIR/log/NAME.out, PID to DIR/pid/NAME
  local name=$1
  shift
  setsid "$@" </dev/null >"$dir/log/$name.out" 2>&1 &
  echo $! >"$dir/pid/$name"
}

write_conf() {
  local nodes=$1 cpus=$2 gpus=$3 port=$4 names ports gres=""
  if [ "$nodes" -eq 1 ]; then names=node1 ports=$((port + 1)); else names="node[1-$nodes]" ports="[$((port + 1))-$((port + nodes))]"; fi
  if [ "$gpus" -gt 0 ]; then
    gres=" Gres=gpu:fake:$gpus"
    : >"$dir/gres.conf"
    echo "AutoDetect=off" >>"$dir/gres.conf"
    for n in $(seq 1 "$nodes"); do
      # Character devices, as Slurm takes no other kind (with a plain file it allocates the GPU
      # but sets no CUDA_VISIBLE_DEVICES); each is /dev/null's (1,3), so nothing can use it as a
      # GPU. Where mknod is not allowed, plain files: jobs run, the GPU placement checks fail.
      for g in $(seq 0 $((gpus - 1))); do
        mknod "$dir/dev/node$n-gpu$g" c 1 3 2>/dev/null ||
          { : >"$dir/dev/node$n-gpu$g"; say "mknod failed: node$n-gpu$g is a plain file, Slurm will set no CUDA_VISIBLE_DEVICES"; }
      done
      echo "NodeName=node$n Name=gpu Type=fake File=$dir/dev/node$n-gpu[0-$((gpus - 1))]" >>"$dir/gres.conf"
    done
  fi
  cat >"$conf" <<CONF
ClusterName=vinftest
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also how long a requeued job waits before it may start again (default 120 s)
AuthInfo=socket=$sock,cred_expire=5
StateSaveLocation=$dir/ctld
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdSpoolDir=$dir/spool/%n
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmdLogFile=$dir/log/slurmd-%n.log
TmpFS=$dir/tmp/%n
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
# Look at pending jobs every second (a requeued job becomes eligible on a timer, not an event)
SchedulerParameters=sched_interval=1,bf_interval=1
ReturnToService=2
JobRequeue=0
MailProg=/bin/true
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=600
KillWait=5
Waittime=0
$([ "$gpus" -gt 0 ] && echo GresTypes=gpu)
NodeName=$names NodeHostname=localhost NodeAddr=127.0.0.1 Port=$ports CPUs=$cpus RealMemory=4000$gres State=UNKNOWN
# Preemption as many sites have it: a job in 'high' takes the nodes of the default partition's
# jobs, which get GraceTime seconds (SIGTERM to their tasks at its start), then Slurm requeues them.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=30
PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
CONF
}

start() {
  local nodes=${1:-1} cpus=${2:-4} gpus=${3:-0} port=${4:-6817}
  for p in "$dir"/pid/*; do running "$p" && { say "already running under $dir"; exit 1; }; done
  for c in munged slurmctld slurmd sbatch; do
    command -v "$c" >/dev/null || { say "$c is not installed (scripts/setup installs slurm-wlm and munge)"; exit 1; }
  done
  rm -rf "$dir"
  mkdir -p "$dir"/{ctld,run,log,pid,munge,dev}
  for n in $(seq 1 "$nodes"); do mkdir -p "$dir/spool/node$n" "$dir/tmp/node$n"; done
  chmod 755 "$dir" "$dir/munge"  # munged wants the socket's directory searchable by all
  head -c 1024 /dev/urandom >"$dir/munge/key"
  chmod 400 "$dir/munge/key"
  launch munged munged -F --key-file="$dir/munge/key" --socket="$sock" --pid-file="$dir/munge/pid" \
    --seed-file="$dir/munge/seed" --log-file="$dir/log/munged.log"
  for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
  [ -S "$sock" ] || { cat "$dir/log/munged.out" >&2; say "munged did not start"; exit 1; }
  write_conf "$nodes" "$cpus" "$gpus" "$port"
  export SLURM_CONF=$conf
  # slurmctld checks time limits (and sends --signal warnings) every 30 s from its start: tests
  # that wait for one time their jobs from this.
  date +%s >"$dir/ctld-started"
  launch slurmctld slurmctld -D -c -f "$conf"
  for n in $(seq 1 "$nodes"); do launch "slurmd-node$n" slurmd -D -N "node$n" -f "$conf"; done
  for _ in $(seq 300); do
    [ "$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" -ge "$nodes" ] && { say "up: $nodes node(s) x $cpus CPUs, $gpus fake GPU(s) each"; return 0; }
    for p in "$dir"/pid/*; do
      running "$p" || { tail -n 20 "$dir/log/$(basename "$p").out" >&2; say "$(basename "$p") exited"; stop; exit 1; }
    done
    sleep 0.1
  done
  sinfo -N -o '%N %T %E' >&2 || true
  say "the nodes did not become idle in 30 s"
  stop
  exit 1
}

stop() {
  [ -d "$dir/pid" ] || return 0
  export SLURM_CONF=$conf
  if running "$dir/pid/slurmctld"; then
    # Job steps outlive their slurmd: cancel the jobs first and let them drain.
    local jobs
    jobs=$(squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null || true
      for _ in $(seq 100); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.1; done
    fi
  fi
  local p daemons=()
  for p in "$dir"/pid/slurmd-* "$dir"/pid/slurmctld; do [ -f "$p" ] && daemons+=("$p"); done
  for p in "${daemons[@]}"; do running "$p" && kill -TERM "$(cat "$p")" 2>/dev/null || true; done
  for _ in $(seq 150); do
    local left=0
    for p in "${daemons[@]}"; do running "$p" && left=1; done
    [ $left = 0 ] && break
    sleep 0.1
  done
  for p in "${daemons[@]}"; do running "$p" && kill -KILL "$(cat "$p")" 2>/dev/null || true; done
  if running "$dir/pid/munged"; then  # last: the others talk to it while they stop
    kill -TERM "$(cat "$dir/pid/munged")" 2>/dev/null || true
    for _ in $(seq 50); do running "$dir/pid/munged" || break; sleep 0.1; done
    running "$dir/pid/munged" && kill -KILL "$(cat "$dir/pid/munged")" 2>/dev/null || true
  fi
  rm -f "$dir"/pid/*
}

client_env() {
  echo "export SLURM_CONF=$conf"
}

wait_job() {
  local seconds=$1 job=$2 t=0
  export SLURM_CONF=$conf
  while [ -n "$(squeue -h -j "$job" 2>/dev/null)" ]; do
    sleep 0.2
    t=$((t + 1))
    [ $t -lt $((seconds * 5)) ] || { say "job $job still queued after $seconds s"; squeue -j "$job" >&2 || true; return 1; }
  done
  local line id task state code
  scontrol show job -o "$job" 2>/dev/null | while read -r line; do
    # An array task as Slurm's %A_%a (<array job id>_<task>), as its log and directory are named.
    id=$(sed -n 's/.*\bArrayJobId=\([0-9]*\).*/\1/p' <<<"$line")
    [ -n "$id" ] || id=$(sed -n 's/.*\bJobId=\([0-9]*\).*/\1/p' <<<"$line")
    task=$(sed -n 's/.*\bArrayTaskId=\([0-9]*\).*/\1/p' <<<"$line")
    state=$(sed -n 's/.*\bJobState=\([A-Z_]*\).*/\1/p' <<<"$line")
    code=$(sed -n 's/.*\bExitCode=\([0-9:]*\).*/\1/p' <<<"$line")
    echo "$id${task:+_$task} $state $code"
  done
}

case $cmd in
  start) shift 2; start "$@" ;;
  stop) stop ;;
  env) client_env ;;
  wait) wait_job "$3" "$4" ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
