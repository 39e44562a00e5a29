#!/usr/bin/env bash
# The Wan2.1 family on the command line: `vinf forward` on the transformer against diffusers'
# numbers (a transformer directory or the pipeline root), and a clear message with exit status 2
# for every rejected model, input or layout.
# usage: test_wan_cli.sh VINF TEST_TOOL WAN_FIXTURE_DIR
set -u
vinf=$1 tool=$2 fixture=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/expect.sh"

inputs=$fixture/inputs.safetensors
ref=$fixture/ref.safetensors

# The transformer at both timesteps (F32 937.5 and 301.25, written by index) within 1e-4.
expect 0 "wrote $work/x.safetensors" -- "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/x.safetensors" --device cpu
expect 0 "ok noise_pred.t1" -- "$tool" compare "$work/x.safetensors" "$ref" 1e-4 noise_pred.t0 noise_pred.t1
# The pipeline root finds transformer/ itself.
expect 0 "40864 parameters" -- "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/root.safetensors" --device cpu
expect 0 "ok noise_pred.t1" -- "$tool" compare "$work/root.safetensors" "$work/x.safetensors" 0 noise_pred.t0 noise_pred.t1
expect 0 "Wan2.1 transformer" -- "$vinf" forward --help
# The UNet's settings do not change a Wan call: said, not silently dropped.
expect 0 "--vi.* settings are for the UNet family" -- "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/vi.safetensors" --device cpu --vi.local-frames 4

# Refused inputs and layouts, with nothing written.
expect 2 "has no tensor 'hidden_states'" -- "$vinf" forward --model "$fixture/transformer" --inputs "$ref" --out "$work/z.safetensors" --device cpu
expect 2 "runs on one rank in this version" -- "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/z.safetensors" --device cpu --parallel.cfg 2
expect 2 "runs on one rank in this version" -- "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/z.safetensors" --device cpu --vi.emulate-clips 2
expect 2 "--dump-temporal is for the UNet" -- "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/z.safetensors" --device cpu --dump-temporal "$work/d"
# Inputs that do not fit the transformer: the UNet fixture's (4 channels, other names), another width.
mkdir -p "$work/i2v"
cp "$fixture/transformer/diffusion_pytorch_model.safetensors" "$work/i2v/"
sed 's/"image_dim": null/"image_dim": 1280/' "$fixture/transformer/config.json" > "$work/i2v/config.json"
expect 2 "image-to-video" -- "$vinf" forward --model "$work/i2v" --inputs "$inputs" --out "$work/z.safetensors" --device cpu
mkdir -p "$work/short"
cp "$fixture/transformer/config.json" "$work/short/"
expect 2 "diffusion_pytorch_model.safetensors" -- "$vinf" forward --model "$work/short" --inputs "$inputs" --out "$work/z.safetensors" --device cpu
[ ! -e "$work/z.safetensors" ] || { echo "FAIL: a refused run left $work/z.safetensors"; fails=$((fails + 1)); }

# make-model writes a random transformer in the real layout, which inspect describes and forward runs.
expect 0 "wrote the Wan transformer $work/rand" -- "$vinf" make-model --preset wan-tiny --seed 3 --out "$work/rand"
expect 0 "40,864 parameters; check: every parameter" -- "$vinf" inspect "$work/rand"
expect 0 "wrote $work/rand.safetensors" -- "$vinf" forward --model "$work/rand" --inputs "$inputs" --out "$work/rand.safetensors" --device cpu
expect 1 "FAIL noise_pred.t0" -- "$tool" compare "$work/rand.safetensors" "$ref" 1e-4 noise_pred.t0
expect 2 "already exists" -- "$vinf" make-model --preset wan-tiny --out "$work/rand"
expect 2 "wan-tiny, wan-1.3b, wan-14b" -- "$vinf" make-model --preset wan-7b --out "$work/w7"
expect 0 "UniPCMultistepScheduler" -- "$vinf" inspect "$fixture"

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
