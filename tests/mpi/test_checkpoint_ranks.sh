#!/usr/bin/env bash
# Checkpoints and resuming of `vinf generate` over N ranks (built-in tiny model):
# - a run killed (SIGKILL) after step 5 and resumed equals an uninterrupted run, bit for bit;
# - SIGTERM (test hook) and SIGUSR1 (sent to mpirun): a checkpoint, exit status 75, resume completes;
# - invariant mode resumes on another number of ranks (tolerance: GroupNorm sums in another order);
# - incompatible checkpoints (model, steps, resolution, mode, clips in compat mode) are refused;
# - a damaged newest checkpoint is skipped by --resume auto and refused by --resume PATH; flipped
#   bytes inside its data fail their checksum: auto falls back to the previous checkpoint, and with
#   no other checkpoint the run is refused (exit 2) instead of starting over or using wrong data;
# - a configuration over 64 KiB (a long prompt list) is checkpointed and resumed;
# - what keeps the run's files from being written fails before the first step;
# - a full disk while writing a checkpoint: a clear error, the previous checkpoints intact;
# - --checkpoint.keep; activation dumps over the whole video equal a one-rank run's.
# The refusals and the failing probe run at 2 and 3 ranks, the full disk at 2, the 64 KiB
# configuration at 3.
# usage: test_checkpoint_ranks.sh MPIEXEC VINF TEST_TOOL FIXTURE_MODEL_DIR N
set -u
mpiexec=$1 vinf=$2 tool=$3 n=$5
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../cli/expect.sh"
require_test_device "$vinf"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# No video: these runs check latents and checkpoints (the video has the generate tests), and
# encoding one costs about a fifth of each tiny run.
common=(--model builtin:tiny "${device_args[@]}" --output.video=false --comm-timeout 60 --video.height 32 --video.width 32
        --prompt.text "a lighthouse at dusk" --vi.local-frames 2 --vi.global-frames 4 --checkpoint.every 2)
gen() {  # gen RANKS OUT options...
  local ranks=$1 out=$2
  shift 2
  "$mpiexec" -np "$ranks" "$vinf" generate "${common[@]}" --out "$out" "$@"
}
same() {  # same DESCRIPTION A B RTOL
  local out
  if out=$("$tool" h5-compare "$2/latents.h5" "$3/latents.h5" "$4" 2>&1); then echo "ok: $1 ($out)"
  else echo "FAIL: $1"; echo "$out"; fails=$((fails + 1)); fi
}
status_is() {  # status_is DESCRIPTION WANT GOT
  if [ "$2" -eq "$3" ]; then echo "ok: $1 (exit $3)"; else echo "FAIL: $1: exit $3, expected $2"; fails=$((fails + 1)); fi
}
frames=24
gen "$n" "$work/ref" --video.frames $frames --sampler.steps 8 --quiet > /dev/null 2>&1 || { echo "FAIL: reference run"; exit 1; }

# 1. Killed after step 5 (checkpoints after 2 and 4), resumed: bit-identical.
VINF_FAULT_STEP="rank=$((n - 1)),step=5,signal=KILL" gen "$n" "$work/kill" --video.frames $frames \
  --sampler.steps 8 --quiet > /dev/null 2>&1
[ -f "$work/kill/checkpoints/step-000004.h5" ] && [ ! -e "$work/kill/latents.h5" ] && [ ! -e "$work/kill/run.json" ] \
  && echo "ok: killed run left step-000004.h5 and no result" || { echo "FAIL: killed run's files"; ls -R "$work/kill"; fails=$((fails + 1)); }
expect 0 "resuming from $work/kill/checkpoints/step-000004.h5" -- gen "$n" "$work/kill" --video.frames $frames --sampler.steps 8 --resume auto
same "killed at step 5 and resumed = uninterrupted" "$work/kill" "$work/ref" "$exact_tol"
[ "$(ls "$work/kill/checkpoints" | wc -l)" -eq 2 ] && [ -f "$work/kill/checkpoints/step-000008.h5" ] \
  && echo "ok: --checkpoint.keep 2 keeps the newest two" || { echo "FAIL: keep"; ls "$work/kill/checkpoints"; fails=$((fails + 1)); }
expect 0 "step 8 of 8 completed" -- "$vinf" inspect "$work/kill/checkpoints/step-000008.h5"

# 2. SIGTERM after step 3 on the last rank: every rank stops after a checkpoint, exit 75.
VINF_FAULT_STEP="rank=$((n - 1)),step=3,signal=TERM" gen "$n" "$work/term" --video.frames $frames \
  --sampler.steps 8 > "$work/term.log" 2>&1
status_is "SIGTERM: checkpoint and the documented status" 75 $?
grep -q "received SIGTERM: stopped after step 3 of 8" "$work/term.log" && [ -f "$work/term/checkpoints/step-000003.h5" ] \
  && echo "ok: SIGTERM message and step-000003.h5" || { echo "FAIL: SIGTERM log/checkpoint"; tail -5 "$work/term.log"; fails=$((fails + 1)); }
expect 0 "outputs in" -- gen "$n" "$work/term" --video.frames $frames --sampler.steps 8 --resume auto
same "stopped by SIGTERM and resumed = uninterrupted" "$work/term" "$work/ref" "$exact_tol"

# 3. A real signal: SIGUSR1 to mpirun, which forwards it to every rank.
if [ "$n" -eq 2 ]; then
  # mpirun itself in the background (not a function's subshell), so that $! is mpirun.
  "$mpiexec" -np "$n" "$vinf" generate "${common[@]}" --out "$work/usr1" --video.frames $frames --sampler.steps 60 \
    --verbose > "$work/usr1.log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do grep -q "step 2/60" "$work/usr1.log" && break; sleep 0.1; done
  kill -USR1 "$pid"
  wait "$pid"
  status_is "SIGUSR1 to mpirun: checkpoint and the documented status" 75 $?
  grep -q "received SIGUSR1" "$work/usr1.log" || { echo "FAIL: no SIGUSR1 message"; tail -5 "$work/usr1.log"; fails=$((fails + 1)); }
  expect 0 "outputs in" -- gen "$n" "$work/usr1" --video.frames $frames --sampler.steps 60 --resume auto --quiet
fi

# 3b. A stop signal while the process is still starting (MPI initialising; a preemption or a
# time limit's warning right after a start): held until vinf handles it, not the end of the
# process. The signal goes once the starting process shows SIGUSR1 and SIGTERM blocked, and not
# SIGINT (a library blocking every signal for a moment while it starts a thread is not that).
if [ "$n" -eq 1 ]; then
  "$vinf" generate "${common[@]}" --out "$work/early" --video.frames $frames --sampler.steps 8 > "$work/early.log" 2>&1 &
  pid=$!
  held=0
  for _ in $(seq 2000); do
    blocked=$(sed -n 's/^SigBlk:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null) || break
    [ -n "$blocked" ] && [ $((0x$blocked & 0x4202)) -eq $((0x4200)) ] && { held=1; break; }
    sleep 0.005
  done
  [ $held = 1 ] && kill -USR1 "$pid"
  wait "$pid"
  rc=$?
  if [ $held = 1 ] && [ $rc -eq 75 ] && grep -q 'received SIGUSR1: stopped after step 1 of 8, checkpoint .*, [0-9.]* s after the signal' "$work/early.log"; then
    echo "ok: SIGUSR1 while starting: held, then a checkpoint after step 1 and exit 75"
  else
    echo "FAIL: SIGUSR1 while starting (held $held, exit $rc)"; tail -5 "$work/early.log"; fails=$((fails + 1))
  fi
fi

# 4. Invariant mode resumes on another number of ranks.
if [ "$n" -gt 1 ]; then
  other=$(( n == 4 ? 2 : 1 ))
  expect 0 "resuming from $work/term/checkpoints/step-000008.h5 (written by $n rank(s))" -- \
    gen "$other" "$work/term" --video.frames $frames --sampler.steps 8 --resume "$work/term/checkpoints/step-000008.h5" --overwrite
  VINF_FAULT_STEP="rank=0,step=3,signal=TERM" gen "$n" "$work/move" --video.frames $frames \
    --sampler.steps 8 --quiet > /dev/null 2>&1
  expect 0 "outputs in" -- gen "$other" "$work/move" --video.frames $frames --sampler.steps 8 --resume auto
  same "written by $n ranks at step 3, finished by $other" "$work/move" "$work/ref" 3e-5
fi

# Sections 5 and 11 check refusals and a failing probe, decided in the plan before any step: at 2
# and 3 ranks, an even and an odd size, which covers what they depend on the ranks for. The full
# disk (7) runs at 2 ranks, the 64 KiB configuration's collective write (10) at 3 (an odd number of
# writers); the rest runs at every size.
files_checks=0 full_disk=0 big_config=0
[ "$n" -eq 2 ] || [ "$n" -eq 3 ] && files_checks=1
[ "$n" -eq 2 ] && full_disk=1
[ "$n" -eq 3 ] && big_config=1

# 5. Checkpoints of another run are refused, naming what differs.
if [ "$files_checks" -eq 1 ]; then
  ck=$work/kill/checkpoints/step-000008.h5
  expect 2 "sampler.steps 8 there, 9 here" -- gen "$n" "$work/x1" --video.frames $frames --sampler.steps 9 --resume "$ck"
  expect 2 "written for another model" -- gen "$n" "$work/x2" --video.frames $frames --sampler.steps 8 --model.seed 7 --resume "$ck"
  expect 2 "video.height 32 there, 64 here" -- "$mpiexec" -np "$n" "$vinf" generate --model builtin:tiny --video.height 64 \
    --video.width 32 --prompt.text "a lighthouse at dusk" --vi.local-frames 2 --vi.global-frames 4 --video.frames $frames \
    --sampler.steps 8 --out "$work/x3" --resume "$ck"
  expect 2 "vi.mode \"invariant\" there, \"compat\" here" -- gen "$n" "$work/x4" --video.frames $frames --sampler.steps 8 \
    --vi.mode compat --resume "$ck"
  expect 2 "is not a vinf checkpoint" -- gen "$n" "$work/x5" --video.frames $frames --sampler.steps 8 --resume "$work/ref/latents.h5"
  if [ "$n" -gt 1 ]; then
    VINF_FAULT_STEP="rank=0,step=3,signal=TERM" gen "$n" "$work/compat" --video.frames $frames \
      --sampler.steps 8 --vi.mode compat --quiet > /dev/null 2>&1
    expect 2 "parallel.clips $n there, 1 here" -- gen 1 "$work/compat" --video.frames $frames --sampler.steps 8 \
      --vi.mode compat --resume auto
  fi
fi

# 6. A damaged newest checkpoint: auto skips it (and finishes with the same latents), PATH refuses it.
cp -r "$work/kill" "$work/damaged"
truncate -s 5000 "$work/damaged/checkpoints/step-000008.h5"
rm "$work/damaged/latents.h5" "$work/damaged/run.json"
expect 0 "skipping checkpoint $work/damaged/checkpoints/step-000008.h5" -- \
  gen "$n" "$work/damaged" --video.frames $frames --sampler.steps 8 --resume auto
same "damaged newest checkpoint skipped, run finished from step 6" "$work/damaged" "$work/ref" "$exact_tol"
truncate -s 5000 "$work/damaged/checkpoints/step-000008.h5"
expect 2 "truncated or damaged" -- gen "$n" "$work/damaged" --video.frames $frames --sampler.steps 8 \
  --resume "$work/damaged/checkpoints/step-000008.h5"

# 6b. Bytes flipped inside the newest checkpoint's latent data (a damaged disk or a bad copy; the
# file's structure intact, so only the checksums can tell): --resume auto refuses it, naming the
# file and the dataset, falls back to the previous checkpoint and says so; the result equals the
# uninterrupted run (same ranks: bit for bit). Frame frames-2 is read by the last rank.
cp -r "$work/kill" "$work/flipped"
rm "$work/flipped/latents.h5" "$work/flipped/run.json"
"$tool" h5-flip "$work/flipped/checkpoints/step-000008.h5" /latents $((frames - 2)) > /dev/null \
  || { echo "FAIL: h5-flip"; fails=$((fails + 1)); }
gen "$n" "$work/flipped" --video.frames $frames --sampler.steps 8 --resume auto > "$work/flipped.log" 2>&1
status_is "flipped bytes in the newest checkpoint: resumed from the previous one" 0 $?
per=$((frames / n))
for want in "skipping checkpoint $work/flipped/checkpoints/step-000008.h5: $work/flipped/checkpoints/step-000008.h5: /latents (slices $((frames - per)) to $((frames - 1)) along axis 0) does not match its checksum" \
            "falling back to the older checkpoint $work/flipped/checkpoints/step-000006.h5" \
            "resuming from $work/flipped/checkpoints/step-000006.h5"; do
  grep -qF "$want" "$work/flipped.log" && echo "ok: log says '$want'" \
    || { echo "FAIL: log lacks '$want'"; tail -5 "$work/flipped.log"; fails=$((fails + 1)); }
done
same "flipped newest checkpoint skipped, run finished from step 6" "$work/flipped" "$work/ref" "$exact_tol"
# The only checkpoint, with bytes flipped in the solver's memory: refused (exit 2) by auto and by
# PATH, and left as it was; nothing is computed.
mkdir -p "$work/one/checkpoints"
cp "$work/kill/checkpoints/step-000008.h5" "$work/one/checkpoints/"
"$tool" h5-flip "$work/one/checkpoints/step-000008.h5" /state/previous_x0 1 > /dev/null
cp "$work/one/checkpoints/step-000008.h5" "$work/one-damaged.h5"
expect 2 "none of the 1 checkpoint(s) in $work/one/checkpoints can be used" -- \
  gen "$n" "$work/one" --video.frames $frames --sampler.steps 8 --resume auto
expect 2 "$work/one/checkpoints/step-000008.h5: /state/previous_x0 (slices 0 to $((per - 1)) along axis 0) does not match its checksum" -- \
  gen "$n" "$work/one" --video.frames $frames --sampler.steps 8 --resume "$work/one/checkpoints/step-000008.h5"
cmp -s "$work/one/checkpoints/step-000008.h5" "$work/one-damaged.h5" && [ ! -e "$work/one/latents.h5" ] \
  && [ "$(ls "$work/one/checkpoints")" = step-000008.h5 ] \
  && echo "ok: the refused checkpoint is left as it was, nothing written" \
  || { echo "FAIL: files after the refused checkpoint"; ls -R "$work/one"; fails=$((fails + 1)); }

# 7. The disk fills while a checkpoint is written (its temporary name points at /dev/full).
if [ "$full_disk" -eq 1 ]; then
  VINF_FAULT_STEP="rank=0,step=5,signal=KILL" gen "$n" "$work/full" --video.frames $frames \
    --sampler.steps 8 --quiet > /dev/null 2>&1
  ln -s /dev/full "$work/full/checkpoints/step-000006.h5.partial"
  expect 1 "disk full" -- gen "$n" "$work/full" --video.frames $frames --sampler.steps 8 --resume auto --quiet
  expect 0 "step 4 of 8 completed" -- "$vinf" inspect "$work/full/checkpoints/step-000004.h5"
  [ ! -e "$work/full/checkpoints/step-000006.h5" ] && [ ! -e "$work/full/latents.h5" ] \
    && echo "ok: nothing written under a final name" || { echo "FAIL: files after the full disk"; ls -R "$work/full"; fails=$((fails + 1)); }
  rm -f "$work/full/checkpoints/step-000006.h5.partial"
  expect 0 "outputs in" -- gen "$n" "$work/full" --video.frames $frames --sampler.steps 8 --resume auto
  same "after the full disk, resumed from step 4 = uninterrupted" "$work/full" "$work/ref" "$exact_tol"
fi

# 8. Activation dumps: the selected modules over the whole video, the same on N ranks as on one.
dump=(--dump.modules "mid_block,transformer_in.out,*temp_attentions.0.transformer_blocks.0.attn1.out" --dump.steps 1,3
      --video.frames $frames --sampler.steps 3 --quiet)
if gen "$n" "$work/dumpN" "${dump[@]}" > /dev/null && gen 1 "$work/dump1" "${dump[@]}" > /dev/null; then
  expect 0 "/activations/step3/mid_block  [2, $frames, 64, 2, 2] f32" -- "$vinf" inspect "$work/dumpN/activations.h5"
  expect 0 "datasets agree within" -- "$tool" h5-diff "$work/dumpN/activations.h5" "$work/dump1/activations.h5" 1e-3
else
  echo "FAIL: dump runs"; fails=$((fails + 1))
fi

# 9. A step that makes the latents NaN (here planted on the last rank after step 3) stops the run
# there, naming the step, the rank and the frame; no checkpoint or result holds it.
last=$((n - 1)) per=$((frames / n))
expect 1 "step 3 of 8 (t=" -- env VINF_FAULT_STEP="rank=$last,step=3,signal=NAN" \
  "$mpiexec" -np "$n" "$vinf" generate "${common[@]}" --out "$work/nan" --video.frames $frames --sampler.steps 8 --quiet
# With --debug the ranks check every UNet module's output: all were finite (the NaN came after).
expect 1 "made the latents NaN or infinite on rank $last (first in frame $((last * per + per / 2))); every UNet module's output was finite on that rank" -- \
  env VINF_FAULT_STEP="rank=$last,step=3,signal=NAN" "$mpiexec" -np "$n" "$vinf" generate "${common[@]}" \
  --out "$work/nan" --video.frames $frames --sampler.steps 8 --resume auto --quiet --debug
[ -f "$work/nan/checkpoints/step-000002.h5" ] && [ ! -e "$work/nan/checkpoints/step-000004.h5" ] \
  && [ ! -e "$work/nan/latents.h5" ] && [ ! -e "$work/nan/run.json" ] \
  && echo "ok: the NaN step left only the step-2 checkpoint" || { echo "FAIL: files after the NaN step"; ls -R "$work/nan"; fails=$((fails + 1)); }

# 10. A configuration of any size: one long prompt per clip (300 sentences of ~270 bytes over the
# clips; each is truncated to the text encoder's tokens, with a warning) makes the configuration
# that every checkpoint and latents.h5 carry about 80 KB, more than an HDF5 object header (64 KiB)
# holds. Stopped after step 1 and resumed: the checkpoints and latents.h5 are written, the resume
# compares the whole stored prompt list with this run's, and the result equals an uninterrupted run.
if [ "$big_config" -eq 1 ]; then
  big=$work/prompts.ini
  sentence="a slow pan across a harbour at dawn, fishing boats leaving one by one, gulls over the water, mist lifting from the hills behind the town, warm light on the wet stones of the quay, a dog asleep by the nets, bells from the church on the hill. "
  {
    echo "[prompt]"
    for i in $(seq "$n"); do
      printf 'text = part %d of a long story: ' "$i"
      for _ in $(seq $((300 / n))); do printf '%s' "$sentence"; done
      echo
    done
  } > "$big"
  big_args=(--model builtin:tiny "${device_args[@]}" --output.video=false --comm-timeout 60 --video.height 32 --video.width 32
            --vi.local-frames 2 --vi.global-frames 4 --config "$big" --video.frames $frames --sampler.steps 2
            --checkpoint.every 1)
  VINF_FAULT_STEP="rank=$((n - 1)),step=1,signal=TERM" "$mpiexec" -np "$n" "$vinf" generate "${big_args[@]}" \
    --out "$work/big" > "$work/big.log" 2>&1
  status_is "configuration over 64 KiB: checkpoint after step 1 and the stop status" 75 $?
  config_bytes=$("$vinf" inspect "$work/big/checkpoints/step-000001.h5" 2>&1 | sed -n 's|.*/run/config  \[1\] text of \([0-9]*\) bytes.*|\1|p')
  [ "${config_bytes:-0}" -gt 65536 ] && echo "ok: step-000001.h5 holds the configuration, $config_bytes bytes" \
    || { echo "FAIL: the configuration in step-000001.h5: '${config_bytes}' bytes"; tail -3 "$work/big.log"; fails=$((fails + 1)); }
  expect 0 "resuming from $work/big/checkpoints/step-000001.h5" -- \
    "$mpiexec" -np "$n" "$vinf" generate "${big_args[@]}" --resume auto --out "$work/big"
  expect 0 "ok $work/big/latents.h5" -- "$tool" h5-check "$work/big/latents.h5" $frames 4 4 4
  "$mpiexec" -np "$n" "$vinf" generate "${big_args[@]}" --quiet --out "$work/big-ref" > /dev/null 2>&1
  same "configuration over 64 KiB: stopped and resumed = uninterrupted" "$work/big" "$work/big-ref" "$exact_tol"
fi

# 11. What keeps the run's files from being written fails before the first step, not at the first
# checkpoint: here the probe that carries the run's stamp points at /dev/full.
if [ "$files_checks" -eq 1 ]; then
  mkdir -p "$work/probe/checkpoints"
  ln -s /dev/full "$work/probe/checkpoints/probe.h5.partial"
  expect 1 "checked before the first step: HDF5 could not" -- \
    gen "$n" "$work/probe" --video.frames $frames --sampler.steps 8 --resume auto --quiet
  [ "$(ls "$work/probe/checkpoints")" = probe.h5.partial ] && echo "ok: no checkpoint written" \
    || { echo "FAIL: files after the failed check"; ls -R "$work/probe"; fails=$((fails + 1)); }
  # With --overwrite the check comes before the previous run's files are removed: they stay.
  cp -r "$work/kill" "$work/keep"
  ln -s /dev/full "$work/keep/checkpoints/probe.h5.partial"
  expect 1 "checked before the first step" -- gen "$n" "$work/keep" --video.frames $frames --sampler.steps 8 --overwrite --quiet
  [ -f "$work/keep/run.json" ] && [ -f "$work/keep/checkpoints/step-000008.h5" ] \
    && echo "ok: --overwrite with a failed check left the previous run's files" \
    || { echo "FAIL: the previous run's files after the failed check"; ls -R "$work/keep"; fails=$((fails + 1)); }
fi

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
