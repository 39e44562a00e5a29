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
expect 2 "cannot be read" -- "$vinf" prepare-data "$work/videos" "$work/nope.tsv" --model "$work/pipe" --out "$work/x.h5" "${size[@]}"
expect 2 "is not a folder of videos" -- "$vinf" prepare-data "$work/nope" "$work/captions.tsv" --model "$work/pipe" --out "$work/x.h5"
for f in strict.h5 none.h5 x.h5 strict.h5.partial none.h5.partial; do
  [ -e "$work/$f" ] && { echo "FAIL: a refused run left $f"; fails=$((fails + 1)); }
done
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "training from videos: ok"
