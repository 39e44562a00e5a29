#!/usr/bin/env bash
# The vinf command line: help, version, exit codes and messages for bad input.
set -u
vinf=$1
. "$(dirname "$0")/expect.sh"

expect 0 "usage: vinf <command>" -- "$vinf" --help
expect 2 "usage: vinf <command>" -- "$vinf"
expect 0 "vinf 0." -- "$vinf" --version
expect 2 "unknown command 'bogus'" -- "$vinf" bogus
expect 0 "--device" -- "$vinf" selfcheck --help
expect 2 "--device must be cpu, cuda or all, got 'tpu'" -- "$vinf" selfcheck --device tpu
expect 2 "unrecognised option '--no-such-flag'" -- "$vinf" selfcheck --no-such-flag
expect 0 "checks passed" -- "$vinf" selfcheck --device cpu --filter conv2d
expect 0 "attention banded" -- "$vinf" selfcheck --list
# The kernels that are off by default: scripts/gpu-check's selfcheck.kernels command line (on a
# CPU build the CUDA part skips), and a name it does not know.
expect 0 "cuda kernels off by default, on here: temporal-attention,index32,staged-uploads,flash-attention,gemm-epilogues" -- \
  env VINF_GPU_KERNELS=all "$vinf" selfcheck --device all --filter "attention temporal"
expect 2 "VINF_GPU_KERNELS: no kernel is called 'flash'; the names are" -- \
  env VINF_GPU_KERNELS=index32,flash "$vinf" selfcheck --device all --filter conv2d
expect 2 "--filter 'no such op' matches no op case" -- "$vinf" selfcheck --device cpu --filter "no such op"
out=$("$vinf" selfcheck --list --filter upsample_nearest 2>&1)
if [[ "$out" == *"upsample 2x"* && "$out" != *conv2d* ]]; then echo "ok: selfcheck --list --filter lists the family's cases only"
else echo "FAIL: selfcheck --list --filter upsample_nearest"; echo "$out" | tail -5; fails=$((fails + 1)); fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'device = cpu\nfilter = conv2d\n' > "$work/selfcheck.ini"
expect 0 "checks passed" -- "$vinf" selfcheck --config "$work/selfcheck.ini"
out=$("$vinf" selfcheck --config "$work/selfcheck.ini" --filter layer_norm 2>&1)
if [[ "$out" == *layer_norm* && "$out" != *conv2d* ]]; then echo "ok: selfcheck --filter on the command line wins over the file"
else echo "FAIL: selfcheck --config precedence"; echo "$out" | tail -5; fails=$((fails + 1)); fi
printf 'device = cpu\nfiltre = conv2d\n' > "$work/typo.ini"
expect 2 "--config $work/typo.ini line 2: unknown key 'filtre' (vinf selfcheck has no option --filtre" -- "$vinf" selfcheck --config "$work/typo.ini"
expect 0 "--config FILE" -- "$vinf" selfcheck --help

[ "$fails" -eq 0 ] || { echo "$fails CLI check(s) failed"; exit 1; }
