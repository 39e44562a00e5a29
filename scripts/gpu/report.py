#!/usr/bin/env python3
"""OUT/report.md and OUT/report.json from OUT/results/*.json (checks.py) and the machine's
description (system.json, written by scripts/gpu-check).

    report.py --out OUT [--system FILE]

report.json: {"format": "vinf-gpu-check", "system": {...}, "summary": {"pass", "fail", "skip",
"verdict"}, "mfu_percent": the vc2 bf16 UNet call's MFU on one rank (null when not measured),
the PyTorch comparison, each an object keyed by model ({"vc2": x, "wan13b": y}, null where a number
is missing): "vinf_s_per_call" (bench.vc2.np1, bench.wan13b), "torch_s_per_call" (torch.vc2,
torch.wan13b: eager), "torch_compile_s_per_call" (torch.*.compile), "ratio_vs_torch" and
"ratio_vs_torch_compile" (vinf's seconds over torch's: above 1, vinf is slower),
"checks": [{name, group, what, verdict, note, seconds, exit_status, log, command, figures}]}.
A number counts only from a check that passed. Standard library only.
"""
import argparse
import glob
import json
import os
import sys

GROUP_ORDER = ["cli", "perf", "torch", "real-shapes", "ranks", "unit", "bundle"]
GROUP_TITLE = {"cli": "vinf commands", "perf": "step benchmark (vc2 shapes)",
               "torch": "PyTorch + diffusers reference (same GPU, same shapes)",
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


# The models vinf and the PyTorch reference both run: vinf's check and the field of its figures
# with the seconds per call, and the eager and compiled torch checks (bench_torch.py's JSON).
MODELS = {"vc2": {"vinf": ("bench.vc2.np1", "call_s"), "torch": "torch.vc2", "compile": "torch.vc2.compile",
                  "what": "UNet3D, 320x512, 24 frames"},
          "wan13b": {"vinf": ("bench.wan13b", "call_s"), "torch": "torch.wan13b", "compile": "torch.wan13b.compile",
                     "what": "Wan2.1-1.3B, 480x832, 81 frames"}}


def number(checks, name, field):
    """figures[field] of the check called name when it passed and the figure is a positive number."""
    c = checks.get(name)
    if not c or c.get("verdict") != "pass":
        return None
    v = (c.get("figures") or {}).get(field)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def ratio(a, b):
    return a / b if a is not None and b is not None else None


def torch_comparison(checks):
    """The report.json fields of the comparison with PyTorch, each keyed by model."""
    by_name = {c["name"]: c for c in checks}
    out = {k: {} for k in ("vinf_s_per_call", "torch_s_per_call", "torch_compile_s_per_call", "ratio_vs_torch",
                           "ratio_vs_torch_compile")}
    for model, m in MODELS.items():
        vinf = number(by_name, *m["vinf"])
        eager = number(by_name, m["torch"], "s_per_call")
        compiled = number(by_name, m["compile"], "s_per_call")
        out["vinf_s_per_call"][model] = vinf
        out["torch_s_per_call"][model] = eager
        out["torch_compile_s_per_call"][model] = compiled
        out["ratio_vs_torch"][model] = ratio(vinf, eager)
        out["ratio_vs_torch_compile"][model] = ratio(vinf, compiled)
    return out


def torch_table(checks, comparison):
    """report.md's table of vinf against PyTorch; [] when none of its checks ran."""
    by_name = {c["name"]: c for c in checks}
    names = [n for m in MODELS.values() for n in (m["vinf"][0], m["torch"], m["compile"])]
    if not any(n in by_name for n in names):
        return []

    def cell(v, form="%.4g"):
        return form % v if isinstance(v, (int, float)) and not isinstance(v, bool) else "—"

    def tflop(name, field, scale):
        v = number(by_name, name, field)
        return v * scale if v is not None else None

    md = ["## vinf vs PyTorch (same GPU, same shapes)", "",
          "Seconds per model call (bf16, CFG batch 2), both in this run; ratio = vinf / torch (above 1: vinf is "
          "slower). TFLOP/call and MFU as each program counts them (compare seconds, not MFU).", "",
          "| model | vinf s/call | torch eager s/call | ratio | torch compile s/call | ratio | "
          "torch TFLOP/call | torch MFU % | torch compile MFU % | vinf TFLOP/call | vinf MFU % |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for model, m in MODELS.items():
        vname = m["vinf"][0]
        vinf_tflop = (tflop(vname, "flops_per_call", 1e-12) if model == "vc2" else tflop(vname, "TFLOP/call", 1))
        md.append("| %s (%s) | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            model, m["what"], cell(comparison["vinf_s_per_call"][model]), cell(comparison["torch_s_per_call"][model]),
            cell(comparison["ratio_vs_torch"][model], "%.3g"), cell(comparison["torch_compile_s_per_call"][model]),
            cell(comparison["ratio_vs_torch_compile"][model], "%.3g"),
            cell(tflop(m["torch"], "flops_per_call", 1e-12)), cell(number(by_name, m["torch"], "mfu_percent"), "%.1f"),
            cell(number(by_name, m["compile"], "mfu_percent"), "%.1f"), cell(vinf_tflop),
            cell(number(by_name, vname, "mfu_percent"), "%.1f")))
    md.append("")
    missing = [c for n in names for c in [by_name.get(n)] if c and c["verdict"] != "pass"]
    for c in missing:
        md.append("- %s (%s)%s" % (c["name"], c["verdict"], ": " + c["note"] if c.get("note") else ""))
    framework = next((by_name[n]["figures"].get("framework") for n in names
                      if n.startswith("torch.") and n in by_name and (by_name[n].get("figures") or {}).get("framework")),
                     None)
    if framework:
        md.append("- torch: %s" % framework)
    if missing or framework:
        md.append("")
    return md


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
    comparison = torch_comparison(checks)
    doc = {"format": "vinf-gpu-check", "version": 1, "system": system,
           "summary": dict(counts, verdict=verdict, checks=len(checks)), "mfu_percent": mfu}
    doc.update(comparison)
    doc["checks"] = checks
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
    md += torch_table(checks, comparison)
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
