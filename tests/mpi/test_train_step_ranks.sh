#!/usr/bin/env bash
# `vinf train-step` under mpirun -np N: the ranks split the batch and sum their gradients, so the
# result equals one process on the whole batch (to the order of the sums: relative 1e-5 for the
# gradients; the parameters after the step element by element, vinf_test_tool compare-adamw: the
# first AdamW step moves each by lr g / (|g| + eps), so where a gradient is rounding's distance
# from zero its sign, and the step's, is rounding's too). At 1 and 2 ranks the tiny model's step
# also matches PyTorch's (tests/fixtures/tiny-unet3d/train). Bad inputs exit 2.
# usage: test_train_step_ranks.sh MPIEXEC VINF TEST_TOOL FIXTURE_MODEL_DIR N
set -u
mpiexec=$1 vinf=$2 tool=$3 fixture=$4 n=$5
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../cli/expect.sh"
require_test_device "$vinf"
if [ "$test_device" = cuda ]; then
  echo "skipped: training runs on the CPU (its optimizer works in host memory)"; exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ref=$fixture/train/ref_train_step.safetensors

# A batch of 4 (each rank gets 1-2 samples at 3 and 4 ranks): N ranks against one process.
"$tool" train-batch "$ref" "$work/b4.safetensors" 4 || exit 1
"$vinf" train-step --model "$fixture" --inputs "$work/b4.safetensors" --out "$work/one.safetensors" "${device_args[@]}" \
  2>"$work/one.log" || { echo "FAIL: one-process train-step exited $?"; tail -5 "$work/one.log"; exit 1; }
"$mpiexec" -np "$n" "$vinf" train-step --model "$fixture" --inputs "$work/b4.safetensors" --out "$work/ranks.safetensors" \
  "${device_args[@]}" 2>"$work/ranks.log" || { echo "FAIL: mpirun -np $n vinf train-step exited $?"; tail -5 "$work/ranks.log"; exit 1; }
grep -q "batch 4 over $n rank(s)" "$work/ranks.log" || { echo "FAIL: the log does not say the batch is split over $n ranks"; fails=$((fails + 1)); }
"$tool" compare-relative "$work/ranks.safetensors" "$work/one.safetensors" 1e-5 loss grad_norm grad. || fails=$((fails + 1))
"$tool" compare-adamw "$work/ranks.safetensors" "$work/one.safetensors" 1e-3 || fails=$((fails + 1))

if [ "$n" -le 2 ]; then
  # PyTorch's step on the fixture: loss, norm and every gradient to 1e-4 of each tensor's largest
  # element, the parameters after the step as above (tests/train has a tighter bound per element).
  "$mpiexec" -np "$n" "$vinf" train-step --model "$fixture" --inputs "$ref" --out "$work/ref.safetensors" "${device_args[@]}" \
    2>/dev/null || { echo "FAIL: train-step on the fixture exited $?"; exit 1; }
  "$tool" compare-relative "$work/ref.safetensors" "$ref" 1e-4 loss grad_norm grad. || fails=$((fails + 1))
  "$tool" compare-adamw "$work/ref.safetensors" "$ref" 1e-3 || fails=$((fails + 1))
fi

if [ "$n" -eq 1 ]; then
  # Without the `adamw` metadata the [train] options set the optimizer: the fixture's settings
  # given as options reproduce the metadata's run exactly.
  "$tool" train-batch "$ref" "$work/plain.safetensors" 2 --no-adamw || exit 1
  "$vinf" train-step --model "$fixture" --inputs "$work/plain.safetensors" --out "$work/opts.safetensors" --train.lr 1e-3 \
    --train.weight-decay 1e-2 --train.clip-grad-norm 1 "${device_args[@]}" 2>/dev/null || { echo "FAIL: train-step with options exited $?"; exit 1; }
  "$tool" compare-relative "$work/opts.safetensors" "$work/ref.safetensors" 0 || fails=$((fails + 1))
  expect 2 "has no tensor 'x0'" -- "$vinf" train-step --model "$fixture" --inputs "$fixture/inputs.safetensors" --out "$work/x.safetensors"
  expect 2 "this command checks training against the CPU" -- "$vinf" train-step --model "$fixture" --inputs "$ref" --out "$work/x.safetensors" --device cuda
  expect 2 "this command computes in f32" -- "$vinf" train-step --model "$fixture" --inputs "$ref" --out "$work/x.safetensors" --dtype bf16
  expect 2 "option '--train.lr' must be in [0, 10], got '-1'" -- "$vinf" train-step --model "$fixture" --inputs "$work/plain.safetensors" --out "$work/x.safetensors" --train.lr -1
  expect 2 "--inputs is required" -- "$vinf" train-step --model "$fixture" --out "$work/x.safetensors"
  [ -e "$work/x.safetensors" ] && { echo "FAIL: a refused run left an output file"; fails=$((fails + 1)); }
else
  # More ranks than samples: refused before any work.
  "$tool" train-batch "$ref" "$work/b1.safetensors" 1 || exit 1
  expect 2 "at most 1 ranks can take part" -- "$mpiexec" -np "$n" "$vinf" train-step --model "$fixture" --inputs "$work/b1.safetensors" --out "$work/x.safetensors" "${device_args[@]}"
fi
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "train-step over $n rank(s): ok"
