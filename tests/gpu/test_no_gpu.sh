#!/usr/bin/env bash
# scripts/gpu-check where no GPU is visible: OUT mode says so and exits 77 before building anything;
# --help explains the modes; bad arguments exit 2 with a message. nvidia-smi is replaced by one that
# lists no GPU, so the test means the same on any machine.
# usage: test_no_gpu.sh SOURCE_DIR
set -u
repo=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../cli/expect.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
check=$repo/scripts/gpu-check

mkdir "$work/fake-bin"
printf '#!/bin/sh\necho "No devices were found"\nexit 6\n' > "$work/fake-bin/nvidia-smi"
chmod +x "$work/fake-bin/nvidia-smi"
nogpu() { PATH="$work/fake-bin:$PATH" "$@"; }

expect 77 "no GPU: nvidia-smi lists none" -- nogpu "$check" "$work/out"
[ ! -e "$work/out/report.json" ] && echo "ok: nothing run without a GPU" || { echo "FAIL: a report without a GPU"; fails=$((fails + 1)); }
if ! command -v nvidia-smi > /dev/null; then
  expect 77 "nvidia-smi is not installed" -- "$check" "$work/out"
fi

expect 0 "usage: scripts/gpu-check" -- "$check" --help
expect 0 "mfu_percent" -- "$check" -h
for word in "--bundle DIR" "--run DIR OUT" "--only REGEX" "--budget" "77 no GPU" "perf/results/" \
            "torch.vc2, torch.wan13b" "torch.vc2.compile, torch.wan13b.compile" "--torch-ref DIR" "VINF_TORCH_REF" \
            '"torch_s_per_call"' '"ratio_vs_torch"' '"torch_compile_s_per_call"' "vinf vs PyTorch (same GPU, same shapes)"; do
  "$check" --help | grep -qF -- "$word" && echo "ok: --help mentions $word" || { echo "FAIL: --help lacks '$word'"; fails=$((fails + 1)); }
done

expect 2 "expected one output directory" -- nogpu "$check"
expect 2 "expected one output directory" -- nogpu "$check" a b
expect 2 "unknown option '--frobnicate'" -- nogpu "$check" --frobnicate "$work/out"
expect 2 "--run needs the bundle's directory and an output directory" -- nogpu "$check" --run "$work"
expect 2 "no bundle at '$work/none'" -- nogpu "$check" --run "$work/none" "$work/out"
expect 2 "--budget needs a whole number" -- nogpu "$check" --budget soon "$work/out"
expect 2 "--cores needs a positive number" -- nogpu "$check" --cores 0 "$work/out"
expect 2 "unexpected argument(s) with --bundle" -- nogpu "$check" --bundle "$work/b" extra
expect 2 "go with OUT or --run, not --bundle" -- nogpu "$check" --bundle "$work/b" --only gpu
expect 2 "--torch-ref needs a directory" -- nogpu "$check" "$work/out" --torch-ref
expect 2 "--torch-ref: '$work/none' has no bench_torch.py" -- nogpu "$check" --torch-ref "$work/none" "$work/out"
mkdir "$work/ref" && touch "$work/ref/bench_torch.py"
expect 77 "no GPU: nvidia-smi lists none" -- nogpu "$check" --torch-ref "$work/ref" "$work/out"
echo "not a bundle" > "$work/junk.tar.xz"
expect 2 "cannot unpack" -- nogpu "$check" --run "$work/junk.tar.xz" "$work/out"

[ "$fails" -eq 0 ] && echo "all gpu-check usage checks passed" || echo "$fails gpu-check usage check(s) failed"
exit $((fails > 0))
