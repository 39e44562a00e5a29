#!/usr/bin/env bash
# `vinf generate --long.mode windows|fifo` in one process: the help and the INI section, the one
# line each that says what a method overrides or ignores, run.json's record of the method and its
# boundaries, --evaluate over them, and exit status 2 with a message for every setting the methods refuse (no output
# directory left behind).
# usage: test_long_cli.sh VINF TEST_TOOL
set -u
vinf=$1 tool=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/expect.sh"

small=(--model builtin:tiny --device cpu --video.height 32 --video.width 32 --output.video=false
       --prompt.text "a long road")

expect 0 "--long.mode arg (=clips)" -- "$vinf" generate --help
expect 0 "--long.fifo-lookahead" -- "$vinf" generate --help

# Windows from an INI section; a [vi] option is ignored with one line.
printf '[long]\nmode = windows\nwindow = 4\nstride = 2\n[vi]\nlocal-frames = 2\n' > "$work/w.ini"
expect 0 "the [vi] settings are ignored (--vi.local-frames)" -- \
  "$vinf" generate "${small[@]}" --config "$work/w.ini" --video.frames 8 --sampler.steps 2 --evaluate --out "$work/w"
expect 0 '"boundaries": [' -- cat "$work/w/run.json"
expect 0 '"mode": "windows"' -- cat "$work/w/run.json"
python3 - "$work/w/run.json" <<'PY' && echo "ok: run.json's boundaries are the windows' starts" || { echo "FAIL: boundaries"; fails=$((fails + 1)); }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["boundaries"] == [2, 4], d["boundaries"]
assert "evaluate.json" in d["outputs"] and d["times_s"]["evaluate"] > 0
PY
# --evaluate measured latents.h5 (no VAE output here) with the windows' boundaries.
python3 - "$work/w/evaluate.json" <<'PY' && echo "ok: --evaluate: evaluate.json over the windows' seams" || { echo "FAIL: evaluate.json"; fails=$((fails + 1)); }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["space"] == "latents" and d["frames"] == 8, (d["space"], d["frames"])
assert d["boundaries"] == [2, 4] and len(d["seam"]) == 2, d["boundaries"]
assert len(d["series"]["frame_difference"]) == 7 and all(x > 0 for x in d["series"]["frame_difference"])
PY
[ -s "$work/w/evaluate.png" ] && echo "ok: evaluate.png" || { echo "FAIL: no evaluate.png"; fails=$((fails + 1)); }

# FIFO: the steps and the scheduler it overrides, one line each; the progress counts frames.
expect 0 "= 4 steps, one queue level each: --sampler.steps 30 is overridden" -- \
  "$vinf" generate "${small[@]}" --long.mode fifo --long.fifo-window 2 --long.fifo-partitions 2 --video.frames 3 \
  --out "$work/f"
expect 0 "steps every frame with DDIM" -- \
  "$vinf" generate "${small[@]}" --long.mode fifo --long.fifo-window 2 --long.fifo-partitions 1 --video.frames 2 \
  --out "$work/f2"
expect 0 "frames 3/3" -- \
  "$vinf" generate "${small[@]}" --long.mode fifo --long.fifo-window 2 --long.fifo-partitions 2 --video.frames 3 \
  --sampler.scheduler ddim --sampler.steps 4 --out "$work/f3"
expect 0 "ok $work/f3/latents.h5" -- "$tool" h5-check "$work/f3/latents.h5" 3 4 4 4
# A FIFO checkpoint holds the queue after the video: vinf evaluate takes finished runs only.
ckpt=$(ls "$work/f3/checkpoints"/step-*.h5 | tail -1)
expect 2 "is a checkpoint: its latents are partly denoised" -- "$vinf" evaluate "$ckpt" --out "$work/ce"

# FIFO as released: eta 1, --video.fps 8 and --output.fps 10 unless given, the released grid and
# use_scale on the base video recorded; given options win. Two prompts, each for its frames.
expect 0 "frames 4/4" -- "$vinf" generate "${small[@]}" --long.mode fifo --long.fifo-window 2 \
  --long.fifo-partitions 2 --video.frames 4 --prompt.text "then a bridge" --long.fifo-prompt-frames 1,3 --out "$work/fr"
python3 - "$work/fr/run.json" <<'PY' && echo "ok: FIFO's released defaults in run.json" || { echo "FAIL: FIFO defaults"; fails=$((fails + 1)); }
import json, sys
c = json.load(open(sys.argv[1]))["config"]
assert c["sampler"]["eta"] == 1 and c["video"]["fps"] == 8 and c["output"]["fps"] == 10, c
assert c["long"]["fifo-grid"] == "released" and c["long"]["fifo-prompt-frames"] == [1, 3], c["long"]
assert "use_scale" not in c["sampler"], c["sampler"]
PY
expect 0 "frames 4/4" -- "$vinf" generate "${small[@]}" --long.mode fifo --long.fifo-window 2 \
  --long.fifo-partitions 2 --video.frames 4 --sampler.eta 0 --video.fps 24 --long.fifo-grid config \
  --sampler.use-scale off --out "$work/fg"
python3 - "$work/fg/run.json" <<'PY' && echo "ok: given options win over FIFO's defaults" || { echo "FAIL: FIFO options"; fails=$((fails + 1)); }
import json, sys
c = json.load(open(sys.argv[1]))["config"]
# The config grid records no key, as FIFO runs did before it existed: such a run can be continued.
assert c["sampler"]["eta"] == 0 and c["video"]["fps"] == 24 and "fifo-grid" not in c["long"], c
assert c["sampler"]["use_scale"] == "off", c["sampler"]
PY
# use_scale on a plain DDIM run changes its numbers (the formula is the unit tests').
ddim=(--video.frames 4 --sampler.scheduler ddim --sampler.steps 3 --vi.mode off)
expect 0 "outputs in" -- "$vinf" generate "${small[@]}" "${ddim[@]}" --out "$work/s0"
expect 0 "outputs in" -- "$vinf" generate "${small[@]}" "${ddim[@]}" --sampler.use-scale off --out "$work/s1"
expect 0 "outputs in" -- "$vinf" generate "${small[@]}" "${ddim[@]}" --sampler.use-scale on --out "$work/s2"
expect 0 "ok" -- "$tool" h5-compare "$work/s0/latents.h5" "$work/s1/latents.h5" 0
expect 1 "" -- "$tool" h5-compare "$work/s0/latents.h5" "$work/s2/latents.h5" 0

# Refusals, before anything runs.
bad() {  # bad TEXT options...: exit 2 with TEXT, no output directory
  local text=$1
  shift
  expect 2 "$text" -- "$vinf" generate "${small[@]}" --video.frames 8 --out "$work/bad" "$@"
  [ -e "$work/bad" ] && { echo "FAIL: a refused run left $work/bad"; fails=$((fails + 1)); rm -rf "$work/bad"; }
}
bad "--long.mode must be clips (Video-Infinity), windows" --long.mode sliding
bad "--long.blend must be linear or uniform" --long.mode windows --long.blend cosine
bad "--long.stride must be in [1, --long.window = 4]" --long.mode windows --long.window 4 --long.stride 5
bad "option '--long.window' must be in [1, 100000], got '0'" --long.mode windows --long.window 0
bad "--long.fifo-window must be even" --long.mode fifo --long.fifo-window 5
bad "--long.fifo-window must be at least 2 frames" --long.mode fifo --long.fifo-window 1 --long.fifo-lookahead=false
bad "option '--long.fifo-partitions' must be in [1, 1000], got '0'" --long.mode fifo --long.fifo-partitions 0
bad "makes at least --long.fifo-window = 16 frames" --long.mode fifo
bad "--long.fifo-prompt-frames gives 1 length(s) for 2 prompt(s)" --long.mode fifo --long.fifo-window 4 \
  --prompt.text "a second prompt" --long.fifo-prompt-frames 8
bad "--long.fifo-prompt-frames adds up to 7 frames; the video has 8" --long.mode fifo --long.fifo-window 4 \
  --prompt.text "a second prompt" --long.fifo-prompt-frames 3,4
bad "--long.fifo-prompt-frames: 'x' is not a number of frames" --long.mode fifo --long.fifo-window 4 \
  --long.fifo-prompt-frames 3,x
bad "9 prompts for 8 frames" --long.mode fifo --long.fifo-window 4 --prompt.text 2 --prompt.text 3 --prompt.text 4 \
  --prompt.text 5 --prompt.text 6 --prompt.text 7 --prompt.text 8 --prompt.text 9
bad "--long.fifo-grid must be released" --long.mode fifo --long.fifo-window 4 --long.fifo-grid uniform
bad "--sampler.use-scale must be auto, on or off" --sampler.use-scale yes
bad "--sampler.use-scale on scales DDIM's steps" --sampler.use-scale on
bad "--parallel.cfg, --parallel.tensor and --parallel.pipeline must be 1" --long.mode windows --parallel.tensor 2
bad "--sampler.noise compat is the layout" --long.mode windows --sampler.noise compat
bad "--dump.modules records Video-Infinity's clips" --long.mode windows --dump.modules conv_in
bad "--evaluate.clip-vision is for --evaluate's similarities: add --evaluate" --evaluate.clip-vision "$work"
bad "has no config.json (a transformers CLIPVisionModelWithProjection directory)" --evaluate --evaluate.clip-vision "$work"

echo "$fails failure(s)"
exit $((fails > 0))
