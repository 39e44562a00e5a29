#!/usr/bin/env bash
# The job scripts of slurm/ on a real Slurm: a private cluster of 2 emulated nodes x 4 CPUs with
# 2 fake GPUs each (tests/slurm/cluster.sh: GRES whose device files are /dev/null), started for
# the test and stopped at its end, also on failure. The jobs run exactly as a user submits them,
# from a directory laid out like the checkout (slurm/, jobs/, inputs/, outputs/), on the built-in
# tiny model; they ask for the nodes' GPUs as on a GPU cluster (--gpus-per-node=2), see no real
# one and run on the CPU.
#
#   test_slurm.sh SCENARIO VINF TEST_TOOL SOURCE_DIR
#   multinode     sbatch slurm/multinode.sbatch on 2 nodes x 2 tasks with the tcp and debug NCCL
#                 profiles: outputs complete, the per-node diagnostics and NCCL settings in the log;
#                 every rank sees both GPUs of its node and takes GPU <local rank> (vinf --verbose
#                 names each rank's choice; the script's probe names each task's SLURM_LOCALID)
#   sweep         sbatch --array=0-2 slurm/sweep.sbatch jobs/test-sweep.csv: three output
#                 directories with the rows' settings, jobs/summarize's table; refused tables;
#                 sbatch --array=0-1%1 slurm/extend-chain.sbatch: a video extended by two links of
#                 an image-to-video model, each continuing the last
#   srun          srun -n 2 vinf generate (interactive use); srun --gres=gpu:2 across both nodes;
#                 sbatch slurm/cpu.sbatch on both nodes: CPU mode's layout, one rank per socket
#   requeue       a job stopped mid-run, first as at its time limit (SIGUSR1 to the batch shell),
#                 then as at preemption (SIGTERM to the ranks): it checkpoints, requeues itself
#                 twice and ends with latents bit-identical to an uninterrupted run; then a Wan2.1
#                 pipeline (CFG on 2 ranks) stopped once, requeued, ending on diffusers' latents; a
#                 SkyReels-V2 diffusion-forcing run (exact mode on 2 ranks) preempted inside a window,
#                 requeued, ending on diffusers' latents; a 10,001-frame one preempted and requeued
#   timelimit     a job with --time=1 and --signal=B:USR1@50 that Slurm itself warns: it stops
#                 with a checkpoint, requeues itself, and ends as the uninterrupted run
#   preempt       a job preempted twice by jobs of a higher partition (PreemptMode=REQUEUE): with
#                 GraceTime the ranks checkpoint and the job requeues itself; without, Slurm
#                 requeues it and the script leaves that be; the result is the uninterrupted run's
#   rank-failure  a rank killed mid-run: the job ends FAILED within a minute, the rank named
#   jobs          sbatch slurm/jobs.sbatch jobs/test-jobs.jsonl on 2 nodes x 2 tasks, twice (queued together; the script takes whole nodes, so one runs after the other):
#                 2 replicas x 2 pipeline stages (VINF_PIPELINE) stopped mid-list by SIGUSR1, and 4
#                 replicas (--parallel.data 4) unstopped; the first requeues itself, skips the
#                 finished jobs and resumes the interrupted ones; both end FAILED with exit code 2
#                 (bad-size), the others done and bit-identical to their runs alone
#   refusals      bad submissions end with exit status 2 and a message naming what to fix; the
#                 script's requeue decisions against a stand-in scontrol
#   cpu-partition a cluster with no GPU configured (a CPU partition): vinf.sbatch, sweep.sbatch and
#                 jobs.sbatch submitted as they are, with no resource option, run on the CPU with
#                 one rank per socket; a GPU request is Slurm's refusal; salloc + srun as
#                 slurm/interactive.md shows for a CPU partition
# Exit status 77 (skipped) when not root or Slurm is not installed.
set -u
scenario=$1 vinf=$2 tool=$3 src=$4
cluster=$src/tests/slurm/cluster.sh

if [ "$(id -u)" -ne 0 ] || ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  echo "skipped: the Slurm tests start their own munged/slurmctld/slurmd as root (scripts/setup installs slurm-wlm and munge)"
  exit 77
fi

# Short paths: munge's socket path must stay under 108 bytes.
state=$(mktemp -d /tmp/vinf-slurm.XXXXXX)
work=$(mktemp -d /tmp/vinf-slurm-work.XXXXXX)
cleanup() {
  bash "$cluster" stop "$state" >/dev/null 2>&1
  rm -rf "$state" "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Each scenario its own port, so that a daemon still closing down cannot collide with the next.
case $scenario in
  multinode) port=6910 ;; sweep) port=6920 ;; srun) port=6930 ;;
  requeue) port=6940 ;; rank-failure) port=6950 ;; refusals) port=6960 ;;
  timelimit) port=6970 ;; preempt) port=6980 ;; jobs) port=6990 ;; train) port=6900 ;; cpu-partition) port=6890 ;;
  *) echo "unknown scenario '$scenario'"; exit 2 ;;
esac
gpus=2
[ "$scenario" != cpu-partition ] || gpus=0
bash "$cluster" start "$state" 2 4 "$gpus" "$port" || { echo "FAIL: the test cluster did not start"; exit 1; }
eval "$(bash "$cluster" env "$state")"
# Open MPI as root, over loopback TCP: the emulated nodes share one host name, so shared-memory
# segment names would collide across them.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,tcp \
  OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_rmaps_base_oversubscribe=1
export VINF=$vinf VINF_HOME=$src OMP_NUM_THREADS=1

cd "$work" || exit 1
for d in slurm jobs inputs; do ln -s "$src/$d" "$d"; done
mkdir outputs
# The demo's model and settings, made small (32 frames, 2 steps) unless a scenario says otherwise.
small=(--video.frames 32 --sampler.steps 2)
# What every job asks for on these nodes (the scripts' defaults are for 8-GPU nodes).
node=(--ntasks-per-node=2 --gpus-per-node=2 --cpus-per-task=1)

fails=0
ok() { echo "ok: $*"; }
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
# check DESCRIPTION COMMAND...: ok when the command succeeds.
check() {
  local what=$1
  shift
  if "$@" >/dev/null 2>&1; then ok "$what"; else fail "$what"; fi
}
# finished JOBID STATE [SECONDS]: waits for the job and checks its final state.
finished() {
  local got
  got=$(bash "$cluster" wait "$state" "${3:-180}" "$1") || { fail "job $1 did not end"; return 1; }
  if [ "$(awk '{print $2}' <<<"$got" | sort -u)" = "$2" ]; then ok "job $1: $(tr '\n' ' ' <<<"$got")"; else
    fail "job $1 ended as '$got', expected $2"
    return 1
  fi
}
show_log() { echo "---- $1"; cat "$1" 2>/dev/null; echo "----"; }
# same_latents DIR: DIR/latents.h5 equals outputs/straight/latents.h5 (the uninterrupted run on
# the same 2 ranks) bit for bit, as resuming on the same ranks promises.
same_latents() {
  local cmp
  if cmp=$("$tool" h5-compare "$1/latents.h5" outputs/straight/latents.h5 0 2>&1); then ok "latents bit-identical to the uninterrupted run ($cmp)"; else
    fail "latents differ from the uninterrupted run: $cmp"
  fi
}
# srun_options LOG: the srun line of the run has sbatch's --cpus-per-task and the CPU binding.
srun_options() {
  check "srun gets sbatch's --cpus-per-task (not inherited since Slurm 22.05) and --cpu-bind=cores" \
    grep -q -- 'srun --mpi=pmix --kill-on-bad-exit=1 --cpus-per-task=1 --cpu-bind=cores ' "$1"
}
# placement LOG NODES: vinf's --verbose line for each rank r of NODES x 2: its node's 2 GPUs
# visible, local rank r % 2, and that GPU's turn (the index it takes: turn mod the GPUs seen).
placement() {
  local r
  for r in $(seq 0 $((2 * $2 - 1))); do
    check "rank $r sees GPUs 0,1 and takes GPU $((r % 2)) (its local rank)" \
      grep -q "rank $r on .*: local rank $((r % 2)) of 2, CUDA_VISIBLE_DEVICES=0,1 (GPU turn $((r % 2)) of the 2 local rank(s) given these GPUs): cpu" "$1"
  done
}
# ctld_phase SECONDS: waits until SECONDS (mod 30) past slurmctld's start, where its 30-second
# time-limit checks are at 0; prints nothing.
ctld_phase() {
  local started now
  started=$(cat "$state/ctld-started")
  now=$(date +%s)
  sleep $(((($1 - (now - started)) % 30 + 30) % 30))
}
# straight STEPS...: the uninterrupted run on 2 ranks into outputs/straight.
straight() {
  srun -n 2 --mpi=pmix --kill-on-bad-exit=1 "$vinf" generate --config inputs/demo.ini "$@" --out outputs/straight -q >/dev/null 2>&1
  check "the uninterrupted run" test -f outputs/straight/latents.h5
}
# The jobs that Slurm stops must still be running when it does, however fast this machine is at
# the moment (its speed varies several-fold with what else runs): their steps are paced to last at
# least this long (a test hook of vinf generate).
pace=(VINF_TEST_STEP_SECONDS=1)
# timeline LOG: the job's starts, stops and requeues, for the test's output.
timeline() {
  grep -E 'requeued [0-9]+ time|received SIG|requeueing|Slurm has requeued|Slurm requeued|done:' "$1" | sed 's/;.*//; s/^/  /'
}
outputs_complete() {  # DIR RANKS
  [ -f "$1/latents.h5" ] && [ -f "$1/video.mp4" ] && [ -f "$1/contact.png" ] &&
    [ "$(jq -r '.status + " " + (.config.parallel.world | tostring)' "$1/run.json")" = "complete $2" ]
}

case $scenario in
multinode)
  for f in slurm/env/*.sh; do check "$f parses" bash -n "$f"; done
  # As a user on a GPU partition submits it: the GPUs asked for, the ranks laid out by the script
  # (one per GPU, the node's CPUs shared out).
  j=$(VINF_NCCL_PROFILE="tcp debug" sbatch --parsable --job-name=mn --nodes=2 --gpus-per-node=2 \
    slurm/multinode.sbatch inputs/demo.ini "${small[@]}" --verbose)
  finished "$j" COMPLETED || show_log "outputs/mn-$j.log"
  check "outputs/mn-$j/: latents.h5, video.mp4, contact.png, run.json of 4 ranks" outputs_complete "outputs/mn-$j" 4
  log=outputs/mn-$j.log
  check "the log has both nodes' versions" test "$(grep -c '^\[node [01] .*NCCL: ' "$log")" -eq 2
  check "the log has the nodes' interfaces" grep -q '^\[node 1 .*interfaces: ' "$log"
  check "the log says why it runs on the CPU" grep -q 'no GPU on .*running on the CPU' "$log"
  check "the ranks spread over node1 and node2" grep -q '4 task(s) on 2 node(s) node\[1-2\]' "$log"
  check "the log shows the profiles' NCCL settings" grep -q 'NCCL settings: .*NCCL_DEBUG=INFO .*NCCL_IB_DISABLE=1 ' "$log"
  check "debug.sh's collective timeout reached vinf" grep -q -- '--comm-timeout 120' "$log"
  check "one rank per GPU, the node's 4 CPUs shared out" grep -q 'one rank per GPU: 2 rank(s) per node x 2 CPU(s) of the node.s 4' "$log"
  check "srun places them so, bound to their cores" \
    grep -q -- 'srun --mpi=pmix --kill-on-bad-exit=1 --nodes=2 --ntasks=4 --ntasks-per-node=2 --cpus-per-task=2 --distribution=block:block --cpu-bind=cores ' "$log"
  # GPUs per node: the probe shows what Slurm gave each task, vinf's lines what each rank took.
  for r in 0 1 2 3; do
    check "task $r on node $((r / 2)) as local rank $((r % 2)) sees both GPUs" \
      grep -q "^\[task $r node $((r / 2)) local $((r % 2))\] CUDA_VISIBLE_DEVICES=0,1;" "$log"
  done
  placement "$log" 2
  check "the log says the nodes' GPUs" grep -q 'GPUs per node: 2, device cpu' "$log"
  [ $fails -eq 0 ] || show_log "$log"
  ;;

sweep)
  j=$(sbatch --parsable --array=0-2 "${node[@]}" slurm/sweep.sbatch jobs/test-sweep.csv)
  finished "$j" COMPLETED || for f in outputs/sweep-"$j"_*.log; do show_log "$f"; done
  for k in 0 1 2; do
    check "outputs/sweep-${j}_$k/ complete" outputs_complete "outputs/sweep-${j}_$k" 2
  done
  # Row k's settings reached task k (the table: local-frames 2/4/4, seeds 1/2/3, three prompts).
  check "task 1 ran row 1" test "$(jq -r '[.config.vi["local-frames"], .config.sampler.seed, .config.vi["local-phase-t"]] | map(tostring) | join(",")' "outputs/sweep-${j}_1/run.json")" = "4,2,600"
  check "task 2's prompt kept its quotes and comma" test "$(jq -r '.config.prompt.text[0]' "outputs/sweep-${j}_2/run.json")" = 'a "quoted" word, and a comma'
  table=$(jobs/summarize outputs/sweep-"${j}"_*)
  echo "$table"
  check "the summary has a header, a rule and 3 rows" test "$(grep -c '^|' <<<"$table")" -eq 5
  check "the summary's columns include the swept settings" grep -q 'sampler.seed | vi.global-frames | vi.local-frames | vi.local-phase-t' <<<"$table"
  check "the summary has task 1's row" grep -q "^| sweep-${j}_1 | complete | 2 | 16 | 2 | a lighthouse in a storm | 2 | 8 | 4 | 600 |" <<<"$table"
  check "the CSV summary has 4 lines" test "$(jobs/summarize --csv outputs/sweep-"${j}"_* | wc -l)" -eq 4
  srun_options "outputs/sweep-${j}_1.log"
  check "the log names task 1 as its directory does, ${j}_1" grep -q "job ${j}_1 (sweep), requeued 0 time" "outputs/sweep-${j}_1.log"
  # A chain of two links (slurm/extend-chain.sbatch, one at a time with %1): link 1 continues link
  # 0's video, which continues first.mp4 (9 frames): 9 + 4 + 4 frames, a seam at 9 and one at 13.
  ffmpeg -v error -f lavfi -i testsrc=size=48x32:rate=8 -frames:v 9 -pix_fmt yuv420p first.mp4
  printf '%s\n' "model = $src/tests/fixtures/wan-i2v-tiny" "[prompt]" "text = the test card moves on" \
    "max-length = 24" "[video]" "frames = 5" "[sampler]" "steps = 2" "[vi]" "mode = exact" > chain.ini
  j=$(sbatch --parsable --array=0-1%1 "${node[@]}" slurm/extend-chain.sbatch chain.ini first.mp4)
  finished "$j" COMPLETED || for f in outputs/chain-"$j"_*.log; do show_log "$f"; done
  check "link 0 joined 9 + 4 frames, the seam at 9" test "$(jq -r '"\(.frames) \(.seam_frame)"' "outputs/chain-${j}_0/extend.json")" = "13 9"
  check "link 1 continued link 0: 17 frames, the seam at 13" test "$(jq -r '"\(.input) \(.frames) \(.seam_frame)"' "outputs/chain-${j}_1/extend.json")" = "outputs/chain-${j}_0/video.mp4 17 13"
  check "link 1's log names what it continues" grep -q "link 1 of the chain: continuing outputs/chain-${j}_0/video.mp4" "outputs/chain-${j}_1.log"
  ;;

srun)
  out=$(srun -n 2 --mpi=pmix --kill-on-bad-exit=1 "$vinf" generate --config inputs/demo.ini "${small[@]}" --out outputs/interactive 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && grep -q 'outputs in outputs/interactive/' <<<"$out"; then ok "srun -n 2 vinf generate"; else
    fail "srun -n 2 vinf generate exited $rc"
    echo "$out" | tail -20
  fi
  check "outputs/interactive/ complete, 2 ranks" outputs_complete outputs/interactive 2
  # An srun across both nodes, as after salloc -N 2, with the GPUs asked for as GRES (the other
  # way to have every task see its node's GPUs).
  # --kill-on-bad-exit: a rank that dies ends the others at once (a failure, not a hang to the timeout).
  srun -N 2 --ntasks-per-node=2 --gres=gpu:2 --mpi=pmix --kill-on-bad-exit=1 "$vinf" generate --config inputs/demo.ini "${small[@]}" \
    --out outputs/two-nodes --verbose >two-nodes.log 2>&1
  check "srun -N 2 --ntasks-per-node=2 --gres=gpu:2 vinf generate" outputs_complete outputs/two-nodes 4
  # salloc + srun as slurm/interactive.md's one-node form (its GPUs and tasks sized for these nodes).
  salloc --nodes=1 --ntasks-per-node=2 --gpus-per-node=2 --cpus-per-task=1 --time=00:05:00 bash -c \
    "srun --mpi=pmix --kill-on-bad-exit=1 --cpus-per-task=1 --cpu-bind=cores $vinf generate --config inputs/demo.ini \
     ${small[*]} --out outputs/salloc" >salloc.log 2>&1
  check "salloc --gpus-per-node=2 + srun vinf generate (interactive.md)" outputs_complete outputs/salloc 2
  [ $fails -eq 0 ] || show_log salloc.log
  placement two-nodes.log 2
  [ $fails -eq 0 ] || show_log two-nodes.log
  # CPU mode: cpu.sbatch on both (whole) nodes lays out one rank per socket with the socket's
  # cores as threads, from what lscpu says of the nodes (this machine's CPUs).
  cores=$(lscpu -p=CORE,SOCKET | grep -v '^#' | sort -u | wc -l)
  sockets=$(lscpu -p=SOCKET | grep -v '^#' | sort -u | wc -l)
  j=$(sbatch --parsable --job-name=cpu --nodes=2 slurm/cpu.sbatch inputs/demo.ini "${small[@]}")
  finished "$j" COMPLETED || show_log "outputs/cpu-$j.log"
  log=outputs/cpu-$j.log
  check "cpu.sbatch: outputs complete, $sockets rank(s) per node on 2 nodes" outputs_complete "outputs/cpu-$j" $((2 * sockets))
  check "cpu.sbatch logs its layout" grep -q "CPU layout (socket): $sockets rank(s) per node x $((cores / sockets)) thread(s) on .*OMP_PLACES=cores OMP_PROC_BIND=close" "$log"
  check "cpu.sbatch's srun lays the ranks out per node, bound to their cores" \
    grep -q -- "srun --mpi=pmix --kill-on-bad-exit=1 --nodes=2 --ntasks=$((2 * sockets)) --ntasks-per-node=$sockets --cpus-per-task=[0-9]* --distribution=block:block --cpu-bind=cores " "$log"
  check "vinf ran with the socket's cores as threads" test "$(jq '.config.parallel.threads' "outputs/cpu-$j/run.json")" = $((cores / sockets))
  [ $fails -eq 0 ] || show_log "$log"
  ;;

requeue)
  # The uninterrupted run, then the same run stopped twice.
  steps=(--video.frames 32 --sampler.steps 12 --checkpoint.every 1)
  straight "${steps[@]}"
  j=$(env "${pace[@]}" sbatch --parsable --job-name=rq "${node[@]}" slurm/vinf.sbatch inputs/demo.ini "${steps[@]}")
  out=outputs/rq-$j log=outputs/rq-$j.log
  # stop_at STEP HOW: once checkpoint STEP exists, stop the job as HOW does.
  stop_at() {
    local t
    for t in $(seq 600); do
      [ -e "$out/checkpoints/step-$(printf %06d "$1").h5" ] && { "${@:2}"; return 0; }
      sleep 0.1
    done
    fail "checkpoint $1 did not appear"
  }
  stop_at 2 scancel --batch --signal=USR1 "$j"                    # as --signal=B:USR1@120
  for t in $(seq 600); do grep -q 'requeued 1 time' "$log" 2>/dev/null && break; sleep 0.1; done
  stop_at 6 scancel --signal=TERM "$j"                            # as preemption
  for t in $(seq 600); do grep -q 'requeued 2 time' "$log" 2>/dev/null && break; sleep 0.1; done
  stop_at 8 scontrol requeue "$j"                                 # an administrator's requeue
  finished "$j" COMPLETED || show_log "$log"
  check "the batch shell passed SIGUSR1 on" grep -q 'received SIGUSR1: passing it to every rank' "$log"
  check "vinf stopped on SIGUSR1 with a checkpoint" grep -q 'received SIGUSR1: stopped after step' "$log"
  check "vinf stopped on SIGTERM with a checkpoint" grep -q 'received SIGTERM: stopped after step' "$log"
  check "vinf says how long stopping took" test "$(grep -c 'stopped after step [0-9]* of 12, checkpoint .*, [0-9.]* s after the signal' "$log")" -eq 3
  check "the job requeued itself twice" test "$(grep -c 'requeueing job' "$log")" -eq 2
  check "the third start resumed" grep -q 'requeued 2 time(s) so far' "$log"
  check "scontrol requeue: vinf's own line says where it stopped" test "$(grep -c 'received SIGTERM: stopped after step' "$log")" -eq 2
  check "scontrol requeue: the script says what happened, once" \
    test "$(grep -c "Slurm requeued job $j itself (scontrol requeue, JobState=[A-Z]*) while vinf ran: vinf stopped after a checkpoint. Its next start resumes from $out/checkpoints/step-" "$log")" -eq 1
  check "no stray lines from srun or the shell" test "$(grep -cE 'got SIGCONT|^Terminated|Job step aborted|Exited with exit code 75' "$log")" -eq 0
  check "the fourth start resumed" grep -q 'requeued 3 time(s) so far' "$log"
  check "run.json says where it resumed" test "$(jq -r '.resumed_from != null' "$out/run.json")" = true
  same_latents "$out"
  srun_options "$log"
  grep -o 'stopped after step .* after the signal' "$log"
  [ $fails -eq 0 ] || show_log "$log"
  # A Wan2.1 pipeline through the same script: 2 tasks, one guidance branch each (cfg = 2 in its
  # INI), from diffusers' initial latents; stopped as at its time limit after step 2, requeued, and
  # ending on diffusers' final latents.
  wan=$src/tests/fixtures/wan-tiny
  printf '%s\n' "model = $wan" "latents-init = $wan/ref_pipeline.safetensors" "[prompt]" \
    "text = A beagle swims in the ocean with coral reefs." "negative = blurry, low quality" "max-length = 24" \
    "[video]" "frames = 9" "height = 32" "width = 32" "[sampler]" "steps = 4" "guidance = 5" "[parallel]" "cfg = 2" > wan.ini
  j=$(env "${pace[@]}" sbatch --parsable --job-name=wan "${node[@]}" slurm/vinf.sbatch wan.ini --checkpoint.every 1)
  out=outputs/wan-$j log=outputs/wan-$j.log
  stop_at 2 scancel --batch --signal=USR1 "$j"
  finished "$j" COMPLETED || show_log "$log"
  check "Wan: vinf stopped on SIGUSR1 with a checkpoint" grep -q 'received SIGUSR1: stopped after step' "$log"
  check "Wan: the job requeued itself and resumed" grep -q 'requeued 1 time(s) so far' "$log"
  check "Wan: outputs complete, 2 ranks" outputs_complete "$out" 2
  check "Wan: the final latents are diffusers' WanPipeline's" "$tool" h5-vs-latents "$out/latents.h5" "$wan/ref_pipeline.safetensors" latents 1e-4
  [ $fails -eq 0 ] || show_log "$log"
  # SkyReels-V2's diffusion forcing through the same script, each window's frames over the 2 tasks
  # (exact mode): preempted inside its second window (SIGTERM to the ranks after row 7 of 11), it
  # checkpoints the window and every frame's solver, requeues itself, decodes the first window's
  # frames again from latents.h5.partial and ends on diffusers' final latents.
  df=$src/tests/fixtures/skyreels-df-tiny
  printf '%s\n' "model = $df" "latents-init = $df/ref_async.safetensors" "[prompt]" \
    "text = A red fox trots through fresh snow at dawn." "negative = dark, noisy, static" "max-length = 24" \
    "[video]" "frames = 33" "height = 32" "width = 48" "[sampler]" "steps = 4" "guidance = 6" "[vi]" "mode = exact" \
    "[df]" "base-frames = 21" "overlap-history = 9" "ar-step = 1" "causal-block-size = 2" "addnoise-condition = 20" > df.ini
  j=$(env "${pace[@]}" sbatch --parsable --job-name=df "${node[@]}" slurm/vinf.sbatch df.ini --checkpoint.every 1)
  out=outputs/df-$j log=outputs/df-$j.log
  stop_at 7 scancel --signal=TERM "$j"
  finished "$j" COMPLETED || show_log "$log"
  check "DF: vinf stopped on SIGTERM after a row, with a checkpoint" grep -q 'received SIGTERM: stopped after row [0-9]* of 11' "$log"
  check "DF: the job requeued itself and resumed inside the second window" grep -q 'after row [0-9]* of 11 (window 2), 6 latent frames final' "$log"
  check "DF: outputs complete, 2 ranks" outputs_complete "$out" 2
  check "DF: the final latents are diffusers' SkyReelsV2DiffusionForcingPipeline's" "$tool" h5-vs-ref "$out/latents.h5" "$df/ref_async.safetensors" latents 1e-4 0
  [ $fails -eq 0 ] || show_log "$log"
  # A 10,001-frame diffusion-forcing video (125 windows, 250 rows; random tiny weights, 32 x 32,
  # each window over the 2 tasks), preempted after row 100 or so: it requeues itself, continues
  # from its row with the windows before it read back, and ends with every frame.
  "$vinf" make-model --preset skyreels-df-tiny --layout pipeline --out dfm > /dev/null 2>&1
  printf '%s\n' "model = $PWD/dfm" "[prompt]" "text = a fox trots through fresh snow" "[video]" "frames = 10001" \
    "height = 32" "width = 32" "[sampler]" "steps = 2" "[vi]" "mode = exact" "[df]" "base-frames = 97" \
    "overlap-history = 17" > long.ini
  j=$(sbatch --parsable --job-name=long "${node[@]}" slurm/vinf.sbatch long.ini --checkpoint.every 50)
  out=outputs/long-$j log=outputs/long-$j.log
  stop_at 100 scancel --signal=TERM "$j"
  finished "$j" COMPLETED 300 || show_log "$log"
  check "long DF: stopped after a row with a checkpoint" grep -q 'received SIGTERM: stopped after row [0-9]* of 250' "$log"
  check "long DF: requeued and resumed past the first windows" grep -q 'after row [0-9]* of 250 (window [0-9]*), [0-9]* latent frames final' "$log"
  check "long DF: outputs complete, 2 ranks" outputs_complete "$out" 2
  check "long DF: every frame in latents.h5" "$vinf" inspect "$out/latents.h5"
  check "long DF: 2,501 latent frames" grep -q '"latent-frames": 2501' "$out/run.json"
  grep -oE 'stopped after row [0-9]+ of 250|after row [0-9]+ of 250 \(window [0-9]+\), [0-9]+ latent frames final' "$log"
  [ $fails -eq 0 ] || show_log "$log"
  ;;

timelimit)
  # A real time limit: --time=1 (Slurm's least) and --signal=B:USR1@50. Slurm sends the warning
  # at its first 30-second time-limit check at or past 50 s before the end (here: the first check
  # after the start), so a job started 20 s past a check hears it ~10 s in. The test sends nothing.
  # The run takes at least 24 s (paced steps): ~10 s before the warning, the rest in the next
  # start (or, on a slow machine, the next two). The uninterrupted run goes on while the test waits
  # for the moment to submit.
  steps=(--video.frames 32 --sampler.steps 24 --checkpoint.every 4)
  straight "${steps[@]}" &
  straight_pid=$!
  ctld_phase 20
  SECONDS=0
  j=$(env "${pace[@]}" sbatch --parsable --job-name=tl --time=1 --signal=B:USR1@50 "${node[@]}" slurm/vinf.sbatch inputs/demo.ini "${steps[@]}")
  out=outputs/tl-$j log=outputs/tl-$j.log
  wait $straight_pid
  finished "$j" COMPLETED 150 || show_log "$log"
  echo "the job took $SECONDS s:"
  timeline "$log"
  check "its time limit was 1 minute" grep -q 'TimeLimit=00:01:00' <<<"$(scontrol show job "$j")"
  check "Slurm's warning reached the batch shell" grep -q 'received SIGUSR1: passing it to every rank' "$log"
  check "vinf stopped on it with a checkpoint" grep -q 'received SIGUSR1: stopped after step' "$log"
  check "the job requeued itself" grep -q 'requeueing job' "$log"
  check "a later start resumed" grep -q 'requeued 1 time(s) so far' "$log"
  check "outputs complete" outputs_complete "$out" 2
  same_latents "$out"
  grep -o 'stopped after step .* after the signal' "$log"
  [ $fails -eq 0 ] || show_log "$log"
  ;;

preempt)
  # Real preemption: the default partition's jobs (PriorityTier 1, PreemptMode=REQUEUE) yield to
  # a job of 'high' that needs both nodes. First with GraceTime=30: the ranks get SIGTERM,
  # checkpoint, and the script requeues the job before the grace ends. Then with GraceTime=0:
  # Slurm requeues the job at once (srun kills the ranks; the run continues from the last
  # checkpoint), and the script must not requeue it again nor report an error.
  steps=(--video.frames 32 --sampler.steps 20 --checkpoint.every 1)
  straight "${steps[@]}"
  SECONDS=0
  j=$(env "${pace[@]}" sbatch --parsable --job-name=pre --nodes=1 "${node[@]}" slurm/vinf.sbatch inputs/demo.ini "${steps[@]}")
  out=outputs/pre-$j log=outputs/pre-$j.log
  # preempt_at STEP: once checkpoint STEP exists, a 'high' job that needs both nodes.
  preempt_at() {
    local t
    for t in $(seq 900); do
      [ -e "$out/checkpoints/step-$(printf %06d "$1").h5" ] && break
      sleep 0.1
    done
    sbatch --parsable -p high -N 2 --exclusive --job-name=high --output=/dev/null --wrap 'sleep 2'
  }
  h1=$(preempt_at 2)
  for _ in $(seq 900); do grep -q 'requeued 1 time' "$log" 2>/dev/null && break; sleep 0.1; done
  scontrol update PartitionName=debug GraceTime=0
  stop1=$(sed -n 's/.*: stopped after step \([0-9]*\) of.*/\1/p' "$log" | head -1)
  h2=$(preempt_at $((${stop1:-4} + 2)))
  finished "$j" COMPLETED 150 || show_log "$log"
  echo "the job took $SECONDS s:"
  timeline "$log"
  finished "$h1" COMPLETED
  finished "$h2" COMPLETED
  check "Slurm requeued it itself once (the preemption without a grace time)" \
    test "$(grep -c "preempted JobId=$j has been requeued" "$state/log/slurmctld.log")" -eq 1
  check "with a grace time the ranks stopped on SIGTERM with a checkpoint" grep -q 'received SIGTERM: stopped after step' "$log"
  check "and the job requeued itself once" test "$(grep -c 'requeueing job' "$log")" -eq 1
  check "without one Slurm requeued it, and the script left that be" grep -q "Slurm requeued job $j itself (a preemption" "$log"
  check "no error from the script" test "$(grep -c 'vinf-job .*error' "$log")" -eq 0
  check "no failed scontrol requeue" test "$(grep -c "Requeue of JobId=$j returned an error" "$state/log/slurmctld.log")" -eq 0
  check "the third start resumed" grep -q 'requeued 2 time(s) so far' "$log"
  check "outputs complete" outputs_complete "$out" 2
  same_latents "$out"
  grep -o 'stopped after step .* after the signal' "$log"
  [ $fails -eq 0 ] || show_log "$log"
  ;;

rank-failure)
  SECONDS=0
  j=$(VINF_FAULT_STEP=rank=3,step=1,signal=KILL sbatch --parsable --job-name=die --nodes=2 "${node[@]}" \
    slurm/multinode.sbatch inputs/demo.ini --sampler.steps 6)
  finished "$j" FAILED 120
  check "ended within a minute ($SECONDS s)" test $SECONDS -lt 60
  log=outputs/die-$j.log
  check "the log names the killed rank (task 3)" grep -q 'task 3: Killed' "$log"
  check "the script says what happened" grep -q 'vinf generate failed: a rank killed by signal 9' "$log"
  check "and that no checkpoint was written (none to point at)" grep -q 'No checkpoint was written (it stopped before the first' "$log"
  check "the job was not requeued" test "$(grep -c 'requeueing job' "$log")" -eq 0
  [ $fails -eq 0 ] || show_log "$log"
  ;;

jobs)
  # One list, two layouts submitted together on the 4 tasks of 2 nodes (whole nodes: one after the other) (a unit of one rank either way):
  # jl: 2 replicas (the default: as many as the tasks allow) x 2 stages (VINF_PIPELINE=2), each
  # replica on one node, steps paced and checkpointed, stopped once a checkpoint exists; jd: 4
  # replicas of one rank, --parallel.data among the options. Meanwhile each good job runs alone on
  # one rank (a pipeline of one-rank stages equals one rank bit for bit).
  SECONDS=0
  list=(jobs/test-jobs.jsonl inputs/demo.ini --video.frames 32)
  a=$(env "${pace[@]}" VINF_PIPELINE=2 sbatch --parsable --job-name=jl --nodes=2 "${node[@]}" slurm/jobs.sbatch \
    "${list[@]}" --checkpoint.every 1)
  b=$(sbatch --parsable --job-name=jd --nodes=2 "${node[@]}" slurm/jobs.sbatch "${list[@]}" --parallel.data 4)
  alone() {  # NAME OPTIONS...: the job's run alone into outputs/alone-NAME
    local name=$1
    shift
    "$vinf" generate --config inputs/demo.ini --video.frames 32 "$@" --out "outputs/alone-$name" -q >/dev/null 2>&1
  }
  alone kite --sampler.seed 1 --sampler.steps 2 --prompt.text "a kite over the dunes" &
  alone lighthouse --sampler.seed 2 --sampler.steps 2 --prompt.text "a lighthouse in a storm" \
    --vi.local-frames 4 &
  alone harbour --sampler.seed 4 --sampler.steps 3 --prompt.text "a harbour at dawn" --sampler.scheduler ddim &
  out=outputs/jl-$a log=outputs/jl-$a.log
  for t in $(seq 600); do
    compgen -G "$out/*/checkpoints/step-000001.h5" >/dev/null && break
    [ $((t % 10)) != 0 ] || [ -n "$(squeue -h -j "$a" 2>/dev/null)" ] || break
    sleep 0.1
  done
  scancel --batch --signal=USR1 "$a"                              # as --signal=B:USR1@120
  wait
  good=(kite lighthouse harbour)
  for name in "${good[@]}"; do check "$name alone" test -f "outputs/alone-$name/latents.h5"; done
  # ended JOBID: the job ends FAILED with exit code 2 (a job of the list failed, the others ran).
  ended() {
    local got
    got=$(bash "$cluster" wait "$state" 120 "$1")
    if grep -q ' FAILED 2:0$' <<<"$got"; then ok "job $1: $got (the failed job's exit status 2)"; else fail "job $1 ended as '$got', expected FAILED 2:0"; fi
  }
  # the_list DIR LOG LAYOUT: every good job's latents equal its run alone, jobs.json has 3 done and
  # bad-size failed naming video.height, the log has vinf's layout, the table and the script's word.
  the_list() {
    local dir=$1 log=$2 cmp name
    for name in "${good[@]}"; do
      if cmp=$("$tool" h5-compare "$dir/$name/latents.h5" "outputs/alone-$name/latents.h5" 0 2>&1); then ok "$dir/$name = its run alone ($cmp)"; else
        fail "$dir/$name differs from its run alone: $cmp"
      fi
    done
    check "$dir/jobs.json: 3 done, bad-size failed naming video.height" jq -e '
      ([.jobs[] | select(.status == "done") | .out] | sort) == ["harbour", "kite", "lighthouse"] and
      (.jobs[] | select(.out == "bad-size") | .status == "failed" and (.message | test("video.height")))' "$dir/jobs.json"
    check "$log: $3" grep -qF "$3" "$log"
    check "$log: the table of the jobs" grep -qE '^  bad-size +failed +[0-9.]+ s  --video.height must be a multiple of 8' "$log"
    check "$log: some jobs failed, the others are done" grep -qF "some jobs failed, the others are done (3 done, 1 failed, 0 to do): the table above names each failed job" "$log"
  }
  ended "$b"
  the_list "outputs/jd-$b" "outputs/jd-$b.log" "4 replica(s) x 1 pipeline stage(s) of 1 rank(s)"
  check "jd: the layout of the options, none added" grep -q "layout as the options and inputs/demo.ini set it over 4 task(s)" "outputs/jd-$b.log"
  table=$(jobs/summarize "outputs/jd-$b")
  check "jobs/summarize of the list: a row per job, bad-size failed with why" \
    test "$(grep -cE '^\| (kite|lighthouse|harbour) \| complete \||^\| bad-size \| failed: --video.height' <<<"$table")" -eq 4
  [ $fails -eq 0 ] || show_log "outputs/jd-$b.log"
  ended "$a"
  echo "the lists took $SECONDS s; jl:"
  timeline "$log"
  the_list "$out" "$log" "2 replica(s) x 2 pipeline stage(s) of 1 rank(s)"
  check "jl: VINF_PIPELINE=2 and the default replicas" grep -q 'layout --parallel.pipeline 2 --parallel.data 2 over 4 task(s)' "$log"
  check "the batch shell passed SIGUSR1 on" grep -q 'received SIGUSR1: passing it to every rank' "$log"
  check "the list stopped with jobs to do and requeued itself once" \
    test "$(grep -c 'stopped with a checkpoint in .*<job>/checkpoints (the interrupted jobs.* [1-9] to do): requeueing job' "$log")" -eq 1
  check "the second start ran the same list" grep -q 'requeued 1 time(s) so far' "$log"
  check "the first start had every job to run, and said no more" grep -q "4 job(s) in jobs/test-jobs.jsonl, 4 to run, 2 replica" "$log"
  check "the second start names where the others are" grep -qE "4 job\(s\) in jobs/test-jobs.jsonl, [1-3] to run \(outputs/jl-$a/jobs.json has the others\)" "$log"
  check "a replica's first video says its models were loaded before it, not kept from an earlier one" \
    test "$(grep -c 'loaded in .* before the first video' "$log")" -ge 2
  # The jobs done at the stop (the first table) ran once; some job resumed from its checkpoint;
  # bad-size was not tried again.
  first=$(sed -n '/vinf generate: jobs (/,/ to do; /p' "$log" | sed '/ to do; /q' | awk '$2 == "done" {print $1}')
  echo "  done at the stop: $(tr '\n' ' ' <<<"${first:-none}")"
  for name in $first; do check "$name, done at the stop, was not run again" test "$(jq ".jobs[] | select(.out == \"$name\") | .starts" "$out/jobs.json")" = 1; done
  check "bad-size was not tried again" test "$(jq '.jobs[] | select(.out == "bad-size") | .starts' "$out/jobs.json")" = 1
  resumed=$(for name in "${good[@]}"; do jq -r '.resumed_from // empty' "$out/$name/run.json"; done | grep -c checkpoints)
  check "$resumed interrupted job(s) resumed from a checkpoint" test "$resumed" -ge 1
  srun_options "$log"
  [ $fails -eq 0 ] || { show_log "$log"; cat "$out/jobs.json"; }
  ;;

train)
  # slurm/train.sbatch on 2 nodes (one rank per socket: one per node here), the tiny fixture model
  # on synthetic data: an uninterrupted job, then one stopped by the time limit's SIGUSR1 after its
  # second step, which checkpoints, requeues itself and ends bit for bit where the first ended (the
  # same layout and threads compute the same numbers); then the stopped job's checkpoint resumed by
  # a job on one node (the optimizer state re-sharded over another number of ranks), to rounding.
  "$tool" train-data data.h5 6 4 32 || fail "train-data"
  cat > train.ini <<INI
model = $src/tests/fixtures/tiny-unet3d
data = $work/data.h5
[train]
steps = 6
batch = 4
micro-batch = 1
lr = 1e-3
bucket-mb = 0.05
[checkpoint]
every = 1
INI
  tnode=(--nodes=2 --ntasks-per-node=1 --cpus-per-task=2)
  a=$(sbatch --parsable --job-name=ta "${tnode[@]}" slurm/train.sbatch train.ini)
  finished "$a" COMPLETED || show_log "outputs/ta-$a.log"
  check "the training job ran on 2 ranks" jq -e '.layout.ranks == 2 and .layout.zero == 2' "outputs/ta-$a/run.json"
  j=$(env "${pace[@]}" sbatch --parsable --job-name=tr "${tnode[@]}" slurm/train.sbatch train.ini)
  out=outputs/tr-$j log=outputs/tr-$j.log
  for t in $(seq 600); do [ -e "$out/checkpoints/step-000002.h5" ] && break; sleep 0.1; done
  scancel --batch --signal=USR1 "$j"                              # as --signal=B:USR1@300
  for t in $(seq 600); do grep -q 'requeued 1 time' "$log" 2>/dev/null && break; sleep 0.1; done
  cp -r "$out" outputs/tr-copy
  finished "$j" COMPLETED || show_log "$log"
  check "vinf train stopped on SIGUSR1 with a checkpoint" grep -q 'vinf train: stopped by SIGUSR1 after step [0-9] of 6' "$log"
  check "the job requeued itself once" test "$(grep -c 'requeueing job' "$log")" -eq 1
  check "run.json says where it resumed" jq -e '.resumed_from != null' "$out/run.json"
  check "the stopped and resumed run has the uninterrupted run's losses, bit for bit" \
    cmp <(cut -d, -f1-4 "$out/log.csv") <(cut -d, -f1-4 "outputs/ta-$a/log.csv")
  check "... and its trained parameters" "$tool" compare-relative "$out/model/diffusion_pytorch_model.safetensors" \
    "outputs/ta-$a/model/diffusion_pytorch_model.safetensors" 0
  # The copy holds the checkpoints up to the stop (the later ones may be there too: resume the
  # second step's, as a job that got one node after a preemption would).
  find outputs/tr-copy/checkpoints -name 'step-*.h5' ! -name step-000002.h5 -delete
  k=$(VINF_OUT=outputs/tr-copy sbatch --parsable --job-name=tk --nodes=1 --ntasks-per-node=1 --cpus-per-task=2 \
    slurm/train.sbatch train.ini)
  finished "$k" COMPLETED || show_log "outputs/tk-$k.log"
  check "the one-node job resumed the 2-rank checkpoint" grep -q 'resuming from .*step-000002.h5 after step 2 (written by 2 rank(s)' "outputs/tk-$k.log"
  check "... and trained the same to rounding" awk -F, 'NR == FNR { l[FNR] = $2; next } FNR > 1 { d = $2 - l[FNR]; if (d < 0) d = -d; if (d > 1e-5 * l[FNR]) bad = 1; n++ } END { exit bad || n != 6 }' \
    "outputs/ta-$a/log.csv" outputs/tr-copy/log.csv
  [ $fails -eq 0 ] || show_log "$log"
  ;;

cpu-partition)
  # No GPU anywhere (no GRES configured): the scripts as a user submits them there, without any
  # resource option. Before, their GPU request was refused by sbatch.
  if sbatch --gpus-per-node=1 --wrap true >gpu-refused.txt 2>&1; then fail "a GPU request was accepted"; else
    ok "a GPU request is Slurm's refusal here: $(head -1 gpu-refused.txt)"
  fi
  sockets=$(lscpu -p=SOCKET | grep -v '^#' | sort -u | wc -l)
  j=$(sbatch --parsable --job-name=plain slurm/vinf.sbatch inputs/demo.ini "${small[@]}")
  finished "$j" COMPLETED || show_log "outputs/plain-$j.log"
  log=outputs/plain-$j.log
  check "vinf.sbatch as it is: outputs complete, one rank per socket ($sockets)" outputs_complete "outputs/plain-$j" "$sockets"
  check "its log says it runs on the CPU" grep -q 'no GPU on .*running on the CPU' "$log"
  check "... with CPU mode's layout" grep -q "CPU layout (socket): $sockets rank(s) per node x" "$log"
  [ $fails -eq 0 ] || show_log "$log"
  a=$(sbatch --parsable --array=0-2 slurm/sweep.sbatch jobs/test-sweep.csv)
  finished "$a" COMPLETED || for f in outputs/sweep-"$a"_*.log; do show_log "$f"; done
  for k in 0 1 2; do check "sweep.sbatch as it is: outputs/sweep-${a}_$k/ complete" outputs_complete "outputs/sweep-${a}_$k" "$sockets"; done
  check "the log names task 2 as its directory does, ${a}_2" grep -q "job ${a}_2 (sweep), requeued 0 time" "outputs/sweep-${a}_2.log"
  b=$(sbatch --parsable slurm/jobs.sbatch jobs/test-jobs.jsonl inputs/demo.ini "${small[@]}")
  got=$(bash "$cluster" wait "$state" 180 "$b")
  log=outputs/jobs-$b.log
  if grep -q ' FAILED 2:0$' <<<"$got" && grep -qF "(3 done, 1 failed, 0 to do)" "$log"; then ok "jobs.sbatch as it is: 3 done, bad-size failed (exit 2)"; else
    fail "jobs.sbatch: $got"
    show_log "$log"
  fi
  # salloc + srun as slurm/interactive.md shows for a CPU partition (salloc runs the command).
  salloc --ntasks=2 --cpus-per-task=1 bash -c "OMP_NUM_THREADS=1 srun --mpi=pmix --cpus-per-task=1 $vinf generate \
    --config inputs/demo.ini --device cpu ${small[*]} --out outputs/salloc" >salloc.log 2>&1
  check "salloc --ntasks=2 + srun vinf generate --device cpu" outputs_complete outputs/salloc 2
  [ $fails -eq 0 ] || show_log salloc.log
  ;;

refusals)
  # refused LOG_NAME TEXT SBATCH_ARGS...: the job fails with exit status 2 and TEXT in its log.
  refused() {
    local name=$1 text=$2 j got
    shift 2
    j=$(sbatch --parsable --job-name="$name" "${node[@]}" "$@")
    got=$(bash "$cluster" wait "$state" 60 "$j")
    local log
    log=$(ls outputs/"$name"-"$j"*.log 2>/dev/null | head -1)
    if grep -q ' FAILED 2:0' <<<"$got" && grep -qF -- "$text" "$log"; then ok "$name: exit 2, '$text'"; else
      fail "$name: $got, expected FAILED 2:0 and '$text'"
      show_log "$log"
    fi
  }
  refused noconfig "no config file: sbatch slurm/vinf.sbatch CONFIG.ini" slurm/vinf.sbatch
  refused missing "cannot read the config file 'inputs/nothing.ini'" slurm/vinf.sbatch inputs/nothing.ini
  refused badopt "unrecognised option '--vi.nonsense'" slurm/vinf.sbatch inputs/demo.ini --vi.nonsense 3
  VINF=$work/no-vinf refused novinf "no vinf binary at $work/no-vinf" slurm/vinf.sbatch inputs/demo.ini
  VINF_NCCL_PROFILE=infiniband refused noprofile "VINF_NCCL_PROFILE: no profile 'infiniband'" slurm/vinf.sbatch inputs/demo.ini
  refused notarray "slurm/sweep.sbatch is a job array" slurm/sweep.sbatch jobs/test-sweep.csv
  refused pastend "has 3 row(s) (tasks 0-2); array task 5 has none: submit with --array=0-2" --array=5 slurm/sweep.sbatch jobs/test-sweep.csv
  printf 'vi.local-frames,seed\n4\n' >short.csv
  refused shortrow "short.csv:2: 1 field(s), the header has 2" --array=0 slurm/sweep.sbatch short.csv inputs/demo.ini
  printf 'vi.local-frames,Seed Value\n4,1\n' >badhead.csv
  refused badheader "column name 'Seed Value' is not a vinf generate option" --array=0 slurm/sweep.sbatch badhead.csv inputs/demo.ini
  printf 'vi.local-frames,seed\n4,1\n' >noconf.csv
  refused sweepconfig "no config file for the sweep" --array=0 slurm/sweep.sbatch noconf.csv
  printf 'prompt,seed\n"unclosed,1\n' >quote.csv
  refused quote "quote.csv:2: a quote is not closed" --array=0 slurm/sweep.sbatch quote.csv inputs/demo.ini
  refused nolist "no job list: sbatch slurm/jobs.sbatch JOBLIST BASE.ini" slurm/jobs.sbatch
  refused listmissing "cannot read the job list 'jobs/nothing.jsonl'" slurm/jobs.sbatch jobs/nothing.jsonl inputs/demo.ini
  refused listbase "no base config file: sbatch slurm/jobs.sbatch jobs/test-jobs.jsonl BASE.ini" slurm/jobs.sbatch jobs/test-jobs.jsonl
  VINF_PIPELINE=3 refused stages "4 task(s) do not split into replicas of 3 stage(s) x cfg 1 x tensor 1: submit a multiple of 3 tasks, or set VINF_DATA" \
    --nodes=2 slurm/jobs.sbatch jobs/test-jobs.jsonl inputs/demo.ini
  # srun's status when it killed the other ranks after one failed (the race the badopt job may or
  # may not hit): the job's status is the first failing task's, read from srun's lines.
  printf 'srun: error: node1: task 1: Exited with exit code 2\nslurmstepd: error: *** STEP CANCELLED ***\nsrun: error: node1: task 0: Terminated\n' >srun-race.log
  got=$(bash -c 'source slurm/lib.sh; vinf_rc=143; vinf_first_failure srun-race.log; echo "rc=$vinf_rc"' 2>&1)
  if grep -q 'rc=2$' <<<"$got" && grep -q 'task 1 exited with status 2 first' <<<"$got"; then ok "srun 143 after task 1 exited 2: status 2"; else fail "srun race: $got"; fi
  printf 'srun: error: node1: task 3: Killed\n' >srun-killed.log
  got=$(bash -c 'source slurm/lib.sh; vinf_rc=137; vinf_first_failure srun-killed.log; echo "rc=$vinf_rc"' 2>&1)
  if grep -q 'rc=137$' <<<"$got"; then ok "a killed rank keeps its signal status"; else fail "killed rank: $got"; fi
  # The requeue decision after vinf stopped (75), against a stand-in scontrol that logs its calls:
  # SHOW1 and SHOW2 are what `scontrol show job` says before and after `scontrol requeue`, which
  # succeeds or fails (RQ). The job is in its first start (SLURM_RESTART_COUNT=0).
  decide() {  # SHOW1 SHOW2 RQ [RC]
    SHOW1=$1 SHOW2=$2 RQ=$3 RC=${4:-75} bash -c '
      source slurm/lib.sh
      scontrol() {
        echo "scontrol $*" >>calls.log
        case $1 in
          show) if grep -q requeue calls.log; then echo "JobId=7 $SHOW2 BatchFlag=1"; else echo "JobId=7 $SHOW1 BatchFlag=1"; fi ;;
          requeue) [ "$RQ" = ok ] || { echo "Job is pending execution for job 7" >&2; return 1; } ;;
        esac
      }
      sleep() { :; }
      SLURM_JOB_ID=7 SLURM_RESTART_COUNT=0 vinf_rc=$RC
      vinf_finish outputs/x' 2>&1
    echo "rc=$?"
  }
  rm -f calls.log
  got=$(decide "JobState=COMPLETING Reason=None Requeue=1 Restarts=1" "" ok)
  if grep -q 'Slurm requeued job 7 itself' <<<"$got" && ! grep -q 'scontrol requeue' calls.log && grep -q 'rc=75$' <<<"$got" &&
    ! grep -q error <<<"$got"; then ok "requeued by Slurm already (Restarts grew): no second requeue, no error"; else fail "already requeued: $got; $(cat calls.log)"; fi
  rm -f calls.log
  got=$(decide "JobState=PENDING Reason=BeginTime Requeue=1 Restarts=0" "" ok 137)
  if grep -q 'Slurm requeued job 7 itself.*ended (status 137)' <<<"$got" && ! grep -q 'scontrol requeue' calls.log && ! grep -q error <<<"$got"; then
    ok "ranks killed by Slurm's requeue (pending again): no error"; else fail "pending again: $got; $(cat calls.log)"; fi
  rm -f calls.log
  got=$(decide "JobState=RUNNING Reason=None Requeue=1 Restarts=0" "JobState=COMPLETING Reason=None Requeue=1 Restarts=1" fail)
  if grep -q 'scontrol requeue 7' calls.log && grep -q 'requeued job 7 itself meanwhile' <<<"$got" && ! grep -q error <<<"$got"; then
    ok "requeued by Slurm while the script asked: no error"; else fail "race: $got; $(cat calls.log)"; fi
  rm -f calls.log
  got=$(decide "JobState=RUNNING Reason=None Requeue=0 Restarts=0" "JobState=RUNNING Reason=None Requeue=0 Restarts=0" fail)
  if grep -q 'error: scontrol requeue 7 failed: Job is pending execution for job 7 (JobState=RUNNING' <<<"$got" && grep -q 'rc=75$' <<<"$got"; then
    ok "a requeue that fails on its own is reported with Slurm's reason"; else fail "failed requeue: $got"; fi
  rm -f calls.log
  got=$(decide "JobState=RUNNING Reason=None Requeue=1 Restarts=0" "" ok)
  if grep -q 'scontrol requeue 7' calls.log && grep -q 'requeueing job 7' <<<"$got" && ! grep -q error <<<"$got"; then
    ok "a running job requeues itself"; else fail "plain requeue: $got; $(cat calls.log)"; fi
  # An array's first task has the array's job id, for which scontrol lists every task: the
  # decision reads this task's own line (two lines once made it take a failure for a requeue).
  got=$(bash -c 'source slurm/lib.sh
    scontrol() { printf "JobId=7 ArrayJobId=7 ArrayTaskId=0 JobState=FAILED Restarts=0\nJobId=8 ArrayJobId=7 ArrayTaskId=1 JobState=FAILED Restarts=0\n"; }
    SLURM_JOB_ID=7 SLURM_RESTART_COUNT=0
    if vinf_slurm_requeued; then echo "requeued ($vinf_job_state)"; else echo "not requeued ($vinf_job_state)"; fi' 2>&1)
  if [ "$got" = "not requeued (FAILED)" ]; then ok "an array's first task reads its own line of scontrol show job"; else fail "array task: $got"; fi
  # The layout at the start, on a described GPU node: the GPUs win over a VINF_CPU_RANKS left in
  # the environment from CPU jobs (it applies to CPU mode); the job's own tasks win over both.
  got=$(bash -c 'source slurm/lib.sh; VINF_DEVICE=cuda vinf_gpus_seen=8 SLURM_GPUS_ON_NODE=8 SLURM_CPUS_ON_NODE=64 \
    SLURM_JOB_NUM_NODES=1 VINF_CPU_RANKS=socket; unset SLURM_NTASKS; vinf_layout; echo "tasks=$vinf_tasks threads=$OMP_NUM_THREADS"' 2>&1)
  if grep -q 'one rank per GPU: 8 rank(s) per node x 8 CPU(s) of the node.s 64' <<<"$got" && grep -q 'tasks=8 threads=8$' <<<"$got"; then
    ok "8 GPUs, VINF_CPU_RANKS=socket left over: 8 ranks of 8 threads"; else fail "GPU layout: $got"; fi
  got=$(bash -c 'source slurm/lib.sh; VINF_DEVICE=cuda vinf_gpus_seen=8 SLURM_GPUS_ON_NODE=8 SLURM_CPUS_ON_NODE=64 \
    SLURM_JOB_NUM_NODES=1 SLURM_NTASKS=4 SLURM_CPUS_PER_TASK=16; vinf_layout; echo "tasks=$vinf_tasks ${vinf_srun_opts[*]}"' 2>&1)
  if grep -q 'tasks=4 --kill-on-bad-exit=1 --cpus-per-task=16 --cpu-bind=cores$' <<<"$got"; then ok "the job's own 4 tasks win"; else
    fail "own tasks: $got"; fi
  # A stop signal before vinf starts: the shell survives it and does not start vinf.
  got=$(bash -c 'source slurm/lib.sh; srun() { echo "srun ran"; }; VINF_DEVICE=cpu; vinf_srun_opts=(); kill -USR1 $$; vinf_generate outputs/x inputs/demo.ini; echo "rc=$vinf_rc"' 2>&1)
  if grep -q 'received SIGUSR1 before vinf started: not starting it' <<<"$got" && grep -q 'rc=75$' <<<"$got" && ! grep -q 'srun ran' <<<"$got"; then
    ok "SIGUSR1 before the run: the shell lives, vinf is not started, status 75"; else fail "early signal: $got"; fi
  # Outside a job.
  out=$(env -u SLURM_JOB_ID bash slurm/vinf.sbatch inputs/demo.ini 2>&1)
  rc=$?
  if [ $rc -eq 2 ] && grep -q 'runs inside a Slurm job' <<<"$out"; then ok "outside Slurm: exit 2, says so"; else fail "outside Slurm: $rc: $out"; fi
  ;;
esac

echo "$fails failure(s)"
[ $fails -eq 0 ]
