#!/usr/bin/env bash
# The numbers of a fixed set of runs, one SHA-256 per output: the check that a restructuring
# changed no behaviour. Run it before and after a change on the same machine, with the same
# environment (BLAS core type, threads), and compare the two lists with diff: every line must be
# the same. It is not a CTest test: the numbers of a run depend on the machine's kernels, so a
# list recorded on one machine says nothing about another.
#
# What is hashed is what a run computes, never times or paths: latents.h5's /latents (h5dump's
# binary dump), the tensors of a safetensors file, the losses of train's log.csv, and the trained
# model's weights.
#
# usage: tests/tools/behaviour_snapshot.sh BUILD_DIR [OUT_FILE]   (default OUT_FILE: stdout)
# Needs: h5dump (hdf5-tools), mpirun, ffmpeg (prepare-data's test clips), python3.
set -euo pipefail
build=$(cd "${1:?usage: behaviour_snapshot.sh BUILD_DIR [OUT_FILE]}" && pwd)
out=${2:-/dev/stdout}
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")  # the tree it was built from
vinf=$build/src/app/vinf
[ -x "$vinf" ] || vinf=$build/vinf
[ -x "$vinf" ] || { echo "behaviour_snapshot: no vinf in $build" >&2; exit 2; }
tool=$build/tests/vinf_test_tool
[ -x "$tool" ] || tool=$(find "$build" -name vinf_test_tool -type f | head -1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
mpi=(mpirun --oversubscribe -np)
wan=$src/tests/fixtures/wan-tiny
unet=$src/tests/fixtures/tiny-unet3d

lines=()
# The /latents dataset of latents.h5 in DIR.
latents_hash() {
  h5dump -d /latents -b LE -o "$work/dump.bin" "$1/latents.h5" > /dev/null
  sha256sum < "$work/dump.bin" | cut -d' ' -f1
}
# Every tensor of a safetensors file, without its metadata (which names the program's version).
tensors_hash() {
  python3 - "$1" <<'PY'
import hashlib, json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
h = hashlib.sha256()
for name in sorted(k for k in head if k != "__metadata__"):
    e = head[name]
    a, b = e["data_offsets"]
    h.update(name.encode() + json.dumps([e["dtype"], e["shape"]]).encode() + raw[8 + n + a:8 + n + b])
print(h.hexdigest())
PY
}
record() { lines+=("$1 $2"); echo "behaviour_snapshot: $1 $2" >&2; }
gen() {  # NAME RANKS ARGS...: a generate run into $work/NAME, its latents recorded
  local name=$1 ranks=$2
  shift 2
  "${mpi[@]}" "$ranks" "$vinf" generate "$@" --out "$work/$name" -q > "$work/$name.log" 2>&1 ||
    { echo "behaviour_snapshot: $name failed:" >&2; grep -m3 "vinf" "$work/$name.log" >&2; exit 1; }
  record "$name" "$(latents_hash "$work/$name")"
}

tiny=(--model builtin:tiny --device cpu --video.height 32 --video.width 32 --output.video=false
      --prompt.text "a long road" --sampler.steps 3)
vi=(--vi.local-frames 2 --vi.global-frames 2)
gen plain 1 "${tiny[@]}" --video.frames 8 --vi.mode off
gen invariant-1 1 "${tiny[@]}" "${vi[@]}" --video.frames 12 --vi.mode invariant
gen invariant-3 3 "${tiny[@]}" "${vi[@]}" --video.frames 12 --vi.mode invariant
gen exact-3 3 "${tiny[@]}" "${vi[@]}" --video.frames 12 --vi.mode exact
gen cfg2-2 2 "${tiny[@]}" "${vi[@]}" --video.frames 12 --vi.mode invariant --parallel.cfg 2
gen windows 1 "${tiny[@]}" --video.frames 8 --long.mode windows --long.window 4 --long.stride 2
gen windows-3 3 "${tiny[@]}" --video.frames 8 --long.mode windows --long.window 4 --long.stride 2
gen fifo 1 "${tiny[@]}" --video.frames 3 --long.mode fifo --long.fifo-window 2 --long.fifo-partitions 2
gen fifo-2 2 "${tiny[@]}" --video.frames 3 --long.mode fifo --long.fifo-window 2 --long.fifo-partitions 2
# A job list of two videos over two replicas.
printf '%s\n' '{"seed": 7, "prompt": "a kite", "out": "kite"}' '{"seed": 2, "steps": 2, "prompt": "a boat", "out": "boat"}' \
  > "$work/jobs.jsonl"
"${mpi[@]}" 2 "$vinf" generate "${tiny[@]}" --video.frames 4 --vi.mode off --jobs "$work/jobs.jsonl" \
  --parallel.data 2 --out "$work/jobs" -q > "$work/jobs.log" 2>&1 ||
  { echo "behaviour_snapshot: jobs failed:" >&2; tail -5 "$work/jobs.log" >&2; exit 1; }
for d in "$work"/jobs/*/; do
  [ -f "$d/latents.h5" ] && record "jobs/$(basename "$d")" "$(latents_hash "$d")"
done
# Pipeline stages: the schedule split over two stages.
gen pipeline-2 2 "${tiny[@]}" --video.frames 4 --vi.mode off --parallel.pipeline 2

# The Wan family: generate on one rank, exact mode and the windows over ranks, forward.
wan_args=(--model "$wan" --prompt.text "A beagle swims in the ocean with coral reefs." --prompt.negative "blurry"
          --sampler.guidance 5 --prompt.max-length 24 --device cpu --video.frames 9 --video.height 32
          --video.width 32 --sampler.steps 3 --output.video=false)
gen wan 1 "${wan_args[@]}"
gen wan-exact-2 2 "${wan_args[@]}" --vi.mode exact
gen wan-cfg-2 2 "${wan_args[@]}" --parallel.cfg 2
gen wan-windows-3 3 "${wan_args[@]}" --vi.mode invariant --vi.local-frames 1 --vi.global-frames 1
"$vinf" forward --model "$wan/transformer" --inputs "$wan/inputs.safetensors" --out "$work/wan-forward.safetensors" \
  --device cpu > /dev/null 2>&1
record wan-forward "$(tensors_hash "$work/wan-forward.safetensors")"
"$vinf" forward --model "$unet" --inputs "$unet/inputs.safetensors" --out "$work/unet-forward.safetensors" \
  --device cpu --vi.mode off > /dev/null 2>&1
record unet-forward "$(tensors_hash "$work/unet-forward.safetensors")"

# Training: one train-step on one and on two ranks, and three steps of vinf train (AdamW, ZeRO 2
# over two ranks) on a prepare-data file of test clips.
"$tool" train-batch "$unet/train/ref_train_step.safetensors" "$work/b4.safetensors" 4
for n in 1 2; do
  "${mpi[@]}" "$n" "$vinf" train-step --model "$unet" --inputs "$work/b4.safetensors" --out "$work/step$n.safetensors" \
    --device cpu > /dev/null 2>&1
  record "train-step-$n" "$(tensors_hash "$work/step$n.safetensors")"
done
"$vinf" make-model --preset tiny --layout pipeline --out "$work/pipe" > /dev/null 2>&1
mkdir -p "$work/videos"
ffmpeg -v error -f lavfi -i testsrc=size=64x64:rate=8 -t 2 -pix_fmt yuv420p "$work/videos/a.mp4"
printf 'a.mp4\ta test pattern moving\n' > "$work/captions.tsv"
"$vinf" prepare-data "$work/videos" "$work/captions.tsv" --model "$work/pipe" --out "$work/data.h5" \
  --data.width 64 --data.height 64 --data.frames 8 > /dev/null 2>&1
record prepare-data "$(h5dump -d /latents -b LE -o "$work/data.bin" "$work/data.h5" > /dev/null && sha256sum < "$work/data.bin" | cut -d' ' -f1)"
for n in 1 2; do
  "${mpi[@]}" "$n" "$vinf" train --model "$work/pipe" --data "$work/data.h5" --out "$work/train$n" --train.steps 3 \
    --train.batch 2 --train.lr 1e-3 --checkpoint.every 2 -q > /dev/null 2>&1
  record "train-$n-loss" "$(cut -d, -f1-4 "$work/train$n/log.csv" | sha256sum | cut -d' ' -f1)"
  record "train-$n-model" "$(tensors_hash "$work/train$n/model/unet/diffusion_pytorch_model.safetensors")"
done

printf '%s\n' "${lines[@]}" > "$out"
