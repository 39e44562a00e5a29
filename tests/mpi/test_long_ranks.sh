#!/usr/bin/env bash
# Long videos by sliding windows and by FIFO-Diffusion over N ranks (the built-in tiny model):
# - windows (24 frames, windows of 8 every 4: 5 windows spread over the ranks) equal one rank;
#   at one rank a window at least as long as the video is the plain model (--vi.mode off);
# - FIFO (f = 4, n = 4 with lookahead: 8 model calls per iteration over the ranks) equals one rank,
#   at 2 ranks also without lookahead;
# - both stopped after a checkpoint (kept with --checkpoint.every) and resumed on another number of
#   ranks equal the uninterrupted run;
# - at 2 ranks vinf evaluate finds the boundaries the runs recorded (the windows', none for FIFO);
# - FIFO on the tiny fixture UNet with the draws of the authors' released code equals that code's
#   run (fixtures/fifo-tiny), every iteration's queue included;
# - more ranks than FIFO's model calls, or than windows, are refused (exit 2) before anything runs.
# Every window's numbers come from the same computation whichever rank makes it, and the windows
# are combined in window order on every rank, so with OMP_NUM_THREADS=1 (set by the test's
# registration) the runs agree bit for bit.
# usage: test_long_ranks.sh MPIEXEC VINF TEST_TOOL FIXTURE_MODEL_DIR N
set -u
mpiexec=$1 vinf=$2 tool=$3 n=$5
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../cli/expect.sh"
require_test_device "$vinf"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0

common=(--model builtin:tiny --model.seed 5 "${device_args[@]}" --output.video=false --comm-timeout 60 --quiet
        --video.height 32 --video.width 32 --prompt.text "a long road" --sampler.steps 3)
windows=(--long.mode windows --video.frames 24 --long.window 8 --long.stride 4)
fifo=(--long.mode fifo --video.frames 10 --long.fifo-window 4 --long.fifo-partitions 4 --sampler.eta 0.5)
run() {  # run RANKS options...: vinf generate over RANKS ranks; its output on failure
  local ranks=$1 log
  shift
  log=$("$mpiexec" -np "$ranks" "$vinf" generate "${common[@]}" "$@" 2>&1) || { echo "$log" | tail -6; return 1; }
}
same() {  # same DESCRIPTION A.h5 B.h5: bit for bit
  if out=$("$tool" h5-compare "$2" "$3" 0 2>&1); then echo "ok: $1"; else echo "FAIL: $1"; echo "$out" | tail -3; fails=$((fails + 1)); fi
}
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# 1. Windows: N ranks against one.
# (At one rank the reference is the run itself: the 1-rank checks are the plain model's and resuming.)
run 1 "${windows[@]}" --out "$work/w1" || fail "windows on 1 rank"
if [ "$n" -gt 1 ]; then
  run "$n" "${windows[@]}" --out "$work/wn" || fail "windows on $n ranks"
  same "windows: $n rank(s) = 1 rank" "$work/wn/latents.h5" "$work/w1/latents.h5"
else
  run 1 --long.mode windows --video.frames 8 --long.window 16 --out "$work/whole" || fail "one window"
  run 1 --vi.mode off --video.frames 8 --out "$work/plain" || fail "plain model"
  same "a window as long as the video = the plain model" "$work/whole/latents.h5" "$work/plain/latents.h5"
fi

# 2. FIFO: N ranks against one, with and without lookahead.
run 1 "${fifo[@]}" --out "$work/f1" || fail "fifo on 1 rank"
if [ "$n" -gt 1 ]; then
  run "$n" "${fifo[@]}" --out "$work/fn" || fail "fifo on $n ranks"
  same "fifo: $n rank(s) = 1 rank" "$work/fn/latents.h5" "$work/f1/latents.h5"
fi
if [ "$n" -eq 2 ]; then  # (the partitions' split over ranks is the same code with or without lookahead)
  run 1 "${fifo[@]}" --long.fifo-lookahead=false --out "$work/g1" || fail "fifo without lookahead on 1 rank"
  run "$n" "${fifo[@]}" --long.fifo-lookahead=false --out "$work/gn" || fail "fifo without lookahead on $n ranks"
  same "fifo without lookahead: $n rank(s) = 1 rank" "$work/gn/latents.h5" "$work/g1/latents.h5"
fi

# 3. Resume on another number of ranks from a checkpoint in the middle: the run's directory as a
# stopped run leaves it (no run.json, no latents.h5), continued from that checkpoint.
other=$((n % 2 + 1))
resume() {  # resume NAME CHECKPOINT options...
  local name=$1 ckpt=$2
  shift 2
  run "$n" "$@" --checkpoint.every 2 --checkpoint.keep 100 --out "$work/$name" || { fail "$name: the first run"; return; }
  rm -f "$work/$name/run.json" "$work/$name/latents.h5"
  find "$work/$name/checkpoints" -name 'step-*.h5' ! -name "$ckpt" -delete
  run "$other" "$@" --resume auto --out "$work/$name" || { fail "$name: resumed on $other rank(s)"; return; }
}
resume wr step-000002.h5 "${windows[@]}"
same "windows: stopped after step 2 on $n rank(s), resumed on $other = uninterrupted" "$work/wr/latents.h5" "$work/w1/latents.h5"
# (22 iterations of a 16-step schedule: a checkpoint after more iterations than steps.)
resume fr step-000018.h5 "${fifo[@]}"
same "fifo: stopped after iteration 18 on $n rank(s), resumed on $other = uninterrupted" "$work/fr/latents.h5" "$work/f1/latents.h5"

# 4. The seams vinf evaluate finds in latents.h5 are the ones the run recorded: the windows' starts,
# none for FIFO (not the ranks' shares).
if [ "$n" -eq 2 ]; then
  for run in wn:4,8,12,16 fn:; do
    dir=${run%%:*} want=${run#*:}
    "$vinf" evaluate "$work/$dir/latents.h5" --out "$work/$dir-eval" --quiet > /dev/null 2>&1 || fail "vinf evaluate $dir"
    got=$(python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(",".join(map(str, d["boundaries"])), d["boundary_source"])' \
          "$work/$dir-eval/evaluate.json" 2>&1)
    [ "$got" = "$want recorded" ] && echo "ok: evaluate $dir: boundaries '$want' as recorded" || fail "evaluate $dir: '$got', not '$want recorded'"
  done
fi

# 5. FIFO as its authors' released code runs it (fixtures/fifo-tiny: every draw given through
# --latents-init, the tiny UNet, guidance 12, fps 8): the video within 1e-4 and the queue after
# every iteration (a checkpoint each) within 5e-4 of the largest magnitude, the fixture's
# tolerances; A (lookahead, eta 0) and B (eta 1) have 4 model calls per iteration, so run on 1-4
# ranks; C (no lookahead) has 2, so on at most 2.
released() {  # released CASE ETA LOOKAHEAD MODEL
  local ref=$here/../fixtures/fifo-tiny/ref_$1.safetensors dir=$work/released_$1 k
  "$tool" fifo-embeddings "$ref" "$work/emb_$1.safetensors" || { fail "$1: embeddings"; return; }
  "$mpiexec" -np "$n" "$vinf" generate --model "$4" "${device_args[@]}" --output.video=false --comm-timeout 60 \
    --quiet --video.height 64 --video.width 64 --video.frames 6 --long.mode fifo --long.fifo-window 4 \
    --long.fifo-partitions 2 --long.fifo-lookahead="$3" --sampler.eta "$2" --sampler.guidance 12 \
    --prompt.embeddings "$work/emb_$1.safetensors" --latents-init "$ref" --checkpoint.every 1 \
    --checkpoint.keep 100 --out "$dir" > "$work/released_$1.log" 2>&1 || { tail -5 "$work/released_$1.log"; fail "$1: the run"; return; }
  "$tool" h5-vs-ref "$dir/latents.h5" "$ref" video 1e-4 0 || fail "$1: the video"
  for k in $(seq 0 9); do
    "$tool" h5-vs-ref "$dir/checkpoints/step-$(printf %06d $((k + 1))).h5" "$ref" "iter$k.queue_after" 5e-4 6 \
      > "$work/q.txt" || { cat "$work/q.txt"; fail "$1: the queue after iteration $k"; }
  done
  echo "ok: released FIFO case $1 on $n rank(s): the video and the queue after each of 10 iterations"
}
released A 0 true "$4"
released B 1 true "$4"
[ "$n" -le 2 ] && released C 0 false "$4"

# 6. Refusals, before anything runs.
if [ "$n" -ge 2 ]; then
  expect 2 "use at most 1 rank(s), or more partitions" -- \
    "$mpiexec" -np "$n" "$vinf" generate "${common[@]}" --long.mode fifo --video.frames 10 --long.fifo-window 4 \
    --long.fifo-partitions 1 --long.fifo-lookahead=false --out "$work/bad1"
  expect 2 "make 1 window(s) of 8" -- \
    "$mpiexec" -np "$n" "$vinf" generate "${common[@]}" --long.mode windows --video.frames 8 --out "$work/bad2"
  [ -e "$work/bad1" ] || [ -e "$work/bad2" ] && fail "a refused run left an output directory"
fi

[ "$fails" -eq 0 ] && echo "all passed" || echo "$fails check(s) failed"
exit $((fails > 0))
