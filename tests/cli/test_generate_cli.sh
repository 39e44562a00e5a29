#!/usr/bin/env bash
# `vinf generate` in one process: the help, the INI file and its precedence, a model directory with
# an embeddings file against the built-in model, and a message with exit status 2 for every
# rejected input, with no output directory left behind by a refused run.
# usage: test_generate_cli.sh VINF TEST_TOOL
set -u
vinf=$1 tool=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/expect.sh"

# On the CPU whatever the node has. The runs compared bit for bit below compute the same shapes in
# the same order on the same threads (only where the weights or embeddings come from differs), so
# they are equal by construction; runs of other shapes are compared with a tolerance.
small=(--model builtin:tiny --device cpu --video.frames 8 --video.height 32 --video.width 32 --sampler.steps 2
       --prompt.text "a kite" --vi.local-frames 2 --vi.global-frames 4)

# Help: every option with its default.
expect 0 "--sampler.steps [1, 1000] (=30)" -- "$vinf" generate --help
expect 0 "--vi.global-frames [0, 100000] (=16)" -- "$vinf" generate --help
expect 0 "--tf32 " -- "$vinf" generate --help
expect 0 "generate" -- "$vinf" --help

# A small run, its outputs and what they say.
expect 0 "outputs in $work/a/" -- "$vinf" generate "${small[@]}" --out "$work/a"
expect 0 "ok $work/a/latents.h5" -- "$tool" h5-check "$work/a/latents.h5" 8 4 4 4
expect 0 '"scheduler": "dpmpp-sde"' -- cat "$work/a/run.json"
expect 0 '"timesteps": [' -- cat "$work/a/run.json"
expect 0 "step 2/2" -- "$vinf" generate "${small[@]}" --out "$work/progress"

# The video outputs: video.mp4 (frames, size, rate), contact.png (4 x 2 thumbnails of 32x32), PNG frames.
expect 0 "video.mp4, frames/, contact.png" -- "$vinf" generate "${small[@]}" --out "$work/v" --output.png --output.fps 12
expect 0 "32,32,12/1,8" -- ffprobe -v error -count_frames -select_streams v:0 \
  -show_entries stream=nb_read_frames,width,height,r_frame_rate -of csv=p=0 "$work/v/video.mp4"
expect 0 "128,64" -- ffprobe -v error -show_entries stream=width,height -of csv=p=0 "$work/v/contact.png"
expect 0 "32,32" -- ffprobe -v error -show_entries stream=width,height -of csv=p=0 "$work/v/frames/frame-000007.png"
[ "$(ls "$work/v/frames" | wc -l)" -eq 8 ] && echo "ok: 8 PNG frames" || { echo "FAIL: PNG frames"; fails=$((fails + 1)); }
expect 0 "outputs in $work/tile/ (latents.h5, video.mp4, contact.png, run.json)" -- \
  "$vinf" generate "${small[@]/32/64}" --vae.tile 4 --out "$work/tile"
expect 0 '"tile": 4' -- cat "$work/tile/run.json"
expect 0 "outputs in $work/nv/ (latents.h5, run.json)" -- "$vinf" generate "${small[@]}" --out "$work/nv" --output.video=false
# --profile: each of the 2 model calls timed op by op; the table, the JSON, and the same latents.
expect 0 "rank 0, profile over 2 model call(s), steady clock" -- \
  "$vinf" generate "${small[@]}" --out "$work/prof" --output.video=false --profile "$work/profile.json"
expect 0 "ok: profile" -- python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))
assert p["calls"] == 2 and p["clock"] == "steady clock", p["calls"]
assert 0 < p["op_s"] <= p["call_s"] * 1.0001, (p["op_s"], p["call_s"])
kinds = {r["name"] for r in p["by_op_kind"]}
assert {"conv2d", "linear", "attention", "group_norm", "comm all-gather"} <= kinds, kinds
modules = {r["name"] for r in p["by_module"]}
assert {"conv_in", "mid_block.temp_attentions.0.transformer_blocks.0.attn1"} <= modules, modules
assert abs(sum(r["s_per_call"] for r in p["by_module"]) - p["op_s"]) < 1e-9
print("ok: profile")' "$work/profile.json"
expect 0 "max |diff| 0 " -- "$tool" h5-compare "$work/prof/latents.h5" "$work/nv/latents.h5" 0
expect 2 "$work/none" -- "$vinf" generate "${small[@]}" --out "$work/prof2" --profile "$work/none/p.json"
[ ! -e "$work/prof2" ] && echo "ok: no output directory for a refused --profile" \
  || { echo "FAIL: $work/prof2 made"; fails=$((fails + 1)); }
# ffmpeg missing or dying: a clear error, the latents kept, no video left behind.
expect 1 "cannot run ffmpeg ('$work/no-ffmpeg'" -- "$vinf" generate "${small[@]}" --out "$work/f1" --output.ffmpeg "$work/no-ffmpeg"
printf '#!/bin/sh\nhead -c 100 > /dev/null\necho "fake ffmpeg gives up" >&2\nexit 3\n' > "$work/bad-ffmpeg"
chmod +x "$work/bad-ffmpeg"
expect 1 "fake ffmpeg gives up" -- "$vinf" generate "${small[@]}" --out "$work/f2" --output.ffmpeg "$work/bad-ffmpeg"
for d in f1 f2; do
  [ -f "$work/$d/latents.h5" ] && [ ! -e "$work/$d/video.mp4" ] && [ ! -e "$work/$d/video.mp4.partial.mp4" ] \
    && echo "ok: $d: latents kept, no video" || { echo "FAIL: $d files"; ls "$work/$d"; fails=$((fails + 1)); }
done

# The output directory: refused when it exists, replaced with --overwrite.
expect 2 "$work/a exists (a finished run)" -- "$vinf" generate "${small[@]}" --out "$work/a"
# A finished run is never overwritten without --overwrite: --resume auto (which the Slurm scripts
# always pass) finds nothing to do, and resuming it from one of its checkpoints is refused.
sum_a=$(md5sum < "$work/a/latents.h5")
expect 0 "holds a finished run (run.json): nothing to do" -- "$vinf" generate "${small[@]}" --out "$work/a" --resume auto
last=$(ls "$work"/a/checkpoints/step-*.h5 | tail -1)
expect 2 "holds a finished run (run.json), which resuming would overwrite" -- \
  "$vinf" generate "${small[@]}" --out "$work/a" --resume "$last"
[ "$(md5sum < "$work/a/latents.h5")" = "$sum_a" ] && echo "ok: the finished run's latents are untouched" \
  || { echo "FAIL: the finished run's latents.h5 changed"; fails=$((fails + 1)); }
# --overwrite starts again and leaves none of the previous run's outputs, checkpoints included, for
# a later --resume auto (step-000099.h5 stands for a later step of an older, longer run).
cp "$last" "$work/a/checkpoints/step-000099.h5"
expect 0 "removed the previous run's outputs in $work/a: run.json, latents.h5, video.mp4, contact.png, checkpoints/step-000002.h5, checkpoints/step-000099.h5" -- \
  "$vinf" generate "${small[@]}" --out "$work/a" --overwrite
[ ! -e "$work/a/checkpoints/step-000099.h5" ] && [ -f "$work/a/checkpoints/step-000002.h5" ] && [ -f "$work/a/run.json" ] \
  && echo "ok: --overwrite left only this run's checkpoint" || { echo "FAIL: checkpoints after --overwrite"; ls "$work/a/checkpoints"; fails=$((fails + 1)); }
expect 0 "holds a finished run, which this run replaces from the start" -- \
  "$vinf" generate "${small[@]}" --out "$work/a" --overwrite --resume auto
expect 0 '"resumed_from": null' -- cat "$work/a/run.json"
touch "$work/plain-file"
expect 2 "option '--out': '$work/plain-file' is a file, not a directory" -- "$vinf" generate "${small[@]}" --out "$work/plain-file" --overwrite

# The INI file: sections are dotted names, a key before any section is top-level, the command
# line wins over the file.
cat > "$work/run.ini" <<'EOF'
model = builtin:tiny
[video]
frames = 8
height = 32
width = 32
[sampler]
steps = 2
scheduler = ddim
[prompt]
text = a kite
text = a boat
[long]
mode = windows
window = 4
stride = 4
[vi]
local-frames = 2
global-frames = 4
EOF
expect 0 "outputs in $work/ini/" -- "$vinf" generate --config "$work/run.ini" --out "$work/ini" --sampler.steps 3
expect 0 '"steps": 3' -- cat "$work/ini/run.json"
expect 0 '"scheduler": "ddim"' -- cat "$work/ini/run.json"
expect 0 '"a boat"' -- cat "$work/ini/run.json"
# The default output directory is outputs/<config name>-<id> under the working directory.
(cd "$work" && SLURM_JOB_ID=4242 "$vinf" generate --config run.ini --quiet > /dev/null 2>&1)
expect 0 "ok" -- "$tool" h5-check "$work/outputs/run-4242/latents.h5" 8 4 4 4

# The whole pipeline from files equals the built-in model (make-model draws every part as builtin:
# does): UNet, VAE, text encoder and tokenizer from a pipeline directory; the split layout
# (--model.text-encoder/--model.tokenizer/--model.vae beside a UNet directory); the same text through
# vinf encode-text as an embeddings file.
expect 0 "" -- "$vinf" make-model --preset tiny --seed 5 --out "$work/tiny5"
expect 0 "wrote the pipeline" -- "$vinf" make-model --preset tiny --seed 5 --layout pipeline --out "$work/pipe5"
expect 0 "outputs" -- "$vinf" generate "${small[@]}" --model.seed 5 --out "$work/b"
expect 0 "outputs" -- "$vinf" generate "${small[@]/builtin:tiny/$work/pipe5}" --out "$work/p"
expect 0 "max |diff| 0 " -- "$tool" h5-compare "$work/p/latents.h5" "$work/b/latents.h5" 0
expect 0 "" -- cmp "$work/p/contact.png" "$work/b/contact.png"
expect 0 "tokenizer $work/pipe5/tokenizer, text encoder $work/pipe5/text_encoder" -- \
  "$vinf" generate "${small[@]/builtin:tiny/$work/tiny5}" --model.text-encoder "$work/pipe5/text_encoder" \
  --model.tokenizer "$work/pipe5/tokenizer" --model.vae "$work/pipe5/vae" --out "$work/s" --verbose
expect 0 "max |diff| 0 " -- "$tool" h5-compare "$work/s/latents.h5" "$work/b/latents.h5" 0
expect 0 "wrote $work/emb.safetensors" -- "$vinf" encode-text --model "$work/pipe5" --prompt "a kite" --negative "" \
  --out "$work/emb.safetensors"
expect 0 "outputs" -- "$vinf" generate --model "$work/tiny5" --prompt.embeddings "$work/emb.safetensors" \
  --video.frames 8 --video.height 32 --video.width 32 --sampler.steps 2 --vi.local-frames 2 --vi.global-frames 4 --out "$work/c"
expect 0 "max |diff| 0 " -- "$tool" h5-compare "$work/c/latents.h5" "$work/b/latents.h5" 0
# A prompt over 77 tokens runs, truncated, and says what it dropped.
long="a kite over the sea $(printf 'and a boat %.0s' {1..30})at dawn"
expect 0 "prompt 0 has 263 tokens; the text encoder takes 77, so these are dropped: 'boat and a boat" -- \
  "$vinf" generate "${small[@]/a kite/$long}" --out "$work/long"

# Rejected inputs: the message names the option (or file), status 2, no output directory.
bad() {  # bad TEXT options...
  local text=$1
  shift
  expect 2 "$text" -- "$vinf" generate "$@" --out "$work/refused"
  if [ -e "$work/refused" ]; then echo "FAIL: a refused run left $work/refused"; fails=$((fails + 1)); rm -rf "$work/refused"; fi
}
bad "unrecognised option '--bogus'" "${small[@]}" --bogus 1
bad "--sampler.steps" --model builtin:tiny --prompt.text x --sampler.steps many
bad "option '--sampler.steps' must be in [1, 1000], got '0'" --model builtin:tiny --prompt.text x --sampler.steps 0
bad "no model: give --model" --prompt.text x
bad "'$work/nowhere' does not exist (no such directory)" --model "$work/nowhere" --prompt.text x
long_name=$(printf 'd%.0s' {1..300})  # longer than a file name may be: the lookup fails, not only misses
bad "option '--model': '$long_name' does not exist" --model "$long_name" --prompt.text x
bad "--model $work/tiny5 has no text_encoder/: give --model.text-encoder DIR" --model "$work/tiny5" --prompt.text x
bad "option '--model.tokenizer': '$work/nowhere' does not exist" --model "$work/pipe5" --model.tokenizer "$work/nowhere" --prompt.text x
bad "cannot be combined with a built-in model" "${small[@]}" --model.tokenizer "$work/pipe5/tokenizer"
mkdir -p "$work/broken-tok" && cp "$work/pipe5/tokenizer/vocab.json" "$work/broken-tok/"
bad "tokenizer $work/broken-tok: no merges.txt" --model "$work/pipe5" --model.tokenizer "$work/broken-tok" --prompt.text x
bad "--video.height must be a multiple of 8" --model builtin:tiny --prompt.text x --video.height 100
bad "option '--vae.tile' must be 0 or in [1, 2048], got '-5'" "${small[@]}" --vae.tile -5
bad "option '--video.width' must be in [8, 16384], got '0'" --model builtin:tiny --prompt.text x --video.width 0
bad "--parallel.cfg 2 needs an even number of ranks" "${small[@]}" --parallel.cfg 2
bad "--parallel.cfg 2 splits the two guidance branches" "${small[@]}" --parallel.cfg 2 --sampler.guidance 1
bad "--sampler.scheduler 'euler' is not one of" "${small[@]}" --sampler.scheduler euler
bad "--sampler.noise must be auto, invariant or compat" "${small[@]}" --sampler.noise loud
bad "option '--sampler.seed' must be in [0, 9007199254740991], got '-1'" "${small[@]}" --sampler.seed -1
bad "no prompt" --model builtin:tiny
# Job lists and the outer layout: refused before MPI starts or anything is created.
bad "--parallel.data 2 makes replicas that take jobs from a list: give --jobs FILE" "${small[@]}" --parallel.data 2
bad "option '--parallel.pipeline' must be in [1, 1000], got '0'" "${small[@]}" --parallel.pipeline 0
bad "option '--jobs': '$work/nowhere.jsonl' does not exist" "${small[@]}" --jobs "$work/nowhere.jsonl"
printf '{"seed": 1}\n{"seed": 2, "model": "builtin:small"}\n' > "$work/badlist.jsonl"
bad "badlist.jsonl line 2: 'model' cannot be set per job" "${small[@]}" --jobs "$work/badlist.jsonl"
printf '{"seed": 1}\n' > "$work/list1.jsonl"
touch "$work/x.h5"
bad "--resume $work/x.h5 with --jobs: every job resumes from its own checkpoints" "${small[@]}" \
  --jobs "$work/list1.jsonl" --resume "$work/x.h5"
bad "1 rank(s) cannot be laid out as 1 replica(s) x 2 pipeline stage(s)" "${small[@]}" --parallel.pipeline 2
# A video that cannot fit in memory is refused before anything is created.
bad "the layout does not fit: rank 0 needs about" --model builtin:tiny \
  --device cpu --prompt.text x --video.frames 1000000 --video.height 32 --video.width 32
# Prompts end up in run.json and the checkpoints, which hold UTF-8 only.
bad "--prompt.text number 2 is not valid UTF-8 (byte 3)" "${small[@]}" --prompt.text $'caf\xe9'
bad "--prompt.negative is not valid UTF-8 (byte 0)" "${small[@]}" --prompt.negative $'\xff'
printf 'model = builtin:tiny\n[prompt]\ntext = ok\ntext = \xc3(\n' > "$work/latin1.ini"
bad "--prompt.text number 2 is not valid UTF-8 (byte 0)" --config "$work/latin1.ini"
expect 2 "option '--out': '' is empty: give a path" -- "$vinf" generate --model builtin:tiny --prompt.text x --out ''
bad "the built-in models are builtin:tiny and builtin:small" --model builtin:huge --prompt.text x
bad "--vi.mode must be invariant, compat, exact or off" "${small[@]}" --vi.mode sideways
bad "--vi.local-frames 9 is larger than the 8 frames per clip" --model builtin:tiny --prompt.text x --video.frames 8 --vi.local-frames 9
"$tool" text-embeddings "$work/wide.safetensors" 0 77 64 "" x
bad "cross_attention_dim is 32" --model "$work/tiny5" --prompt.embeddings "$work/wide.safetensors"
bad "option '--config': '$work/none.ini' does not exist" --config "$work/none.ini"
printf 'model = builtin:tiny\n[video]\nframez = 8\n' > "$work/typo.ini"
bad "--config $work/typo.ini line 3: unknown key 'framez' in [video] (vinf generate has no option --video.framez" \
  --config "$work/typo.ini" --prompt.text x
printf 'model = builtin:tiny\nhelp = 1\n' > "$work/help.ini"
bad "--config $work/help.ini line 2: 'help' is not a setting" --config "$work/help.ini" --prompt.text x
# A --dump.modules glob that matches no module of the model is refused before the run starts,
# with the module names (it would otherwise write an empty activations.h5).
bad "--dump.modules: 'down_blocks.9*' matches no module of this model; the modules are time_embedding, conv_in, \
transformer_in, down_blocks.0, down_blocks.1, mid_block, up_blocks.0, up_blocks.1, conv_norm_out, conv_out, and inside them" \
  "${small[@]}" --dump.modules 'mid_block, down_blocks.9*'
bad "--dump.modules: 'Mid_block' matches no module" "${small[@]}" --dump.modules 'Mid_block'
# Option errors whose text holds the option library's own placeholders (%value%, %canonical_option%)
# are reported, with '%' shown as '％', instead of being expanded forever (timeout: a hang fails).
expect 2 "the argument ('％value％') for option '--video.height' is invalid" -- \
  timeout 60 "$vinf" generate --model builtin:tiny --prompt.text x --video.height %value% --out "$work/refused"
expect 2 "unrecognised option '--％canonical_option％x'" -- timeout 60 "$vinf" generate --%canonical_option%x 1
printf 'model = builtin:tiny\n[video]\nheight = %%value%%\n' > "$work/placeholder.ini"
expect 2 "--config $work/placeholder.ini line 3: the argument ('％value％') for option" -- \
  timeout 60 "$vinf" generate --config "$work/placeholder.ini" --out "$work/refused"
printf '{"prediction_type": "v_prediction"}' > "$work/v.json"
bad "prediction_type" "${small[@]}" --model.scheduler-config "$work/v.json"
expect 2 "cannot create the output directory" -- "$vinf" generate "${small[@]}" --out /proc/vinf-test

# --latents-init: the initial latents from a file instead of the seed's draw. With a scheduler that
# draws no noise after the start (dpmpp), two seeds then give the same latents bit for bit (same
# shapes, same order); without the file the seed's draw differs. A file of another shape, without
# the key, or with a long-video method that draws its own latents is refused.
write_init() {  # write_init FILE F [KEY]: KEY (latents_init) F32 [1,4,F,4,4] of fixed values
  python3 - "$1" "$2" "${3:-latents_init}" <<'PY'
import json, math, struct, sys
path, frames, key = sys.argv[1], int(sys.argv[2]), sys.argv[3]
n = 4 * frames * 16
data = struct.pack("<%df" % n, *[1.3 * math.sin(0.7 * i) for i in range(n)])
head = json.dumps({key: {"dtype": "F32", "shape": [1, 4, frames, 4, 4], "data_offsets": [0, len(data)]}}).encode()
head += b" " * (-len(head) % 8)
open(path, "wb").write(struct.pack("<Q", len(head)) + head + data)
PY
}
write_init "$work/init.safetensors" 8
write_init "$work/init6.safetensors" 6
write_init "$work/other.safetensors" 8 latents
init_run=("${small[@]}" --sampler.scheduler dpmpp --output.video=false)
expect 0 "outputs" -- "$vinf" generate "${init_run[@]}" --sampler.seed 1 --latents-init "$work/init.safetensors" --out "$work/li1"
expect 0 "outputs" -- "$vinf" generate "${init_run[@]}" --sampler.seed 2 --latents-init "$work/init.safetensors" --out "$work/li2"
expect 0 "max |diff| 0 " -- "$tool" h5-compare "$work/li1/latents.h5" "$work/li2/latents.h5" 0
expect 0 "outputs" -- "$vinf" generate "${init_run[@]}" --sampler.seed 1 --out "$work/li0"
expect 1 "FAIL" -- "$tool" h5-compare "$work/li0/latents.h5" "$work/li1/latents.h5" 1e-3
expect 2 "'latents_init' is F32[1,4,6,4,4] but this video's latents are F32[1,4,8,4,4]" -- "$vinf" generate "${init_run[@]}" --latents-init "$work/init6.safetensors" --out "$work/li3"
expect 2 "has no tensor 'latents_init'" -- "$vinf" generate "${init_run[@]}" --latents-init "$work/other.safetensors" --out "$work/li3"
expect 2 "option '--latents-init': '$work/none.safetensors' does not exist" -- "$vinf" generate "${init_run[@]}" --latents-init "$work/none.safetensors" --out "$work/li3"
expect 2 "--latents-init gives the clips method's latents" -- "$vinf" generate "${init_run[@]}" --latents-init "$work/init.safetensors" --long.mode windows --out "$work/li3"
[ ! -e "$work/li3" ] || { echo "FAIL: a refused run left $work/li3"; fails=$((fails + 1)); }

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
