#!/usr/bin/env bash
# `vinf evaluate`: synthetic videos encoded by ffmpeg (a still scene, a flicker, a texture moving 2
# pixels per frame, a planted seam) and latents.h5 files (recorded boundaries, clip starts), the
# json's numbers with tolerances for the lossy path, and every refused input with exit status 2.
# usage: test_evaluate_cli.sh VINF TEST_TOOL
set -u
vinf=$1 tool=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/expect.sh"
if ! command -v ffmpeg > /dev/null 2>&1; then echo "skipped: no ffmpeg"; exit 77; fi

# A video of KIND, F frames 64x48, nearly lossless (qp 0, no chroma subsampling).
make_video() {
  "$tool" video-frames "$work/$1.rgb" "$1" "$2" 64 48 || { echo "FAIL: video-frames $1"; exit 1; }
  ffmpeg -v error -y -f rawvideo -pix_fmt rgb24 -s 64x48 -r 8 -i "$work/$1.rgb" -c:v libx264 -qp 0 -pix_fmt yuv444p \
    "$work/$1.mp4" || { echo "FAIL: ffmpeg $1"; exit 1; }
}
# json VALUE-EXPRESSION FILE: a value of evaluate.json, printed by python3.
json() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($1)" "$2"; }
check() {  # check DESCRIPTION PYTHON-CONDITION FILE
  if [ "$(json "$2" "$3")" = True ]; then echo "ok: $1"; else echo "FAIL: $1 ($2)"; fails=$((fails + 1)); fi
}

expect 0 "frame_difference" -- "$vinf" evaluate --help
expect 0 "clip_first_frame_similarity" -- "$vinf" evaluate --help
expect 0 "evaluate" -- "$vinf" --help

make_video still 6
expect 0 "wrote evaluate.json and evaluate.png" -- "$vinf" evaluate "$work/still.mp4" --out "$work/still"
check "still: frame_difference and motion 0" \
  "all(v == 0 for v in j['series']['frame_difference'] + j['series']['motion']) and j['space'] == 'rgb' and j['frames'] == 6 and j['boundaries'] == []" \
  "$work/still/evaluate.json"
[ -s "$work/still/evaluate.png" ] && echo "ok: evaluate.png" || { echo "FAIL: no evaluate.png"; fails=$((fails + 1)); }

make_video flicker 6
expect 0 "" -- "$vinf" evaluate "$work/flicker.mp4" --out "$work/flicker" --quiet
check "flicker: every difference about 120, flicker score about 0.53" \
  "all(abs(v - 120) < 3 for v in j['series']['frame_difference']) and abs(j['summary']['flicker_score'] - (1 - 120 / 255)) < 0.02" \
  "$work/flicker/evaluate.json"

make_video shift 6
expect 0 "" -- "$vinf" evaluate "$work/shift.mp4" --out "$work/shift" --quiet
check "shift: motion about 2 pixels" "all(abs(v - 2) < 0.3 for v in j['series']['motion'])" "$work/shift/evaluate.json"

# The seam at frame 4 of 8 (a 22-pixel jump): its difference stands out; boundary 2 is calm.
make_video seam 8
expect 0 "" -- "$vinf" evaluate "$work/seam.mp4" --out "$work/seam" --boundaries 2,4 --quiet
check "seam: boundaries as given" "j['boundaries'] == [2, 4] and j['boundary_source'] == 'given'" "$work/seam/evaluate.json"
check "seam: ratio at 4 above 1, at 2 near 1" \
  "j['seam'][1]['frame'] == 4 and j['seam'][1]['difference'] == j['series']['frame_difference'][3] and abs(j['seam'][0]['motion_ratio'] - 1) < 0.2" \
  "$work/seam/evaluate.json"
# Evaluating again replaces evaluate.json.
expect 0 "" -- "$vinf" evaluate "$work/seam.mp4" --out "$work/seam" --quiet
check "seam: replaced, no boundaries for a video by default" "j['boundaries'] == [] and j['seam'] == []" "$work/seam/evaluate.json"

# latents.h5: recorded boundaries win; else the clip starts of clip_size; the seam at F/2 = 6.
expect 0 "" -- "$tool" latents-h5 "$work/rec.h5" 12 3 "3,6"
expect 0 "(latents), 2 boundaries" -- "$vinf" evaluate "$work/rec.h5" --out "$work/rec"
check "latents: recorded boundaries, space latents" \
  "j['space'] == 'latents' and j['boundaries'] == [3, 6] and j['boundary_source'] == 'recorded' and 'flicker_score' not in j['summary']" \
  "$work/rec/evaluate.json"
check "latents: the seam at 6 is 5.1 against 0.1 inside" \
  "abs(j['seam'][1]['difference'] - 5.1) < 1e-5 and abs(j['seam'][1]['inside_mean'] - 0.1) < 1e-5 and abs(j['seam'][0]['ratio'] - 1) < 1e-4" \
  "$work/rec/evaluate.json"
expect 0 "" -- "$tool" latents-h5 "$work/clips.h5" 12 3 -
expect 0 "" -- "$vinf" evaluate "$work/clips.h5" --out "$work/clips" --quiet
check "latents: clip starts of 3 clips" "j['boundaries'] == [4, 8] and j['boundary_source'] == 'clip_size'" "$work/clips/evaluate.json"
mkdir -p "$work/tiny-clip" && echo '{}' > "$work/tiny-clip/config.json"
expect 0 "--clip-vision ignored" -- "$vinf" evaluate "$work/clips.h5" --out "$work/clips" --clip-vision "$work/tiny-clip"
check "latents: the json says CLIP was not computed" "'not computed' in j['clip']" "$work/clips/evaluate.json"

# Refusals: exit 2 and a message naming the problem.
echo "not a video" > "$work/notes.txt"
expect 2 "is not a video ffmpeg can read" -- "$vinf" evaluate "$work/notes.txt" --out "$work/x"
expect 2 "does not exist" -- "$vinf" evaluate "$work/missing.mp4" --out "$work/x"
expect 2 "boundary 6 is outside 1..5 (the video has 6 frames" -- "$vinf" evaluate "$work/still.mp4" --out "$work/x" --boundaries 2,6
expect 2 "boundary 2 does not follow 3" -- "$vinf" evaluate "$work/still.mp4" --out "$work/x" --boundaries 3,2
expect 2 "'x' is not a frame number" -- "$vinf" evaluate "$work/still.mp4" --out "$work/x" --boundaries 1,x
expect 2 "has no model.safetensors" -- "$vinf" evaluate "$work/still.mp4" --out "$work/x" --clip-vision "$work/tiny-clip"
expect 2 "--out DIR is required" -- "$vinf" evaluate "$work/still.mp4"
expect 2 "boundary 12 is outside 1..11" -- "$vinf" evaluate "$work/rec.h5" --out "$work/x" --boundaries 12

[ "$fails" -eq 0 ] && echo "all evaluate checks passed" || echo "$fails check(s) failed"
[ "$fails" -eq 0 ]
