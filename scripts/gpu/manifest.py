#!/usr/bin/env python3
"""Writes the list of GPU tests of a build tree as JSON, for scripts/gpu/checks.py.

    manifest.py --build BUILD_DIR --source SOURCE_DIR --out FILE [--relocate]

The tests come from `ctest --show-only=json-v1` (command, environment, labels, timeout,
processors, skip status), so the runner needs neither CMake nor CTest:
  - every test labelled `gpu` (the multi-rank scripts with VINF_TEST_DEVICE=cuda);
  - every doctest case of vinf_unit_tests that uses the GPU: a TEST_CASE whose body calls
    gpu_or_skip, or a helper of the same file that does (found by reading tests/**/*.cpp).
With --relocate, paths are rewritten for a bundle: the build tree's programs become
@PREFIX@/bin/NAME, the source tree @PREFIX@, ../shared @PREFIX@/shared and MPIEXEC
@PREFIX@/bin/mpiexec; checks.py replaces @PREFIX@ with where the bundle was unpacked.
"""
import argparse
import json
import os
import re
import subprocess
import sys

PREFIX = "@PREFIX@"


def ctest_tests(build_dir):
    out = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build_dir, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)["tests"]


def properties(test):
    return {p["name"]: p["value"] for p in test.get("properties", [])}


def gpu_case_names(source_dir):
    """Names of the doctest cases that need a GPU, read from the test sources."""
    names = []
    case_re = re.compile(r'TEST_CASE\("((?:[^"\\]|\\.)*)"\)')
    for root, _dirs, files in os.walk(os.path.join(source_dir, "tests")):
        for f in sorted(files):
            if not f.endswith(".cpp"):
                continue
            text = open(os.path.join(root, f), encoding="utf-8").read()
            # Helpers of this file whose body calls gpu_or_skip (for_each_cuda_dtype and the like).
            helpers = set()
            for m in re.finditer(r"\b(\w+)\s*\([^;{)]*\)\s*\{", text):
                body = text[m.end():m.end() + 2000]
                end = body.find("\n}")
                if "gpu_or_skip(" in body[:end if end >= 0 else len(body)] and m.group(1) != "gpu_or_skip":
                    helpers.add(m.group(1))
            cases = list(case_re.finditer(text))
            for i, m in enumerate(cases):
                body = text[m.end():cases[i + 1].start() if i + 1 < len(cases) else len(text)]
                if "gpu_or_skip(" in body or any(re.search(r"\b%s\s*\(" % re.escape(h), body) for h in helpers):
                    names.append(m.group(1).encode().decode("unicode_escape"))
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--relocate", action="store_true")
    a = ap.parse_args()
    build = os.path.realpath(a.build)
    source = os.path.realpath(a.source)
    shared = os.path.realpath(os.path.join(source, "..", "shared"))

    tests = ctest_tests(build)
    wanted_cases = set(gpu_case_names(source))
    mpiexec = vinf = test_tool = unit_tests = None
    programs = {}

    def relocate(s):
        if not a.relocate or not isinstance(s, str):
            return s
        for raw in (s, os.path.realpath(s) if s.startswith("/") else s):
            if raw.startswith(build + "/") and os.path.isfile(raw) and os.access(raw, os.X_OK):
                programs[os.path.basename(raw)] = raw
                return PREFIX + "/bin/" + os.path.basename(raw)
        if mpiexec and s == mpiexec:
            return PREFIX + "/bin/mpiexec"
        for old, new in ((shared, PREFIX + "/shared"), (os.path.join(source, "..", "shared"), PREFIX + "/shared"),
                         (source, PREFIX)):
            s = s.replace(old + "/", new + "/")
            if s == old:
                s = new
        return s

    checks = []
    for t in tests:
        props = properties(t)
        cmd = t.get("command") or []
        if cmd and os.path.basename(cmd[0]) == "vinf_unit_tests" and unit_tests is None:
            unit_tests = cmd[0]
        if not cmd or "gpu" not in props.get("LABELS", []) or not t["name"].startswith("gpu."):
            continue
        if mpiexec is None:
            # script MPIEXEC VINF TEST_TOOL FIXTURE_MODEL N
            mpiexec, vinf, test_tool = cmd[1], cmd[2], cmd[3]
        checks.append({
            "name": t["name"], "group": "ranks", "command": cmd,
            "environment": props.get("ENVIRONMENT", []),
            "timeout": props.get("TIMEOUT", 1500),
            "processors": props.get("PROCESSORS", 1),
            "skip_return_code": props.get("SKIP_RETURN_CODE"),
            "working_directory": props.get("WORKING_DIRECTORY"),
        })
    if not checks:
        print("manifest.py: error: no test labelled gpu in " + build, file=sys.stderr)
        return 1
    # The GPU cases by their full names, from the binary itself: CTest's doctest discovery cuts a
    # name at ';' (its list separator), and such a test matches no case.
    if unit_tests is None:
        print("manifest.py: error: vinf_unit_tests has no CTest test (is it built?)", file=sys.stderr)
        return 1
    listed = subprocess.run([unit_tests, "--list-test-cases", "--no-version"], check=True, capture_output=True,
                            text=True).stdout.splitlines()
    missing = sorted(wanted_cases - set(listed))
    if missing:
        print("manifest.py: error: GPU test cases not in %s: %s" % (unit_tests, "; ".join(missing)), file=sys.stderr)
        return 1
    for name in [x for x in listed if x in wanted_cases]:
        checks.append({
            "name": "unit." + name, "group": "unit",
            "command": [unit_tests, "--test-case=" + name.replace("\\", "\\\\").replace(",", "\\,")],
            "environment": [], "timeout": 600, "processors": 2, "skip_return_code": None,
            "working_directory": None,
        })
    for c in checks:
        c["command"] = [relocate(x) for x in c["command"]]
        c["environment"] = [relocate(x) for x in c["environment"]]
        c["working_directory"] = relocate(c["working_directory"])
    # The programs and directories the other checks (selfcheck, TF32, benchmark) use.
    bench = os.path.join(build, "perf", "vinf_bench_step")
    bench_wan = os.path.join(build, "perf", "vinf_bench_wan")
    bench_ops = os.path.join(build, "perf", "vinf_bench_ops")
    paths = {"vinf": vinf, "unit_tests": unit_tests, "test_tool": test_tool, "mpiexec": mpiexec,
             "bench_step": bench if os.access(bench, os.X_OK) else None,
             "bench_wan": bench_wan if os.access(bench_wan, os.X_OK) else None,
             "bench_ops": bench_ops if os.access(bench_ops, os.X_OK) else None,
             "fixtures": os.path.join(source, "tests", "fixtures"),
             "shared_fixtures": os.path.join(shared, "fixtures"), "source": source}
    paths = {k: relocate(v) for k, v in paths.items()}
    doc = {"format": "vinf-gpu-manifest", "version": 1, "relocated": a.relocate, "paths": paths,
           "checks": checks, "programs": sorted(programs.values())}
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
