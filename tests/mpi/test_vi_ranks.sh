#!/usr/bin/env bash
# Video-Infinity over N ranks (`vinf forward`, --vi.mode compat | invariant):
# - N = 1, 2: the released code's outputs (fixtures vi/default.ws1, .ws2), final and per rank;
# - every N: N ranks equal one process emulating N clips (--vi.emulate-clips), for several settings;
# - invariant: N ranks equal one rank;
# - halo x moves half the all-gather bytes of halo kv;
# - bad configurations end every rank with status 2 and a message; a rank that dies or hangs ends
#   the job (watchdog) instead of hanging it.
# usage: test_vi_ranks.sh MPIEXEC VINF TEST_TOOL FIXTURE_MODEL_DIR N
set -u
mpiexec=$1 vinf=$2 tool=$3 fixture=$4 n=$5
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../cli/expect.sh"
require_test_device "$vinf"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
golden=$fixture/vi
keys="noise_pred.t900 noise_pred.t500"

check() {  # check DESCRIPTION command... : counts a failure when the command fails
  local what=$1
  shift
  if out=$("$@" 2>&1); then echo "ok: $what"; else echo "FAIL: $what"; echo "$out" | tail -8; fails=$((fails + 1)); fi
}
run() { "$mpiexec" -np "$n" "$vinf" forward --model "$fixture" "${device_args[@]}" --comm-timeout 60 "$@"; }

# 1. The released code at 1 and 2 ranks (settings of vi/cases.json), every exchange variant.
# One rank exchanges nothing: one variant there, every one at 2 ranks.
halos="x kv" exchanges="three-round fused"
[ "$n" -eq 1 ] && halos=x exchanges=three-round
if [ "$n" -le 2 ]; then
  for halo in $halos; do
    for exchange in $exchanges; do
      out=$work/ws.$halo.$exchange.safetensors
      log=$(run --inputs "$fixture/inputs.safetensors" --vi.mode compat --vi.local-frames 2 --vi.global-frames 4 \
              --vi.halo $halo --vi.exchange $exchange --dump-temporal "$work/dump.$halo" --out "$out" 2>&1) \
        || { echo "FAIL: compat run ($halo, $exchange)"; echo "$log" | tail -5; fails=$((fails + 1)); continue; }
      check "compat ws$n halo=$halo exchange=$exchange = released code" \
        "$tool" compare "$out" "$golden/default.ws$n.safetensors" 1e-4 $keys
      echo "$log" | grep -q "communication per rank" || { echo "FAIL: no byte summary"; fails=$((fails + 1)); }
      echo "$log" | grep 'rank 0:' > "$work/bytes.$halo.$exchange"
    done
    for ((r = 0; r < n; r++)); do
      # Every per-rank intermediate of the fixture (22 tensors: temporal modules and their attentions).
      cmp=$("$tool" compare "$work/dump.$halo.rank$r.safetensors" "$golden/default.ws$n.rank$r.intermediates.t900.safetensors" 1e-4 2>&1)
      if [ $? -eq 0 ] && [ "$(grep -c '^ok' <<< "$cmp")" -eq 22 ]; then
        echo "ok: ws$n rank $r intermediates ($halo)"
      else
        echo "FAIL: ws$n rank $r intermediates ($halo)"; echo "$cmp" | grep -v '^ok' | head; fails=$((fails + 1))
      fi
    done
  done
  if [ "$n" -eq 2 ]; then
    # x carries one array where kv carries two: the global all-gathers halve exactly.
    gx=$(sed -n 's/.*all-gather \([0-9]*\) B.*/\1/p' "$work/bytes.x.three-round")
    gkv=$(sed -n 's/.*all-gather \([0-9]*\) B.*/\1/p' "$work/bytes.kv.three-round")
    if [ -n "$gx" ] && [ "$((2 * gx))" -eq "$gkv" ]; then echo "ok: all-gather bytes x $gx = kv $gkv / 2"
    else echo "FAIL: all-gather bytes x '$gx' vs kv '$gkv'"; fails=$((fails + 1)); fi
  fi
fi

# CFG parallelism (world = 2 x clips): rank pairs split the batch; N = 2 is one clip per branch
# (the released code at 1 rank), N = 4 two clips per branch (at 2 ranks).
if [ "$n" -eq 2 ] || [ "$n" -eq 4 ]; then
  run --inputs "$fixture/inputs.safetensors" --vi.mode compat --vi.local-frames 2 --vi.global-frames 4 --parallel.cfg 2 \
    --out "$work/cfg2.safetensors" 2>/dev/null || { echo "FAIL: --parallel.cfg 2 run"; fails=$((fails + 1)); }
  check "--parallel.cfg 2 over $n ranks = released code at $((n / 2)) rank(s)" \
    "$tool" compare "$work/cfg2.safetensors" "$golden/default.ws$((n / 2)).safetensors" 1e-4 $keys
fi

# 2. N ranks = one process emulating N clips; invariant: N ranks = 1 rank. 12 frames for N = 3
#    (4 per clip), 16 otherwise.
frames=16
[ "$n" -eq 3 ] && frames=12
"$tool" slice-frames "$fixture/inputs.safetensors" "$work/in.safetensors" 0 $frames || exit 1
settings=(
  "--vi.mode compat --vi.local-frames 2 --vi.global-frames 4"
  "--vi.mode compat --vi.local-frames 1 --vi.global-frames 3 --vi.conv-halo 2 --vi.token-num-scale --vi.halo kv"
  "--vi.mode compat --vi.local-frames 3 --vi.global-frames 2 --vi.sync-groupnorm --vi.exchange fused"
  "--vi.mode invariant --vi.local-frames 2 --vi.global-frames 5"
  "--vi.mode invariant --vi.local-frames 3 --vi.global-frames 0 --vi.token-num-scale --vi.halo kv --vi.exchange fused"
)
i=0
for s in "${settings[@]}"; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  run --inputs "$work/in.safetensors" $s --out "$work/ranks$i.safetensors" 2>/dev/null \
    || { echo "FAIL: mpirun -np $n with $s"; fails=$((fails + 1)); continue; }
  # shellcheck disable=SC2086
  "$vinf" forward --model "$fixture" "${device_args[@]}" --inputs "$work/in.safetensors" $s --vi.emulate-clips "$n" \
    --out "$work/emul$i.safetensors" 2>/dev/null || { echo "FAIL: emulation with $s"; fails=$((fails + 1)); continue; }
  check "$n ranks = $n emulated clips: $s" "$tool" compare "$work/ranks$i.safetensors" "$work/emul$i.safetensors" 1e-5 $keys
  if [[ "$s" == *invariant* ]]; then
    # shellcheck disable=SC2086
    "$vinf" forward --model "$fixture" "${device_args[@]}" --inputs "$work/in.safetensors" $s --out "$work/one$i.safetensors" 2>/dev/null
    check "invariant: $n ranks = 1 rank: $s" "$tool" compare "$work/ranks$i.safetensors" "$work/one$i.safetensors" 1e-4 $keys
  fi
done

# 3. Bad configurations: status 2 and a message on every rank, no hang, no output file.
bad() {  # bad TEXT args...
  local text=$1
  shift
  expect 2 "$text" -- timeout 120 "$mpiexec" -np "$n" "$vinf" forward --model "$fixture" "${device_args[@]}" \
    --out "$work/bad.safetensors" "$@"
  [ -e "$work/bad.safetensors" ] && { echo "FAIL: a refused run left an output file"; fails=$((fails + 1)); }
}
per=$((frames / n))
bad "is larger than the $per frames per clip" --inputs "$work/in.safetensors" --vi.local-frames $((per + 1))
bad "--vi.conv-halo $((per + 1)) is larger than the $per frames per clip" --inputs "$work/in.safetensors" \
  --vi.mode compat --vi.local-frames 1 --vi.conv-halo $((per + 1))
bad "is larger than the video ($frames frames)" --inputs "$work/in.safetensors" --vi.local-frames 1 --vi.global-frames $((frames + 1))
bad "option '--parallel.cfg' must be in [1, 2], got '3'" --inputs "$work/in.safetensors" --parallel.cfg 3
bad "--vi.halo must be x or kv" --inputs "$work/in.safetensors" --vi.halo q
bad "--vi.sync-groupnorm is a compat-mode option" --inputs "$work/in.safetensors" --vi.sync-groupnorm
if [ "$n" -gt 1 ]; then
  "$tool" slice-frames "$fixture/inputs.safetensors" "$work/odd.safetensors" 0 $((n * 4 + 1)) || exit 1
  bad "frames cannot be split into $n equal clips" --inputs "$work/odd.safetensors" --vi.local-frames 1
fi
if [ $((n % 2)) -eq 1 ] && [ "$n" -gt 1 ]; then
  bad "--parallel.cfg 2 needs an even number of ranks" --inputs "$work/in.safetensors" --parallel.cfg 2
fi

# 4. Faults: a rank that dies mid-run, and one that stops answering, end the whole job.
if [ "$n" -gt 1 ]; then
  victim=$((n - 1))
  out=$(VINF_FAULT="rank=$victim,call=7,action=abort" timeout 120 "$mpiexec" -x VINF_FAULT -np "$n" "$vinf" forward \
          --model "$fixture" "${device_args[@]}" --inputs "$work/in.safetensors" --vi.local-frames 1 --vi.global-frames 4 --out "$work/f.safetensors" 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [[ "$out" == *"rank $victim: fault injection"* ]] && [ ! -e "$work/f.safetensors" ]; then
    echo "ok: rank $victim aborting mid-run ends the job (exit $rc)"
  else
    echo "FAIL: rank $victim aborting mid-run: exit $rc"; echo "$out" | tail -8; fails=$((fails + 1))
  fi
  out=$(VINF_FAULT="rank=$victim,call=7,action=hang" timeout 120 "$mpiexec" -x VINF_FAULT -np "$n" "$vinf" forward \
          --model "$fixture" "${device_args[@]}" --inputs "$work/in.safetensors" --vi.local-frames 1 --vi.global-frames 4 --comm-timeout 3 \
          --out "$work/f.safetensors" 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [[ "$out" == *"longer than the communication timeout"* ]]; then
    echo "ok: rank $victim hanging ends the job through the watchdog (exit $rc)"
  else
    echo "FAIL: rank $victim hanging: exit $rc"; echo "$out" | tail -8; fails=$((fails + 1))
  fi
fi

# 5. The transports. Every device: --comm-backend mpi = auto. On the CPU, nccl is refused. On a
#    GPU, NCCL runs when every rank has a GPU of its own and equals the MPI transport over device
#    buffers; with fewer GPUs than ranks the ranks share one, auto takes the MPI transport (and says
#    so) and an explicit nccl is refused, naming the ranks that share it. Both equal the CPU.
vi_args=(--inputs "$work/in.safetensors" --vi.mode compat --vi.local-frames 2 --vi.global-frames 4 --vi.sync-groupnorm)
for backend in mpi auto; do
  run "${vi_args[@]}" --comm-backend $backend --out "$work/comm.$backend.safetensors" 2>"$work/comm.$backend.log" \
    || { echo "FAIL: run with --comm-backend $backend"; tail -5 "$work/comm.$backend.log"; fails=$((fails + 1)); }
done
check "--comm-backend auto = mpi on $test_device" "$tool" compare "$work/comm.auto.safetensors" "$work/comm.mpi.safetensors" "$exact_tol" $keys
gpus=$(visible_gpus)
if [ "$test_device" = cpu ]; then
  bad "--comm-backend nccl needs the CUDA device" "${vi_args[@]}" --comm-backend nccl
elif [ "$n" -le "$gpus" ]; then
  run "${vi_args[@]}" --comm-backend nccl --out "$work/comm.nccl.safetensors" 2>"$work/comm.nccl.log" \
    || { echo "FAIL: run with --comm-backend nccl"; tail -5 "$work/comm.nccl.log"; fails=$((fails + 1)); }
  check "NCCL = MPI transport on the GPU" "$tool" compare "$work/comm.nccl.safetensors" "$work/comm.mpi.safetensors" 1e-6 $keys
else
  grep -q "using the MPI transport" "$work/comm.auto.log" && echo "ok: $n ranks on $gpus GPU(s): auto says it takes MPI" \
    || { echo "FAIL: $n ranks on $gpus GPU(s): auto did not say it takes the MPI transport"; tail -5 "$work/comm.auto.log"; fails=$((fails + 1)); }
  bad "share GPU" "${vi_args[@]}" --comm-backend nccl
fi
if [ "$test_device" = cuda ]; then
  # The GPU against the CPU: the same model in f32 (cuBLAS and cuDNN sum in other orders).
  "$vinf" forward --model "$fixture" --device cpu --dtype f32 "${vi_args[@]}" --vi.emulate-clips "$n" \
    --out "$work/comm.cpu.safetensors" 2>/dev/null || { echo "FAIL: the CPU reference run"; fails=$((fails + 1)); }
  check "GPU = CPU" "$tool" compare "$work/comm.mpi.safetensors" "$work/comm.cpu.safetensors" 1e-4 $keys
fi

[ "$fails" -eq 0 ] && echo "Video-Infinity over $n rank(s): all checks passed" || { echo "$fails check(s) failed"; exit 1; }
