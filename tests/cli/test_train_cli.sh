#!/usr/bin/env bash
# Training from videos: vinf prepare-data on synthetic clips (ffmpeg's test sources) with a
# make-model pipeline (bad videos and captions reported by name and skipped, or refused with
# --strict), then vinf train on the data file.
# usage: test_train_cli.sh VINF TEST_TOOL
set -u
vinf=$1 tool=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/expect.sh"
if ! command -v ffmpeg > /dev/null 2>&1; then echo "skipped: no ffmpeg"; exit 77; fi

"$vinf" make-model --preset tiny --layout pipeline --out "$work/pipe" > /dev/null 2>&1 || { echo "FAIL: make-model"; exit 1; }
mkdir -p "$work/videos/more"
# 24 and 16 frames of moving test patterns (3 and 2 clips of 8), one too short, one not a video.
ffmpeg -v error -f lavfi -i testsrc=size=96x80:rate=8 -t 3 -pix_fmt yuv420p "$work/videos/a.mp4" || exit 1
ffmpeg -v error -f lavfi -i testsrc2=size=64x64:rate=8 -t 2 -pix_fmt yuv420p "$work/videos/more/b.mp4" || exit 1
ffmpeg -v error -f lavfi -i testsrc=size=64x48:rate=8 -t 0.5 -pix_fmt yuv420p "$work/videos/short.mp4" || exit 1
echo "not a video" > "$work/videos/bad.mp4"
ffmpeg -v error -f lavfi -i testsrc=size=64x64:rate=8 -t 1 -pix_fmt yuv420p "$work/videos/uncaptioned.mp4" || exit 1
printf '# name<TAB>caption\na.mp4\ta test pattern moving\nmore/b.mp4\tanother test pattern\nshort.mp4\ttoo short\nbad.mp4\tbroken\nmissing.mp4\tnot there\nno tab here\n' \
  > "$work/captions.tsv"
size=(--data.width 64 --data.height 64 --data.frames 8)

expect 0 "wrote $work/data.h5: 5 clip(s) of 8 frames (4x8x8 latents) from 2 video(s), 5 problem(s) skipped" -- \
  "$vinf" prepare-data "$work/videos" "$work/captions.tsv" --model "$work/pipe" --out "$work/data.h5" "${size[@]}"
out=$("$vinf" prepare-data "$work/videos" "$work/captions.tsv" --model "$work/pipe" --out "$work/again.h5" "${size[@]}" 2>&1)
for said in "video short.mp4 has 4 frames, fewer than a clip's 8; skipped" "video bad.mp4: " \
            "line 6 names missing.mp4, which is not a file" "line 7 is not \`VIDEO<TAB>caption\`" \
            "video uncaptioned.mp4 has no caption" "video 2/5 more/b.mp4: 16 frames, 2 clip(s)"; do
  [[ "$out" == *"$said"* ]] && echo "ok: says '$said'" || { echo "FAIL: prepare-data does not say '$said'"; echo "$out"; fails=$((fails + 1)); }
done
expect 0 "/latents  [5, 4, 8, 8, 8] f32" -- "$vinf" inspect "$work/data.h5"
expect 0 "/text  [5, 77, 32] f32" -- "$vinf" inspect "$work/data.h5"
# The clips every 4 frames, every second frame: a has 24 frames, so clips start at 0 and 4 (span 15).
expect 0 "video 1/5 a.mp4: 24 frames, 3 clip(s)" -- "$vinf" prepare-data "$work/videos" "$work/captions.tsv" --model "$work/pipe" \
  --out "$work/steps.h5" "${size[@]}" --data.frame-step 2 --data.clip-step 4

# Refusals: exit 2, nothing written.
expect 2 "(--strict refuses every bad video and caption)" -- "$vinf" prepare-data "$work/videos" "$work/captions.tsv" \
  --model "$work/pipe" --out "$work/strict.h5" "${size[@]}" --strict
printf 'short.mp4\ttoo short\n' > "$work/only_short.tsv"
expect 2 "no clip was made" -- "$vinf" prepare-data "$work/videos" "$work/only_short.tsv" --model "$work/pipe" --out "$work/none.h5" "${size[@]}"
expect 2 "must be positive multiples of the VAE's scale 8" -- "$vinf" prepare-data "$work/videos" "$work/captions.tsv" \
  --model "$work/pipe" --out "$work/x.h5" --data.width 60 --data.height 64
expect 2 "option '--captions': '$work/nope.tsv' does not exist" -- "$vinf" prepare-data "$work/videos" "$work/nope.tsv" --model "$work/pipe" --out "$work/x.h5" "${size[@]}"
expect 2 "option '--videos': '$work/nope' does not exist" -- "$vinf" prepare-data "$work/nope" "$work/captions.tsv" --model "$work/pipe" --out "$work/x.h5"
for f in strict.h5 none.h5 x.h5 strict.h5.partial none.h5.partial; do
  [ -e "$work/$f" ] && { echo "FAIL: a refused run left $f"; fails=$((fails + 1)); }
done

# vinf train: the loss falls on these clips (40 steps of 2 clips at lr 1e-3: the last 5 steps'
# mean under 0.6 of the first 5's; about 0.42 against 1.1 when written).
expect 0 "40 step(s) in" -- "$vinf" train --model "$work/pipe" --data "$work/data.h5" --out "$work/run" \
  --train.steps 40 --train.batch 2 --train.lr 1e-3 --train.log-every 10
ratio=$(awk -F, 'NR > 1 { v[NR - 1] = $2 } END { a = 0; b = 0; for (i = 1; i <= 5; ++i) { a += v[i]; b += v[NR - i] } print b / a }' "$work/run/log.csv")
awk -v r="$ratio" 'BEGIN { exit !(r < 0.6) }' && echo "ok: the loss fell to $ratio of its start" \
  || { echo "FAIL: the loss's last 5 steps are $ratio of its first 5"; fails=$((fails + 1)); }
for f in log.csv loss.png train.json model/unet/config.json model/unet/diffusion_pytorch_model.safetensors model/vae/config.json \
         model/text_encoder/config.json model/tokenizer/vocab.json; do
  [ -s "$work/run/$f" ] || { echo "FAIL: the run did not write $f"; fails=$((fails + 1)); }
done
expect 0 "41 $work/run/log.csv" -- wc -l "$work/run/log.csv"

# The exported pipeline loads in generate; trained at learning rate 0 it is the model it started
# from, so it generates the same latents bit for bit.
gen=(--device cpu --video.frames 8 --video.height 64 --video.width 64 --sampler.steps 2 --prompt.text "a kite"
     --vi.local-frames 2 --vi.global-frames 4 -q)
"$vinf" train --model "$work/pipe" --data "$work/data.h5" --out "$work/lr0" --train.steps 2 --train.lr 0 -q 2>/dev/null \
  || { echo "FAIL: training at lr 0 exited $?"; fails=$((fails + 1)); }
expect 0 "outputs in $work/g0/" -- "$vinf" generate --model "$work/pipe" "${gen[@]}" --out "$work/g0"
expect 0 "outputs in $work/g1/" -- "$vinf" generate --model "$work/lr0/model" "${gen[@]}" --out "$work/g1"
expect 0 "outputs in $work/g2/" -- "$vinf" generate --model "$work/run/model" "${gen[@]}" --out "$work/g2"
"$tool" h5-compare "$work/g1/latents.h5" "$work/g0/latents.h5" 0 || fails=$((fails + 1))
if "$tool" h5-compare "$work/g2/latents.h5" "$work/g0/latents.h5" 1e-3 > /dev/null; then
  echo "FAIL: the trained model generates what the untrained one does"; fails=$((fails + 1))
fi

# --train.params temporal: every other parameter leaves the run bit for bit as it came; the
# temporal ones moved.
m0=$work/pipe/unet/diffusion_pytorch_model.safetensors
"$vinf" train --model "$work/pipe" --data "$work/data.h5" --out "$work/temporal" --train.steps 3 --train.lr 1e-3 \
  --train.params temporal -q 2>/dev/null || { echo "FAIL: --train.params temporal exited $?"; fails=$((fails + 1)); }
m1=$work/temporal/model/unet/diffusion_pytorch_model.safetensors
"$tool" compare-relative "$m1" "$m0" 0 '!.temp_' '!transformer_in.' || fails=$((fails + 1))
for k in transformer_in.proj_in.weight down_blocks.0.temp_convs.0.conv1.2.weight; do
  if "$tool" compare-relative "$m1" "$m0" 0 "$k" > /dev/null; then echo "FAIL: $k did not change"; fails=$((fails + 1)); fi
done
expect 0 "trained (--train.params conv_out.*,*.norm1.*)" -- "$vinf" train --model "$work/pipe" --data "$work/data.h5" \
  --out "$work/globs" --train.steps 1 --train.params 'conv_out.*,*.norm1.*'

# same_training A B: two runs of 2 steps at lr 1e-3 that compute the same training to the order of
# their sums: every step's loss to 1e-6 and gradient norm to 1e-5 (log.csv), the parameters within
# 4 lr (AdamW's first steps move each by about lr g / |g|, whose sign is rounding's to decide for a
# gradient near zero: the losses and norms are the tight check).
same_training() {
  paste -d, "$1/log.csv" "$2/log.csv" | awk -F, 'NR > 1 { d = $2 - $7; if (d < 0) d = -d; if (d > 1e-6 * $7) bad = 1;
      e = $4 - $9; if (e < 0) e = -e; if (e > 1e-5 * $9) bad = 1 } END { exit bad }' \
    && echo "ok: $1 and $2 have the same losses and gradient norms" \
    || { echo "FAIL: $1 and $2 differ in loss or gradient norm"; paste -d, "$1/log.csv" "$2/log.csv"; fails=$((fails + 1)); }
  "$tool" compare "$1/model/unet/diffusion_pytorch_model.safetensors" "$2/model/unet/diffusion_pytorch_model.safetensors" \
    4e-3 > "$work/compare.log" || { echo "FAIL: $1 and $2 differ in their parameters"; grep FAIL "$work/compare.log"; fails=$((fails + 1)); }
}

# Gradient accumulation: a batch of 2 in micro-batches of 1 is the batch of 2.
"$vinf" train --model "$work/pipe" --data "$work/data.h5" --out "$work/acc1" --train.steps 2 --train.batch 2 \
  --train.micro-batch 1 --train.lr 1e-3 -q 2>/dev/null || { echo "FAIL: micro-batches exited $?"; fails=$((fails + 1)); }
"$vinf" train --model "$work/pipe" --data "$work/data.h5" --out "$work/acc2" --train.steps 2 --train.batch 2 \
  --train.lr 1e-3 -q 2>/dev/null || { echo "FAIL: whole batches exited $?"; fails=$((fails + 1)); }
same_training "$work/acc1" "$work/acc2"

# Activation checkpointing: the same training.
"$vinf" train --model "$work/pipe" --data "$work/data.h5" --out "$work/ckpt" --train.steps 2 --train.batch 2 \
  --train.lr 1e-3 --train.checkpoint-activations -q 2>/dev/null || { echo "FAIL: checkpointing exited $?"; fails=$((fails + 1)); }
same_training "$work/ckpt" "$work/acc2"

# LoRA: the run writes the adapters (diffusers' layout) and no model; generate merges them. At
# scale 0 that is the base model bit for bit; at scale 1 the model --export writes with them merged.
expect 0 "lora.safetensors)" -- "$vinf" train --model "$work/pipe" --data "$work/data.h5" --out "$work/lora" \
  --train.steps 4 --train.batch 2 --train.lr 1e-2 --train.lora 4
[ -e "$work/lora/model" ] && { echo "FAIL: a LoRA run exported a model without --export"; fails=$((fails + 1)); }
"$vinf" train --model "$work/pipe" --data "$work/data.h5" --out "$work/lora2" --train.steps 4 --train.batch 2 \
  --train.lr 1e-2 --train.lora 4 --export "$work/lora2/merged" -q 2>/dev/null || { echo "FAIL: LoRA with --export exited $?"; fails=$((fails + 1)); }
"$tool" compare-relative "$work/lora2/lora.safetensors" "$work/lora/lora.safetensors" 0 || fails=$((fails + 1))
# (-v for -q: the log line that names the LoRA.)
expect 0 "LoRA $work/lora/lora.safetensors merged at scale 0" -- "$vinf" generate --model "$work/pipe" "${gen[@]/-q/-v}" \
  --model.lora "$work/lora/lora.safetensors" --model.lora-scale 0 --out "$work/gl0"
"$tool" h5-compare "$work/gl0/latents.h5" "$work/g0/latents.h5" 0 || fails=$((fails + 1))
expect 0 "outputs in $work/gl1/" -- "$vinf" generate --model "$work/pipe" "${gen[@]}" --model.lora "$work/lora/lora.safetensors" --out "$work/gl1"
expect 0 "outputs in $work/gm/" -- "$vinf" generate --model "$work/lora2/merged" "${gen[@]}" --out "$work/gm"
"$tool" h5-compare "$work/gl1/latents.h5" "$work/gm/latents.h5" 0 || fails=$((fails + 1))
if "$tool" h5-compare "$work/gl1/latents.h5" "$work/g0/latents.h5" 1e-4 > /dev/null; then
  echo "FAIL: the LoRA changes nothing"; fails=$((fails + 1))
fi
expect 2 "is not a LoRA tensor" -- "$vinf" generate --model "$work/pipe" "${gen[@]}" --model.lora "$m0" --out "$work/x5"
expect 2 "--train.lora trains the adapters alone" -- "$vinf" train --model "$work/pipe" --data "$work/data.h5" \
  --out "$work/x6" --train.lora 4 --train.params temporal

# Refusals: exit 2 before any step.
expect 2 "the glob 'nothing.*' matches no parameter" -- "$vinf" train --model "$work/pipe" --data "$work/data.h5" \
  --out "$work/x1" --train.params 'nothing.*'
expect 2 "--train.batch 3 must be a multiple of --train.micro-batch 2" -- "$vinf" train --model "$work/pipe" \
  --data "$work/data.h5" --out "$work/x2" --train.batch 3 --train.micro-batch 2
expect 2 "already holds files" -- "$vinf" train --model "$work/pipe" --data "$work/data.h5" --out "$work/run"
expect 2 "is not an HDF5 file" -- "$vinf" train --model "$work/pipe" --data "$work/captions.tsv" --out "$work/x3"
expect 2 "--dtype f16: training computes in f32, or with bf16 products" -- "$vinf" train --model "$work/pipe" --data "$work/data.h5" --out "$work/x4" --dtype f16
for d in x1 x2 x3 x4 x6; do [ -e "$work/$d" ] && { echo "FAIL: a refused run made $d"; fails=$((fails + 1)); }; done

[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "training from videos: ok"
