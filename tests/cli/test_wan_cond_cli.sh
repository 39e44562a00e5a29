#!/usr/bin/env bash
# Wan2.1's conditioned pipelines on the command line, against diffusers' numbers
# (tests/fixtures/wan-i2v-tiny, wan-flf2v-tiny, wan-v2v-tiny): image-to-video, first-and-last-frame
# and video-to-video from the references' draws, forward on the image-to-video transformer,
# checkpoints resumed bit for bit with the conditioning part of the numbers, make-model's random
# image-to-video pipeline and inspect, vinf extend and generate --continue, a job list naming its
# images and its links, SkyReels-V2's diffusion forcing against diffusers, and a clear message with
# exit status 2 for every refused input.
# usage: test_wan_cond_cli.sh VINF TEST_TOOL FIXTURES_DIR MPIEXEC
set -u
vinf=$1 tool=$2 fixtures=$3 mpiexec=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/expect.sh"

i2v=$fixtures/wan-i2v-tiny flf=$fixtures/wan-flf2v-tiny v2v=$fixtures/wan-v2v-tiny t2v=$fixtures/wan-tiny
# The references' call: their prompt, negative prompt, guidance, 4 steps, 9 frames.
call=(--prompt.text "A beagle swims in the ocean with coral reefs." --prompt.negative "blurry, low quality"
      --sampler.guidance 5 --sampler.steps 4 --device cpu "${video_args[@]}")
# The runs less their image or video (i2v_model, v2v_model) and less their frames (*_base).
i2v_model=(--model "$i2v" "${call[@]}" --prompt.max-length 24 --video.frames 9 --video.height 32 --video.width 48)
i2v_run=("${i2v_model[@]}" --image "$i2v/image.png")
flf_run=(--model "$flf" --image "$flf/image.png" --last-image "$flf/last_image.png" "${call[@]}" --video.frames 9 --video.height 32 --video.width 48)
v2v_base=(--model "$t2v" "${call[@]}" --prompt.max-length 24 --video.height 32 --video.width 32)
v2v_model=("${v2v_base[@]}" --video.frames 9)
v2v_run=("${v2v_model[@]}" --video "$v2v/frames" --strength 0.7)

# The three pipelines from the references' draws: the final latents within 1e-4 of diffusers'.
expect 0 "image-to-video from $i2v/image.png" -- "$vinf" generate "${i2v_run[@]}" --latents-init "$i2v/ref_pipeline.safetensors" --out "$work/i2v"
expect 0 "ok" -- "$tool" h5-vs-ref "$work/i2v/latents.h5" "$i2v/ref_pipeline.safetensors" latents 1e-4 0
expect 0 "first-and-last-frame from" -- "$vinf" generate "${flf_run[@]}" --latents-init "$flf/ref_pipeline.safetensors" --out "$work/flf"
expect 0 "ok" -- "$tool" h5-vs-ref "$work/flf/latents.h5" "$flf/ref_pipeline.safetensors" latents 1e-4 0
expect 0 "steps 3-4 run" -- "$vinf" generate "${v2v_run[@]}" --latents-init "$v2v/ref_v2v.safetensors" --out "$work/v2v"
expect 0 "ok" -- "$tool" h5-vs-ref "$work/v2v/latents.h5" "$v2v/ref_v2v.safetensors" latents 1e-4 0
# The conditioning is in run.json (the numbers a resume must match).
expect 0 "0.7 2" -- jq -r '"\(.config.input.strength) \(.config.input["first-step"])"' "$work/v2v/run.json"
expect 0 "$i2v/image.png" -- jq -r '.config.input.image' "$work/i2v/run.json"
# The transformer alone on the reference's inputs (renamed for forward), and over 2 tensor ranks.
"$tool" pick "$i2v/ref_transformer.safetensors" "$work/in.safetensors" hidden_states encoder_hidden_states \
  encoder_hidden_states_image timesteps=timestep
expect 0 "wrote $work/fw.safetensors" -- "$vinf" forward --model "$i2v" --inputs "$work/in.safetensors" --out "$work/fw.safetensors" --device cpu
"$tool" pick "$work/fw.safetensors" "$work/fw0.safetensors" noise_pred=noise_pred.t0
expect 0 "ok 1 tensors" -- "$tool" compare-relative "$work/fw0.safetensors" "$i2v/ref_transformer.safetensors" 1e-5 noise_pred
expect 0 "each rank 1 of 2 heads" -- "$mpiexec" -np 2 "$vinf" forward --model "$i2v" --inputs "$work/in.safetensors" --out "$work/fw2.safetensors" --device cpu --parallel.tensor 2
expect 0 "ok noise_pred.t0" -- "$tool" compare "$work/fw2.safetensors" "$work/fw.safetensors" 1e-5 noise_pred.t0
"$tool" pick "$i2v/ref_transformer.safetensors" "$work/no-image.safetensors" hidden_states encoder_hidden_states timesteps=timestep
expect 2 "give its CLIP states as 'encoder_hidden_states_image'" -- "$vinf" forward --model "$i2v" --inputs "$work/no-image.safetensors" --out "$work/z.safetensors" --device cpu

# Checkpoints: stopped after step 2 and resumed, the uninterrupted run's latents bit for bit; the
# same with video-to-video's cut schedule (its first step is 3 of 4); another image is refused.
quiet=(--output.video=false --sampler.seed 7)
expect 0 "outputs in $work/k0/" -- "$vinf" generate "${i2v_run[@]}" "${quiet[@]}" --out "$work/k0"
expect 75 "stopped after step 2 of 4" -- env VINF_FAULT_STEP="rank=0,step=2,signal=TERM" "$vinf" generate "${i2v_run[@]}" "${quiet[@]}" --checkpoint.every 1 --out "$work/k"
expect 2 "other settings" -- "$vinf" generate "${i2v_model[@]}" "${quiet[@]}" --image "$flf/last_image.png" --resume auto --out "$work/k"
expect 0 "resuming from $work/k/checkpoints/step-000002.h5" -- "$vinf" generate "${i2v_run[@]}" "${quiet[@]}" --resume auto --out "$work/k"
expect 0 "max |diff| 0 " -- "$tool" h5-compare "$work/k/latents.h5" "$work/k0/latents.h5" 0
expect 0 "outputs in $work/v0/" -- "$vinf" generate "${v2v_run[@]}" "${quiet[@]}" --out "$work/v0"
expect 75 "stopped after step 3 of 4" -- env VINF_FAULT_STEP="rank=0,step=3,signal=TERM" "$vinf" generate "${v2v_run[@]}" "${quiet[@]}" --checkpoint.every 1 --out "$work/vk"
expect 2 "other settings" -- "$vinf" generate "${v2v_model[@]}" "${quiet[@]}" --video "$v2v/frames" --strength 1 --resume auto --out "$work/vk"
expect 0 "after step 3 of 4" -- "$vinf" generate "${v2v_run[@]}" "${quiet[@]}" --resume auto --out "$work/vk"
expect 0 "max |diff| 0 " -- "$tool" h5-compare "$work/vk/latents.h5" "$work/v0/latents.h5" 0

# A random image-to-video pipeline: make-model writes it, inspect describes its image side,
# generate runs it.
expect 0 "image_encoder/, image_processor/" -- "$vinf" make-model --preset wan-i2v-tiny --layout pipeline --seed 2 --out "$work/rand"
expect 0 "the pipeline reads layer 1's states" -- "$vinf" inspect "$work/rand"
expect 0 "image-to-video: 36 input channels" -- "$vinf" inspect "$i2v"
expect 0 "outputs in $work/r/" -- "$vinf" generate --model "$work/rand" --image "$i2v/image.png" --prompt.text "a dog" --video.frames 5 --video.height 32 --video.width 32 --sampler.steps 2 --device cpu --output.video=false --out "$work/r"

# Refused, each with what to do, exit status 2 and nothing written.
expect 2 "give the first frame with --image FILE" -- "$vinf" generate "${i2v_model[@]}" --out "$work/bad"
expect 2 "is text-to-video" -- "$vinf" generate "${v2v_model[@]}" --image "$i2v/image.png" --out "$work/bad"
expect 2 "give --last-image FILE" -- "$vinf" generate --model "$flf" --image "$flf/image.png" "${call[@]}" --video.frames 9 --video.height 32 --video.width 48 --out "$work/bad"
expect 2 "--last-image needs a first-and-last-frame pipeline" -- "$vinf" generate "${i2v_run[@]}" --last-image "$flf/last_image.png" --out "$work/bad"
expect 2 "for a text-to-video pipeline" -- "$vinf" generate "${i2v_run[@]}" --video "$v2v/frames" --out "$work/bad"
expect 2 "runs int(4 x 0.2) = 0 steps" -- "$vinf" generate "${v2v_model[@]}" --video "$v2v/frames" --strength 0.2 --out "$work/bad"
expect 2 "'--strength' must be in (0, 1]" -- "$vinf" generate "${v2v_model[@]}" --video "$v2v/frames" --strength 1.5 --out "$work/bad"
expect 2 "has 9 frames, fewer than --video.frames 13; use --video.frames 9" -- "$vinf" generate "${v2v_base[@]}" --video "$v2v/frames" --video.frames 13 --out "$work/bad"
expect 2 "is for a Wan2.1 pipeline" -- "$vinf" generate --model builtin:tiny --image "$i2v/image.png" --prompt.text x --out "$work/bad"
printf 'not a picture' > "$work/text.png"
expect 2 "is not an image ffmpeg can read" -- "$vinf" generate "${i2v_model[@]}" --image "$work/text.png" --out "$work/bad"
expect 2 "$work/none.png" -- "$vinf" generate "${i2v_model[@]}" --image "$work/none.png" --out "$work/bad"
mkdir -p "$work/empty"
expect 2 "holds no image files" -- "$vinf" generate "${v2v_model[@]}" --video "$work/empty" --out "$work/bad"
expect 2 "has no tensor 'posterior_eps'" -- "$vinf" generate "${v2v_run[@]}" --latents-init "$i2v/ref_pipeline.safetensors" --out "$work/bad"
[ ! -e "$work/bad" ] || { echo "FAIL: a refused run left $work/bad"; fails=$((fails + 1)); }

if [ "$have_ffmpeg" -eq 1 ]; then
  # vinf extend: the image-to-video run's video continued by 8 frames, joined (17 frames), the seam
  # measured; generate --continue chains one more link (21 frames).
  expect 0 "then 8 new (the seam at frame 9)" -- "$vinf" extend --model "$i2v" --video "$work/i2v/video.mp4" --frames 9 --prompt.text "on it swims" --sampler.steps 2 --device cpu --evaluate --out "$work/e1"
  expect 0 "17 9" -- jq -r '"\(.frames) \(.seam.frame)"' "$work/e1/extend.json"
  expect 0 "nb_read_frames=17" -- ffprobe -v error -count_frames -show_entries stream=nb_read_frames "$work/e1/video.mp4"
  expect 0 "image-to-video from $work/e2/last-frame.png" -- "$vinf" generate --model "$i2v" --continue "$work/e1" --video.frames 5 --prompt.text "and on" --sampler.steps 2 --device cpu --out "$work/e2"
  expect 0 "21" -- jq -r '.frames' "$work/e2/extend.json"
  expect 2 "needs at least 5 (1 + 4k) frames" -- "$vinf" extend --model "$i2v" --video "$work/i2v/video.mp4" --frames 1 --prompt.text x --out "$work/bad"
  expect 2 "is a UNet model" -- "$vinf" extend --model builtin:tiny --video "$work/i2v/video.mp4" --frames 5 --prompt.text x --out "$work/bad"
  expect 2 "--continue $work/k has no video.mp4" -- "$vinf" generate --model "$i2v" --continue "$work/k" --prompt.text x --out "$work/bad"
  expect 0 "continue a video" -- "$vinf" extend --help
  # A job list: two images, and a link of a chain (run in order by one replica): each job names its
  # image or the run it continues.
  printf '%s\n' "{\"out\": \"a\", \"image\": \"$i2v/image.png\", \"seed\": 7}" \
    "{\"out\": \"b\", \"image\": \"$flf/last_image.png\"}" \
    "{\"out\": \"c\", \"continue\": \"$work/list/a\", \"video.frames\": 5}" > "$work/jobs.jsonl"
  expect 0 "" -- "$vinf" generate "${i2v_model[@]}" --output.video --jobs "$work/jobs.jsonl" --out "$work/list"
  expect 0 "done done done" -- jq -r '[.jobs[].status] | join(" ")' "$work/list/jobs.json"
  expect 0 "max |diff| 0 " -- "$tool" h5-compare "$work/list/a/latents.h5" "$work/k0/latents.h5" 0
  expect 0 "13" -- jq -r '.frames' "$work/list/c/extend.json"
fi
# SkyReels-V2's diffusion forcing (tests/fixtures/skyreels-df-tiny) from the reference's draws:
# synchronous, with addnoise_condition, asynchronous with causal blocks of 2 (and its guidance
# branches over 2 ranks): the final latents within 1e-4 of diffusers'.
df=$fixtures/skyreels-df-tiny
df_call=(--model "$df" --prompt.text "A red fox trots through fresh snow at dawn." --prompt.negative "dark, noisy, static"
         --sampler.guidance 6 --sampler.steps 4 --prompt.max-length 24 --video.height 32 --video.width 48 --device cpu
         --output.video=false)
df_sync=("${df_call[@]}" --video.frames 25 --df.base-frames 13 --df.overlap-history 5)
df_async=("${df_call[@]}" --video.frames 33 --df.base-frames 21 --df.overlap-history 9 --df.ar-step 1 --df.causal-block-size 2 --df.addnoise-condition 20)
expect 0 "window 3/3: 4 rows" -- "$vinf" generate "${df_sync[@]}" --latents-init "$df/ref_sync.safetensors" --out "$work/df-sync"
expect 0 "ok" -- "$tool" h5-vs-ref "$work/df-sync/latents.h5" "$df/ref_sync.safetensors" latents 1e-4 0
expect 0 "[13,21]" -- jq -c '.boundaries' "$work/df-sync/run.json"
expect 0 "outputs in" -- "$vinf" generate "${df_sync[@]}" --df.addnoise-condition 20 --latents-init "$df/ref_sync_addnoise.safetensors" --out "$work/df-noise"
expect 0 "ok" -- "$tool" h5-vs-ref "$work/df-noise/latents.h5" "$df/ref_sync_addnoise.safetensors" latents 1e-4 0
expect 0 "window 2/2: 5 rows" -- "$vinf" generate "${df_async[@]}" --output.video --latents-init "$df/ref_async.safetensors" --out "$work/df-async"
expect 0 "ok" -- "$tool" h5-vs-ref "$work/df-async/latents.h5" "$df/ref_async.safetensors" latents 1e-4 0
# Stopped inside the second window (row 8 of 11), resumed: the same latents and video, bit for bit
# (the window's frames and every frame's solver come from the checkpoint, the first window's
# frames from latents.h5.partial, decoded again into the video).
expect 75 "stopped after row 8 of 11" -- env VINF_FAULT_STEP="rank=0,step=8,signal=TERM" "$vinf" generate "${df_async[@]}" --output.video --checkpoint.every 3 --latents-init "$df/ref_async.safetensors" --out "$work/df-stop"
expect 0 "after row 8 of 11 (window 2), 6 latent frames final" -- "$vinf" generate "${df_async[@]}" --output.video --checkpoint.every 3 --latents-init "$df/ref_async.safetensors" --resume auto --out "$work/df-stop"
expect 0 "max |diff| 0 " -- "$tool" h5-compare "$work/df-stop/latents.h5" "$work/df-async/latents.h5" 0
expect 0 "" -- cmp "$work/df-async/video.mp4" "$work/df-stop/video.mp4"
expect 0 "/run/boundaries  [1] i64" -- "$vinf" inspect "$work/df-stop/latents.h5"
# Without the latents written so far, the checkpoint alone cannot continue the run.
expect 75 "stopped after row 6" -- env VINF_FAULT_STEP="rank=0,step=6,signal=TERM" "$vinf" generate "${df_async[@]}" --latents-init "$df/ref_async.safetensors" --out "$work/df-lost"
expect 0 "in the making: 6 of 9 latent frames final" -- "$vinf" inspect "$work/df-lost/latents.h5.partial"
rm "$work/df-lost/latents.h5.partial"
expect 2 "latents.h5.partial, the latents written so far, is missing" -- "$vinf" generate "${df_async[@]}" --latents-init "$df/ref_async.safetensors" --resume auto --out "$work/df-lost"
expect 0 "outputs in" -- "$mpiexec" -np 2 "$vinf" generate "${df_async[@]}" --parallel.cfg 2 --latents-init "$df/ref_async.safetensors" --out "$work/df-cfg"
expect 0 "ok" -- "$tool" h5-vs-ref "$work/df-cfg/latents.h5" "$df/ref_async.safetensors" latents 1e-4 0
expect 0 "diffusion forcing (SkyReels-V2)" -- "$vinf" inspect "$df"
expect 0 "scheduler: UniPC with flow sigmas, flow_shift 8.0" -- "$vinf" make-model --preset skyreels-df-tiny --layout pipeline --out "$work/df-rand"
expect 0 "SkyReelsV2DiffusionForcingPipeline" -- cat "$work/df-rand/model_index.json"
# Constant memory: 3 and 11 windows hold the same device memory while denoising (one window's).
rand_df=(--model "$work/df-rand" --prompt.text "a fox" --video.height 32 --video.width 32 --sampler.steps 2 --df.base-frames 9 --df.overlap-history 5 --device cpu --output.video=false)
expect 0 "window 3/3" -- "$vinf" generate "${rand_df[@]}" --video.frames 17 --out "$work/df-r"
expect 0 "window 11/11" -- "$vinf" generate "${rand_df[@]}" --video.frames 49 --out "$work/df-r11"
peak3=$(jq '.ranks[0].denoise_peak_memory_bytes' "$work/df-r/run.json")
peak11=$(jq '.ranks[0].denoise_peak_memory_bytes' "$work/df-r11/run.json")
echo "denoising peaks at 3 and 11 windows: $peak3 and $peak11 bytes"
expect 0 "" -- test "$peak3" -gt 0 -a "$peak3" = "$peak11"
expect 2 "are for a SkyReels-V2 diffusion-forcing pipeline" -- "$vinf" generate "${v2v_model[@]}" --df.ar-step 1 --out "$work/bad"
expect 2 "give it" -- "$vinf" generate "${df_call[@]}" --video.frames 25 --df.base-frames 13 --out "$work/bad"
expect 2 "must be less than --df.base-frames" -- "$vinf" generate "${df_call[@]}" --video.frames 25 --df.base-frames 13 --df.overlap-history 13 --out "$work/bad"
expect 2 "does not divide into causal blocks of 2" -- "$vinf" generate "${df_call[@]}" --video.frames 29 --df.base-frames 21 --df.overlap-history 9 --df.causal-block-size 2 --out "$work/bad"
expect 2 "not with Video-Infinity's windows" -- "$mpiexec" -np 2 "$vinf" generate "${df_sync[@]}" --vi.mode invariant --vi.local-frames 1 --vi.global-frames 1 --out "$work/bad"
expect 2 "give --df.causal-block-size 2 or more" -- "$mpiexec" -np 2 "$vinf" generate "${df_sync[@]}" --vi.mode exact --df.parallel bands --out "$work/bad"
expect 2 "--df.parallel must be exact or bands, got 'ring'" -- "$vinf" generate "${df_sync[@]}" --df.parallel ring --out "$work/bad"
expect 2 "cannot be shared over 4 ranks in bands" -- "$mpiexec" -np 4 "$vinf" generate "${df_async[@]}" --vi.mode exact --df.parallel bands --out "$work/bad"
expect 2 "has no tensor 'window0.noise'" -- "$vinf" generate "${df_sync[@]}" --latents-init "$i2v/ref_pipeline.safetensors" --out "$work/bad2"
[ ! -e "$work/bad" ] || { echo "FAIL: a refused run left $work/bad"; fails=$((fails + 1)); }
[ "$fails" -eq 0 ] && echo "all wan conditioning command-line tests passed"
exit "$fails"
