#!/usr/bin/env bash
# The Wan2.1 family on the command line: `vinf forward` on the transformer against diffusers'
# numbers (a transformer directory or the pipeline root), generate and decode, a random pipeline
# from make-model, and a clear message with exit status 2 for every rejected model, input or layout.
# Two halves, each a CTest test of its own (they take a minute together on 2 cores): `a` the
# transformer, make-model, generate on one rank, the refusals, CFG and exact mode over ranks; `b`
# checkpoints, Video-Infinity's windows, job lists, the VAE and decode.
# usage: test_wan_cli.sh VINF TEST_TOOL WAN_FIXTURE_DIR MPIEXEC [a|b]  (both when not given)
set -u
vinf=$1 tool=$2 fixture=$3 mpiexec=$4 part=${5:-ab}
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/expect.sh"

inputs=$fixture/inputs.safetensors
ref=$fixture/ref.safetensors
# generate's settings: diffusers' pipeline test (the reference's prompt, guidance and length).
wan_base=(--model "$fixture" --prompt.text "A beagle swims in the ocean with coral reefs." --prompt.negative "blurry, low quality"
          --sampler.guidance 5 --prompt.max-length 24 --device cpu)
beagle=("${wan_base[@]}" --video.frames 9 --video.height 32 --video.width 32 --sampler.steps 4)

if [[ $part == *a* ]]; then

# The transformer at both timesteps (F32 937.5 and 301.25, written by index) within 1e-4.
expect 0 "wrote $work/x.safetensors" -- "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/x.safetensors" --device cpu
expect 0 "ok noise_pred.t1" -- "$tool" compare "$work/x.safetensors" "$ref" 1e-4 noise_pred.t0 noise_pred.t1
# The pipeline root finds transformer/ itself.
expect 0 "40864 parameters" -- "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/root.safetensors" --device cpu
expect 0 "ok noise_pred.t1" -- "$tool" compare "$work/root.safetensors" "$work/x.safetensors" 0 noise_pred.t0 noise_pred.t1
# --profile: both calls timed by block part; the predictions as without it.
expect 0 "profile over 2 model call(s)" -- "$vinf" forward --model "$fixture" --inputs "$inputs" \
  --out "$work/prof.safetensors" --device cpu --profile "$work/profile.json"
expect 0 "blocks.*.attn1" -- cat "$work/profile.json"
expect 0 "ok noise_pred.t1" -- "$tool" compare "$work/prof.safetensors" "$work/x.safetensors" 0 noise_pred.t0 noise_pred.t1
expect 0 "Wan2.1 transformer" -- "$vinf" forward --help
# The UNet's settings do not change a Wan call: said, not silently dropped.
expect 0 "--vi.* settings but the mode are for Video-Infinity's windows" -- "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/vi.safetensors" --device cpu --vi.local-frames 4

# Refused inputs and layouts, with nothing written.
expect 2 "has no tensor 'hidden_states'" -- "$vinf" forward --model "$fixture/transformer" --inputs "$ref" --out "$work/z.safetensors" --device cpu
expect 2 "--parallel.cfg 2 x --parallel.tensor 1 = 2 ranks hold each share of the frames of $fixture/transformer: launch a multiple of 2 ranks (1 were started)" -- "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/z.safetensors" --device cpu --parallel.cfg 2
expect 2 "--parallel.cfg 1 x --parallel.tensor 2 = 2 ranks hold each share of the frames of $fixture/transformer: launch a multiple of 2 ranks (1 were started)" -- "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/z.safetensors" --device cpu --parallel.tensor 2
# --parallel.cfg 2: the batch of 2 over two ranks (diffusers' prediction), also with the frames of
# each branch over 2 ranks in exact mode, and with the windows against one rank's windows.
expect 0 "wrote $work/fc2.safetensors" -- "$mpiexec" -np 2 "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/fc2.safetensors" --device cpu --parallel.cfg 2
expect 0 "ok noise_pred.t1" -- "$tool" compare "$work/fc2.safetensors" "$ref" 1e-4 noise_pred.t0 noise_pred.t1
expect 0 "the batch over 2 x 2 ranks" -- "$mpiexec" -np 4 "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/fc4.safetensors" --device cpu --parallel.cfg 2 --vi.mode exact
expect 0 "ok noise_pred.t1" -- "$tool" compare "$work/fc4.safetensors" "$ref" 1e-4 noise_pred.t0 noise_pred.t1
windows=(--vi.mode invariant --vi.local-frames 1 --vi.global-frames 2)
expect 0 "" -- "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/fw1.safetensors" --device cpu "${windows[@]}"
expect 0 "" -- "$mpiexec" -np 4 "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/fw4.safetensors" --device cpu --parallel.cfg 2 "${windows[@]}"
expect 0 "ok noise_pred.t1" -- "$tool" compare "$work/fw4.safetensors" "$work/fw1.safetensors" 1e-5 noise_pred.t0 noise_pred.t1
expect 2 "whose windows on one rank are the emulation of any number of ranks: drop --vi.emulate-clips" -- "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/z.safetensors" --device cpu --vi.emulate-clips 2
expect 2 "--vi.mode compat reproduces the released Video-Infinity's UNet" -- "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/z.safetensors" --device cpu --vi.mode compat
expect 2 "--vi.global-frames 16 is larger than the video (5 latent frames)" -- "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/z.safetensors" --device cpu --vi.mode invariant
# Video-Infinity's windows over the whole video (+-4 of 5 latent frames, no global frames): the plain
# model, diffusers' prediction.
expect 0 "windows of +-4 latent frames and 0 global frame(s)" -- "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/wall.safetensors" --device cpu --vi.mode invariant --vi.local-frames 4 --vi.global-frames 0
expect 0 "ok noise_pred.t1" -- "$tool" compare "$work/wall.safetensors" "$ref" 1e-4 noise_pred.t0 noise_pred.t1
expect 2 "add --vi.mode exact, or launch it without mpirun" -- "$mpiexec" -np 2 "$vinf" forward --model "$fixture/transformer" --inputs "$inputs" --out "$work/z.safetensors" --device cpu
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
expect 2 "wan-tiny, wan-1.3b and wan-14b" -- "$vinf" make-model --preset wan-7b --out "$work/w7"
expect 0 "UniPCMultistepScheduler" -- "$vinf" inspect "$fixture"

# generate on the pipeline directory: the prompt and the negative one through the tokenizer and
# UMT5 (cleaned as the pipeline cleans them), 4 guided UniPC steps from the reference's initial
# latents: diffusers' WanPipeline's final latents within 1e-4.
expect 0 "4 unipc steps, guidance 5" -- "$vinf" generate "${beagle[@]}" --latents-init "$fixture/ref_pipeline.safetensors" --out "$work/g"
expect 0 "ok /latents against latents" -- "$tool" h5-vs-latents "$work/g/latents.h5" "$fixture/ref_pipeline.safetensors" latents 1e-4
expect 0 "\"family\": \"wan\"" -- cat "$work/g/run.json"
# run.json as the UNet's runs write it, so that jobs/summarize tables both families.
expect 0 "| g | complete | 1 | 9 | 4 |" -- "$src/jobs/summarize" "$work/g"
# From the seed's draw: the same seed twice gives the same latents, [3 latent frames, 16, 4, 4].
expect 0 "outputs in $work/s1/" -- "$vinf" generate "${beagle[@]}" --sampler.seed 7 --out "$work/s1"
expect 0 "outputs in $work/s2/" -- "$vinf" generate "${beagle[@]}" --sampler.seed 7 --out "$work/s2"
expect 0 "max |diff| 0 " -- "$tool" h5-compare "$work/s1/latents.h5" "$work/s2/latents.h5" 0
expect 0 "" -- "$tool" h5-check "$work/s1/latents.h5" 3 16 4 4
expect 0 "10 flow-euler steps" -- "$vinf" generate "${wan_base[@]}" --video.frames 9 --video.height 32 --video.width 32 --sampler.scheduler flow-euler --sampler.steps 10 --out "$work/e"
expect 0 "the [vi] settings but the mode are for Video-Infinity's windows (--vi.mode invariant)" -- "$vinf" generate "${beagle[@]}" --vi.local-frames 4 --out "$work/vi"
# Refused, before anything is written: frames not 1 + 4k, sizes not multiples of 16, the UNet's
# schedulers, layouts over ranks, a second prompt, initial latents of the wrong shape.
expect 2 "a Wan video has 1 + 4k frames" -- "$vinf" generate "${wan_base[@]}" --video.frames 10 --video.height 32 --video.width 32 --out "$work/r"
expect 2 "must be a multiple of 16 for a Wan model" -- "$vinf" generate "${wan_base[@]}" --video.frames 9 --video.height 40 --video.width 32 --out "$work/r"
expect 2 "not one of the flow-matching schedulers (unipc, flow-euler)" -- "$vinf" generate "${beagle[@]}" --sampler.scheduler dpmpp --out "$work/r"
expect 2 "takes 2 x N ranks with --parallel.cfg 2 (one guidance branch each), got 1" -- "$vinf" generate "${beagle[@]}" --parallel.cfg 2 --out "$work/r"
expect 2 "drop --parallel.tensor" -- "$vinf" generate "${beagle[@]}" --parallel.tensor 2 --out "$work/r"
expect 2 "takes one prompt" -- "$vinf" generate "${beagle[@]}" --prompt.text "a second one" --out "$work/r"
expect 2 "but this video's latents are F32[1,16,5,4,4]" -- "$vinf" generate "${wan_base[@]}" --video.frames 17 --video.height 32 --video.width 32 --latents-init "$fixture/ref_pipeline.safetensors" --out "$work/r"
expect 2 "is a flow-matching scheduler of the Wan family" -- "$vinf" generate --model builtin:tiny --prompt.text x --sampler.scheduler unipc --out "$work/r"
expect 2 "--prompt.max-length is for the Wan family" -- "$vinf" generate --model builtin:tiny --prompt.text x --prompt.max-length 24 --out "$work/r"
expect 2 "drop --model.vae" -- "$vinf" generate "${beagle[@]}" --model.vae "$fixture/vae" --out "$work/r"
expect 2 "has no --model.lora, --dump.modules or --debug" -- "$vinf" generate "${beagle[@]}" --debug --out "$work/r"
expect 2 "evaluates its video.mp4 with --evaluate" -- "$vinf" generate "${beagle[@]}" --evaluate --output.video=false --out "$work/r"
expect 2 "plan estimates the UNet family's layouts" -- "$vinf" plan --model "$fixture" --prompt.text x
[ ! -e "$work/r" ] || { echo "FAIL: a refused run left $work/r"; fails=$((fails + 1)); }

# CFG parallelism: two ranks, one guidance branch each, all-gathering their predictions: the
# reference's latents again, and the one-rank batch's to f32 rounding (a batch of 1 against 2).
expect 0 "outputs in $work/c2/" -- "$mpiexec" -np 2 "$vinf" generate "${beagle[@]}" --latents-init "$fixture/ref_pipeline.safetensors" --parallel.cfg 2 --out "$work/c2"
expect 0 "ok /latents against latents" -- "$tool" h5-vs-latents "$work/c2/latents.h5" "$fixture/ref_pipeline.safetensors" latents 1e-4
expect 0 "ok /latents" -- "$tool" h5-compare "$work/c2/latents.h5" "$work/g/latents.h5" 1e-5
expect 0 "\"cfg\": 2" -- cat "$work/c2/run.json"
expect 2 "but 2 were started without" -- "$mpiexec" -np 2 "$vinf" generate "${beagle[@]}" --out "$work/r"
expect 2 "has no --vi.mode compat" -- "$vinf" generate "${beagle[@]}" --vi.mode compat --out "$work/r"
expect 2 "fewer than the 4 ranks they would be split over" -- "$mpiexec" -np 4 "$vinf" generate "${beagle[@]}" --vi.mode exact --out "$work/r"

# --vi.mode exact: the latent frames over the ranks, each block's self-attention over every token
# through all-to-alls. 3 latent frames on 3 ranks, and 2 x 2 with --parallel.cfg 2: diffusers'
# final latents again.
expect 0 "the latent frames over 3 ranks" -- "$mpiexec" -np 3 "$vinf" generate "${beagle[@]}" --latents-init "$fixture/ref_pipeline.safetensors" --vi.mode exact --out "$work/x3"
expect 0 "ok /latents against latents" -- "$tool" h5-vs-latents "$work/x3/latents.h5" "$fixture/ref_pipeline.safetensors" latents 1e-4
expect 0 "\"frame-ranks\": 3" -- cat "$work/x3/run.json"
expect 0 "the latent frames over 2 ranks" -- "$mpiexec" -np 4 "$vinf" generate "${beagle[@]}" --latents-init "$fixture/ref_pipeline.safetensors" --vi.mode exact --parallel.cfg 2 --out "$work/x4"
expect 0 "ok /latents against latents" -- "$tool" h5-vs-latents "$work/x4/latents.h5" "$fixture/ref_pipeline.safetensors" latents 1e-4
fi

if [[ $part == *b* ]]; then
# Checkpoints and resuming: SIGTERM after step 2 (the test hook) writes a checkpoint and exits 75;
# --resume auto continues with UniPC's memories and lands on the uninterrupted run's latents bit
# for bit (the same computations in the same order); a resume with other numbers is refused.
quiet_run=("${beagle[@]}" --output.video=false --sampler.seed 3)
expect 0 "outputs in $work/k0/" -- "$vinf" generate "${quiet_run[@]}" --out "$work/k0"
expect 75 "received SIGTERM: stopped after step 2 of 4, checkpoint $work/k/checkpoints/step-000002.h5" -- env VINF_FAULT_STEP="rank=0,step=2,signal=TERM" "$vinf" generate "${quiet_run[@]}" --checkpoint.every 1 --out "$work/k"
expect 0 "step 2 of 4 completed" -- "$vinf" inspect "$work/k/checkpoints/step-000002.h5"
expect 2 "sampler" -- "$vinf" generate "${beagle[@]}" --output.video=false --sampler.seed 4 --resume auto --out "$work/k"
# (The VAE's tiling is not part of the numbers a resume must keep.)
expect 0 "resuming from $work/k/checkpoints/step-000002.h5 after step 2 of 4" -- "$vinf" generate "${quiet_run[@]}" --resume auto --vae.tile 2 --out "$work/k"
expect 0 "max |diff| 0 " -- "$tool" h5-compare "$work/k/latents.h5" "$work/k0/latents.h5" 0
expect 0 "$work/k/checkpoints/step-000002.h5 2" -- jq -r '.resumed_from + " " + (.start_step | tostring)' "$work/k/run.json"
expect 0 "holds a finished run" -- "$vinf" generate "${quiet_run[@]}" --resume auto --out "$work/k"
# The same on two ranks with one guidance branch each.
expect 75 "received SIGTERM: stopped after step 3 of 4" -- env VINF_FAULT_STEP="rank=1,step=3,signal=TERM" "$mpiexec" -np 2 "$vinf" generate "${quiet_run[@]}" --parallel.cfg 2 --out "$work/k2"
expect 0 "after step 3 of 4" -- "$mpiexec" -np 2 "$vinf" generate "${quiet_run[@]}" --parallel.cfg 2 --resume auto --out "$work/k2"
expect 0 "ok /latents" -- "$tool" h5-compare "$work/k2/latents.h5" "$work/k0/latents.h5" 1e-5
# Stopped on 3 ranks in exact mode, resumed on 1, and the other way on 2 x 2: the uninterrupted
# run's latents to f32 rounding (the layout is not part of the numbers a resume keeps).
expect 75 "received SIGTERM: stopped after step 2 of 4" -- env VINF_FAULT_STEP="rank=1,step=2,signal=TERM" "$mpiexec" -np 3 "$vinf" generate "${quiet_run[@]}" --vi.mode exact --checkpoint.every 1 --out "$work/k3"
expect 0 "after step 2 of 4" -- "$vinf" generate "${quiet_run[@]}" --resume auto --out "$work/k3"
expect 0 "ok /latents" -- "$tool" h5-compare "$work/k3/latents.h5" "$work/k0/latents.h5" 1e-5
expect 75 "received SIGTERM: stopped after step 3 of 4" -- env VINF_FAULT_STEP="rank=0,step=3,signal=TERM" "$vinf" generate "${quiet_run[@]}" --checkpoint.every 1 --out "$work/k4"
expect 0 "after step 3 of 4" -- "$mpiexec" -np 4 "$vinf" generate "${quiet_run[@]}" --vi.mode exact --parallel.cfg 2 --resume auto --out "$work/k4"
expect 0 "ok /latents" -- "$tool" h5-compare "$work/k4/latents.h5" "$work/k0/latents.h5" 1e-5

# Video-Infinity's windows (--vi.mode invariant): 5 latent frames, each over +-1 latent frame and
# the global frames 0 and 2. One rank is the emulation; 3 ranks, and 2 x 2 with --parallel.cfg 2,
# give its latents to f32 rounding, with each rank's halo and global-frame bytes per step as the
# analytic count. Stopped on 3 ranks, resumed on 1: the same latents; a resume with other windows
# is refused.
win_base=("${wan_base[@]}" --video.frames 17 --video.height 32 --video.width 32 --sampler.steps 3 --output.video=false --sampler.seed 3
          --vi.mode invariant)
win=("${win_base[@]}" --vi.local-frames 1 --vi.global-frames 2)
per_step='[.ranks[] | .bytes_received_per_step[] | .counted == .analytic] | all'
expect 0 "windows of +-1 latent frames and 2 global frame(s)" -- "$vinf" generate "${win[@]}" --out "$work/w1"
expect 0 "\"vi-mode\": \"invariant\"" -- cat "$work/w1/run.json"
expect 0 "the latent frames over 3 ranks" -- "$mpiexec" -np 3 "$vinf" generate "${win[@]}" --out "$work/w3"
expect 0 "ok /latents" -- "$tool" h5-compare "$work/w3/latents.h5" "$work/w1/latents.h5" 1e-5
expect 0 "true" -- jq -r "$per_step" "$work/w3/run.json"
expect 0 "8192 12288 12288" -- jq -r '[.ranks[].bytes_received_per_step.clip_group.counted] | map(tostring) | join(" ")' "$work/w3/run.json"
expect 0 "the latent frames over 2 ranks" -- "$mpiexec" -np 4 "$vinf" generate "${win[@]}" --parallel.cfg 2 --out "$work/w4"
expect 0 "ok /latents" -- "$tool" h5-compare "$work/w4/latents.h5" "$work/w1/latents.h5" 1e-5
expect 0 "true" -- jq -r "$per_step" "$work/w4/run.json"
expect 0 "outputs in $work/w0/" -- "$vinf" generate "${wan_base[@]}" --video.frames 17 --video.height 32 --video.width 32 --sampler.steps 3 --output.video=false --sampler.seed 3 --out "$work/w0"
expect 1 "FAIL" -- "$tool" h5-compare "$work/w0/latents.h5" "$work/w1/latents.h5" 1e-3
expect 75 "received SIGTERM: stopped after step 2 of 3" -- env VINF_FAULT_STEP="rank=2,step=2,signal=TERM" "$mpiexec" -np 3 "$vinf" generate "${win[@]}" --checkpoint.every 1 --out "$work/wk"
expect 2 "belongs to a run with other settings (vi.global-frames 2 there, 1 here" -- "$vinf" generate "${win_base[@]}" --vi.local-frames 1 --vi.global-frames 1 --resume auto --out "$work/wk"
expect 0 "after step 2 of 3" -- "$vinf" generate "${win[@]}" --resume auto --out "$work/wk"
expect 0 "ok /latents" -- "$tool" h5-compare "$work/wk/latents.h5" "$work/w1/latents.h5" 1e-5
expect 2 "--vi.local-frames 2 is larger than the 1 latent frame(s) the smallest rank holds" -- "$mpiexec" -np 3 "$vinf" generate "${win_base[@]}" --vi.local-frames 2 --vi.global-frames 2 --out "$work/r"
expect 2 "--vi.global-frames 6 is larger than the video (5 latent frames)" -- "$vinf" generate "${win_base[@]}" --vi.local-frames 1 --vi.global-frames 6 --out "$work/r"
[ ! -e "$work/r" ] || { echo "FAIL: a refused run left $work/r"; fails=$((fails + 1)); }

# A job list over two replicas (--parallel.data 2, one rank each): each job as its single run.
printf '%s\n' '{"out": "a", "seed": 3}' '{"out": "b", "seed": 5, "sampler.steps": 3}' > "$work/jobs.jsonl"
wan_small=("${wan_base[@]}" --video.frames 9 --video.height 32 --video.width 32 --output.video=false)
expect 0 "" -- "$mpiexec" -np 2 "$vinf" generate "${wan_small[@]}" --sampler.steps 4 --jobs "$work/jobs.jsonl" --parallel.data 2 --out "$work/list"
expect 0 "\"done\"" -- cat "$work/list/jobs.json"
expect 0 "max |diff| 0 " -- "$tool" h5-compare "$work/list/a/latents.h5" "$work/k0/latents.h5" 0
# The same list in exact mode on 4 ranks: 2 replicas of 2 frame ranks; a layout that splits the
# frames without exact mode is refused per job.
expect 0 "" -- "$mpiexec" -np 4 "$vinf" generate "${wan_small[@]}" --sampler.steps 4 --vi.mode exact --jobs "$work/jobs.jsonl" --parallel.data 2 --out "$work/xlist"
expect 0 "ok /latents" -- "$tool" h5-compare "$work/xlist/a/latents.h5" "$work/k0/latents.h5" 1e-5
expect 2 "but 2 were started without" -- "$mpiexec" -np 4 "$vinf" generate "${wan_small[@]}" --sampler.steps 4 --jobs "$work/jobs.jsonl" --parallel.data 2 --out "$work/badlist"
expect 0 "outputs in $work/b1/" -- "$vinf" generate "${wan_small[@]}" --sampler.seed 5 --sampler.steps 3 --out "$work/b1"
expect 0 "max |diff| 0 " -- "$tool" h5-compare "$work/list/b/latents.h5" "$work/b1/latents.h5" 0

# The video: the pipeline's last stage through the causal VAE into video.mp4 and PNG frames.
expect 0 "video.mp4" -- "$vinf" generate "${beagle[@]}" --latents-init "$fixture/ref_pipeline.safetensors" --output.png --out "$work/v"
n=$(ls "$work/v/frames" 2>/dev/null | grep -c '^frame-.*\.png$')
[ "$n" -eq 9 ] && echo "ok: 9 PNG frames" || { echo "FAIL: $n PNG frames, expected 9"; fails=$((fails + 1)); }
# The same video decoded over tiles of 2 latent pixels (its numbers are checked by decode below).
expect 0 "video.mp4" -- "$vinf" generate "${beagle[@]}" --latents-init "$fixture/ref_pipeline.safetensors" --vae.tile 2 --out "$work/vt"
expect 0 "\"tile\": 2" -- cat "$work/vt/run.json"
# --evaluate measures the video as vinf evaluate does (one clip, no boundaries).
expect 0 "evaluating video.mp4" -- "$vinf" generate "${beagle[@]}" --latents-init "$fixture/ref_pipeline.safetensors" --evaluate --out "$work/ev"
expect 0 "\"frames\": 9" -- cat "$work/ev/evaluate.json"
expect 0 "evaluate.png" -- jq -r '.outputs[]' "$work/ev/run.json"
# vinf decode on the VAE alone: diffusers' decode(mean) within 1e-4.
python3 - "$fixture/ref_vae.safetensors" "$work/mean.safetensors" <<'PY'
import json, struct, sys
src, dst = sys.argv[1], sys.argv[2]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
e = head["mean"]
data = raw[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]]
h = json.dumps({"latents": {"dtype": "F32", "shape": e["shape"], "data_offsets": [0, len(data)]}}).encode()
h += b" " * (-len(h) % 8)
open(dst, "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
expect 0 "3 latent frame(s) to 9 frames 32x32" -- "$vinf" decode --vae "$fixture/vae" --latents "$work/mean.safetensors" --out "$work/dec.safetensors" --device cpu
expect 0 "ok decoded" -- "$tool" compare "$work/dec.safetensors" "$fixture/ref_vae.safetensors" 1e-4 decoded
# Over tiles of 3 latent pixels (24 at full size: tiles of two sizes on 32x32 frames): diffusers'
# numbers again, and the whole-frame decoding's to float rounding (tile-sized convolutions may sum
# in other orders).
expect 0 "wrote $work/tiled.safetensors" -- "$vinf" decode --vae "$fixture/vae" --latents "$work/mean.safetensors" --out "$work/tiled.safetensors" --device cpu --vae.tile 3
expect 0 "ok decoded" -- "$tool" compare "$work/tiled.safetensors" "$fixture/ref_vae.safetensors" 1e-4 decoded
expect 0 "ok decoded" -- "$tool" compare "$work/tiled.safetensors" "$work/dec.safetensors" 2e-5 decoded
expect 2 "option '--vae.tile' must be 0 or in [1, 2048]" -- "$vinf" decode --vae "$fixture/vae" --latents "$work/mean.safetensors" --out "$work/r.safetensors" --device cpu --vae.tile -2
expect 2 "has no tensor 'latents' [N, C, F, h, w]" -- "$vinf" decode --vae "$fixture/vae" --latents "$fixture/inputs.safetensors" --out "$work/r.safetensors" --device cpu
# A Wan run's latents.h5 as its own job: the run's video again, frame for frame (the same numbers
# through the same code).
expect 0 "3 latent frame(s) to 9 frames 32x32 from $work/v/latents.h5" -- "$vinf" decode --vae "$fixture" --checkpoint "$work/v/latents.h5" --out "$work/vd" --output.png --device cpu
for f in contact.png frames/frame-000000.png frames/frame-000008.png; do
  cmp -s "$work/vd/$f" "$work/v/$f" && echo "ok: $f as the run wrote it" || { echo "FAIL: $work/vd/$f differs from the run's"; fails=$((fails + 1)); }
done
expect 2 "video.mp4 exists" -- "$vinf" decode --vae "$fixture" --checkpoint "$work/v/latents.h5" --out "$work/vd" --device cpu
# The causal VAE across ranks: each rank decodes its share of the 5 latent frames of the windows
# run after the VAE's memory from the rank before, rank 0 writes the frames: on 1-4 ranks the same
# PNGs byte for byte (the same chunks through the same code, only handed over).
for n in 1 2 3 4; do
  expect 0 "5 latent frame(s) to 17 frames 32x32 from $work/w1/latents.h5" -- "$mpiexec" -np "$n" "$vinf" decode --vae "$fixture" --checkpoint "$work/w1/latents.h5" --out "$work/wd$n" --output.png --device cpu
  for f in contact.png frames/frame-000000.png frames/frame-000005.png frames/frame-000016.png; do
    cmp -s "$work/wd$n/$f" "$work/wd1/$f" && echo "ok: $n rank(s): $f as one rank's" || { echo "FAIL: $work/wd$n/$f differs from one rank's"; fails=$((fails + 1)); }
  done
done
expect 2 "holds 5 latent frame(s), fewer than the 6 ranks" -- "$mpiexec" -np 6 "$vinf" decode --vae "$fixture" --checkpoint "$work/w1/latents.h5" --out "$work/r" --device cpu
# generate does the same at the end of a run over ranks: 3 frame ranks, its frames as a decode of
# its latents on one rank.
expect 0 "decoded the video over 3 ranks" -- "$mpiexec" -np 3 "$vinf" generate "${win[@]}" --output.video --output.png --out "$work/w3v"
expect 0 "" -- "$vinf" decode --vae "$fixture" --checkpoint "$work/w3v/latents.h5" --out "$work/w3d" --output.png --device cpu
for f in contact.png frames/frame-000000.png frames/frame-000009.png frames/frame-000016.png; do
  cmp -s "$work/w3v/$f" "$work/w3d/$f" && echo "ok: generate over 3 ranks: $f as one rank decodes it" || { echo "FAIL: $work/w3v/$f differs"; fails=$((fails + 1)); }
done
expect 0 "outputs in $work/u/" -- "$vinf" generate --model builtin:tiny --prompt.text x --video.frames 16 --sampler.steps 1 --output.video=false --out "$work/u"
unet_latents=$work/u/latents.h5
expect 2 "does not fit the Wan VAE's 16 latent channels" -- "$vinf" decode --vae "$fixture" --checkpoint "$unet_latents" --out "$work/r" --device cpu

# make-model --layout pipeline: a whole random WanPipeline in diffusers' layout, which inspect
# describes part by part and generate and encode-text run as they run a released one.
expect 0 "wrote the Wan pipeline $work/pipe" -- "$vinf" make-model --preset wan-tiny --layout pipeline --seed 4 --out "$work/pipe"
expect 0 "0.33.1" -- cat "$work/pipe/scheduler/scheduler_config.json"
cmp -s "$work/pipe/scheduler/scheduler_config.json" "$fixture/scheduler/scheduler_config.json" && echo "ok: the fixture's scheduler config" ||
  { echo "FAIL: the pipeline's scheduler config differs from the fixture's"; fails=$((fails + 1)); }
expect 0 "--preset wan-tiny --layout pipeline --seed 4" -- cat "$work/pipe/model_index.json"
inspect_out=$("$vinf" inspect "$work/pipe" 2>&1)
for want in "40,864 parameters; check: every parameter" "(AutoencoderKLWan): base 8" "220,107 parameters; check: every parameter" \
            "(UMT5EncoderModel): 2 layers of 32" "46,496 parameters; check: every parameter" \
            "(T5 SentencePiece): 512 ids; pad 0, eos 1, unk 2; every id is in the text encoder's vocabulary" \
            "scheduler $work/pipe/scheduler: UniPCMultistepScheduler"; do
  [[ "$inspect_out" == *"$want"* ]] && echo "ok: inspect says '$want'" ||
    { echo "FAIL: inspect of the pipeline lacks '$want'"; echo "$inspect_out"; fails=$((fails + 1)); }
done
# The fixture's parts are described alike.
expect 0 "(T5 SentencePiece): 800 ids; pad 0, eos 1, unk 2" -- "$vinf" inspect "$fixture"
expect 0 "outputs in $work/gp/" -- "$vinf" generate --model "$work/pipe" --prompt.text "a kite" --video.frames 5 --video.height 32 \
  --video.width 32 --sampler.steps 2 --device cpu --out "$work/gp" "${video_args[@]}"
expect 0 "" -- "$tool" h5-check "$work/gp/latents.h5" 2 16 4 4
if [ "$have_ffmpeg" -eq 1 ]; then
  [ -s "$work/gp/video.mp4" ] && echo "ok: video.mp4" || { echo "FAIL: no $work/gp/video.mp4"; fails=$((fails + 1)); }
fi
expect 0 "1 prompt(s), 16 tokens x 32 on cpu" -- "$vinf" encode-text --model "$work/pipe" --prompt x --max-length 16 --out "$work/pipe-x.safetensors"
expect 0 "last_hidden_state" -- "$vinf" inspect "$work/pipe-x.safetensors"
# The same seed gives the same files; another seed other weights but the same tokenizer.
expect 0 "wrote the Wan pipeline" -- "$vinf" make-model --preset wan-tiny --layout pipeline --seed 4 --out "$work/pipe2"
expect 0 "wrote the Wan pipeline" -- "$vinf" make-model --preset wan-tiny --layout pipeline --seed 5 --out "$work/pipe3"
for f in model_index.json transformer/config.json transformer/diffusion_pytorch_model.safetensors vae/config.json \
         vae/diffusion_pytorch_model.safetensors text_encoder/config.json text_encoder/model.safetensors \
         tokenizer/spiece.model tokenizer/tokenizer_config.json tokenizer/special_tokens_map.json scheduler/scheduler_config.json; do
  cmp -s "$work/pipe/$f" "$work/pipe2/$f" && echo "ok: seed 4 twice, the same $f" ||
    { echo "FAIL: two runs with seed 4 differ in $f"; fails=$((fails + 1)); }
done
for f in transformer/diffusion_pytorch_model.safetensors vae/diffusion_pytorch_model.safetensors text_encoder/model.safetensors; do
  cmp -s "$work/pipe/$f" "$work/pipe3/$f" && { echo "FAIL: seeds 4 and 5 give the same $f"; fails=$((fails + 1)); } ||
    echo "ok: seeds 4 and 5 differ in $f"
done
cmp -s "$work/pipe/tokenizer/spiece.model" "$work/pipe3/tokenizer/spiece.model" && echo "ok: one tokenizer for every seed" ||
  { echo "FAIL: the tokenizer depends on the seed"; fails=$((fails + 1)); }
# Refused without --overwrite (nothing written), replaced with it.
expect 2 "already exists; pass --overwrite" -- "$vinf" make-model --preset wan-tiny --layout pipeline --seed 9 --out "$work/pipe"
cmp -s "$work/pipe/text_encoder/model.safetensors" "$work/pipe2/text_encoder/model.safetensors" && echo "ok: the refused run wrote nothing" ||
  { echo "FAIL: a refused make-model changed $work/pipe"; fails=$((fails + 1)); }
mkdir -p "$work/partial/vae"
expect 2 "$work/partial/vae already exists" -- "$vinf" make-model --preset wan-tiny --layout pipeline --out "$work/partial"
expect 0 "wrote the Wan pipeline" -- "$vinf" make-model --preset wan-tiny --layout pipeline --seed 5 --out "$work/pipe2" --overwrite
cmp -s "$work/pipe2/text_encoder/model.safetensors" "$work/pipe3/text_encoder/model.safetensors" && echo "ok: --overwrite replaced it" ||
  { echo "FAIL: --overwrite did not replace $work/pipe2"; fails=$((fails + 1)); }
expect 2 "--layout must be unet or pipeline" -- "$vinf" make-model --preset wan-tiny --layout diffusers --out "$work/r2"
expect 0 "flow_shift 3.0" -- "$vinf" make-model --help
[ ! -e "$work/r2" ] || { echo "FAIL: a refused make-model left $work/r2"; fails=$((fails + 1)); }
fi

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
