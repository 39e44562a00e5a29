#!/usr/bin/env bash
# The model commands end to end: forward against diffusers' numbers, make-model, inspect, and a
# clear message with exit status 2 for every rejected model or input.
# usage: test_model_cli.sh VINF TEST_TOOL FIXTURE_MODEL_DIR
set -u
vinf=$1 tool=$2 fixture=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/expect.sh"

inputs=$fixture/inputs.safetensors
ref=$fixture/ref_plain.safetensors

# These runs compare numbers, so they name the CPU: on a GPU node auto would pick CUDA in bf16.
# (The same runs on a GPU are the gpu.* tests and scripts/gpu-check.)
# The acceptance run: the plain model reproduces diffusers within 1e-4.
expect 0 "wrote $work/x.safetensors" -- "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/x.safetensors" --vi.mode off --device cpu
expect 0 "ok noise_pred.t500" -- "$tool" compare "$work/x.safetensors" "$ref" 1e-4 noise_pred.t900 noise_pred.t500
expect 0 "peak memory" -- "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/y.safetensors" --vi.mode off --device cpu

# Options and inputs.
expect 0 "--vi.mode" -- "$vinf" forward --help
expect 2 "--model is required" -- "$vinf" forward --inputs "$inputs" --out "$work/z.safetensors"
# The default mode is invariant: it runs (one clip, so no bytes move) and says so.
expect 0 "--vi.mode invariant, 1 clip(s)" -- "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/inv.safetensors"
expect 2 "cannot read $work/none.json" -- "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/z.safetensors" --import-vi-config "$work/none.json"
expect 2 "--vi.mode must be invariant, compat, exact or off, got 'sideways'" -- "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/z.safetensors" --vi.mode sideways
expect 2 "--dtype must be auto, f32, bf16 or f16, got 'f8'" -- "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/z.safetensors" --vi.mode off --dtype f8
# --dtype auto (the default) is f32 on the CPU; f16 runs on CUDA only; bf16 on CPUs with AVX-512
# BF16 (VINF_CPU_LEVEL=v3 hides AVX-512: what every other CPU says).
expect 2 "--dtype f16 runs on CUDA only" -- "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/z.safetensors" --vi.mode off --device cpu --dtype f16
expect 2 "--dtype bf16 on the CPU needs AVX-512 BF16" -- env VINF_CPU_LEVEL=v3 "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/z.safetensors" --vi.mode off --device cpu --dtype bf16
if grep -qw avx512_bf16 /proc/cpuinfo && [ -z "${VINF_CPU_LEVEL:-}${ONEDNN_MAX_CPU_ISA:-}" ]; then
  # bf16 weights, f32 activations: diffusers' f32 numbers (of order 1) within 0.06, twice the 0.029
  # measured on a Zen 4; and not the f32 run's numbers.
  expect 0 " as bf16 weights, f32 activations on cpu" -- "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/bf16.safetensors" --vi.mode off --device cpu --dtype bf16
  expect 0 "ok noise_pred.t500" -- "$tool" compare "$work/bf16.safetensors" "$ref" 0.06 noise_pred.t900 noise_pred.t500
  expect 1 "FAIL noise_pred.t500" -- "$tool" compare "$work/bf16.safetensors" "$work/x.safetensors" 1e-3 noise_pred.t500
else
  echo "skipped: bf16 on the CPU (this CPU x avx512_bf16, or VINF_CPU_LEVEL / ONEDNN_MAX_CPU_ISA hide it)"
fi
expect 0 " as f32 on cpu" -- "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/auto.safetensors" --vi.mode off --device cpu --dtype auto
# --tf32 concerns CUDA's f32 GEMMs and convolutions only: on the CPU the numbers do not move.
expect 0 "--tf32" -- "$vinf" forward --help
expect 0 " as f32 on cpu" -- "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/tf32.safetensors" --vi.mode off --device cpu --tf32
expect 0 "ok noise_pred.t500" -- "$tool" compare "$work/tf32.safetensors" "$work/x.safetensors" 0 noise_pred.t900 noise_pred.t500
expect 2 "--device must be auto, cpu or cuda, got 'tpu'" -- "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/z.safetensors" --vi.mode off --device tpu
expect 2 "has no tensor 'sample'" -- "$vinf" forward --model "$fixture" --inputs "$ref" --out "$work/z.safetensors" --vi.mode off
expect 2 "does not exist" -- "$vinf" forward --model "$work/nowhere" --inputs "$inputs" --out "$work/z.safetensors" --vi.mode off
expect 2 "option '--inputs': '$work/none.safetensors' does not exist" -- "$vinf" forward --model "$fixture" --inputs "$work/none.safetensors" --out "$work/z.safetensors" --vi.mode off
[ ! -e "$work/z.safetensors" ] || { echo "FAIL: a failed run left $work/z.safetensors"; fails=$((fails + 1)); }

# --config FILE: the long option names as keys, [vi] for --vi.*; the command line wins over the
# file; a key the command does not have, a bad value or a repeated key is refused with the file,
# the line and the key.
cat > "$work/forward.ini" <<EOF
model = $fixture
inputs = $inputs   # the fixture's inputs
out = $work/not-this.safetensors
device = cpu
[vi]
mode = off
EOF
expect 0 "--vi.mode off, 1 clip(s)" -- "$vinf" forward --config "$work/forward.ini" --out "$work/cfg.safetensors"
expect 0 "max |diff| 0 " -- "$tool" compare "$work/cfg.safetensors" "$work/x.safetensors" 0 noise_pred.t900 noise_pred.t500
[ ! -e "$work/not-this.safetensors" ] && echo "ok: --out on the command line wins over the file" \
  || { echo "FAIL: the file's out was written"; fails=$((fails + 1)); }
expect 0 "--vi.mode invariant, 1 clip(s)" -- "$vinf" forward --config "$work/forward.ini" --out "$work/cfg2.safetensors" --vi.mode invariant
expect 0 "--config FILE" -- "$vinf" forward --help
printf 'model = %s\n[vi]\nmdoe = off\n' "$fixture" > "$work/typo.ini"
expect 2 "--config $work/typo.ini line 3: unknown key 'mdoe' in [vi] (vinf forward has no option --vi.mdoe; see vinf forward --help" -- \
  "$vinf" forward --config "$work/typo.ini" --inputs "$inputs" --out "$work/z.safetensors"
printf '# comment\n\n[vi]\nlocal-frames = many\n' > "$work/value.ini"
expect 2 "--config $work/value.ini line 4: the argument ('many') for option 'vi.local-frames' is invalid" -- \
  "$vinf" forward --config "$work/value.ini" --model "$fixture" --inputs "$inputs" --out "$work/z.safetensors"
printf 'out = a.safetensors\ndevice = cpu\nout = b.safetensors\n' > "$work/twice.ini"
expect 2 "--config $work/twice.ini lines 1, 3: option 'out' cannot be specified more than once" -- \
  "$vinf" forward --config "$work/twice.ini" --model "$fixture" --inputs "$inputs"
printf 'model %s\n' "$fixture" > "$work/syntax.ini"
expect 2 "--config $work/syntax.ini line 1: expected \`key = value\` or a [section] header" -- \
  "$vinf" forward --config "$work/syntax.ini" --inputs "$inputs" --out "$work/z.safetensors"
expect 2 "option '--config': '$work/none.ini' does not exist" -- "$vinf" forward --config "$work/none.ini"
[ ! -e "$work/z.safetensors" ] || { echo "FAIL: a refused run left $work/z.safetensors"; fails=$((fails + 1)); }

# Every kind of broken model is refused with the file and the key named.
"$tool" broken-models "$fixture" "$work/broken" || { echo "FAIL: could not write the broken models"; exit 1; }
run_broken() { "$vinf" forward --model "$work/broken/$1" --inputs "$inputs" --out "$work/z.safetensors" --vi.mode off; }
expect 2 "parameter(s) the config needs are missing: 'mid_block.temp_convs.1.conv3.3.weight'" -- run_broken missing-key
expect 2 "are not parameters of the model in $work/broken/unexpected-key/config.json: 'mid_block.extra_layer.weight'; check the config, or pass --ignore-unexpected-weights" -- run_broken unexpected-key
expect 0 "warning: $work/broken/unexpected-key/diffusion_pytorch_model.safetensors: ignored 1 tensor(s)" -- "$vinf" forward --model "$work/broken/unexpected-key" --inputs "$inputs" --out "$work/u.safetensors" --vi.mode off --ignore-unexpected-weights
expect 2 "tensor 'up_blocks.1.attentions.0.proj_in.weight' has shape [1025] but the config" -- run_broken bad-shape
expect 2 "tensor 'conv_in.bias' has dtype I64; model weights must be F32, F16 or BF16" -- run_broken bad-dtype
expect 2 "tensor 'down_blocks.1.resnets.0.conv1.weight' holds a NaN or infinity (element 7 of" -- run_broken nan-weight
expect 2 "the file is truncated or corrupt" -- run_broken truncated
expect 2 "bad-header/diffusion_pytorch_model.safetensors: the header is not valid JSON" -- run_broken bad-header
expect 2 "unknown block type 'SpiralBlock3D' in down_block_types[1]" -- run_broken unknown-block
expect 2 "config key 'act_fn' is \"gelu\"; vinf supports only \"silu\"" -- run_broken unsupported-config
expect 2 "has neither diffusion_pytorch_model.safetensors nor" -- run_broken no-weights
[ ! -e "$work/z.safetensors" ] || { echo "FAIL: a failed run left $work/z.safetensors"; fails=$((fails + 1)); }

# Finite but huge weights make a step's latents infinite: the run stops at step 1, and --debug names
# the first module whose output was not finite (the resnet holding the weights).
expect 0 "wrote" -- "$vinf" make-model --preset tiny --seed 7 --out "$work/pipe" --layout pipeline
huge=(generate --model "$work/pipe" --model.unet "$work/broken/huge-weight" --device cpu --video.frames 4
      --video.height 32 --video.width 32 --sampler.steps 2 --prompt.text "a lighthouse" --vi.local-frames 2
      --vi.global-frames 2 --quiet)
expect 1 "step 1 of 2 (t=999) made the latents NaN or infinite on rank 0 (first in frame 0); run with --debug to name" -- \
  "$vinf" "${huge[@]}" --out "$work/huge"
expect 1 "the first UNet module whose output was not finite on that rank: mid_block.resnets.0;" -- \
  "$vinf" "${huge[@]}" --out "$work/huge-debug" --debug
[ ! -e "$work/huge-debug/latents.h5" ] || { echo "FAIL: the NaN run wrote latents.h5"; fails=$((fails + 1)); }

# make-model: the tiny preset has the fixture's shape, so the fixture inputs run on it.
expect 0 "1349636 parameters" -- "$vinf" make-model --preset tiny --seed 7 --out "$work/tiny"
expect 2 "already exists; pass --overwrite" -- "$vinf" make-model --preset tiny --seed 7 --out "$work/tiny"
expect 0 "wrote" -- "$vinf" make-model --preset tiny --seed 7 --out "$work/tiny" --overwrite
expect 0 "wrote" -- "$vinf" make-model --preset tiny --seed 7 --out "$work/tiny-again"
cmp -s "$work/tiny/diffusion_pytorch_model.safetensors" "$work/tiny-again/diffusion_pytorch_model.safetensors" \
  && echo "ok: the same seed gives the same weights" || { echo "FAIL: make-model is not deterministic"; fails=$((fails + 1)); }
expect 0 "wrote" -- "$vinf" forward --model "$work/tiny" --inputs "$inputs" --out "$work/t.safetensors" --vi.mode off
expect 2 "--preset 'huge' is not a preset; the presets are tiny, small, vc2, wan-tiny, wan-1.3b and wan-14b, and the image-to-video" -- "$vinf" make-model --preset huge --out "$work/h"
expect 2 "--preset is required" -- "$vinf" make-model --out "$work/h"
expect 0 "F16 (470 tensors)" -- bash -c "'$vinf' make-model --preset tiny --dtype f16 --out '$work/tiny16' && '$vinf' inspect '$work/tiny16'"
expect 0 "wrote" -- "$vinf" forward --model "$work/tiny16" --inputs "$inputs" --out "$work/t16.safetensors" --vi.mode off

# make-model and inspect take --config too.
printf 'preset = tiny\nseed = 7\nout = %s\n' "$work/not-here" > "$work/make.ini"
expect 0 "wrote" -- "$vinf" make-model --config "$work/make.ini" --out "$work/tiny-ini"
cmp -s "$work/tiny/diffusion_pytorch_model.safetensors" "$work/tiny-ini/diffusion_pytorch_model.safetensors" && [ ! -e "$work/not-here" ] \
  && echo "ok: make-model --config gives the command line's model" || { echo "FAIL: make-model --config"; fails=$((fails + 1)); }
printf 'preset = tiny\nlayers = pipeline\n' > "$work/make-typo.ini"
expect 2 "--config $work/make-typo.ini line 2: unknown key 'layers' (vinf make-model has no option --layers" -- \
  "$vinf" make-model --config "$work/make-typo.ini" --out "$work/h"
expect 0 "--config FILE" -- "$vinf" make-model --help
printf 'path = %s\n' "$ref" > "$work/inspect.ini"
expect 0 "noise_pred.t900" -- "$vinf" inspect --config "$work/inspect.ini"
printf 'file = %s\n' "$ref" > "$work/inspect-typo.ini"
expect 2 "--config $work/inspect-typo.ini line 1: unknown key 'file' (vinf inspect has no option --file" -- \
  "$vinf" inspect --config "$work/inspect-typo.ini"
expect 0 "--config FILE" -- "$vinf" inspect --help

# inspect.
expect 0 "total                       470        1,349,636" -- "$vinf" inspect "$fixture"
expect 0 "check: every parameter the config implies is present" -- "$vinf" inspect "$fixture"
expect 0 "noise_pred.t900" -- "$vinf" inspect "$ref"
expect 2 "parameter(s) the config needs are missing" -- "$vinf" inspect "$work/broken/missing-key"
expect 2 "does not exist" -- "$vinf" inspect "$work/nothing-here"
expect 2 "neither a model directory, a .safetensors file nor an HDF5 file" -- "$vinf" inspect "$fixture/config.json"

[ "$fails" -eq 0 ] || { echo "$fails model CLI check(s) failed"; exit 1; }
echo "all model CLI checks passed"
