#!/usr/bin/env bash
# The PyTorch anchor of scripts/gpu-check (the torch.* checks) without a GPU or torch:
# - the plan lists torch.vc2, torch.wan13b (after vinf's benchmarks) and their .compile runs (last),
#   each alone on the machine;
# - the checks' command (checks.py torch) skips with its reason (exit 77) where the reference
#   folder is missing, where `import torch` fails and where torch sees no CUDA device; against a
#   stand-in torch and bench_torch.py it passes the model, --compile and --json on, with the
#   library path gpu-check started with and TORCH_REF_SRC under OUT;
# - a run of the torch checks records those skips with the reason, in report.json and report.md,
#   and the time budget cuts them like any other check;
# - report.py's vinf_s_per_call, torch_s_per_call, torch_compile_s_per_call, ratio_vs_torch and
#   ratio_vs_torch_compile from hand-made results (bench.vc2.np1's call_s, bench.wan13b's Google
#   Benchmark JSON), null where a number is missing or its check did not pass.
# usage: test_torch_anchor.sh SOURCE_DIR
set -uo pipefail
repo=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../cli/expect.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
checks_py=$repo/scripts/gpu/checks.py
report_py=$repo/scripts/gpu/report.py

# pycheck WHAT PYTHON_CODE [ARGS...]: the code's assertions, ok/FAIL counted like expect's.
pycheck() {
  local what=$1 code=$2 out
  shift 2
  if out=$(python3 -c "$code" "$@" 2>&1); then
    echo "ok: $what"
  else
    echo "FAIL: $what"; echo "$out" | tail -20; fails=$((fails + 1))
  fi
}

# A manifest like manifest.py's, with no GPU test of its own (only the checks checks.py defines).
cat > "$work/manifest.json" << EOF
{"format": "vinf-gpu-manifest", "version": 1, "relocated": false,
 "paths": {"vinf": "$work/bin/vinf", "unit_tests": "$work/bin/vinf_unit_tests", "test_tool": "$work/bin/vinf_test_tool",
           "mpiexec": "$work/bin/mpiexec", "bench_step": "$work/bin/vinf_bench_step",
           "bench_wan": "$work/bin/vinf_bench_wan", "bench_ops": "$work/bin/vinf_bench_ops",
           "fixtures": "$repo/tests/fixtures", "shared_fixtures": "$work/shared/fixtures", "source": "$repo"},
 "checks": [], "programs": []}
EOF

# 1. The plan.
list=$(python3 "$checks_py" run --manifest "$work/manifest.json" --out "$work/list" --mode bundle --list)
pycheck "--list: torch.vc2 and torch.wan13b after vinf's benchmarks, the compiled runs last, all alone" '
import sys
rows = [l.split() for l in sys.argv[1].splitlines()]
names = [r[1] for r in rows]
torch = [r for r in rows if r[1].startswith("torch.")]
assert [r[1] for r in torch] == ["torch.vc2", "torch.wan13b", "torch.vc2.compile", "torch.wan13b.compile"], torch
assert all(r[0] == "torch" and r[-1] == "alone" for r in torch), torch
bench = [i for i, n in enumerate(names) if n.startswith("bench.")]
assert bench and names.index("torch.vc2") > max(bench), names
assert names[-2:] == ["torch.vc2.compile", "torch.wan13b.compile"], names
assert all(int(r[2]) >= 300 for r in torch), torch
' "$list"

# 2. The command of a torch check, alone. Stand-ins for torch (on PYTHONPATH) and bench_torch.py.
mkdir -p "$work/torch-broken/torch" "$work/torch-cpu/torch" "$work/torch-cuda/torch" "$work/ref"
echo 'raise ImportError("libcudart.so.12: cannot open shared object file: No such file or directory")' \
  > "$work/torch-broken/torch/__init__.py"
cat > "$work/torch-cpu/torch/__init__.py" << 'EOF'
__version__ = "2.5.0+cpu"
class version:
    cuda = None
class cuda:
    @staticmethod
    def is_available():
        return False
EOF
cat > "$work/torch-cuda/torch/__init__.py" << 'EOF'
__version__ = "2.5.0+cu124"
class version:
    cuda = "12.4"
class cuda:
    @staticmethod
    def is_available():
        return True
    @staticmethod
    def get_device_name(i):
        return "Stand-in GPU"
EOF
# Seconds per call: vc2 0.5 eager, 0.25 compiled; wan13b 1.25 eager, 0.625 compiled.
cat > "$work/ref/bench_torch.py" << 'EOF'
import argparse, json, os, sys
ap = argparse.ArgumentParser()
ap.add_argument("model", choices=["vc2", "wan13b"])
ap.add_argument("--compile", action="store_true")
ap.add_argument("--json")
a = ap.parse_args()
import torch
s = {"vc2": 0.5, "wan13b": 1.25}[a.model] / (2 if a.compile else 1)
flops = {"vc2": 2.0e13, "wan13b": 5.0e14}[a.model]
out = dict(model=a.model, framework="torch %s + diffusers 0.33.1" % torch.__version__, gpu="Stand-in GPU",
           compiled=a.compile, dtype="bf16", s_per_call=s, s_per_call_all=[s, s, s], flops_per_call=flops,
           tflops=flops / s / 1e12, mfu_percent=100 * flops / s / 1e12 / 989.0, peak_tflops=989.0,
           argv=sys.argv[1:], ld_library_path=os.environ.get("LD_LIBRARY_PATH"),
           torch_ref_src=os.environ.get("TORCH_REF_SRC"))
print(json.dumps(out))
with open(a.json, "w") as f:
    json.dump(out, f)
EOF
echo "# stand-in" > "$work/ref/README.md"

expect 77 "skipped: no PyTorch reference: $work/none has no bench_torch.py" -- \
  python3 "$checks_py" torch --ref "$work/none" --model vc2 --json "$work/t.json"
expect 77 "skipped: no python3 with CUDA torch: ImportError: libcudart.so.12: cannot open shared object file" -- \
  env PYTHONPATH="$work/torch-broken" python3 "$checks_py" torch --ref "$work/ref" --model vc2 --json "$work/t.json"
expect 77 "skipped: no python3 with CUDA torch: AssertionError: torch 2.5.0+cpu (CUDA None) sees no CUDA device" -- \
  env PYTHONPATH="$work/torch-cpu" python3 "$checks_py" torch --ref "$work/ref" --model wan13b --json "$work/t.json"
expect 77 "skipped: no python3 with CUDA torch: no-such-python3 is not on PATH" -- \
  python3 "$checks_py" torch --ref "$work/ref" --model vc2 --json "$work/t.json" --python no-such-python3
[ ! -e "$work/t.json" ] && echo "ok: no JSON from a skipped torch check" || { echo "FAIL: a skipped check wrote JSON"; fails=$((fails + 1)); }
expect 0 "torch 2.5.0+cu124 CUDA 12.4 Stand-in GPU" -- \
  env PYTHONPATH="$work/torch-cuda" LD_LIBRARY_PATH="$work/bundle-cuda:/orig/lib" VINF_GPU_CHECK_LD_LIBRARY_PATH=/orig/lib \
  python3 "$checks_py" torch --ref "$work/ref" --model wan13b --compile --json "$work/t.json"
pycheck "checks.py torch ran bench_torch.py wan13b --compile --json with gpu-check's library path" '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["argv"] == ["wan13b", "--compile", "--json", sys.argv[1]], j["argv"]
assert j["ld_library_path"] == "/orig/lib", j["ld_library_path"]
' "$work/t.json"
expect 0 "Stand-in GPU" -- env PYTHONPATH="$work/torch-cuda" LD_LIBRARY_PATH="$work/bundle-cuda" VINF_GPU_CHECK_LD_LIBRARY_PATH= \
  python3 "$checks_py" torch --ref "$work/ref" --model vc2 --json "$work/t.json"
pycheck "checks.py torch: no library path where gpu-check started without one; eager without --compile" '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["ld_library_path"] is None, j["ld_library_path"]
assert j["argv"] == ["vc2", "--json", sys.argv[1]] and j["compiled"] is False, j
' "$work/t.json"

# 3. Runs of the torch checks: skipped with the reason (torch missing, then the folder missing),
#    cut by the budget, then passed; each with hand-made results of vinf's benchmarks beside.
# run_torch TORCH_STAND_IN OUT [checks.py run options]: the torch checks as gpu-check runs them
# (its library path kept), the stand-in torch on PYTHONPATH.
run_torch() {
  local torch=$1 out=$2
  shift 2
  PYTHONPATH=$work/$torch LD_LIBRARY_PATH=$work/bundle-cuda VINF_GPU_CHECK_LD_LIBRARY_PATH=/orig/lib \
    python3 "$checks_py" run --manifest "$work/manifest.json" --out "$out" --mode bundle --only '^torch' \
    --system "$out/none.json" "$@"
}
expect 0 "torch.wan13b.compile ... skip" -- run_torch torch-broken "$work/skip" --torch-ref "$work/ref"
pycheck "a run without torch: the 4 torch checks skipped with the reason; ratios and torch times null" '
import json, sys
r = json.load(open(sys.argv[1] + "/report.json"))
checks = {c["name"]: c for c in r["checks"]}
assert sorted(checks) == ["torch.vc2", "torch.vc2.compile", "torch.wan13b", "torch.wan13b.compile"], sorted(checks)
for c in checks.values():
    assert c["verdict"] == "skip" and c["group"] == "torch", c
    assert c["note"] == "skipped: no python3 with CUDA torch: ImportError: libcudart.so.12: cannot open shared " \
                        "object file: No such file or directory", c["note"]
assert r["summary"]["verdict"] == "skip", r["summary"]
for key in ("torch_s_per_call", "torch_compile_s_per_call", "ratio_vs_torch", "ratio_vs_torch_compile",
            "vinf_s_per_call"):
    assert r[key] == {"vc2": None, "wan13b": None}, (key, r[key])
md = open(sys.argv[1] + "/report.md").read()
assert "## vinf vs PyTorch (same GPU, same shapes)" in md, md
assert "- torch.wan13b.compile (skip): skipped: no python3 with CUDA torch: ImportError" in md, md
' "$work/skip"
expect 0 "torch.vc2 ... skip" -- run_torch torch-cuda "$work/noref" --torch-ref "$work/none"
pycheck "a run without the reference folder: skipped, the folder named" '
import json, sys
r = json.load(open(sys.argv[1] + "/report.json"))
notes = {c["name"]: (c["verdict"], c["note"]) for c in r["checks"]}
assert len(notes) == 4 and all(v == "skip" and "no PyTorch reference: " + sys.argv[2] + " has no bench_torch.py" in n
                               for v, n in notes.values()), notes
' "$work/noref" "$work/none"
expect 0 "the time budget (--budget 10 s) ran out" -- run_torch torch-cuda "$work/budget" --torch-ref "$work/ref" \
  --budget 10
pycheck "a budget too short: the torch checks not started, recorded as skipped" '
import json, sys
r = json.load(open(sys.argv[1] + "/report.json"))
assert len(r["checks"]) == 4 and all(c["verdict"] == "skip" and "time budget" in c["note"] for c in r["checks"]), r["checks"]
' "$work/budget"

# vinf's results as bench.vc2.np1 (bench_step's JSON through checks.py) and bench.wan13b (Google
# Benchmark's JSON, --benchmark_out) would leave them.
mkdir -p "$work/pass/results"
cat > "$work/wan.gbench.json" << 'EOF'
{"context": {"date": "2026-12-03T03:59:26+00:00", "executable": "vinf_bench_wan", "num_cpus": 16},
 "benchmarks": [{"name": "wan_call/wan-1.3b [cuda bf16] B2 F21 60x104 text 512/min_time:2.000/real_time",
   "family_index": 0, "per_family_instance_index": 0,
   "run_name": "wan_call/wan-1.3b [cuda bf16] B2 F21 60x104 text 512/min_time:2.000/real_time",
   "run_type": "iteration", "repetitions": 1, "repetition_index": 0, "threads": 1, "iterations": 1,
   "real_time": 5.0e+03, "cpu_time": 4.9e+03, "time_unit": "ms", "MFU": 1.0e-01, "TFLOP/call": 4.9e+02,
   "TFLOP/s": 9.8e+01, "attention share": 6.0e-01, "peak GiB": 2.1e+01, "weights GiB": 2.6e+00,
   "label": "NVIDIA H200"}]}
EOF
pycheck "checks.py reads bench.wan13b's Google Benchmark JSON: call_s 5 s, MFU in percent, counters" '
import json, sys
sys.path.insert(0, sys.argv[1])
import checks
f = checks.gbench_figures(sys.argv[2])
assert abs(f["call_s"] - 5.0) < 1e-12, f
assert abs(f["mfu_percent"] - 10.0) < 1e-9 and f["TFLOP/call"] == 490.0 and f["label"] == "NVIDIA H200", f
j = json.load(open(sys.argv[2]))
j["benchmarks"][0].update(real_time=2.5e6, time_unit="us")
json.dump(j, open(sys.argv[3], "w"))
assert abs(checks.gbench_figures(sys.argv[3])["call_s"] - 2.5) < 1e-12
json.dump({"benchmarks": []}, open(sys.argv[3], "w"))
assert checks.gbench_figures(sys.argv[3]) == {}
result = {"name": "bench.wan13b", "group": "perf", "what": "", "verdict": "pass", "note": "", "seconds": 61.0,
          "exit_status": 0, "log": "logs/bench.wan13b.log", "command": [], "figures": f}
json.dump(result, open(sys.argv[4] + "/bench.wan13b.json", "w"))
vc2 = {"name": "bench.vc2.np1", "group": "perf", "what": "", "verdict": "pass", "note": "", "seconds": 9.6,
       "exit_status": 0, "log": "logs/bench.vc2.np1.log", "command": [],
       "figures": {"call_s": 2.0, "flops_per_call": 3.8e13, "mfu_percent": 2.1, "ranks": 1}}
json.dump(vc2, open(sys.argv[4] + "/bench.vc2.np1.json", "w"))
' "$repo/scripts/gpu" "$work/wan.gbench.json" "$work/other.gbench.json" "$work/pass/results"
pycheck "checks.py carries a --profile report (bench_step JSON, bench_wan's profile file) into the figures" '
import json, sys
sys.path.insert(0, sys.argv[1])
import checks
rows = [{"name": "k%d" % i, "s_per_call": 0.001 * (30 - i), "ops_per_call": 2} for i in range(30)]
prof = {"clock": "CUDA events", "calls": 3, "call_s": 1.5, "op_s": 1.2, "gap_s": 0.3, "ops_per_call": 9000,
        "kernel_launches_per_call": 10000, "library_calls_per_call": 800, "host_syncs_per_call": 68,
        "by_op_kind": rows, "by_module": rows[:3], "by_module_kind": []}
j = json.load(open(sys.argv[2]))
json.dump(j, open(sys.argv[3] + "/w.bench.json", "w"))
json.dump({j["benchmarks"][0]["name"]: prof}, open(sys.argv[3] + "/w.profile.json", "w"))
f = checks.gbench_figures(sys.argv[3] + "/w.bench.json")
assert f["profile.call_s"] == 1.5 and f["profile.gap_s"] == 0.3 and f["profile.host_syncs_per_call"] == 68, f
assert len(f["profile.top.by_op_kind"]) == 20 and f["profile.top.by_op_kind"][0] == "k0 30.000 ms", f
assert f["profile.top.by_module"] == ["k0 30.000 ms", "k1 29.000 ms", "k2 28.000 ms"], f
step = {"summary": {"call_s": 1.6}, "config": {"ranks": 1}, "ranks": [{"flops_per_call": 1}], "targets": [],
        "profile": prof}
json.dump(step, open(sys.argv[3] + "/s.bench.json", "w"))
g = checks.bench_figures(sys.argv[3] + "/s.bench.json")
assert g["call_s"] == 1.6 and g["profile.kernel_launches_per_call"] == 10000 and g["profile.clock"] == "CUDA events", g
' "$repo/scripts/gpu" "$work/wan.gbench.json" "$work"
expect 0 "6 passed, 0 failed" -- run_torch torch-cuda "$work/pass" --torch-ref "$work/ref"
pycheck "a run with torch: ratio_vs_torch = vinf s/call / torch s/call for vc2 and wan13b, eager and compiled" '
import json, sys
r = json.load(open(sys.argv[1] + "/report.json"))
def close(got, want):
    assert set(got) == set(want) and all(abs(got[k] - want[k]) < 1e-12 for k in want), (got, want)
close(r["vinf_s_per_call"], {"vc2": 2.0, "wan13b": 5.0})
close(r["torch_s_per_call"], {"vc2": 0.5, "wan13b": 1.25})
close(r["torch_compile_s_per_call"], {"vc2": 0.25, "wan13b": 0.625})
close(r["ratio_vs_torch"], {"vc2": 4.0, "wan13b": 4.0})
close(r["ratio_vs_torch_compile"], {"vc2": 8.0, "wan13b": 8.0})
c = {x["name"]: x for x in r["checks"]}["torch.vc2"]
assert c["figures"]["torch_ref_src"] == sys.argv[1] + "/torch-ref-src", c["figures"]
assert c["figures"]["ld_library_path"] == "/orig/lib", c["figures"]
md = open(sys.argv[1] + "/report.md").read()
row = [l for l in md.splitlines() if l.startswith("| vc2 (")]
assert len(row) == 1, md
cells = [x.strip() for x in row[0].strip("|").split("|")]
assert cells[1:7] == ["2", "0.5", "4", "0.25", "8", "20"], cells
assert cells[7] == "%.1f" % (100 * 2e13 / 0.5 / 1e12 / 989) and cells[9] == "38" and cells[10] == "2.1", cells
wan = [x.strip() for x in [l for l in md.splitlines() if l.startswith("| wan13b (")][0].strip("|").split("|")]
assert wan[1:7] == ["5", "1.25", "4", "0.625", "8", "500"] and wan[9] == "490" and wan[10] == "10.0", wan
assert "- torch: torch 2.5.0+cu124 + diffusers 0.33.1" in md, md
' "$work/pass"

# 4. report.py alone on hand-made results: a missing number, a skip and a failure give null.
mkdir -p "$work/mixed/results"
cp "$work/pass/results/bench.vc2.np1.json" "$work/pass/results/torch.vc2.json" "$work/mixed/results/"
pycheck "report.py: nulls where a check is missing, skipped or failed" '
import json, subprocess, sys
out, report = sys.argv[1], sys.argv[2]
res = out + "/results/"
base = json.load(open(res + "torch.vc2.json"))
# The compiled vc2 run failed after writing a number: it does not count.
json.dump(dict(base, name="torch.vc2.compile", verdict="fail", note="exit status 1",
               figures=dict(base["figures"], s_per_call=0.01)), open(res + "torch.vc2.compile.json", "w"))
# Wan: torch eager skipped (no figures), the compiled run passed, vinf failed with its figures.
json.dump(dict(base, name="torch.wan13b", verdict="skip", note="skipped: no python3 with CUDA torch: x", figures={}),
          open(res + "torch.wan13b.json", "w"))
json.dump(dict(base, name="torch.wan13b.compile", figures=dict(base["figures"], s_per_call=0.75)),
          open(res + "torch.wan13b.compile.json", "w"))
json.dump({"name": "bench.wan13b", "group": "perf", "what": "", "verdict": "fail", "note": "timed out",
           "seconds": 600, "exit_status": None, "log": None, "command": [], "figures": {"call_s": 5.0}},
          open(res + "bench.wan13b.json", "w"))
subprocess.run([sys.executable, report, "--out", out], check=True, stdout=subprocess.DEVNULL)
r = json.load(open(out + "/report.json"))
assert r["vinf_s_per_call"] == {"vc2": 2.0, "wan13b": None}, r["vinf_s_per_call"]
assert r["torch_s_per_call"] == {"vc2": 0.5, "wan13b": None}, r["torch_s_per_call"]
assert r["torch_compile_s_per_call"] == {"vc2": None, "wan13b": 0.75}, r["torch_compile_s_per_call"]
assert r["ratio_vs_torch"] == {"vc2": 4.0, "wan13b": None}, r["ratio_vs_torch"]
assert r["ratio_vs_torch_compile"] == {"vc2": None, "wan13b": None}, r["ratio_vs_torch_compile"]
md = open(out + "/report.md").read()
assert "- torch.wan13b (skip): skipped: no python3 with CUDA torch: x" in md and "- bench.wan13b (fail): timed out" in md, md
# Without any vinf or torch check: no table, the fields still there, null.
for f in ("bench.vc2.np1", "bench.wan13b", "torch.vc2", "torch.vc2.compile", "torch.wan13b", "torch.wan13b.compile"):
    __import__("os").remove(res + f + ".json")
json.dump({"name": "selfcheck", "group": "cli", "what": "", "verdict": "pass", "note": "", "seconds": 1,
           "exit_status": 0, "log": None, "command": [], "figures": {}}, open(res + "selfcheck.json", "w"))
subprocess.run([sys.executable, report, "--out", out], check=True, stdout=subprocess.DEVNULL)
r = json.load(open(out + "/report.json"))
assert r["ratio_vs_torch"] == {"vc2": None, "wan13b": None} and r["torch_s_per_call"] == {"vc2": None, "wan13b": None}
assert "vinf vs PyTorch" not in open(out + "/report.md").read()
' "$work/mixed" "$report_py"

[ "$fails" -eq 0 ] && echo "all torch anchor checks passed" || echo "$fails torch anchor check(s) failed"
exit $((fails > 0))
