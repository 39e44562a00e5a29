#!/usr/bin/env bash
# Wan2.1's conditioned pipelines under mpirun -np N (tests/fixtures/wan-i2v-tiny, wan-flf2v-tiny,
# wan-v2v-tiny: 3 latent frames): image-to-video and video-to-video with the latent frames (and the
# condition channels with them) over up to 3 ranks in exact mode, the rest as CFG's second branch,
# against diffusers' final latents within 1e-4; first-and-last-frame with CFG over 2 ranks;
# Video-Infinity's windows over the ranks against the same windows on one; stopped on N ranks and
# resumed on one; a job list whose jobs name their images, over N replicas, each job its single run;
# SkyReels-V2's diffusion forcing as a job list over N replicas, and in exact mode over the ranks,
# stopped and resumed.
# usage: test_wan_cond_ranks.sh MPIEXEC VINF TEST_TOOL FIXTURE_MODEL_DIR N
set -u
mpiexec=$1 vinf=$2 tool=$3 fixtures=$(dirname "$4") n=$5
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../cli/expect.sh"
require_test_device "$vinf"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

i2v=$fixtures/wan-i2v-tiny flf=$fixtures/wan-flf2v-tiny v2v=$fixtures/wan-v2v-tiny
call=(--prompt.text "A beagle swims in the ocean with coral reefs." --prompt.negative "blurry, low quality"
      --sampler.guidance 5 --sampler.steps 4 --video.frames 9 "${device_args[@]}" --output.video=false)
i2v_model=(--model "$i2v" "${call[@]}" --prompt.max-length 24 --video.height 32 --video.width 48)
i2v_run=("${i2v_model[@]}" --image "$i2v/image.png")
v2v_run=(--model "$fixtures/wan-tiny" --video "$v2v/frames" --strength 0.7 "${call[@]}" --prompt.max-length 24
         --video.height 32 --video.width 32)
# N ranks: the frames over all of them (N <= 3), or over N / 2 per guidance branch (N = 4).
layout=(--vi.mode exact)
[ "$n" -eq 4 ] && layout+=(--parallel.cfg 2)
[ "$n" -eq 1 ] && layout=()
tol=1e-4

expect 0 "outputs in $work/i2v/" -- "$mpiexec" -np "$n" "$vinf" generate "${i2v_run[@]}" "${layout[@]}" --latents-init "$i2v/ref_pipeline.safetensors" --out "$work/i2v"
expect 0 "ok" -- "$tool" h5-vs-ref "$work/i2v/latents.h5" "$i2v/ref_pipeline.safetensors" latents "$tol" 0
expect 0 "outputs in $work/v2v/" -- "$mpiexec" -np "$n" "$vinf" generate "${v2v_run[@]}" "${layout[@]}" --latents-init "$v2v/ref_v2v.safetensors" --out "$work/v2v"
expect 0 "ok" -- "$tool" h5-vs-ref "$work/v2v/latents.h5" "$v2v/ref_v2v.safetensors" latents "$tol" 0
if [ $((n % 2)) -eq 0 ]; then
  flf_layout=(--parallel.cfg 2)
  [ "$n" -eq 4 ] && flf_layout+=(--vi.mode exact)
  expect 0 "outputs in $work/flf/" -- "$mpiexec" -np "$n" "$vinf" generate --model "$flf" --image "$flf/image.png" --last-image "$flf/last_image.png" "${call[@]}" --video.height 32 --video.width 48 "${flf_layout[@]}" --latents-init "$flf/ref_pipeline.safetensors" --out "$work/flf"
  expect 0 "ok" -- "$tool" h5-vs-ref "$work/flf/latents.h5" "$flf/ref_pipeline.safetensors" latents "$tol" 0
fi
# Video-Infinity's windows (+-1 latent frame, global frame 0) over min(N, 3) ranks against one rank.
windows=(--vi.mode invariant --vi.local-frames 1 --vi.global-frames 1 --sampler.seed 4)
w=$((n < 3 ? n : 3))
expect 0 "outputs in $work/w1/" -- "$vinf" generate "${i2v_run[@]}" "${windows[@]}" --out "$work/w1"
expect 0 "outputs in $work/wn/" -- "$mpiexec" -np "$w" "$vinf" generate "${i2v_run[@]}" "${windows[@]}" --out "$work/wn"
expect 0 "ok /latents" -- "$tool" h5-compare "$work/wn/latents.h5" "$work/w1/latents.h5" 1e-5
# Stopped after step 2 on N ranks, resumed on one: the uninterrupted run's latents to f32 rounding
# (the layout is not part of the numbers a resume keeps; the image is).
quiet=(--sampler.seed 7 --checkpoint.every 1)
expect 0 "outputs in $work/k0/" -- "$vinf" generate "${i2v_run[@]}" --sampler.seed 7 --out "$work/k0"
expect 75 "stopped after step 2 of 4" -- env VINF_FAULT_STEP="rank=$((n - 1)),step=2,signal=TERM" "$mpiexec" -np "$n" "$vinf" generate "${i2v_run[@]}" "${layout[@]}" "${quiet[@]}" --out "$work/k"
expect 0 "after step 2 of 4" -- "$vinf" generate "${i2v_run[@]}" "${quiet[@]}" --resume auto --out "$work/k"
expect 0 "ok /latents" -- "$tool" h5-compare "$work/k/latents.h5" "$work/k0/latents.h5" 1e-5
# A job list over N replicas of one rank, each job naming its image: job a is k0's run.
printf '%s\n' "{\"out\": \"a\", \"image\": \"$i2v/image.png\", \"seed\": 7}" \
  "{\"out\": \"b\", \"image\": \"$flf/last_image.png\", \"seed\": 7}" > "$work/jobs.jsonl"
expect 0 "" -- "$mpiexec" -np "$n" "$vinf" generate "${i2v_model[@]}" --jobs "$work/jobs.jsonl" --parallel.data "$n" --out "$work/list"
expect 0 "max |diff| 0 " -- "$tool" h5-compare "$work/list/a/latents.h5" "$work/k0/latents.h5" "$exact_tol"
expect 1 "" -- "$tool" h5-compare "$work/list/b/latents.h5" "$work/k0/latents.h5" 1e-3
# SkyReels-V2's diffusion forcing as a job list over N replicas: each job its single run.
df=(--model "$fixtures/skyreels-df-tiny" --prompt.text "A red fox trots through fresh snow at dawn." --sampler.steps 2
    --video.frames 25 --video.height 32 --video.width 48 --df.base-frames 13 --df.overlap-history 5 --df.ar-step 1
    "${device_args[@]}" --output.video=false)
printf '%s\n' '{"out": "a", "seed": 3}' '{"out": "b", "seed": 4, "df.addnoise-condition": 20}' > "$work/df.jsonl"
expect 0 "" -- "$mpiexec" -np "$n" "$vinf" generate "${df[@]}" --jobs "$work/df.jsonl" --parallel.data "$n" --out "$work/dflist"
expect 0 "outputs in $work/df3/" -- "$vinf" generate "${df[@]}" --sampler.seed 3 --out "$work/df3"
expect 0 "max |diff| 0 " -- "$tool" h5-compare "$work/dflist/a/latents.h5" "$work/df3/latents.h5" "$exact_tol"
# Diffusion forcing in exact mode: each window's frames over the ranks (over 2 per guidance branch at
# N = 4), the causal blocks of 2 kept across them, shared as exact mode shares them and in bands of
# whole blocks: diffusers' final latents within 1e-4; stopped
# inside the second window and resumed on the same ranks, bit for bit (to f32 rounding on a GPU),
# and inside the first resumed on one rank.
dfx=(--model "$fixtures/skyreels-df-tiny" --prompt.text "A red fox trots through fresh snow at dawn."
     --prompt.negative "dark, noisy, static" --sampler.guidance 6 --sampler.steps 4 --prompt.max-length 24
     --video.frames 33 --video.height 32 --video.width 48 --df.base-frames 21 --df.overlap-history 9 --df.ar-step 1
     --df.causal-block-size 2 --df.addnoise-condition 20 "${device_args[@]}" --output.video=false
     --latents-init "$fixtures/skyreels-df-tiny/ref_async.safetensors" --checkpoint.every 4)
expect 0 "outputs in $work/dfx/" -- "$mpiexec" -np "$n" "$vinf" generate "${dfx[@]}" "${layout[@]}" --out "$work/dfx"
expect 0 "ok" -- "$tool" h5-vs-ref "$work/dfx/latents.h5" "$fixtures/skyreels-df-tiny/ref_async.safetensors" latents "$tol" 0
if [ "$n" -gt 1 ]; then  # bands of whole causal blocks (3 a window: up to 3 frame ranks)
  expect 0 "outputs in $work/dfb/" -- "$mpiexec" -np "$n" "$vinf" generate "${dfx[@]}" "${layout[@]}" --df.parallel bands --out "$work/dfb"
  expect 0 "ok" -- "$tool" h5-vs-ref "$work/dfb/latents.h5" "$fixtures/skyreels-df-tiny/ref_async.safetensors" latents "$tol" 0
  expect 0 '"df": "bands"' -- cat "$work/dfb/run.json"
fi
expect 75 "stopped after row 7 of 11" -- env VINF_FAULT_STEP="rank=$((n - 1)),step=7,signal=TERM" "$mpiexec" -np "$n" "$vinf" generate "${dfx[@]}" "${layout[@]}" --out "$work/dfk"
expect 0 "after row 7 of 11 (window 2)" -- "$mpiexec" -np "$n" "$vinf" generate "${dfx[@]}" "${layout[@]}" --resume auto --out "$work/dfk"
expect 0 "ok /latents" -- "$tool" h5-compare "$work/dfk/latents.h5" "$work/dfx/latents.h5" "$exact_tol"
# Stopped on N ranks, resumed on one (the layout is not part of the numbers): diffusers' latents.
expect 75 "stopped after row 5 of 11" -- env VINF_FAULT_STEP="rank=$((n - 1)),step=5,signal=TERM" "$mpiexec" -np "$n" "$vinf" generate "${dfx[@]}" "${layout[@]}" --out "$work/dfk1"
expect 0 "after row 5 of 11 (window 1), 0 latent frames final" -- "$vinf" generate "${dfx[@]}" --resume auto --out "$work/dfk1"
expect 0 "ok" -- "$tool" h5-vs-ref "$work/dfk1/latents.h5" "$fixtures/skyreels-df-tiny/ref_async.safetensors" latents "$tol" 0
[ "$fails" -eq 0 ] && echo "all wan conditioning tests passed at $n rank(s)"
exit "$fails"
