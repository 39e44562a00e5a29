#!/usr/bin/env bash
# `vinf decode`: the VAE decoder against diffusers' own output (tests/fixtures/tiny-unet3d/vae),
# the same numbers for any frames-per-call (up to f32 rounding) and for the older attention key
# names, and a clear message with exit status 2 for every rejected input.
# usage: test_decode_cli.sh VINF TEST_TOOL FIXTURE_VAE_DIR
set -u
vinf=$1 tool=$2 vae=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/expect.sh"
ref=$vae/ref_decode.safetensors
# Every run names the CPU: on a GPU node auto would pick CUDA in bf16 (scripts/gpu-check covers it).

expect 0 "wrote $work/a.safetensors" -- "$vinf" decode --device cpu --vae "$vae" --latents "$ref" --out "$work/a.safetensors"
expect 0 "ok decoded" -- "$tool" compare "$work/a.safetensors" "$ref" 1e-4 decoded
# Frames decode independently: one at a time gives the numbers of all four at once, up to f32
# rounding (the convolutions of another batch size may run another oneDNN kernel, which sums in
# another order: a few 1e-6 seen on pixels of order 1).
expect 0 "wrote" -- "$vinf" decode --device cpu --vae "$vae" --latents "$ref" --out "$work/b.safetensors" --frames-per-call 1
expect 0 "ok decoded" -- "$tool" compare "$work/b.safetensors" "$work/a.safetensors" 2e-5 decoded
# --vae.tile: a tile covering the frame is whole-frame decoding; smaller tiles (edge tiles of every
# size) reproduce diffusers' untiled output too; a negative tile is refused.
# (Exact: a tile as large as the frame takes the untiled path, the same calls as the default.)
expect 0 "wrote" -- "$vinf" decode --device cpu --vae "$vae" --latents "$ref" --out "$work/t8.safetensors" --vae.tile 8
expect 0 "max |diff| 0 " -- "$tool" compare "$work/t8.safetensors" "$work/a.safetensors" 0 decoded
for t in 1 3; do
  expect 0 "wrote" -- "$vinf" decode --device cpu --vae "$vae" --latents "$ref" --out "$work/t$t.safetensors" --vae.tile $t
  expect 0 "ok decoded" -- "$tool" compare "$work/t$t.safetensors" "$ref" 1e-4 decoded
done
expect 2 "option '--vae.tile' must be 0 or in [1, 2048], got '-6'" -- "$vinf" decode --device cpu --vae "$vae" --latents "$ref" --out "$work/t6.safetensors" --vae.tile -6
# A file from the diffusers <= 0.16 era: query/key/value/proj_attn, [C, C, 1, 1] weights. Exact:
# the loader renames and reshapes them into the same tensors, and the decode is the same calls.
expect 0 "" -- "$tool" vae-old-names "$vae" "$work/old-vae"
expect 0 "wrote" -- "$vinf" decode --device cpu --vae "$work/old-vae" --latents "$ref" --out "$work/c.safetensors"
expect 0 "check: every parameter the config implies is present" -- "$vinf" inspect "$work/old-vae"
expect 0 "VAE $vae (AutoencoderKL): channels" -- "$vinf" inspect "$vae"
expect 0 "max |diff| 0 " -- "$tool" compare "$work/c.safetensors" "$work/a.safetensors" 0 decoded
# A pipeline root with vae/ works too.
mkdir -p "$work/pipeline" && ln -s "$(cd "$vae" && pwd)" "$work/pipeline/vae"
expect 0 "wrote" -- "$vinf" decode --device cpu --vae "$work/pipeline" --latents "$ref" --out "$work/d.safetensors"

# A run's latents.h5 or final checkpoint to video.mp4 + contact.png (divided by the scaling factor).
expect 0 "outputs" -- "$vinf" generate --model builtin:tiny --video.frames 8 --video.height 32 --video.width 32 \
  --sampler.steps 2 --prompt.text "a kite" --vi.local-frames 2 --vi.global-frames 4 --output.video=false --out "$work/run"
expect 0 "8 frame(s) 8x8" -- "$vinf" decode --device cpu --vae "$vae" --checkpoint "$work/run/latents.h5" --out "$work/dec" --output.png
expect 0 "8,8,8" -- ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames,width,height \
  -of csv=p=0 "$work/dec/video.mp4"
[ "$(ls "$work/dec/frames" | wc -l)" -eq 8 ] && echo "ok: 8 PNG frames" || { echo "FAIL: PNG frames"; fails=$((fails + 1)); }
expect 0 "contact.png" -- "$vinf" decode --device cpu --vae "$vae" --checkpoint "$work/run/checkpoints/step-000002.h5" --out "$work/dec2"
cmp -s "$work/dec/contact.png" "$work/dec2/contact.png" && echo "ok: the final checkpoint decodes like latents.h5" \
  || { echo "FAIL: contact sheets differ"; fails=$((fails + 1)); }
expect 2 "video.mp4 exists" -- "$vinf" decode --device cpu --vae "$vae" --checkpoint "$work/run/latents.h5" --out "$work/dec"
expect 1 "cannot run ffmpeg" -- "$vinf" decode --device cpu --vae "$vae" --checkpoint "$work/run/latents.h5" --out "$work/dec3" \
  --output.ffmpeg "$work/no-ffmpeg"

# --config FILE: [output] png = true is --output.png true; the command line wins over the file.
cat > "$work/decode.ini" <<EOF
device = cpu
vae = $vae
checkpoint = $work/run/latents.h5
out = $work/not-this
[output]
png = true
video = false
EOF
expect 0 "contact.png in $work/dec-ini" -- "$vinf" decode --config "$work/decode.ini" --out "$work/dec-ini"
cmp -s "$work/dec/contact.png" "$work/dec-ini/contact.png" && [ "$(ls "$work/dec-ini/frames" | wc -l)" -eq 8 ] && [ ! -e "$work/not-this" ] \
  && echo "ok: decode --config decodes as the command line does" || { echo "FAIL: decode --config"; fails=$((fails + 1)); }
expect 0 "--config FILE" -- "$vinf" decode --help
printf 'vae = %s\n[output]\npngs = true\n' "$vae" > "$work/typo.ini"
expect 2 "--config $work/typo.ini line 3: unknown key 'pngs' in [output] (vinf decode has no option --output.pngs" -- \
  "$vinf" decode --config "$work/typo.ini" --checkpoint "$work/run/latents.h5" --out "$work/x"
[ ! -e "$work/x" ] || { echo "FAIL: a refused decode created $work/x"; fails=$((fails + 1)); }

# Rejected inputs.
expect 2 "either --latents IN.safetensors or --checkpoint X.h5" -- "$vinf" decode --device cpu --vae "$vae" --out "$work/x.safetensors"
expect 2 "is missing or not an HDF5 file" -- "$vinf" decode --device cpu --vae "$vae" --checkpoint "$ref" --out "$work/x"
expect 0 "outputs" -- "$vinf" generate --model builtin:tiny --video.frames 8 --video.height 32 --video.width 32 \
  --sampler.steps 1 --prompt.text "a kite" --vi.local-frames 2 --vi.global-frames 4 --output.video=false \
  --dump.modules mid_block --out "$work/dumprun"
cp "$work/dumprun/activations.h5" "$work/dump.h5"
expect 2 "neither a vinf checkpoint nor a latents.h5" -- "$vinf" decode --device cpu --vae "$vae" --checkpoint "$work/dump.h5" --out "$work/x"
expect 0 "--frames-per-call" -- "$vinf" decode --help
expect 0 "--tf32 " -- "$vinf" decode --help
expect 2 "--vae is required" -- "$vinf" decode --latents "$ref" --out "$work/x.safetensors"
expect 2 "does not exist" -- "$vinf" decode --device cpu --vae "$work/nowhere" --latents "$ref" --out "$work/x.safetensors"
expect 2 "has no tensor 'latents'" -- "$vinf" decode --device cpu --vae "$vae" --latents "$work/a.safetensors" --out "$work/x.safetensors"
expect 2 "option '--frames-per-call' must be in [1, 4096], got '0'" -- "$vinf" decode --device cpu --vae "$vae" --latents "$ref" --out "$work/x.safetensors" --frames-per-call 0
mkdir -p "$work/no-weights" && cp "$vae/config.json" "$work/no-weights/"
expect 2 "has neither diffusion_pytorch_model.safetensors" -- "$vinf" decode --device cpu --vae "$work/no-weights" --latents "$ref" --out "$work/x.safetensors"
expect 2 "has neither diffusion_pytorch_model.safetensors" -- "$vinf" inspect "$work/no-weights"
mkdir -p "$work/wide" && sed 's/"latent_channels": 4/"latent_channels": 8/' "$vae/config.json" > "$work/wide/config.json"
cp "$vae/diffusion_pytorch_model.safetensors" "$work/wide/"
expect 2 "implies [8,8,1,1]" -- "$vinf" decode --device cpu --vae "$work/wide" --latents "$ref" --out "$work/x.safetensors"
mkdir -p "$work/gelu" && sed 's/"silu"/"gelu"/' "$vae/config.json" > "$work/gelu/config.json"
cp "$vae/diffusion_pytorch_model.safetensors" "$work/gelu/"
expect 2 "act_fn \"gelu\" is not supported" -- "$vinf" decode --device cpu --vae "$work/gelu" --latents "$ref" --out "$work/x.safetensors"
[ ! -e "$work/x.safetensors" ] || { echo "FAIL: a refused decode wrote its output"; fails=$((fails + 1)); }

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
