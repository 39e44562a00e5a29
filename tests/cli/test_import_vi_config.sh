#!/usr/bin/env bash
# `vinf generate --import-vi-config FILE` with configs shaped as the released Video-Infinity code's
# examples (one GPU, four GPUs, eight prompts over eight GPUs), on the fixture UNet at tiny sizes:
# - every pipe_configs field and the seed reach the run: run.json holds them, video.mp4 has the
#   export frame rate, and the latents equal those of the same run given as options (bit for bit:
#   the same computation on the same ranks);
# - num_frames is per GPU: the video has num_frames x the run's clip ranks;
# - options given on the command line or in --config win over the file;
# - one line names the fields the run ignores;
# - a wrong type or value: exit 2 naming the field, no output directory.
# usage: test_import_vi_config.sh MPIEXEC VINF TEST_TOOL FIXTURE_MODEL_DIR
set -u
mpiexec=$1 vinf=$2 tool=$3 fixture=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/expect.sh"
device_args=(--device cpu --dtype f32)  # compared bit for bit: the CPU whatever the node has

# A pipeline around the fixture UNet, with the tiny preset's VAE, text encoder and tokenizer (the
# same latent channels and cross-attention width).
"$vinf" make-model --preset tiny --seed 2 --layout pipeline --out "$work/parts" > /dev/null || { echo "FAIL: make-model"; exit 1; }
mkdir "$work/pipe"
ln -s "$fixture" "$work/pipe/unet"
mv "$work/parts/vae" "$work/parts/text_encoder" "$work/parts/tokenizer" "$work/pipe/"

# config NAME DEVICES NUM_FRAMES DTYPE PROMPT...: a config with the released examples' fields.
config() {
  local name=$1 devices=$2 frames=$3 dtype=$4
  shift 4
  local prompts
  prompts=$(printf '%s\n' "$@" | jq -R . | jq -sc .)
  cat > "$work/$name.json" <<EOF
{
    "dtype": "$dtype",
    "devices": $devices,
    "seed": 7,
    "master_port": 29516,
    "base_path": "./exp",
    "pipe_configs": {
        "prompts": $prompts,
        "steps": 2,
        "guidance_scale": 7.5,
        "fps": 12,
        "num_frames": $frames,
        "height": 32,
        "width": 48,
        "export_fps": 6,
        "file_name": null
    },
    "plugin_configs": {
        "attn": {
            "padding": 2,
            "top_k": 4,
            "top_k_chunk_size": 8,
            "attn_scale": 1.0,
            "token_num_scale": false,
            "dynamic_scale": true,
            "local_phase": {"t": 700, "local_biase": 10, "global_biase": 0},
            "global_phase": {"t": 700, "local_biase": 0, "global_biase": 10}
        },
        "conv_3d": {"padding": 1},
        "conv_layer": {}
    }
}
EOF
}
# The same settings as options.
as_options=(--sampler.steps 2 --sampler.guidance 7.5 --video.fps 12 --video.height 32 --video.width 48
            --output.fps 6 --sampler.seed 7 --vi.local-frames 2 --vi.global-frames 4 --vi.local-phase-t 700
            --vi.global-phase-t 700)
# field RUN_DIR JQ_EXPR WANT: run.json's JQ_EXPR equals the JSON value WANT (numbers as numbers)
field() {
  if [ "$(jq "($2) == ($3)" "$1/run.json" 2>&1)" = true ]; then
    echo "ok: $(basename "$1"): $2 = $3"
  else
    echo "FAIL: $1: $2 = $(jq -c "$2" "$1/run.json" 2>&1), expected $3"; fails=$((fails + 1))
  fi
}
same() {  # same A B: bit-identical latents
  expect 0 "max |diff| 0 " -- "$tool" h5-compare "$work/$1/latents.h5" "$work/$2/latents.h5" 0
}

# 1. One GPU: every field reaches the run.
config single "[0]" 8 torch.float16 "a beagle with goggles swimming over a reef"
expect 0 "--import-vi-config $work/single.json: ignored: devices, dtype (f16; this run computes in f32, --dtype chooses), base_path, master_port, pipe_configs.file_name, plugin_configs.conv_3d, plugin_configs.attn.top_k_chunk_size" -- \
  "$vinf" generate --model "$work/pipe" --import-vi-config "$work/single.json" "${device_args[@]}" --out "$work/single"
field "$work/single" '.config.sampler | [.steps, .guidance, .seed]' '[2,7.5,7]'
field "$work/single" '.config.video' '{"fps":12,"frames":8,"height":32,"width":48}'
field "$work/single" '.config.output.fps' '6'
field "$work/single" '.config.prompt.text' '["a beagle with goggles swimming over a reef"]'
field "$work/single" '.config.vi | [.["local-frames"], .["global-frames"], .["conv-halo"], .["local-phase-t"]]' '[2,4,4,700]'
field "$work/single" '.config["import-vi-config"]' "\"$work/single.json\""
if [ "$have_ffmpeg" -eq 1 ]; then
  expect 0 "48,32,6/1,8" -- ffprobe -v error -count_frames -select_streams v:0 \
    -show_entries stream=width,height,r_frame_rate,nb_read_frames -of csv=p=0 "$work/single/video.mp4"
fi
expect 0 "outputs in" -- "$vinf" generate --model "$work/pipe" "${as_options[@]}" --video.frames 8 \
  --prompt.text "a beagle with goggles swimming over a reef" "${device_args[@]}" --output.video=false --out "$work/single.opt"
same single single.opt

# 2. Options given on the command line or in --config win, and the line says which they replace.
cat > "$work/run.ini" <<EOF
import-vi-config = $work/single.json
[sampler]
steps = 3
EOF
expect 0 "pipe_configs.steps (--sampler.steps given), seed (--sampler.seed given), pipe_configs.num_frames (--video.frames given), pipe_configs.prompts (--prompt.text given)" -- \
  "$vinf" generate --model "$work/pipe" --config "$work/run.ini" --sampler.seed 9 --video.frames 4 --prompt.text "a cat" \
  "${device_args[@]}" --output.video=false --out "$work/over"
field "$work/over" '[.config.sampler.steps, .config.sampler.seed, .config.video.frames, .config.prompt.text[0], .config.sampler.guidance]' '[3,9,4,"a cat",7.5]'

# 3. Four GPUs on 4 ranks: 4 x num_frames frames, the same latents as the options.
config four "[0, 1, 2, 3]" 6 torch.float32 "a lighthouse at dusk, waves rolling in"
expect 0 "ignored: devices, base_path" -- "$mpiexec" -np 4 "$vinf" generate --model "$work/pipe" \
  --import-vi-config "$work/four.json" "${device_args[@]}" --output.video=false --out "$work/four"
field "$work/four" '[.config.video.frames, .config.parallel.clips, .config.parallel["frames-per-clip"]]' '[24,4,6]'
expect 0 "outputs in" -- "$mpiexec" -np 4 "$vinf" generate --model "$work/pipe" "${as_options[@]}" --video.frames 24 \
  --prompt.text "a lighthouse at dusk, waves rolling in" "${device_args[@]}" --output.video=false --out "$work/four.opt"
same four four.opt

# 4. A config for 8 GPUs run on 2 ranks: with eight prompts, clip r of N would take prompt
#    int(r / N * 8) and six prompts would never be used: refused, naming the file's field. With two
#    prompts every prompt reaches a clip, the video has 2 x num_frames frames, and the line says the
#    file listed 8 GPUs.
config eight "[0, 1, 2, 3, 4, 5, 6, 7]" 4 torch.float16 "a puppy in the rain" "a girl finds the puppy" \
  "they walk home" "they play in the garden" "they run under cherry trees" "a rest in the grass" \
  "a festival with lanterns" "a walk on the beach at sunset"
expect 2 "--import-vi-config $work/eight.json: pipe_configs.prompts: 8 prompts for 2 clips" -- \
  "$mpiexec" -np 2 "$vinf" generate --model "$work/pipe" --import-vi-config "$work/eight.json" "${device_args[@]}" \
  --output.video=false --out "$work/eight"
config eight "[0, 1, 2, 3, 4, 5, 6, 7]" 4 torch.float16 "a puppy in the rain" "a walk on the beach at sunset"
log=$("$mpiexec" -np 2 "$vinf" generate --model "$work/pipe" --import-vi-config "$work/eight.json" "${device_args[@]}" \
        --output.video=false --verbose --out "$work/eight" 2>&1)
for want in "clip 1 (frames 4-7): prompt 1" "ignored: devices (8 listed, this run has 2 clip ranks), dtype (f16;"; do
  grep -qF "$want" <<< "$log" && echo "ok: eight: $want" || { echo "FAIL: eight: no '$want'"; echo "$log" | tail; fails=$((fails + 1)); }
done
field "$work/eight" '.config.prompt.text | [length, .[0], .[1]]' '[2,"a puppy in the rain","a walk on the beach at sunset"]'
field "$work/eight" '.config.video.frames' '8'

# 5. Wrong types and values: exit 2 naming the field, nothing written.
bad() {  # bad KEY VALUE TEXT: single.json with "KEY": VALUE
  local key=$1 value=$2 text=$3
  sed -E "s/^( *\"$key\": ).*,$/\1$value,/" "$work/single.json" > "$work/bad.json"
  grep -qF "\"$key\": $value," "$work/bad.json" || { echo "FAIL: test set-up: no $key in the config"; fails=$((fails + 1)); }
  expect 2 "$text" -- "$vinf" generate --model "$work/pipe" --import-vi-config "$work/bad.json" "${device_args[@]}" \
    --out "$work/refused"
  if [ -e "$work/refused" ]; then echo "FAIL: a refused run left $work/refused"; fails=$((fails + 1)); rm -rf "$work/refused"; fi
}
bad steps '"30"' "$work/bad.json: config key 'pipe_configs.steps' must be an integer, got \"30\""
bad steps 0 "$work/bad.json: pipe_configs.steps must be in [1, 1000], got 0"
bad steps 99999999999 "$work/bad.json: config key 'pipe_configs.steps' must be an integer in [-2147483648, 2147483647], got 99999999999"
bad guidance_scale true "config key 'pipe_configs.guidance_scale' must be a number, got true"
bad guidance_scale 120 "pipe_configs.guidance_scale must be in [0, 100], got 120"
bad fps 0 "$work/bad.json: pipe_configs.fps must be in (0, 1000], got 0"
bad export_fps -8 "$work/bad.json: pipe_configs.export_fps must be in (0, 1000], got -8"
bad num_frames 2.5 "config key 'pipe_configs.num_frames' must be an integer, got 2.5"
bad num_frames 0 "pipe_configs.num_frames (frames per GPU, --video.frames / ranks) must be in [1, 1000000], got 0"
bad height 100 "$work/bad.json: pipe_configs.height must be a multiple of 8"
bad width '"wide"' "config key 'pipe_configs.width' must be an integer, got \"wide\""
bad prompts '"a dog"' "config key 'pipe_configs.prompts' must be a list of strings, got \"a dog\""
bad prompts '[]' "config key 'pipe_configs.prompts' must be a non-empty list of strings, got []"
bad prompts '["a dog", 3]' "config key 'pipe_configs.prompts' must be a list of strings, got [\"a dog\",3]"
bad seed -1 "$work/bad.json: seed must be >= 0, got -1"
bad seed '"123"' "$work/bad.json: config key 'seed' must be an integer, got \"123\""
bad dtype '"torch.int8"' "$work/bad.json: dtype 'torch.int8' is not torch.float16, torch.bfloat16 or torch.float32"
bad devices 4 "$work/bad.json: config key 'devices' must be a non-empty list of GPU numbers, got 4"
bad padding -1 "plugin_configs.attn.padding (--vi.local-frames) must be >= 0, got -1"
# A file whose settings do not fit the video: the message names the options and their fields.
sed -E 's/^( *"top_k": ).*,$/\116,/' "$work/single.json" > "$work/bad.json"
expect 2 "--vi.global-frames 16 is larger than the video (8 frames) (--import-vi-config $work/bad.json: plugin_configs.attn.padding is --vi.local-frames, attn.top_k --vi.global-frames" -- \
  "$vinf" generate --model "$work/pipe" --import-vi-config "$work/bad.json" "${device_args[@]}" --out "$work/refused"
echo '{"pipe_configs": [], "plugin_configs": {}}' > "$work/bad.json"
expect 2 "$work/bad.json: config key 'pipe_configs' must hold a JSON object" -- "$vinf" generate --model "$work/pipe" \
  --import-vi-config "$work/bad.json" "${device_args[@]}" --out "$work/refused"

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
