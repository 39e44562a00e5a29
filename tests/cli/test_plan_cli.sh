#!/usr/bin/env bash
# `vinf plan`: the help, a layout's table (ranks to nodes, replicas, stages, clips), the launcher's
# environment, exit status 2 with what would fit for a layout that does not, and for one the ranks
# cannot make; the JSON form; and the estimate against what real generate runs of builtin:tiny
# measured: the arena's peak of one rank (an upper bound within 30%) and the bytes two ranks
# received per step (within 10%).
# usage: test_plan_cli.sh MPIEXEC VINF
set -u
mpiexec=$1 vinf=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/expect.sh"
# No launcher around the plans below unless a check sets one.
launcher_vars=(-u SLURM_NTASKS -u SLURM_NTASKS_PER_NODE -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_LOCAL_SIZE -u PMI_SIZE)
plan() { env "${launcher_vars[@]}" "$vinf" plan "$@"; }
tiny=(--model builtin:tiny --device cpu --video.height 64 --video.width 64)

expect 0 "--ranks-per-node [1, 4096]" -- plan --help
expect 0 "--parallel.pipeline [1, 1000] (=1)" -- plan --help
expect 0 "plan " -- "$vinf" --help
# --dtype bf16 on the CPU plans for nodes that may have AVX-512 BF16 whatever this one has
# (VINF_CPU_LEVEL=v3 hides it here): half the weights' bytes.
expect 0 "bf16 weights, f32 activations on cpu" -- env VINF_CPU_LEVEL=v3 "$vinf" plan "${tiny[@]}" --ranks 1 --dtype bf16
expect 2 "--dtype f16 runs on CUDA only" -- plan "${tiny[@]}" --ranks 1 --dtype f16

# 8 ranks, 4 a node: 2 pipeline stages of (2 frame ranks x 2 tensor ranks). Rank 5: node 1, local
# rank 1, replica 0, stage 1, branch 0, clip 0 (frames [0,16)), tensor rank 1, steps [15,30).
layout=("${tiny[@]}" --video.frames 32 --ranks 8 --parallel.pipeline 2 --parallel.tensor 2 --device-memory 4
        --ranks-per-node 4)
expect 0 "1 replica(s) x 2 pipeline stage(s) x 4 rank(s) per stage" -- plan "${layout[@]}"
expect 0 "rank node local replica stage branch clip" -- plan "${layout[@]}"
row=$(plan "${layout[@]}" | awk '$1 == 5 && $2 == 1')
[[ "$row" =~ ^\ +5\ +1\ +1\ +0\ +1\ +0\ +0\ +\[0,16\)\ +1\ +\[15,30\) ]] && echo "ok: rank 5's row" \
  || { echo "FAIL: rank 5's row: '$row'"; fails=$((fails + 1)); }
expect 0 "warning: tensor group of replica 0, stage 0, branch 0, clip 1 (ranks 2-3) spans nodes 0-1" -- \
  plan "${layout[@]::${#layout[@]}-2}" --ranks-per-node 3
# The launcher's environment gives the ranks and the ranks per node; nothing gives one rank.
expect 0 "4 rank(s) on 2 node(s) of 2" -- env "${launcher_vars[@]}" SLURM_NTASKS=4 'SLURM_NTASKS_PER_NODE=2(x2)' \
  "$vinf" plan "${tiny[@]}" --video.frames 32 --device-memory 4
expect 0 "2 rank(s) on 1 node(s) of 2" -- env "${launcher_vars[@]}" OMPI_COMM_WORLD_SIZE=2 \
  "$vinf" plan "${tiny[@]}" --video.frames 32 --device-memory 4
expect 0 "1 rank(s) on 1 node(s) of 1" -- plan "${tiny[@]}" --video.frames 32 --device-memory 4

# Too little memory: exit 2, the table still printed, and what would fit (or that nothing does).
expect 2 "what would fit: --video.frames " -- plan "${tiny[@]}" --video.frames 64 --device-memory 0.03
expect 2 " frame ranks instead of 1 (" -- plan "${tiny[@]}" --video.frames 64 --device-memory 0.03
expect 2 "rank node local" -- plan "${tiny[@]}" --video.frames 64 --device-memory 0.03
expect 2 "use devices with more memory" -- plan "${tiny[@]}" --video.frames 64 --device-memory 0.001
# Layouts the ranks cannot make, and bad options: exit 2 naming the option.
expect 2 "launch a multiple of 2 ranks" -- plan "${tiny[@]}" --ranks 3 --parallel.data 2
expect 2 "option '--ranks' must be in [1, 1000000], got '0'" -- plan "${tiny[@]}" --ranks 0
expect 2 "option '--device-memory' must be in (0, 1048576], got '0'" -- plan "${tiny[@]}" --device-memory 0
expect 2 "--parallel.tensor 5 splits every attention's heads" -- plan "${tiny[@]}" --ranks 5 --parallel.tensor 5
expect 2 "unrecognised option '--bogus' (see vinf plan --help)" -- plan --bogus 1
expect 2 "--vi.global-frames 16 is larger than the video (8 frames)" -- plan "${tiny[@]}" --video.frames 8

# JSON: every rank, and the verdict; exit 2 with the message when it does not fit.
plan "${layout[@]}" --json > "$work/plan.json"
expect 0 "true" -- jq -e '.fits and .world == 8 and (.ranks | length) == 8 and .ranks[5].stage == 1 and
  .ranks[5].node == 1 and .ranks[5].steps == [15, 30] and .ranks[7].memory_bytes.total > 0' "$work/plan.json"
plan "${tiny[@]}" --video.frames 64 --device-memory 0.001 --json > "$work/no.json" 2> /dev/null
expect 0 "true" -- jq -e '(.fits | not) and (.message | test("does not fit"))' "$work/no.json"

# The estimate against real runs (one step; 32x32 keeps them cheap): one rank with the VAE
# decoding, and two ranks' exchanges.
run=(--model builtin:tiny --device cpu --video.frames 8 --video.height 32 --video.width 32 --vi.global-frames 4
     --vi.local-frames 2 --sampler.steps 1 --prompt.text x)
expect 0 "outputs in $work/one/" -- "$vinf" generate "${run[@]}" --out "$work/one"
plan "${run[@]}" --ranks 1 --json > "$work/one.json"
expect 0 "true" -- jq -e --slurpfile m "$work/one/run.json" \
  '.ranks[0].memory_bytes.total as $e | $m[0].ranks[0].peak_memory_bytes as $p | $e >= $p and $e <= 1.3 * $p' \
  "$work/one.json"
expect 0 "outputs in $work/two/" -- "$mpiexec" -np 2 "$vinf" generate "${run[@]}" --output.video false --out "$work/two"
plan "${run[@]}" --output.video false --ranks 2 --json > "$work/two.json"
for r in 0 1; do
  expect 0 "true" -- jq -e --slurpfile m "$work/two/run.json" --argjson r $r \
    '.ranks[$r].bytes_received_per_step.clip_group as $e |
     ([$m[0].ranks[$r].bytes_received.clip_group[].bytes] | add) as $got |
     $got > 0 and ($e - $got | fabs) <= 0.1 * $got' "$work/two.json"
done

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
