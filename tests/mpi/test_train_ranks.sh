#!/usr/bin/env bash
# `vinf train` data parallel under mpirun -np N, on the tiny fixture model and synthetic data:
#  - N ranks equal one process with the same global batch, at ZeRO 0, 1 and 2, with several
#    gradient buckets; the one process runs each batch whole, the ranks in micro-batches of one
#    clip, so gradient accumulation composes with the ranks. To rounding: the losses to relative
#    1e-5 and the gradient norms to 1e-4 (sums over ranks and micro-batches in another order), the
#    trained parameters to 4e-3 (an AdamW step moves a parameter by about lr wherever its gradient
#    is near zero, with a sign that is rounding's; lr 1e-3, 4 steps).
#  - A run stopped by SIGTERM after step 2 writes a checkpoint and exits 75; resumed, it ends bit for
#    bit where the uninterrupted run ends (the same layout computes the same numbers in the same
#    order). Resumed on another number of ranks it follows the same trajectory to rounding.
#  - A checkpoint with flipped bytes is refused, or passed over by --resume auto for an older one;
#    bad settings and a resume with other settings exit 2.
#  - Mixed precision (--dtype bf16) over the ranks against one process, to bf16's precision; its
#    master weights sharded, its parameters all-gathered in bf16; stopped and resumed bit for bit.
# With VINF_TEST_DEVICE=cuda the same command lines run on the GPU (auto: bf16 there). The CUDA
# backward passes add with atomics, so a run does not repeat itself bit for bit: what is equal on
# the CPU is compared there to bf16's precision.
# The data and the one-process runs are made once for every N (tests/mpi/refs.sh).
# usage: test_train_ranks.sh MPIEXEC VINF TEST_TOOL FIXTURE_MODEL_DIR N|refs
set -u
mpiexec=$1 vinf=$2 tool=$3 fixture=$4 n=$5
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../cli/expect.sh"
source "$here/refs.sh"
require_test_device "$vinf"
# Tolerances: of N ranks against one process (losses, gradient norms, parameters), and of a run
# against itself resumed ("0 0" and 0: bit for bit). On CUDA the products are bf16 by default.
near=(1e-5 1e-4) same=(0 0) same_rel=0
if [ "$test_device" = cuda ]; then near=(1e-3 1e-2) same=(1e-3 1e-2) same_rel=1e-2; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

params=model/diffusion_pytorch_model.safetensors
train_settings() {  # train_settings DIR: the settings of every run, on the data in DIR
  setup=(--model "$fixture" --data "$1/data.h5" --train.steps 4 --train.bucket-mb 0.05)
  common=("${setup[@]}" --train.batch 4 --train.lr 1e-3)
}
# The data and the one-process runs the ranks are compared with: f32, the temporal layers alone,
# and bf16 (mixed precision).
make_train_refs() {
  local d=$1
  "$tool" train-data "$d/data.h5" 6 4 32 || { echo "FAIL: train-data"; return 1; }
  train_settings "$d"
  "$vinf" train "${common[@]}" --out "$d/one" 2>"$d/one.log" || { echo "FAIL: one process exited $?"; tail -5 "$d/one.log"; return 1; }
  "$vinf" train "${common[@]}" --train.params temporal --out "$d/t1" 2>/dev/null || { echo "FAIL: temporal, one process"; return 1; }
  "$vinf" train "${common[@]}" --dtype bf16 --out "$d/b1" 2>/dev/null || { echo "FAIL: bf16, one process"; return 1; }
}
shared_refs "$work" "$n" make_train_refs
train_settings "$refs"

# losses and gradient norms of two log.csv files, to relative tolerances (0 0: equal as printed).
same_log() {
  paste -d, "$1/log.csv" "$2/log.csv" | awk -F, -v tl="$3" -v tn="$4" 'NR > 1 { d = $2 - $7; if (d < 0) d = -d;
      if (d > tl * $7) bad = 1; e = $4 - $9; if (e < 0) e = -e; if (e > tn * $9) bad = 1; rows++ }
      END { exit bad || rows != 4 }' \
    && echo "ok: $1 and $2 have the same losses and gradient norms ($3, $4)" \
    || { echo "FAIL: $1 and $2 differ in loss or gradient norm"; paste -d, "$1/log.csv" "$2/log.csv"; fails=$((fails + 1)); }
}
same_params() {
  "$tool" compare "$1/$params" "$2/$params" "$3" > "$work/compare.log" \
    && echo "ok: $1 and $2 trained the same parameters ($3)" \
    || { echo "FAIL: $1 and $2 differ in their parameters"; grep FAIL "$work/compare.log" | head -5; fails=$((fails + 1)); }
}

for z in 0 1 2; do
  "$mpiexec" -np "$n" "$vinf" train "${common[@]}" --train.micro-batch 1 --train.zero "$z" --out "$work/z$z" --checkpoint.every 2 \
    2>"$work/z$z.log" || { echo "FAIL: mpirun -np $n vinf train --train.zero $z exited $?"; tail -5 "$work/z$z.log"; exit 1; }
  same_log "$work/z$z" "$refs/one" "${near[@]}"
  same_params "$work/z$z" "$refs/one" 4e-3
  [ -f "$work/z$z/checkpoints/step-000002.h5" ] && [ -f "$work/z$z/checkpoints/step-000004.h5" ] \
    || { echo "FAIL: --checkpoint.every 2 did not write steps 2 and 4"; fails=$((fails + 1)); }
  jq -e ".layout.ranks == $n and .layout.zero == $z" "$work/z$z/run.json" > /dev/null \
    || { echo "FAIL: run.json does not record $n ranks at ZeRO $z"; fails=$((fails + 1)); }
  # Every bucket of every step was started by the backward pass as it completed it (overlap).
  jq -e '.layout.buckets > 1 and .layout.buckets_started == 4 * .layout.buckets and
         .layout.buckets_started_in_backward == .layout.buckets_started' "$work/z$z/run.json" > /dev/null \
    && echo "ok: ZeRO $z: all $(jq .layout.buckets_started "$work/z$z/run.json") bucket reductions started during the backward pass" \
    || { echo "FAIL: ZeRO $z: buckets not started by the backward pass"; jq .layout "$work/z$z/run.json"; fails=$((fails + 1)); }
done
expect 0 "training state {\"step\":4,\"optimizer_steps\":4,\"trained\":1349636,\"world_size\":$n,\"zero\":2" -- \
  "$vinf" inspect "$work/z2/checkpoints/step-000004.h5"
if [ "$n" -gt 1 ]; then
  grep -q "$n data-parallel ranks, ZeRO stage 1, [0-9]* gradient bucket(s)" "$work/z1.log" \
    || { echo "FAIL: the log does not describe the layout"; head -5 "$work/z1.log"; fails=$((fails + 1)); }
fi

# Activation checkpointing (each block run again in the backward pass) over the ranks: the same
# training, and the buckets still started as the re-run blocks complete their gradients.
"$mpiexec" -np "$n" "$vinf" train "${common[@]}" --train.micro-batch 1 --train.checkpoint-activations --out "$work/ca" \
  2>/dev/null || { echo "FAIL: checkpointed activations over $n ranks"; exit 1; }
same_log "$work/ca" "$refs/one" "${near[@]}"
jq -e '.layout.buckets_started_in_backward == .layout.buckets_started' "$work/ca/run.json" > /dev/null \
  && echo "ok: with checkpointed activations too" || { echo "FAIL: checkpointed activations: buckets not started by the backward pass"; fails=$((fails + 1)); }

# Frozen parameters: only the temporal layers trained, and only their gradients sent (ZeRO 0's
# all-reduces carry the trained gradients and the loss's sum, 8 bytes, each step).
"$mpiexec" -np "$n" "$vinf" train "${common[@]}" --train.params temporal --train.micro-batch 1 --train.zero 0 --out "$work/tn" \
  2>/dev/null || { echo "FAIL: temporal over $n ranks"; exit 1; }
same_log "$work/tn" "$refs/t1" "${near[@]}"
same_params "$work/tn" "$refs/t1" 4e-3
trained=$(jq .trained_parameters "$work/tn/train.json")
sent=$(jq '.communication_rank0["all-reduce"].bytes // 0' "$work/tn/run.json")
# (On CUDA the loss's sum goes through the host's communicator, not the gradients'.)
want=$((n > 1 ? 4 * (4 * trained + 8) : 0))
[ "$test_device" = cuda ] && want=$((n > 1 ? 16 * trained : 0))
[ "$trained" -gt 0 ] && [ "$trained" -lt 1349636 ] && [ "$sent" -eq "$want" ] \
  && echo "ok: $trained trained parameters, $sent bytes all-reduced in 4 steps" \
  || { echo "FAIL: $trained trained parameters, $sent bytes all-reduced, expected $want"; fails=$((fails + 1)); }

# Mixed precision: bf16 products and model copies, f32 master weights (sharded at ZeRO 2: each rank
# keeps its shard's), the parameters all-gathered in bf16. A rounding-order difference in an
# activation flips its bf16 rounding now and then (2^-8 of it), so N ranks follow one process to
# bf16's precision, not f32's: losses to 1e-3, gradient norms to 1e-2 (measured at 2 ranks: 2e-4
# and 1.2e-3 after 4 steps); the exported f32 master weights to 4e-3 as above.
"$mpiexec" -np "$n" "$vinf" train "${common[@]}" --dtype bf16 --train.micro-batch 1 --train.zero 2 --out "$work/bn" \
  2>/dev/null || { echo "FAIL: bf16 over $n ranks"; exit 1; }
same_log "$work/bn" "$refs/b1" 1e-3 1e-2
same_params "$work/bn" "$refs/b1" 4e-3
trained=$(jq .trained_parameters "$work/bn/train.json")
jq -e --argjson t "$trained" '.layout.precision == "bf16" and .memory_per_rank.trained_parameter_bytes == 2 * $t and
       .memory_per_rank.master_weight_bytes * 2 == .memory_per_rank.optimizer_state_bytes' "$work/bn/run.json" > /dev/null \
  && echo "ok: bf16 model copies, f32 master weights of the optimizer's shard ($(jq .memory_per_rank.master_weight_bytes "$work/bn/run.json") bytes)" \
  || { echo "FAIL: run.json's memory at bf16"; jq .memory_per_rank "$work/bn/run.json"; fails=$((fails + 1)); }
# The parameters travel in bf16: rank 0 receives the other shards' 2 bytes per element at each of
# the 4 steps, then their f32 master weights (4 bytes) once, for the export. Rank 0's shard is the
# first 1/N of the 16384-element chunks.
b16=$(jq '.communication_rank0["all-gather"].bytes // 0' "$work/bn/run.json")
chunks=$(((trained + 16383) / 16384)); s0=$((chunks / n * 16384)); [ "$s0" -gt "$trained" ] && s0=$trained
[ "$b16" -eq $((12 * (trained - s0))) ] && echo "ok: all-gathered $b16 bytes (bf16 parameters, f32 export)" \
  || { echo "FAIL: all-gathered $b16 bytes, expected $((12 * (trained - s0)))"; fails=$((fails + 1)); }
VINF_FAULT_STEP="rank=0,step=2,signal=TERM" "$mpiexec" -np "$n" "$vinf" train "${common[@]}" --dtype bf16 \
  --train.micro-batch 1 --train.zero 2 --out "$work/bstop" 2>/dev/null
[ -f "$work/bstop/checkpoints/step-000002.h5" ] || { echo "FAIL: no bf16 checkpoint after the stop"; exit 1; }
expect 2 'precision was "bf16", now "f32"' -- "$mpiexec" -np "$n" "$vinf" train "${common[@]}" --dtype f32 \
  --train.micro-batch 1 --out "$work/bstop" --resume auto
expect 0 "" -- "$mpiexec" -np "$n" "$vinf" train "${common[@]}" --dtype bf16 --train.micro-batch 1 --train.zero 2 \
  --out "$work/bstop" --resume auto
same_log "$work/bstop" "$work/bn" "${same[@]}"
"$tool" compare-relative "$work/bstop/$params" "$work/bn/$params" "$same_rel" || fails=$((fails + 1))

# Stopped by SIGTERM after step 2 (rank n-1 gets it: the ranks agree to stop), then resumed.
VINF_FAULT_STEP="rank=$((n - 1)),step=2,signal=TERM" "$mpiexec" -np "$n" "$vinf" train "${common[@]}" \
  --train.micro-batch 1 --train.zero 2 --out "$work/stop" 2>"$work/stop.log"
rc=$?
[ "$rc" -eq 75 ] && echo "ok: the stopped run exited 75" || { echo "FAIL: the stopped run exited $rc"; tail -5 "$work/stop.log"; fails=$((fails + 1)); }
[ -f "$work/stop/checkpoints/step-000002.h5" ] || { echo "FAIL: no checkpoint after the stop"; ls -R "$work/stop"; exit 1; }
cp -r "$work/stop" "$work/other"
expect 0 "" -- "$mpiexec" -np "$n" "$vinf" train "${common[@]}" --train.micro-batch 1 --train.zero 2 --out "$work/stop" --resume auto
same_log "$work/stop" "$work/z2" "${same[@]}"
"$tool" compare-relative "$work/stop/$params" "$work/z2/$params" "$same_rel" || fails=$((fails + 1))

# The same checkpoint resumed on another number of ranks and ZeRO stage.
m=$((n == 1 ? 2 : n - 1))
expect 0 "" -- "$mpiexec" -np "$m" "$vinf" train "${common[@]}" --train.micro-batch 1 --train.zero 1 --out "$work/other" --resume auto
same_log "$work/other" "$work/z2" "${near[@]}"
same_params "$work/other" "$work/z2" 4e-3

# Damaged checkpoints: refused by name, or passed over for an older one.
cp "$work/other/checkpoints/step-000002.h5" "$work/flipped.h5"
"$tool" h5-flip "$work/flipped.h5" /adam_v 1 || exit 1
expect 2 "flipped.h5" -- "$mpiexec" -np "$n" "$vinf" train "${common[@]}" --out "$work/x1" \
  --train.micro-batch 1 --resume "$work/flipped.h5"
mkdir -p "$work/fall/checkpoints"
cp "$work/stop/checkpoints/step-000002.h5" "$work/fall/checkpoints/"
cp "$work/flipped.h5" "$work/fall/checkpoints/step-000003.h5"
expect 0 "skipped damaged or foreign checkpoints" -- "$mpiexec" -np "$n" "$vinf" train "${common[@]}" --out "$work/fall" \
  --resume auto --train.micro-batch 1 --train.zero 2
same_log "$work/fall" "$work/z2" "${same[@]}"

# Refusals, on every rank alike.
expect 2 "belongs to a run with other settings: lr was 0.001, now 0.002" -- "$mpiexec" -np "$n" "$vinf" train "${setup[@]}" \
  --train.batch 4 --train.micro-batch 1 --train.lr 2e-3 --out "$work/x2" --resume "$work/z2/checkpoints/step-000004.h5"
expect 2 "option '--train.zero' must be in [0, 2], got '3'" -- "$vinf" train "${common[@]}" --out "$work/x3" --train.zero 3
if [ "$n" -gt 1 ]; then
  expect 2 "fewer than the $n ranks" -- "$mpiexec" -np "$n" "$vinf" train "${setup[@]}" --out "$work/x4" --train.batch 1 \
    --train.micro-batch 1
  expect 2 "--train.batch 5 does not divide over the $n ranks" -- "$mpiexec" -np "$n" "$vinf" train "${setup[@]}" \
    --out "$work/x5" --train.batch 5
fi
for d in x3 x4 x5; do [ -e "$work/$d" ] && { echo "FAIL: a refused run made $d"; fails=$((fails + 1)); }; done

[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "train over $n rank(s): ok"
