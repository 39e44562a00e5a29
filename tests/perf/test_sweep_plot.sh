#!/usr/bin/env bash
# perf/step-sweep --quick and perf/plot as a user runs them: every result written, the bytes each
# configuration moves (fused and three-round the same, halo x's all-gather half of kv's), the plots
# and the summary's figures against the JSON, and the refusals.
# Usage: test_sweep_plot.sh SOURCE_DIR BUILD_DIR. Skips (77) without Debian's python3-matplotlib.
set -uo pipefail
src=$1 build=$2
source "$src/tests/cli/expect.sh"
if ! /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  echo "skipped: /usr/bin/python3 has no matplotlib (scripts/setup installs python3-matplotlib)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect 0 "wrote 11 results" -- "$src/perf/step-sweep" --quick --build "$build" --out "$tmp/run"
for f in weak-np1 weak-np2 weak-np3 weak-np4 comm-x-three-round comm-x-fused comm-kv-three-round comm-kv-fused \
         mem-fpr4 mem-fpr8 mem-fpr12; do
  [ -s "$tmp/run/$f.json" ] || { echo "FAIL: $f.json missing"; fails=$((fails + 1)); }
done

check() {  # check DESCRIPTION JQ-CONDITION FILE
  if [ "$(jq -r "$2" "$3")" = true ]; then echo "ok: $1"; else echo "FAIL: $1 ($3)"; fails=$((fails + 1)); fi
}
bytes() { jq -r ".summary.bytes_received_per_rank_per_call" "$tmp/run/$1.json"; }
gather() { jq -r "[.ranks[].bytes_received_per_call[\"all-gather\"]] | add" "$tmp/run/$1.json"; }
for halo in x kv; do
  [ "$(bytes "comm-$halo-fused")" = "$(bytes "comm-$halo-three-round")" ] && echo "ok: $halo: fused moves what three-round moves" ||
    { echo "FAIL: $halo: fused and three-round bytes differ"; fails=$((fails + 1)); }
done
if [ "$(jq -n "$(gather comm-x-three-round) * 2 == $(gather comm-kv-three-round)")" = true ]; then
  echo "ok: halo x all-gathers half of kv's bytes"
else
  echo "FAIL: all-gather bytes x $(gather comm-x-three-round), kv $(gather comm-kv-three-round)"; fails=$((fails + 1))
fi
check "one rank receives nothing" '.summary.bytes_received_per_rank_per_call == 0' "$tmp/run/weak-np1.json"
check "targets judged, GEMM rate measured" \
  '([.targets[].name] | index("gemm_efficiency") != null) and .summary.gemm_flops_per_s > 0 and .summary.raw_comm_s > 0' \
  "$tmp/run/comm-x-fused.json"
check "FLOPs by kind add up" \
  '((.flops_per_call_by_kind | add) - .ranks[0].flops_per_call | fabs) < 1' "$tmp/run/mem-fpr8.json"

expect 0 "halo x bytes against kv (three-round)" -- "$src/perf/plot" "$tmp/run"
for png in weak-scaling memory communication; do
  if [ "$(head -c 4 "$tmp/run/$png.png" | tail -c 3)" = PNG ]; then echo "ok: $png.png"; else
    echo "FAIL: $png.png is not a PNG"; fails=$((fails + 1)); fi
done
ratio=$(jq -n "100 * $(bytes comm-x-three-round) / $(bytes comm-kv-three-round) * 10 | round / 10")
grep -q "halo x bytes against kv (three-round) | ${ratio}" "$tmp/run/summary.md" && echo "ok: summary ratio $ratio%" ||
  { echo "FAIL: summary.md lacks the x/kv ratio $ratio%"; grep "halo x" "$tmp/run/summary.md"; fails=$((fails + 1)); }
[ "$(grep -c '^| [a-z]*-[a-z0-9-]* | [0-9]' "$tmp/run/summary.md")" -eq 11 ] && echo "ok: 11 runs in the summary" ||
  { echo "FAIL: summary.md run rows"; cat "$tmp/run/summary.md"; fails=$((fails + 1)); }

expect 2 "is not empty" -- "$src/perf/step-sweep" --quick --build "$build" --out "$tmp/run"
expect 2 "is not a positive whole number" -- "$src/perf/step-sweep" --quick --build "$build" --ranks "0" --out "$tmp/r2"
expect 2 "is not built" -- "$src/perf/step-sweep" --build "$tmp/nowhere" --out "$tmp/r3"
expect 1 "is not a directory" -- "$src/perf/plot" "$tmp/absent"
mkdir "$tmp/bad" && echo "{" >"$tmp/bad/weak-np1.json"
expect 1 "is not JSON" -- "$src/perf/plot" "$tmp/bad"
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
