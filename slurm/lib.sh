# Shared by the vinf job scripts (vinf.sbatch, multinode.sbatch, sweep.sbatch, jobs.sbatch), which source it;
# not a job script itself. It finds vinf, chooses GPU or CPU mode, loads NCCL profiles, prints what
# a failed job's log needs, runs `vinf generate` under srun with the stop signals forwarded, and
# requeues the job when vinf stopped after a checkpoint (exit status 75).
#
# Environment, all optional (sbatch passes the submitting shell's environment to the job):
#   VINF_HOME          the vinf checkout (default: the directory sbatch was run from)
#   VINF               the vinf binary (default: $VINF_HOME/build/vinf)
#   VINF_DEVICE        cuda | cpu | auto (default: cuda when the batch node has a GPU, else cpu)
#   VINF_NCCL_PROFILE  profiles from slurm/env/ to source, by name or path: "ib", "tcp debug", ...
#   VINF_SRUN_MPI      srun's --mpi plugin (default pmix; Open MPI needs pmix)
#   VINF_CPU_BIND      srun's --cpu-bind for the ranks (default cores: each rank's OpenMP threads
#                      stay on its own cores; empty: leave it to the site's default)
#   VINF_CPU_RANKS     CPU mode's ranks per node: socket (one per socket), numa (one per NUMA
#                      domain) or a number; each rank gets an equal share of the node's cores as
#                      OpenMP threads (OMP_PLACES=cores, OMP_PROC_BIND=close). Unset: socket when
#                      the job asked for no tasks and got no GPU (see vinf_layout)
#   VINF_MAX_REQUEUES  how often a job may requeue itself after a stop signal (default 10)
#   VINF_COMM_TIMEOUT  seconds a collective may wait before vinf ends the job (vinf's --comm-timeout)
#   VINF_OUT           the output directory (default outputs/<job name>-<job id>; give an earlier
#                      job's to continue it from its newest checkpoint)
#   VINF_DATA, VINF_PIPELINE  jobs.sbatch's replicas and pipeline stages (see there)
#   VINF_COMMAND       what vinf_generate runs: generate (the default) or train (train.sbatch)

vinf_log() { echo "[vinf-job $(date '+%F %T')] $*"; }

# A stop signal can reach this shell before vinf runs (a time limit's warning soon after a start,
# a preemption): remember it instead of dying of it (USR1's default action ends the shell, and the
# job with it, unrequeued). vinf_generate then does not start vinf, and the job requeues.
vinf_signals=0
vinf_early_stop=""
# srun's lines about Slurm cancelling the step (a requeue, a preemption), said once by vinf_finish,
# and its "error" for the ranks' status 75, which vinf's own line explains (stopped after a
# checkpoint). When a rank fails, srun's "task N: Exited with exit code X" line stays; its
# step-abort lines that follow are kept out too.
vinf_srun_noise='^srun: got SIGCONT$|^srun: error: [^ ]+ tasks? [0-9,-]+: Exited with exit code 75$|^srun: launch/slurm: _step_signal: Terminating StepId=[0-9.]+$|^srun: Job step aborted: Waiting up to [0-9]+ seconds for job step to finish\.$|^srun: forcing job termination$|^slurmstepd[^:]*: error: \*\*\* STEP [0-9.]+ ON .* CANCELLED AT .* DUE TO (JOB REQUEUE|PREEMPTION) \*\*\*$'
vinf_cancel_cause=""
vinf_jobs_line=""
vinf_remember_stops() {
  trap 'vinf_signals=$((vinf_signals + 1)); vinf_early_stop=${vinf_early_stop:-USR1}' USR1
  trap 'vinf_signals=$((vinf_signals + 1)); vinf_early_stop=${vinf_early_stop:-TERM}' TERM
}
vinf_remember_stops

# Bad input or set-up: say what and what to do, exit 2 (as vinf does for bad input).
vinf_fail() {
  echo "[vinf-job $(date '+%F %T')] error: $*" >&2
  exit 2
}

# vinf_job_start SCRIPT CONFIG: checks the set-up, picks the device, loads the NCCL profiles and
# prints the job's facts. Sets VINF, VINF_DEVICE, VINF_NAME (the job name), OMP_NUM_THREADS,
# vinf_tasks (the ranks vinf runs on) and vinf_srun_opts (what every srun of the job gets; in CPU
# mode with VINF_CPU_RANKS, the layout).
vinf_job_start() {
  local script=$1 config=${2:-}
  [ -n "${SLURM_JOB_ID:-}" ] || vinf_fail "$script runs inside a Slurm job: sbatch $script CONFIG.ini [vinf ${VINF_COMMAND:-generate} options]"
  VINF=${VINF:-$VINF_HOME/build/vinf}
  [ -x "$VINF" ] || vinf_fail "no vinf binary at $VINF: build it (scripts/demo, or cmake --build build) or set VINF=/path/to/vinf"
  [ -n "$config" ] || vinf_fail "no config file: sbatch $script CONFIG.ini [vinf ${VINF_COMMAND:-generate} options]"
  [ -r "$config" ] || vinf_fail "cannot read the config file '$config' (relative paths start at $SLURM_SUBMIT_DIR)"
  VINF_NAME=${SLURM_JOB_NAME:-vinf}
  export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
  # OMP_WAIT_POLICY is left as it is: every CPU kernel of vinf (oneDNN's included) runs on one
  # OpenMP pool, whose spinning workers no longer hold up another library's threads.
  vinf_choose_device
  # --cpu-bind=cores keeps a rank's threads on its own cores (a site without CPU binding says so in
  # one line and runs unbound). GPUs are the job's, per node (--gpus-per-node): every rank sees
  # all of its node's GPUs, and vinf gives local rank r GPU r (see slurm/README.md).
  vinf_layout || exit 2
  local p f
  for p in ${VINF_NCCL_PROFILE:-}; do
    f=$p
    [ -f "$f" ] || f=$VINF_HOME/slurm/env/$p.sh
    [ -f "$f" ] || vinf_fail "VINF_NCCL_PROFILE: no profile '$p' (the names are those of $VINF_HOME/slurm/env/*.sh)"
    # shellcheck disable=SC1090
    . "$f"
    vinf_log "NCCL profile $f"
  done
  vinf_log "job $(vinf_job_label) ($VINF_NAME), requeued ${SLURM_RESTART_COUNT:-0} time(s) so far; $vinf_tasks task(s) on ${SLURM_JOB_NUM_NODES:-1} node(s) $SLURM_JOB_NODELIST, $OMP_NUM_THREADS CPU(s) per task, GPUs per node: ${SLURM_GPUS_ON_NODE:-none}, device $VINF_DEVICE"
  vinf_log "$("$VINF" --version | tr '\n' ';' | sed 's/;$//; s/;/; /g')"
}

# The job as its user reads it: an array task as Slurm's %A_%a (<array job id>_<task>, as its
# output directory and log are named), another job by its id.
vinf_job_label() {
  if [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then echo "${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}_$SLURM_ARRAY_TASK_ID"; else
    echo "$SLURM_JOB_ID"
  fi
}

# vinf_layout: the ranks of the job and the srun options that place them (vinf_tasks,
# vinf_srun_opts), one of three ways, said in the log:
#   - the job asked for tasks (--ntasks, --ntasks-per-node): those, with its --cpus-per-task;
#   - else it was given GPUs (--gpus-per-node, --gres=gpu:N): one rank per GPU of each node, each
#     with an equal share of the node's CPUs, placed block by block (ranks 0.. on the first socket);
#   - else (a CPU partition, or the scripts as they are): CPU mode's layout, VINF_CPU_RANKS
#     (socket unless set) ranks per node with the cores shared out as threads.
# VINF_CPU_RANKS set in CPU mode always takes the third way. Returns 2 with a message on a bad one.
vinf_layout() {
  local nodes=${SLURM_JOB_NUM_NODES:-1} gpus=${SLURM_GPUS_ON_NODE:-0}
  [[ $gpus =~ ^[0-9]+$ ]] || gpus=0
  [ "$gpus" -gt 0 ] || [ "$VINF_DEVICE" != cuda ] || gpus=$vinf_gpus_seen
  vinf_srun_opts=(--kill-on-bad-exit=1)
  if [ -n "${SLURM_NTASKS:-}" ] && ! { [ "$VINF_DEVICE" = cpu ] && [ -n "${VINF_CPU_RANKS:-}" ]; }; then
    vinf_tasks=$SLURM_NTASKS
    # Since Slurm 22.05 srun no longer inherits sbatch's --cpus-per-task: without it each rank
    # would be bound to one CPU while running OMP_NUM_THREADS threads.
    [ -z "${SLURM_CPUS_PER_TASK:-}" ] || vinf_srun_opts+=(--cpus-per-task="$SLURM_CPUS_PER_TASK")
    [ -z "${VINF_CPU_BIND-cores}" ] || vinf_srun_opts+=(--cpu-bind="${VINF_CPU_BIND-cores}")
    return 0
  fi
  if [ "$gpus" -gt 0 ] && ! { [ "$VINF_DEVICE" = cpu ] && [ -n "${VINF_CPU_RANKS:-}" ]; }; then
    local cpus=${SLURM_CPUS_ON_NODE:-$gpus} per
    per=$((cpus / gpus))
    [ "$per" -ge 1 ] || per=1
    export OMP_NUM_THREADS=$per
    vinf_tasks=$((gpus * nodes))
    vinf_srun_opts+=(--nodes="$nodes" --ntasks="$vinf_tasks" --ntasks-per-node="$gpus" --cpus-per-task="$per"
      --distribution=block:block)
    [ -z "${VINF_CPU_BIND-cores}" ] || vinf_srun_opts+=(--cpu-bind="${VINF_CPU_BIND-cores}")
    vinf_log "one rank per GPU: $gpus rank(s) per node x $per CPU(s) of the node's $cpus"
    return 0
  fi
  local policy=${VINF_CPU_RANKS:-socket}
  vinf_cpu_layout "$policy" || return 2
  export OMP_NUM_THREADS=$vinf_cpu_threads OMP_PLACES=${OMP_PLACES:-cores} OMP_PROC_BIND=${OMP_PROC_BIND:-close}
  vinf_tasks=$((vinf_cpu_ranks * nodes))
  vinf_srun_opts+=(--nodes="$nodes" --ntasks="$vinf_tasks" --ntasks-per-node="$vinf_cpu_ranks"
    --cpus-per-task="$vinf_cpu_per_task" --distribution=block:block)
  [ -z "${VINF_CPU_BIND-cores}" ] || vinf_srun_opts+=(--cpu-bind="${VINF_CPU_BIND-cores}")
  vinf_log "CPU layout ($policy): $vinf_cpu_ranks rank(s) per node x $vinf_cpu_threads thread(s) on $vinf_cpu_facts; OMP_PLACES=$OMP_PLACES OMP_PROC_BIND=$OMP_PROC_BIND"
}

# vinf_cpu_layout POLICY: the ranks per node and threads per rank of CPU mode, from the CPUs this
# job may use on this node (its cpuset) as `lscpu -p=CPU,CORE,SOCKET,NODE` describes them (every
# node of the job is taken to be alike). POLICY: socket, numa, or a number of ranks per node. Each
# rank gets cores / ranks cores as OpenMP threads (hyperthreads count as CPUs for srun, not as
# threads). Sets vinf_cpu_ranks, vinf_cpu_threads, vinf_cpu_per_task (CPUs per task for srun) and
# vinf_cpu_facts (one line on what was seen); fails with a message on a bad POLICY. VINF_LSCPU_FILE
# and VINF_CPUS_ALLOWED stand in for lscpu's output and the cpuset (the tests' fake nodes).
vinf_cpu_layout() {
  local policy=$1 allowed topo
  allowed=${VINF_CPUS_ALLOWED:-$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)}
  if [ -n "${VINF_LSCPU_FILE:-}" ]; then topo=$(cat "$VINF_LSCPU_FILE"); else topo=$(lscpu -p=CPU,CORE,SOCKET,NODE 2>/dev/null); fi
  [ -n "$topo" ] || { vinf_log "error: VINF_CPU_RANKS=$policy: lscpu cannot describe this node's CPUs; set --ntasks-per-node and --cpus-per-task yourself and unset VINF_CPU_RANKS" >&2; return 2; }
  # cpus cores sockets numa: counted over the allowed CPUs (cores as socket:core pairs).
  local counts
  counts=$(awk -F, -v allowed="$allowed" '
    BEGIN { n = split(allowed, parts, ","); for (i = 1; i <= n; ++i) { m = split(parts[i], r, "-"); lo = r[1] + 0; hi = (m > 1 ? r[2] : r[1]) + 0; for (c = lo; c <= hi; ++c) ok[c] = 1 } }
    /^#/ { next }
    allowed == "" || ($1 in ok) { cpus++; core[$3 ":" $2] = 1; sock[$3] = 1; numa[$4 == "" ? 0 : $4] = 1 }
    END { nc = 0; for (k in core) nc++; ns = 0; for (k in sock) ns++; nn = 0; for (k in numa) nn++; print cpus + 0, nc, ns, nn }' <<<"$topo")
  local cpus cores sockets numas
  read -r cpus cores sockets numas <<<"$counts"
  [ "${cpus:-0}" -gt 0 ] || { vinf_log "error: VINF_CPU_RANKS=$policy: none of lscpu's CPUs is in this job's set ($allowed)" >&2; return 2; }
  if [ "$policy" = socket ]; then
    vinf_cpu_ranks=$sockets
  elif [ "$policy" = numa ]; then
    vinf_cpu_ranks=$numas
  elif [[ $policy =~ ^[1-9][0-9]{0,5}$ ]]; then
    vinf_cpu_ranks=$policy
  else
    vinf_log "error: VINF_CPU_RANKS must be socket, numa or a number of ranks per node, got '$policy'" >&2
    return 2
  fi
  if [ "$vinf_cpu_ranks" -gt "$cores" ]; then
    vinf_log "error: VINF_CPU_RANKS=$policy asks for $vinf_cpu_ranks ranks per node, but the job has $cores core(s) per node: give at most $cores" >&2
    return 2
  fi
  vinf_cpu_threads=$((cores / vinf_cpu_ranks))
  vinf_cpu_per_task=$((cpus / vinf_cpu_ranks))
  vinf_cpu_facts="$cpus CPU(s), $cores core(s), $sockets socket(s), $numas NUMA domain(s) per node"
  [ $((cores % vinf_cpu_ranks)) -eq 0 ] || vinf_log "note: $cores cores do not split evenly over $vinf_cpu_ranks ranks: $((cores % vinf_cpu_ranks)) stay idle"
  return 0
}

# Sets VINF_DEVICE (unless given) and vinf_gpus_seen, the GPUs nvidia-smi lists on this node.
vinf_choose_device() {
  vinf_gpus_seen=0
  if command -v nvidia-smi >/dev/null 2>&1; then vinf_gpus_seen=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true); fi
  if [ -n "${VINF_DEVICE:-}" ]; then return 0; fi
  if [ "$vinf_gpus_seen" -gt 0 ]; then
    VINF_DEVICE=cuda
  else
    VINF_DEVICE=cpu
    vinf_log "no GPU on $(hostname) (nvidia-smi lists none): running on the CPU"
  fi
}

# vinf_generate OUT CONFIG [vinf generate options]: runs vinf generate on every task of the job,
# resuming from OUT's newest checkpoint when there is one. A stop signal sent to the batch shell
# (#SBATCH --signal=B:USR1@T before the time limit, or scancel --batch --signal=USR1) goes on to
# every rank as SIGUSR1: they finish the step, checkpoint and exit 75. Preemption's SIGTERM (in a
# partition's GraceTime) reaches the ranks directly, with the same effect. (SIGTERM sent to srun
# itself, e.g. scancel --full, or Slurm requeueing the job without a grace time, makes srun kill
# the ranks at once.) A stop signal that came before this sets 75 without starting vinf. Sets
# vinf_rc, and vinf_jobs_line to vinf's count of a job list's jobs ("3 done, 1 failed, 0 to do";
# empty without --jobs).
vinf_generate() {
  local out=$1 config=$2
  shift 2
  local args=("${VINF_COMMAND:-generate}" --config "$config" --out "$out" --resume auto --device "$VINF_DEVICE")
  [ -z "${VINF_COMM_TIMEOUT:-}" ] || args+=(--comm-timeout "$VINF_COMM_TIMEOUT")
  local srun_opts=(--mpi="${VINF_SRUN_MPI:-pmix}" "${vinf_srun_opts[@]}")
  if [ -n "$vinf_early_stop" ]; then
    vinf_log "received SIG$vinf_early_stop before vinf started: not starting it (the job stops as after a checkpoint)"
    vinf_rc=75
    return
  fi
  vinf_log "srun ${srun_opts[*]} $VINF ${args[*]} $*"
  trap 'vinf_signals=$((vinf_signals + 1)); vinf_forward USR1' USR1
  trap 'vinf_signals=$((vinf_signals + 1)); vinf_forward TERM' TERM
  # srun's own lines go to the log as they come and to a copy, read below: with
  # --kill-on-bad-exit, srun's status is often that of a rank it killed (143), not of the rank that
  # failed first.
  # The copy and the log outlive a requeue's or preemption's SIGTERM to every process of the job
  # (a killed tee would lose vinf's last lines); srun's echoes of Slurm's cancelling the step, which
  # vinf_finish then says once in its own words, stay in the copy only.
  local srun_log tee_pid
  srun_log=$(mktemp "${TMPDIR:-/tmp}/vinf-srun.XXXXXX")
  exec {vinf_srun_fd}> >(
    trap '' TERM USR1 INT
    tee -a "$srun_log" | grep --line-buffered -v -E "$vinf_srun_noise" >&2
  )
  tee_pid=$!
  srun "${srun_opts[@]}" "$VINF" "${args[@]}" "$@" 2>&"$vinf_srun_fd" &
  vinf_srun=$!
  local seen
  while :; do
    seen=$vinf_signals
    wait "$vinf_srun"
    vinf_rc=$?
    # A trapped signal ends `wait` early: wait again for srun itself.
    [ "$vinf_signals" != "$seen" ] || break
  done
  vinf_remember_stops
  exec {vinf_srun_fd}>&-
  wait "$tee_pid" 2>/dev/null || true
  vinf_first_failure "$srun_log"
  vinf_cancel_cause=$(grep -m1 -oE 'CANCELLED AT [^ ]+ DUE TO [A-Z ]+[A-Z]' "$srun_log" | sed 's/.* DUE TO //')
  vinf_jobs_line=$(grep -oE 'vinf generate: [0-9]+ done, [0-9]+ failed, [0-9]+ to do' "$srun_log" | tail -1)
  vinf_jobs_line=${vinf_jobs_line#vinf generate: }
  rm -f "$srun_log"
}

# vinf_first_failure SRUN_LOG: when srun ended with a signal's status (128 + N) and its log says
# that a task had exited with a nonzero status first ("task 1: Exited with exit code 2"), that
# status is the job's: a bad input stays 2 however fast srun killed the other ranks.
vinf_first_failure() {
  [ "$vinf_rc" -gt 128 ] || return 0
  local line code
  line=$(grep -m1 -oE 'tasks? [0-9,-]+: Exited with exit code [0-9]+' "$1" 2>/dev/null) || return 0
  code=${line##* }
  [ "$code" -ne 0 ] || return 0
  vinf_log "${line%%:*} exited with status $code first; srun then ended the other ranks (status $vinf_rc)"
  vinf_rc=$code
}

vinf_forward() {
  vinf_log "received SIG$1: passing it to every rank (they stop after this step, with a checkpoint)"
  kill -s USR1 "$vinf_srun" 2>/dev/null || true
}

# vinf_slurm_requeued: true when Slurm has requeued this job itself since it started (preemption
# with PreemptMode=REQUEUE once its GraceTime is over, or at once without one; a node failure): its
# restart count has grown past this start's SLURM_RESTART_COUNT, or it is pending again. Sets
# vinf_job_state (JobState, or "unknown" when scontrol cannot say).
vinf_slurm_requeued() {
  local info restarts
  vinf_job_state=unknown
  info=$(scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null) || return 1
  # An array's first task has the array's job id, for which scontrol lists every task: keep this
  # job's own line.
  info=$(grep -E "(^| )JobId=$SLURM_JOB_ID( |$)" <<<"$info" | head -1)
  [ -n "$info" ] || return 1
  vinf_job_state=$(sed -n 's/.*[[:space:]]JobState=\([A-Z_]*\).*/\1/p' <<<"$info")
  restarts=$(sed -n 's/.*[[:space:]]Restarts=\([0-9]*\).*/\1/p' <<<"$info")
  [ "${restarts:-0}" -le "${SLURM_RESTART_COUNT:-0}" ] || return 0
  case $vinf_job_state in PENDING | REQUEUED | REQUEUE_HOLD | REQUEUE_FED) return 0 ;; esac
  return 1
}

# vinf_newest_checkpoint OUT: the newest checkpoint under OUT (OUT/checkpoints, or a job list's
# OUT/<job>/checkpoints), or nothing when none was written.
vinf_newest_checkpoint() {
  ls -t "$1"/checkpoints/step-*.h5 "$1"/*/checkpoints/step-*.h5 2>/dev/null | head -1
}

# vinf_finish OUT: ends the job script after vinf_generate. 75 (stopped after a checkpoint): the job
# requeues itself and its next start resumes from OUT, unless Slurm has requeued it already; other
# statuses end the job with them. A job list's 2 (some of its jobs failed on bad input, the others
# ran to the end) is reported as such.
vinf_finish() {
  local out=$1 checkpoints=$1/checkpoints
  # A job list: each job has its checkpoints in its own directory.
  [ -z "$vinf_jobs_line" ] || checkpoints="$out/<job>/checkpoints (the interrupted jobs'; $vinf_jobs_line)"
  if [ "$vinf_rc" != 0 ] && vinf_slurm_requeued; then
    local cause newest
    case $vinf_cancel_cause in
      "JOB REQUEUE") cause="scontrol requeue" ;;
      PREEMPTION) cause="a preemption" ;;
      "NODE FAILURE") cause="a node failure" ;;
      *) cause="a preemption, a node failure or scontrol requeue" ;;
    esac
    newest=$(vinf_newest_checkpoint "$out")
    local how="the ranks were ended (status $vinf_rc)"
    [ "$vinf_rc" != 75 ] || how="vinf stopped after a checkpoint"
    vinf_log "Slurm requeued job $(vinf_job_label) itself ($cause, JobState=$vinf_job_state) while vinf ran: $how. Its next start resumes from ${newest:-the beginning (no checkpoint was written)}; the script does not requeue it again"
    exit "$vinf_rc"
  fi
  case $vinf_rc in
    0)
      if [ -n "$vinf_jobs_line" ]; then vinf_log "done: every job of the list ($vinf_jobs_line), outputs in $out/<job>/, recorded in $out/jobs.json"; else
        vinf_log "done: outputs in $out/"
      fi
      exit 0
      ;;
    75)
      local starts=${SLURM_RESTART_COUNT:-0} limit=${VINF_MAX_REQUEUES:-10} said
      if [ "$starts" -ge "$limit" ]; then
        vinf_log "stopped with a checkpoint in $checkpoints, but the job has been requeued $starts times (VINF_MAX_REQUEUES=$limit): not again. To continue, resubmit with VINF_OUT=$out"
        exit 75
      fi
      vinf_log "stopped with a checkpoint in $checkpoints: requeueing job $(vinf_job_label); its next start resumes there"
      if ! said=$(scontrol requeue "$SLURM_JOB_ID" 2>&1); then
        # Slurm may have requeued it in the meantime (a preemption's grace time ending).
        if vinf_slurm_requeued; then
          vinf_log "Slurm has requeued job $(vinf_job_label) itself meanwhile (JobState=$vinf_job_state): its next start resumes from $checkpoints"
          exit 75
        fi
        vinf_log "error: scontrol requeue $SLURM_JOB_ID failed: ${said:-no reason given} (JobState=$vinf_job_state: submitted with --no-requeue, or cancelled); to continue, resubmit with VINF_OUT=$out" >&2
        exit 75
      fi
      # The requeue ends this script; should it return, leave with the documented status. (The
      # braces keep the shell's "Terminated" for the killed sleep out of the log.)
      { sleep 60; } 2>/dev/null
      exit 75
      ;;
    *)
      # A job list's bad input is its failed jobs' own: the others ran to the end.
      if [ "$vinf_rc" = 2 ] && [[ $vinf_jobs_line =~ \ [1-9][0-9]*\ failed ]]; then
        vinf_log "some jobs failed, the others are done ($vinf_jobs_line): the table above names each failed job and why, $out/jobs.json records them, jobs/summarize $out tabulates the finished ones. After fixing the failed lines, resubmit with VINF_OUT=$out: only those run again" >&2
        exit 2
      fi
      local why="exit status $vinf_rc" newest next
      [ "$vinf_rc" -le 128 ] || why="a rank killed by signal $((vinf_rc - 128)) ($(kill -l $((vinf_rc - 128)) 2>/dev/null || echo '?'); KILL: out of memory, a node failure, or srun ending the others)"
      newest=$(vinf_newest_checkpoint "$out")
      if [ -n "$newest" ]; then
        next="The newest checkpoint is $newest: after fixing the cause, resubmit with VINF_OUT=$out to continue from it"
      else
        next="No checkpoint was written (it stopped before the first; --checkpoint.every sets how often): after fixing the cause, resubmit to start again"
      fi
      vinf_log "error: vinf ${VINF_COMMAND:-generate} failed: $why. srun's lines above name the task (= rank) that failed first; vinf's exit statuses: 2 bad input, 3 a collective timed out, 1 other errors. $next" >&2
      exit "$vinf_rc"
      ;;
  esac
}

# vinf_csv_split LINE: the fields of one CSV line into the array vinf_fields ("..." quotes a field
# with commas, "" inside quotes is a quote; spaces around fields are dropped). Fails on an
# unterminated quote.
vinf_csv_split() {
  local line=${1%$'\r'} field="" quoted=0 i c
  vinf_fields=()
  for ((i = 0; i < ${#line}; i++)); do
    c=${line:i:1}
    if [ $quoted = 1 ]; then
      if [ "$c" != '"' ]; then
        field+=$c
      elif [ "${line:i+1:1}" = '"' ]; then
        field+='"'
        i=$((i + 1))
      else
        quoted=0
      fi
    elif [ "$c" = '"' ]; then
      quoted=1
    elif [ "$c" = , ]; then
      vinf_fields+=("$(vinf_trim "$field")")
      field=""
    else
      field+=$c
    fi
  done
  [ $quoted = 0 ] || return 1
  vinf_fields+=("$(vinf_trim "$field")")
}

vinf_trim() {
  local s=$1
  s=${s#"${s%%[![:space:]]*}"}
  printf '%s' "${s%"${s##*[![:space:]]}"}"
}

# vinf_csv_args FILE K: row K (0-based; blank lines and lines starting with # do not count) of a
# sweep table as vinf generate options in the array vinf_args: the header names the options
# (vi.local-frames, sampler.seed, ...; the short names seed, prompt, negative, steps and frames
# stand for sampler.seed, prompt.text, prompt.negative, sampler.steps and video.frames); an empty
# cell leaves that option to the config file. A column `config` names the row's config file
# (vinf_csv_config). Exits 2 naming the file, row or column at fault.
vinf_csv_args() {
  local file=$1 k=$2 line n=-1 header=() row=() lineno=0 found=0 j name
  [ -r "$file" ] || vinf_fail "cannot read the sweep table '$file' (relative paths start at $SLURM_SUBMIT_DIR)"
  while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    case ${line%$'\r'} in '' | '#'*) continue ;; esac
    vinf_csv_split "$line" || vinf_fail "$file:$lineno: a quote is not closed"
    if [ ${#header[@]} -eq 0 ]; then
      header=("${vinf_fields[@]}")
      for name in "${header[@]}"; do
        [[ $name =~ ^[a-z][a-z0-9.-]*$ ]] || vinf_fail "$file:$lineno: column name '$name' is not a vinf generate option (e.g. vi.local-frames, seed, prompt)"
      done
      continue
    fi
    n=$((n + 1))
    if [ "$n" -eq "$k" ]; then
      row=("${vinf_fields[@]}")
      found=$lineno
    fi
  done <"$file"
  [ ${#header[@]} -gt 0 ] || vinf_fail "$file has no header line (the option names, comma-separated)"
  [ "$found" != 0 ] || vinf_fail "$file has $((n + 1)) row(s) (tasks 0-$n); array task $k has none: submit with --array=0-$n"
  [ ${#row[@]} -eq ${#header[@]} ] || vinf_fail "$file:$found: ${#row[@]} field(s), the header has ${#header[@]} (quote fields that hold commas)"
  vinf_args=()
  vinf_csv_config=""
  for j in "${!header[@]}"; do
    [ -n "${row[j]}" ] || continue
    case ${header[j]} in
      config)
        vinf_csv_config=${row[j]}
        continue
        ;;
      seed) name=sampler.seed ;;
      prompt) name=prompt.text ;;
      negative) name=prompt.negative ;;
      steps) name=sampler.steps ;;
      frames) name=video.frames ;;
      *) name=${header[j]} ;;
    esac
    vinf_args+=("--$name" "${row[j]}")
  done
}
