#!/usr/bin/env bash
# perf/long-compare --quick as a user runs it (2 ranks, video and evaluate): a run per method and
# frame count with its evaluate.json, the summary's rows and memory table against the runs' own
# files, and the refusals of bad arguments.
# Usage: test_long_compare.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1 build=$2
source "$src/tests/cli/expect.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

expect 0 "| windows | 16 | 2 |" -- "$src/perf/long-compare" --quick --ranks 2 --build "$build" --out "$tmp/run"
for m in clips windows fifo; do
  for f in 8 16; do
    for file in run.json evaluate.json evaluate.png video.mp4; do
      [ -s "$tmp/run/$m-f$f/$file" ] || { echo "FAIL: $m-f$f/$file missing"; fails=$((fails + 1)); }
    done
  done
done
python3 - "$tmp/run" <<'PY' && echo "ok: the summary's figures are the runs' own" || { echo "FAIL: summary"; fails=$((fails + 1)); }
import json, os, sys
out = sys.argv[1]
rows = [l for l in open(os.path.join(out, "summary.md")) if l.startswith("| ") and l.split("|")[2].strip().isdigit()]
assert len(rows) == 6, rows
for row in rows:
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    method, frames = cells[0], cells[1]
    run = json.load(open(os.path.join(out, f"{method}-f{frames}", "run.json")))
    ev = json.load(open(os.path.join(out, f"{method}-f{frames}", "evaluate.json")))
    peak = max(r["peak_memory_bytes"] for r in run["ranks"]) / 2**20
    assert abs(float(cells[5]) - peak) < 0.06, (cells, peak)
    assert int(cells[8]) == len(ev["seam"]), (cells, ev["seam"])
    # Video-Infinity's 2 clips meet once; the windows every 2 frames (starts 2, 4, ...); FIFO has no seams.
    want = {"clips": 1, "windows": int(frames) // 2 - 2, "fifo": 0}[method]
    assert len(ev["boundaries"]) == want, (method, frames, ev["boundaries"])
PY
expect 2 "'x' is not a positive whole number" -- "$src/perf/long-compare" --build "$build" --frames x --out "$tmp/bad"
expect 2 "--methods: 'loop' is not clips, windows or fifo" -- "$src/perf/long-compare" --build "$build" --methods loop --out "$tmp/bad"
expect 2 "exists and is not empty" -- "$src/perf/long-compare" --quick --build "$build" --out "$tmp/run"
echo "$fails failure(s)"
exit $((fails > 0))
