#!/usr/bin/env python3
"""OUT/report.md and OUT/report.json from OUT/results/*.json (checks.py) and the machine's
description (system.json, written by scripts/gpu-check).

    report.py --out OUT [--system FILE]

report.json: {"format": "vinf-gpu-check", "system": {...}, "summary": {"pass", "fail", "skip",
"verdict"}, "mfu_percent": the vc2 bf16 UNet call's MFU on one rank (null when not measured),
"checks": [{name, group, what, verdict, note, seconds, exit_status, log, command, figures}]}.
Standard library only.
"""
import argparse
import glob
import json
import os
import sys

GROUP_ORDER = ["cli", "perf", "real-shapes", "ranks", "unit", "bundle"]
GROUP_TITLE = {"cli": "vinf commands", "perf": "step benchmark (vc2 shapes)",
               "real-shapes": "UNet at VideoCrafter2 shapes vs the CPU", "ranks": "multi-rank Video-Infinity on the GPU",
               "unit": "GPU unit tests", "bundle": "bundle"}


def fmt(v):
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 1e5 or abs(v) < 1e-3:
            return "%.3e" % v
        return "%.4g" % v
    if isinstance(v, dict):
        return ", ".join("%s %s" % (k, fmt(x)) for k, x in v.items())
    if isinstance(v, list):
        return ", ".join(fmt(x) for x in v)
    return str(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--system", default="")
    a = ap.parse_args()
    system = {}
    if a.system and os.path.exists(a.system):
        with open(a.system, encoding="utf-8") as f:
            system = json.load(f)
    checks = []
    for p in sorted(glob.glob(os.path.join(a.out, "results", "*.json"))):
        if p.endswith(".bench.json") or p.endswith(".figures.json"):
            continue
        with open(p, encoding="utf-8") as f:
            checks.append(json.load(f))
    checks.sort(key=lambda c: (GROUP_ORDER.index(c["group"]) if c["group"] in GROUP_ORDER else 99, c["name"]))
    counts = {v: sum(1 for c in checks if c["verdict"] == v) for v in ("pass", "fail", "skip")}
    mfu = None
    for c in checks:
        if c["name"] == "bench.vc2.np1":
            mfu = c["figures"].get("mfu_percent")
    verdict = "fail" if counts["fail"] else ("pass" if counts["pass"] else "skip")
    doc = {"format": "vinf-gpu-check", "version": 1, "system": system,
           "summary": dict(counts, verdict=verdict, checks=len(checks)), "mfu_percent": mfu, "checks": checks}
    with open(os.path.join(a.out, "report.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")

    md = ["# vinf GPU check", ""]
    gpu = system.get("gpu", {})
    md.append("Verdict: **%s** — %d passed, %d failed, %d skipped of %d checks." % (
        verdict, counts["pass"], counts["fail"], counts["skip"], len(checks)))
    md.append("")
    md.append("vc2 bf16 UNet call (320x512, 24 frames, CFG batch 2, one rank): MFU **%s**." % (
        "%.1f %%" % mfu if isinstance(mfu, (int, float)) else "not measured"))
    md.append("")
    md.append("## Machine")
    md.append("")
    md.append("| | |")
    md.append("|---|---|")
    rows = [("date", system.get("date")), ("host", system.get("host")), ("mode", system.get("mode")),
            ("GPU", gpu.get("name")), ("GPU memory", gpu.get("memory")), ("compute capability", gpu.get("compute_cap")),
            ("driver", gpu.get("driver")), ("CUDA (driver)", gpu.get("cuda_driver_version")),
            ("CPU cores", system.get("cores")), ("kernel", system.get("kernel"))]
    rows += [(k, v) for k, v in sorted(system.get("versions", {}).items())]
    rows += [("bundle", system.get("bundle"))] if system.get("bundle") else []
    for k, v in rows:
        if v not in (None, "", {}):
            md.append("| %s | %s |" % (k, fmt(v).replace("\n", "<br>").replace("|", "\\|")))
    md.append("")
    for g in GROUP_ORDER + sorted({c["group"] for c in checks} - set(GROUP_ORDER)):
        group = [c for c in checks if c["group"] == g]
        if not group:
            continue
        md.append("## " + GROUP_TITLE.get(g, g))
        md.append("")
        md.append("| check | verdict | s | note | log |")
        md.append("|---|---|---|---|---|")
        for c in group:
            md.append("| %s | %s | %s | %s | %s |" % (c["name"].replace("|", "\\|"), c["verdict"], fmt(c["seconds"]),
                                                    (c.get("note") or "").replace("|", "\\|"), c.get("log") or ""))
        md.append("")
        for c in group:
            if c.get("figures"):
                md.append("Figures of %s%s:" % (c["name"], " (" + c["what"] + ")" if c.get("what") else ""))
                md.append("")
                for k, v in c["figures"].items():
                    md.append("- %s: %s" % (k, fmt(v)))
                md.append("")
    with open(os.path.join(a.out, "report.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md) + "\n")
    print("gpu-check: %s — %d passed, %d failed, %d skipped; report in %s/report.md and report.json" % (
        verdict, counts["pass"], counts["fail"], counts["skip"], a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
