#!/usr/bin/env bash
# Many videos in one run over N ranks (the built-in tiny model): `vinf generate --jobs`,
# --parallel.data and --parallel.pipeline.
# - replicas: N replicas of one rank each run a job list (JSON Lines, with a job that fails on bad
#   input); every other job's latents equal its own single run bit for bit (the same computations
#   on the same shapes), the failed one is recorded with its message, the exit status is 2;
# - pipeline: N stages (N >= 2) over a CSV list, several jobs (the pipeline fills) and one video
#   without a list (it does not), equal one rank bit for bit; at 4 ranks also 2 stages x 2 clips,
#   2 stages x CFG 2 and 2 replicas x 2 stages, each against one run of its unit's layout;
# - preemption: a list stopped by SIGTERM (exit 75) and run again completes every job once: the
#   finished ones are not run again, the interrupted one resumes from its checkpoint, and every
#   result equals its single run.
# OMP_NUM_THREADS=1 (set by the test's registration) on every run: bit-identity holds between
# runs with the same threads.
# usage: test_jobs_ranks.sh MPIEXEC VINF TEST_TOOL FIXTURE_MODEL_DIR N
set -u
mpiexec=$1 vinf=$2 tool=$3 n=$5
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../cli/expect.sh"
require_test_device "$vinf"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0

common=(--model builtin:tiny --model.seed 5 "${device_args[@]}" --output.video=false --comm-timeout 60 --quiet
        --video.frames 8 --video.height 32 --video.width 32 --vi.global-frames 4)
run() {  # run RANKS options...: vinf generate over RANKS ranks (--vi.local-frames 2 unless given); its output on failure
  local ranks=$1 log
  shift
  local local_frames=(--vi.local-frames 2)
  [[ " $* " == *" --vi.local-frames "* ]] && local_frames=()
  log=$("$mpiexec" -np "$ranks" "$vinf" generate "${common[@]}" "${local_frames[@]}" "$@" 2>&1) \
    || { echo "$log" | tail -6; return 1; }
}
same() {  # same DESCRIPTION A.h5 B.h5: bit for bit
  if out=$("$tool" h5-compare "$2" "$3" 0 2>&1); then echo "ok: $1"; else echo "FAIL: $1"; echo "$out" | tail -3; fails=$((fails + 1)); fi
}
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# q FILE EXPR: a Python expression over the JSON file's contents `d` (python3, which the bare GPU
# machines have too, unlike jq).
q() { python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# The jobs, and each one's single run on one rank (the references).
cat > "$work/list.jsonl" <<'EOF'
# seed, steps and prompts per job; out names the directory
{"seed": 1, "steps": 3, "prompt": "a kite over the dunes", "out": "kite"}
{"sampler.seed": 2, "steps": 4, "prompt": ["a boat in a harbour"], "vi.local-frames": 4}
{"seed": 3, "steps": 3, "prompt": "bad size", "video.height": 36}
{"seed": 4, "steps": 2, "prompt": "a lighthouse", "sampler.scheduler": "ddim", "out": "lighthouse"}
EOF
ref() {  # ref NAME options...
  local name=$1
  shift
  run 1 --out "$work/ref/$name" "$@" || fail "reference run $name"
}
ref kite --sampler.seed 1 --sampler.steps 3 --prompt.text "a kite over the dunes"
ref job-1 --sampler.seed 2 --sampler.steps 4 --prompt.text "a boat in a harbour" --vi.local-frames 4
ref lighthouse --sampler.seed 4 --sampler.steps 2 --prompt.text "a lighthouse" --sampler.scheduler ddim
good=(kite job-1 lighthouse)

# 1. Replicas: N of one rank each take the jobs from the queue.
"$mpiexec" -np "$n" "$vinf" generate "${common[@]}" --vi.local-frames 2 --jobs "$work/list.jsonl" --parallel.data "$n" \
  --out "$work/data" > "$work/data.log" 2>&1
status=$?
[ "$status" -eq 2 ] && echo "ok: a failed job makes the exit status 2" || fail "exit status $status, not 2 (a job failed)"
for j in "${good[@]}"; do same "$n replica(s): $j = its single run" "$work/data/$j/latents.h5" "$work/ref/$j/latents.h5"; done
failed='d["jobs"][2]["status"] == "failed" and "video.height" in d["jobs"][2]["message"]'
if [ "$(q "$work/data/jobs.json" "$failed and sum(j['status'] == 'done' for j in d['jobs']) == 3")" = True ]; then
  echo "ok: jobs.json: 3 done, job-2 failed with its message"
else
  fail "jobs.json"; cat "$work/data/jobs.json"
fi
grep -q "job-2 .*failed.*video.height" "$work/data.log" || { fail "no summary line for the failed job"; tail -8 "$work/data.log"; }

# 2. Pipeline: N stages, a CSV list of several jobs (the pipeline fills) and one video without a list.
if [ "$n" -ge 2 ]; then
  printf 'out,seed,steps,prompt,vi.local-frames\nkite,1,3,a kite over the dunes,\nlighthouse,4,2,a lighthouse,\n' \
    > "$work/list.csv"
  if run "$n" --jobs "$work/list.csv" --parallel.pipeline "$n" --out "$work/pipe" --sampler.scheduler ddim; then
    run 1 --out "$work/ref/kite_ddim" --sampler.seed 1 --sampler.steps 3 --prompt.text "a kite over the dunes" \
      --sampler.scheduler ddim || fail "reference kite ddim"
    same "pipeline of $n stages, filled: kite = one rank" "$work/pipe/kite/latents.h5" "$work/ref/kite_ddim/latents.h5"
    same "pipeline of $n stages, filled: lighthouse = one rank" "$work/pipe/lighthouse/latents.h5" \
      "$work/ref/lighthouse/latents.h5"
    steps=$(q "$work/pipe/kite/run.json" 'len(d["times_s"]["denoise_per_step"])')
    [ "$steps" = 3 ] && echo "ok: run.json has the 3 steps of every stage" || fail "run.json lists $steps steps, not 3"
  else
    fail "pipeline with a job list"
  fi
  if run "$n" --parallel.pipeline "$n" --out "$work/pipe1" --sampler.seed 2 --sampler.steps 4 \
       --prompt.text "a boat in a harbour" --vi.local-frames 4; then
    same "pipeline of $n stages, one video = one rank" "$work/pipe1/latents.h5" "$work/ref/job-1/latents.h5"
    [ ! -e "$work/pipe1/jobs.json" ] || fail "a single pipelined video wrote jobs.json"
  else
    fail "pipeline without a list"
  fi
fi

# 3. Layouts combined, at 4 ranks: each against one run of its unit's layout.
if [ "$n" -eq 4 ]; then
  one=(--sampler.seed 2 --sampler.steps 4 --prompt.text "a boat")
  run 2 --out "$work/ref/clips2" "${one[@]}" || fail "reference on 2 clip ranks"
  run 2 --out "$work/ref/cfg2" "${one[@]}" --parallel.cfg 2 || fail "reference with CFG 2"
  if run 4 --out "$work/p2c2" "${one[@]}" --parallel.pipeline 2; then
    same "2 stages x 2 clips = 2 clips" "$work/p2c2/latents.h5" "$work/ref/clips2/latents.h5"
  else
    fail "2 stages x 2 clips"
  fi
  if run 4 --out "$work/p2cfg2" "${one[@]}" --parallel.pipeline 2 --parallel.cfg 2; then
    same "2 stages x CFG 2 = CFG 2" "$work/p2cfg2/latents.h5" "$work/ref/cfg2/latents.h5"
  else
    fail "2 stages x CFG 2"
  fi
  "$mpiexec" -np 4 "$vinf" generate "${common[@]}" --vi.local-frames 2 --jobs "$work/list.jsonl" --parallel.data 2 --parallel.pipeline 2 \
    --out "$work/d2p2" > /dev/null 2>&1
  for j in "${good[@]}"; do same "2 replicas x 2 stages: $j" "$work/d2p2/$j/latents.h5" "$work/ref/$j/latents.h5"; done
fi

# 4. Preemption: world rank 0 is sent SIGTERM after step 1 of the job it is running; its unit
#    stops with a checkpoint, no replica starts another job, the run exits 75. Run again: the
#    finished jobs are skipped, the interrupted ones resume, every job ends done and equal.
layout=(--parallel.data "$n")
[ "$n" -ge 2 ] && layout=(--parallel.pipeline 2 --parallel.data $((n / 2)))
[ "$n" -eq 3 ] && layout=(--parallel.data 3)
VINF_FAULT_STEP="rank=0,step=1,signal=TERM" "$mpiexec" -x VINF_FAULT_STEP -np "$n" "$vinf" generate "${common[@]}" --vi.local-frames 2 \
  --jobs "$work/list.jsonl" "${layout[@]}" --out "$work/stop" > "$work/stop.log" 2>&1
status=$?
[ "$status" -eq 75 ] && echo "ok: stopped by SIGTERM: exit 75" || { fail "exit status $status after SIGTERM, not 75"; tail -5 "$work/stop.log"; }
before=$(q "$work/stop/jobs.json" '" ".join(j["out"] for j in d["jobs"] if j["status"] == "done")')
declare -A stamp
for j in $before; do stamp[$j]=$(stat -c %Y.%i "$work/stop/$j/run.json"); done
"$mpiexec" -np "$n" "$vinf" generate "${common[@]}" --vi.local-frames 2 --jobs "$work/list.jsonl" "${layout[@]}" --out "$work/stop" \
  > "$work/resume.log" 2>&1
status=$?
[ "$status" -eq 2 ] && echo "ok: run again: exit 2 (the bad job stays failed)" || { fail "second run: exit $status"; tail -5 "$work/resume.log"; }
for j in "${good[@]}"; do same "stopped and run again: $j" "$work/stop/$j/latents.h5" "$work/ref/$j/latents.h5"; done
for j in $before; do
  [ "${stamp[$j]}" = "$(stat -c %Y.%i "$work/stop/$j/run.json")" ] || fail "$j was finished before the stop, yet ran again"
done
if [ "$(q "$work/stop/jobs.json" 'sum(j["status"] == "done" for j in d["jobs"])')" = 3 ]; then
  echo "ok: every good job done (finished before the stop: ${before:-none})"
else
  fail "jobs.json after the second run"; cat "$work/stop/jobs.json"
fi
resumed=$(for j in "${good[@]}"; do q "$work/stop/$j/run.json" 'd["resumed_from"] or ""'; done | grep -c checkpoints)
[ "$resumed" -ge 1 ] && echo "ok: $resumed job(s) resumed from a checkpoint" || fail "no job resumed from its checkpoint"

[ "$fails" -eq 0 ] && echo "all job-list checks passed at $n rank(s)"
exit $((fails > 0))
