#!/usr/bin/env bash
# `vinf generate` over N ranks (the built-in tiny model, random weights and text):
# - invariant mode: N ranks give the latents of one rank (every scheduler at 4 ranks, dpmpp-sde
#   and ddim with eta at every size);
# - CFG parallelism: 2 x N/2 ranks give the latents of the batched guidance on N/2 ranks (both modes);
# - tensor parallelism: --parallel.tensor 2 on N ranks gives the latents of one rank;
# - exact mode: N ranks give the plain model's latents on one rank holding the whole video, with
#   23 frames (uneven over 2-4 ranks), and the video has every frame;
# - the demo config (inputs/demo.ini, fewer steps) at 4 ranks: latents.h5 and run.json complete;
# - frames that do not divide over the ranks are refused on every rank before any work;
# - a rank that dies mid-run leaves no latents.h5 or run.json behind.
# The one-rank runs are made once for every N (tests/mpi/refs.sh).
# usage: test_generate_ranks.sh MPIEXEC VINF TEST_TOOL FIXTURE_MODEL_DIR N|refs
set -u
mpiexec=$1 vinf=$2 tool=$3 n=$5
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../cli/expect.sh"
source "$here/refs.sh"
require_test_device "$vinf"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 24 frames divide over 1-4 ranks; 32x32 pixels is a 4x4 latent; p, G, c fit 6 frames per clip.
common=(--model builtin:tiny --model.seed 3 "${device_args[@]}" "${video_args[@]}" --comm-timeout 60
        --video.height 32 --video.width 32 --sampler.steps 4 --prompt.text "a lighthouse at dusk"
        --vi.local-frames 2 --vi.global-frames 4)
gen() {  # gen RANKS OUT options...
  local ranks=$1 out=$2
  shift 2
  "$mpiexec" -np "$ranks" "$vinf" generate "${common[@]}" --video.frames 24 --quiet --out "$out" "$@"
}
check() {  # check DESCRIPTION command... : counts a failure when the command fails
  local what=$1
  shift
  if out=$("$@" 2>&1); then echo "ok: $what ($(tail -1 <<< "$out"))"; else echo "FAIL: $what"; echo "$out" | tail -8; fails=$((fails + 1)); fi
}

# The one-rank runs the ranks are compared with: every scheduler below (DIR/NAME.ref), and the
# plain model over 23 frames (DIR/plain).
make_generate_refs() {
  local d=$1 sched
  for sched in dpmpp-sde "ddim --sampler.eta 0.5" dpmpp-sde-karras dpmpp; do
    # shellcheck disable=SC2086
    gen 1 "$d/${sched%% *}.ref" --sampler.scheduler $sched || { echo "FAIL: one rank, $sched"; return 1; }
  done
  "$mpiexec" -np 1 "$vinf" generate "${common[@]}" --video.frames 23 --quiet --out "$d/plain" --vi.mode off \
    || { echo "FAIL: the plain model on one rank"; return 1; }
}
shared_refs "$work" "$n" make_generate_refs

# 1. invariant: the video does not depend on the number of ranks (float tolerance: the GroupNorm
#    sums are reduced in another order, and guidance 12 amplifies the differences). What depends
#    on the ranks is the noise, keyed by frame: dpmpp-sde and ddim with eta draw it in their own
#    ways and run at every size; dpmpp-sde-karras (dpmpp-sde's noise on other sigmas, the tables
#    checked in the unit tests) and dpmpp (no noise) run at 4 ranks.
schedulers=(dpmpp-sde "ddim --sampler.eta 0.5")
[ "$n" -eq 4 ] && schedulers+=(dpmpp-sde-karras dpmpp)
for sched in "${schedulers[@]}"; do
  name=${sched%% *}
  # shellcheck disable=SC2086
  if gen "$n" "$work/$name.$n" --sampler.scheduler $sched; then
    check "invariant $name: $n ranks = 1 rank" "$tool" h5-compare "$work/$name.$n/latents.h5" "$refs/$name.ref/latents.h5" 3e-5
  else
    echo "FAIL: invariant $name run"; fails=$((fails + 1))
  fi
done

# 2. CFG parallelism: rank pairs split the guidance branches; the numbers equal the batched run.
if [ $((n % 2)) -eq 0 ]; then
  half=$((n / 2))
  for mode in invariant compat; do
    if gen "$half" "$work/cfg1.$mode" --vi.mode $mode && gen "$n" "$work/cfg2.$mode" --vi.mode $mode --parallel.cfg 2; then
      check "$mode: --parallel.cfg 2 on $n ranks = batched guidance on $half" \
        "$tool" h5-compare "$work/cfg2.$mode/latents.h5" "$work/cfg1.$mode/latents.h5" 3e-5
      grep -A1 '"cfg_group"' "$work/cfg2.$mode/run.json" | grep -q '"all-gather"' \
        || { echo "FAIL: no cfg-group bytes in run.json"; fails=$((fails + 1)); }
    else
      echo "FAIL: $mode cfg runs"; fails=$((fails + 1))
    fi
  done
fi

# 2b. Exact mode: the unmodified model over the ranks equals it on one rank (--vi.mode off), for
#     23 frames that do not divide over 2, 3 or 4 ranks. Float tolerance as in 1.
if genn=$("$mpiexec" -np "$n" "$vinf" generate "${common[@]}" --video.frames 23 --quiet --out "$work/exact" --vi.mode exact 2>&1); then
  check "exact: $n ranks over 23 frames = the plain model on 1 rank" \
    "$tool" h5-compare "$work/exact/latents.h5" "$refs/plain/latents.h5" 3e-5
  if [ "$have_ffmpeg" -eq 1 ]; then
    got=$(ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames -of csv=p=0 \
            "$work/exact/video.mp4" 2>&1)
    [ "$got" = "23" ] && echo "ok: exact video.mp4 has 23 frames" || { echo "FAIL: exact video.mp4: '$got' frames"; fails=$((fails + 1)); }
  fi
  # Stopped after step 2 on 4 frame ranks (5, 6, 6, 6 frames), resumed on 2 frame ranks x 2 tensor ranks.
  if [ "$n" -eq 4 ]; then
    VINF_FAULT_STEP="rank=0,step=2,signal=TERM" "$mpiexec" -x VINF_FAULT_STEP -np 4 "$vinf" generate "${common[@]}" \
      --video.frames 23 --quiet --out "$work/exact_resumed" --vi.mode exact --checkpoint.every 2 >/dev/null 2>&1
    if "$mpiexec" -np 4 "$vinf" generate "${common[@]}" --video.frames 23 --quiet --out "$work/exact_resumed" \
         --vi.mode exact --parallel.tensor 2 --resume auto >/dev/null 2>&1; then
      check "exact: stopped on 4 frame ranks, resumed on 2 x 2 tensor ranks = one run" \
        "$tool" h5-compare "$work/exact_resumed/latents.h5" "$work/exact/latents.h5" 3e-5
    else
      echo "FAIL: exact mode resume on another layout"; fails=$((fails + 1))
    fi
  fi
else
  echo "FAIL: exact mode runs"; echo "$genn" | tail -5; fails=$((fails + 1))
fi

# 2c. Tensor parallelism: the transformer blocks split over 2 ranks (x N/2 clips) equal one rank
#     holding them whole, invariant mode (random weights drawn whole, then sliced).
if [ $((n % 2)) -eq 0 ]; then
  if gen "$n" "$work/tp.$n" --parallel.tensor 2; then
    ref=$refs/dpmpp-sde.ref
    check "--parallel.tensor 2 on $n ranks = 1 rank" "$tool" h5-compare "$work/tp.$n/latents.h5" "$ref/latents.h5" 3e-5
    grep -q '"tensor_rank": 1' "$work/tp.$n/run.json" || { echo "FAIL: run.json lists no tensor rank 1"; fails=$((fails + 1)); }
  else
    echo "FAIL: --parallel.tensor 2 run"; fails=$((fails + 1))
  fi
fi

# 3. A prompt list goes to the clips in order (clip r of N: prompt int(r / N * P)); with fewer clips
#    than prompts some would never be used, and the run is refused saying how many clips there are.
if [ "$n" -lt 3 ]; then
  expect 2 "--prompt.text: 3 prompts for $n clip" -- "$mpiexec" -np "$n" "$vinf" generate "${common[@]}" --video.frames 24 \
    --out "$work/prompts" --prompt.text "a second prompt" --prompt.text "a third"
elif log=$("$mpiexec" -np "$n" "$vinf" generate "${common[@]}" --video.frames 24 --out "$work/prompts" --verbose \
          --prompt.text "a second prompt" --prompt.text "a third" 2>&1); then
  want="clip $((n - 1)) (frames $((24 - 24 / n))-23): prompt $(( (n - 1) * 3 / n ))"
  grep -qF "$want" <<< "$log" && echo "ok: $want" || { echo "FAIL: no '$want'"; echo "$log" | grep clip; fails=$((fails + 1)); }
else
  echo "FAIL: prompt list run"; echo "$log" | tail -5; fails=$((fails + 1))
fi

# 4. The demo job (inputs/demo.ini: 4 ranks x 16 frames, 64x64) with 2 steps.
if [ "$n" -eq 4 ]; then
  if log=$("$mpiexec" -np 4 "$vinf" generate --config "$here/../../inputs/demo.ini" "${device_args[@]}" "${video_args[@]}" \
              --sampler.steps 2 --out "$work/demo" 2>&1); then
    check "demo latents.h5 [64, 4, 8, 8], finite" "$tool" h5-check "$work/demo/latents.h5" 64 4 8 8
    if grep -q '"status": "complete"' "$work/demo/run.json" && [ "$(grep -c '"rank":' "$work/demo/run.json")" -eq 4 ] \
       && grep -q '"denoise_per_step"' "$work/demo/run.json" && grep -q '"all-gather"' "$work/demo/run.json"; then
      echo "ok: demo run.json: complete, 4 ranks, per-step times, bytes per collective"
    else
      echo "FAIL: demo run.json"; head -40 "$work/demo/run.json"; fails=$((fails + 1))
    fi
    if [ "$have_ffmpeg" -eq 1 ]; then
      frames=$(ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames,width,height \
                 -of csv=p=0 "$work/demo/video.mp4" 2>&1)
      [ "$frames" = "64,64,64" ] && echo "ok: demo video.mp4: 64 frames of 64x64" || { echo "FAIL: video.mp4: '$frames'"; fails=$((fails + 1)); }
    else
      echo "skip: demo video.mp4 (no ffmpeg/ffprobe)"
    fi
    grep -q "step 2/2" <<< "$log" && grep -q "outputs in $work/demo" <<< "$log" \
      || { echo "FAIL: demo progress/outputs lines"; echo "$log"; fails=$((fails + 1)); }
  else
    echo "FAIL: demo run"; echo "$log" | tail -8; fails=$((fails + 1))
  fi
fi

# 5. Frames that do not divide over the clip ranks: status 2 on every rank, nothing created.
if [ "$n" -gt 1 ]; then
  expect 2 "divide" -- "$mpiexec" -np "$n" "$vinf" generate "${common[@]}" --video.frames $((6 * n + 1)) --out "$work/bad"
  [ ! -e "$work/bad" ] || { echo "FAIL: a refused run created its output directory"; fails=$((fails + 1)); }
fi

# 6. A rank that dies mid-run ends the job and leaves no result that looks complete.
if [ "$n" -gt 1 ]; then
  out=$(VINF_FAULT="rank=$((n - 1)),call=9,action=abort" timeout 120 "$mpiexec" -x VINF_FAULT -np "$n" "$vinf" generate \
          "${common[@]}" --video.frames 24 --out "$work/dead" 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ ! -e "$work/dead/latents.h5" ] && [ ! -e "$work/dead/run.json" ]; then
    echo "ok: a rank dying mid-run ends the job (exit $rc), no latents.h5 or run.json"
  else
    echo "FAIL: a rank dying mid-run: exit $rc"; ls -la "$work/dead" 2>&1; echo "$out" | tail -5; fails=$((fails + 1))
  fi
  expect 2 "an unfinished or failed run" -- "$mpiexec" -np "$n" "$vinf" generate "${common[@]}" --video.frames 24 \
    --out "$work/dead"
fi

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
