#!/usr/bin/env python3
"""Runs the GPU checks of scripts/gpu-check and writes their verdicts, logs and figures.

    checks.py run --manifest FILE --out OUT [--prefix DIR] [--mode cluster|bundle]
                  [--only REGEX]... [--skip REGEX]... [--budget S] [--cores N] [--list]
    checks.py tf32 --vinf V --model DIR --inputs FILE --work DIR --figures FILE
    checks.py torch --ref DIR --model vc2|wan13b [--compile] --json FILE [--python PYTHON]

`run` executes the plan: the GPU tests of the manifest (manifest.py) and the checks defined
here (vinf selfcheck, the vc2 real-shape UNet test, the TF32 comparison, the step benchmark,
the PyTorch reference), several at a time within the machine's cores; the benchmarks run alone.
Each check has a timeout; a check that fails does not stop the others. Per check:
OUT/logs/NAME.log and OUT/results/NAME.json (verdict pass/fail/skip, seconds, figures). Then report.py writes
OUT/report.md and OUT/report.json. Exit status 0 when nothing failed, 1 otherwise.
`tf32` is one of the checks (it runs as its own process, with a log and a timeout like the rest).
`torch` is the command of the torch.* checks: the PyTorch + diffusers reference benchmark
(DIR/bench_torch.py) on this machine's python3; it exits 77 ("skipped: ...", with the reason)
where DIR has no bench_torch.py or python3 cannot use torch on a CUDA GPU.
Standard library only: the GPU machine may have nothing else.
"""
import argparse
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl_tcp_if_include": "lo",
           "OMPI_MCA_oob_tcp_if_include": "lo"}
VC2_CASE = "VideoCrafter2 shapes"
# The torch.* checks: the models of bench_torch.py and the timeouts of an eager and a compiled run
# (torch.compile takes minutes the first time; the Wan call is the heavier one).
TORCH_MODELS = ("vc2", "wan13b")
TORCH_TIMEOUT = {("vc2", False): 300, ("wan13b", False): 420, ("vc2", True): 600, ("wan13b", True): 600}
TORCH_WHAT = {"vc2": "diffusers UNet3DConditionModel at vc2 shapes (bench.vc2.np1's call), bf16, CFG batch 2, "
                     "24 frames at 320x512",
              "wan13b": "diffusers WanTransformer3DModel at Wan2.1-1.3B shapes (bench.wan13b's call), bf16, "
                        "CFG batch 2, 81 frames at 480x832"}
# What torch.* needs of python3; its failure is the reason the checks skip.
TORCH_PROBE = ("import torch; assert torch.cuda.is_available(), 'torch %s (CUDA %s) sees no CUDA device' % "
               "(torch.__version__, torch.version.cuda); "
               "print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name(0))")
# gpu-check keeps the library path it was started with here: the torch checks run with it, not
# with the bundle's CUDA directories (torch loads its own cuDNN and NCCL).
TORCH_LD_ENV = "VINF_GPU_CHECK_LD_LIBRARY_PATH"


def safe_name(name):
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")[:90]


class Check:
    def __init__(self, name, group, command, env=None, timeout=600, processors=1, skip_code=None,
                 exclusive=False, figures=None, doctest=False, what=""):
        self.name, self.group, self.command = name, group, command
        self.env = dict(env or {})
        self.timeout, self.processors, self.skip_code = timeout, processors, skip_code
        self.exclusive, self.figures, self.doctest, self.what = exclusive, figures, doctest, what
        self.requires = []  # programs that must be on PATH


def substitute(value, prefix):
    if isinstance(value, str) and prefix:
        return value.replace("@PREFIX@", prefix)
    return value


def torch_check(model, compiled, torch_ref, figures_dir, out):
    name = "torch.%s%s" % (model, ".compile" if compiled else "")
    fig = os.path.join(figures_dir, safe_name(name) + ".bench.json")
    return Check(
        name, "torch",
        [sys.executable, os.path.abspath(__file__), "torch", "--ref", torch_ref, "--model", model, "--json", fig]
        + (["--compile"] if compiled else []),
        env={"TORCH_REF_SRC": os.environ.get("TORCH_REF_SRC") or os.path.join(out, "torch-ref-src")},
        timeout=TORCH_TIMEOUT[(model, compiled)], exclusive=True, skip_code=77, figures=("file", fig),
        what="PyTorch reference (bench_torch.py %s%s): %s" % (model, " --compile" if compiled else "",
                                                            TORCH_WHAT[model]))


def plan(manifest, prefix, mode, out, cores, torch_ref=""):
    """The checks in the order they start."""
    paths = {k: substitute(v, prefix) for k, v in manifest["paths"].items()}
    figures_dir = os.path.join(out, "results")
    checks = []
    common_env = dict(MPI_ENV)
    if mode == "bundle":
        common_env["VINF_TEST_FIXTURES"] = paths["fixtures"]
        common_env["VINF_SHARED_FIXTURES"] = paths["shared_fixtures"]

    checks.append(Check("selfcheck", "cli", [paths["vinf"], "selfcheck", "--device", "cuda"], timeout=300,
                        processors=2, what="vinf selfcheck --device cuda"))
    # The kernels that are off by default (VINF_GPU_KERNELS, src/exec/gpu_kernels.hpp): the op
    # table against the CPU with all of them on, and the one-rank benchmark again with them.
    checks.append(Check("selfcheck.kernels", "cli", [paths["vinf"], "selfcheck", "--device", "cuda"],
                        env={"VINF_GPU_KERNELS": "all"}, timeout=300, processors=2,
                        what="VINF_GPU_KERNELS=all vinf selfcheck --device cuda"))
    if paths.get("bench_step"):
        for np_, fpr, kernels in ((1, 24, ""), (2, 12, ""), (1, 24, "all")):
            name = "bench.vc2.np%d" % np_ + (".kernels" if kernels else "")
            fig = os.path.join(figures_dir, safe_name(name) + ".bench.json")
            checks.append(Check(
                name, "perf",
                [paths["mpiexec"], "-np", str(np_), paths["bench_step"], "--preset", "vc2", "--height", "320",
                 "--width", "512", "--frames-per-rank", str(fpr), "--batch", "2", "--device", "cuda", "--dtype", "bf16",
                 "--comm-backend", "mpi", "--calls", "3", "--warmup", "1", "--json", fig]
                + (["--profile"] if np_ == 1 else []),
                env={"OMP_NUM_THREADS": "1", "VINF_GPU_KERNELS": kernels or "none"}, timeout=420, exclusive=True,
                figures=("bench", fig),
                what="vinf_bench_step, vc2 bf16, CFG batch 2, 24 frames at 320x512 over %d rank(s) on one GPU%s" %
                (np_, ", VINF_GPU_KERNELS=all" if kernels else "")))

    if paths.get("bench_wan"):
        fig = os.path.join(figures_dir, "bench.wan13b.bench.json")
        checks.append(Check(
            "bench.wan13b", "perf",
            [paths["bench_wan"], "--vinf_devices=cuda", "--benchmark_filter=wan_call", "--benchmark_format=console",
             "--benchmark_out=" + fig, "--benchmark_out_format=json",
             "--vinf_profile=" + fig.replace(".bench.json", ".profile.json")],
            env={"OMP_NUM_THREADS": "1"}, timeout=600, exclusive=True, figures=("gbench", fig),
            what="vinf_bench_wan: one Wan2.1-1.3B transformer call, bf16, CFG batch 2, 81 frames at 480x832"))
        checks.append(Check(
            "bench.wan_vae", "perf",
            [paths["bench_wan"], "--vinf_devices=cuda", "--benchmark_filter=wan_vae_decode", "--benchmark_format=console"],
            env={"OMP_NUM_THREADS": "1"}, timeout=300, exclusive=True,
            what="vinf_bench_wan: the Wan2.1 VAE decoding 17 frames at 480x832 in f32, whole frames and tiles of 16"))

    if paths.get("bench_ops"):
        # Attention alone at the vc2 shapes (temporal, spatial, cross): GB/s against the GPU's
        # memory bandwidth, with the default kernels and with VINF_GPU_KERNELS=all.
        for kernels in ("none", "all"):
            checks.append(Check(
                "bench.attention" + (".kernels" if kernels == "all" else ""), "perf",
                [paths["bench_ops"], "--vinf_devices=cuda", "--benchmark_filter=attention"],
                env={"OMP_NUM_THREADS": "1", "VINF_GPU_KERNELS": kernels}, timeout=300, exclusive=True,
                what="vinf_bench_ops, attention at the vc2 shapes on CUDA (GB/s, %% of HBM), VINF_GPU_KERNELS=%s" % kernels))

    # The PyTorch reference at the same shapes, right after vinf's benchmarks and like them alone
    # on the machine: eager here; compiled (minutes each) at the end of the plan.
    torch_ref = torch_ref or os.path.join(os.path.dirname(paths["shared_fixtures"]), "reference", "torch-gpu")
    for model in TORCH_MODELS:
        checks.append(torch_check(model, False, torch_ref, figures_dir, out))

    vc2 = None
    units = []
    ranks = []
    for c in manifest["checks"]:
        env = dict(kv.split("=", 1) for kv in (substitute(x, prefix) for x in c["environment"]))
        check = Check(c["name"], c["group"], [substitute(x, prefix) for x in c["command"]], env=env,
                      timeout=int(c["timeout"]), processors=max(1, int(c["processors"] or 1)),
                      skip_code=c.get("skip_return_code"), doctest=c["group"] == "unit")
        if c["group"] == "unit" and VC2_CASE in c["name"]:
            vc2 = check
        elif c["group"] == "unit":
            check.processors = 2
            units.append(check)
        else:
            ranks.append(check)
    if vc2 is not None:
        vc2.name = "unet.vc2_real_shapes"
        vc2.group = "real-shapes"
        vc2.env["VINF_TEST_REAL_SHAPES"] = "1"
        vc2.processors = max(2, cores // 2)
        vc2.timeout = 900
        vc2.figures = ("real_shapes", None)
        vc2.what = "vc2 UNet call at 320x512, 24 frames, CFG batch 2: f32, f16, bf16 on CUDA vs the CPU"
        checks.append(vc2)
    # The long multi-rank scripts first, the most ranks first, so the short ones fill the gaps.
    ranks.sort(key=lambda c: (-c.timeout, -c.processors, c.name))
    checks += ranks
    checks += units
    fig = os.path.join(figures_dir, "tf32.figures.json")
    checks.append(Check(
        "tf32", "cli",
        [sys.executable, os.path.abspath(__file__), "tf32", "--vinf", paths["vinf"],
         "--model", os.path.join(paths["fixtures"], "tiny-unet3d"),
         "--inputs", os.path.join(paths["fixtures"], "tiny-unet3d", "inputs.safetensors"),
         "--work", os.path.join(out, "tf32-work"), "--figures", fig],
        timeout=300, processors=2, figures=("file", fig),
        what="vinf forward f32 on CUDA with and without --tf32 against the CPU's f32 forward"))
    if mode == "bundle":
        checks.append(Check("bundle.tokenizer_icu", "bundle", [paths["unit_tests"], "--source-file=*test_tokenizer.cpp"],
                            timeout=120, processors=1, doctest=True,
                            what="the tokenizer's tests with the bundle's ICU (its data library is empty)"))
    for model in TORCH_MODELS:
        checks.append(torch_check(model, True, torch_ref, figures_dir, out))
    for c in checks:
        env = dict(common_env)
        env.update(c.env)
        env.setdefault("OMP_NUM_THREADS", str(c.processors))
        c.env = env
    return checks


# -- one check --------------------------------------------------------------------------------

def doctest_verdict(text):
    """A doctest run that passed: 'skip' when its cases skipped themselves (no GPU, a missing file)."""
    m = re.search(r"test cases:\s*(\d+)\s*\|\s*(\d+) passed", text)
    if m and int(m.group(1)) == 0:
        return "fail", "no test case matched the filter"
    if re.search(r"MESSAGE: skipped|: skipped\b|^skipped", text, re.M):
        line = next((l for l in text.splitlines() if "skipped" in l), "skipped")
        return "skip", line[line.find("MESSAGE: ") + 9:].strip() if "MESSAGE: " in line else line.strip()
    return "pass", ""


def bench_figures(path):
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    s = j.get("summary", {})
    figs = {"call_s": s.get("call_s"), "exposed_comm_s": s.get("exposed_comm_s"), "raw_comm_s": s.get("raw_comm_s"),
            "bytes_received_per_rank_per_call": s.get("bytes_received_per_rank_per_call"),
            "flops_per_s": s.get("flops_per_s"), "gemm_flops_per_s": s.get("gemm_flops_per_s"),
            "peak_memory_bytes": s.get("peak_memory_bytes"), "frame_steps_per_s": s.get("frame_steps_per_s"),
            "ranks": j.get("config", {}).get("ranks"), "comm_backend": j.get("config", {}).get("comm_backend"),
            "vi_mode": j.get("config", {}).get("vi.mode")}
    if j.get("ranks"):
        figs["flops_per_call"] = j["ranks"][0].get("flops_per_call")
    if isinstance(j.get("profile"), dict):
        figs.update(profile_figures(j["profile"]))
    for t in j.get("targets", []):
        if t.get("name") == "mfu":
            figs["mfu_percent"] = t.get("value")
        figs["target." + t.get("name", "?")] = "%.4g %s (%s %g): %s" % (
            t.get("value", 0), t.get("unit", ""), "at most" if t.get("bound_is") == "upper" else "at least",
            t.get("bound", 0), t.get("verdict", ""))
    return figs


def profile_figures(p, top=20):
    """A --profile report (src/ops/profile_json.hpp) as figures: the call against its ops, the
    counters per call, and the `top` op kinds and modules by time ("name ms")."""
    figs = {"profile." + k: p.get(k) for k in ("clock", "call_s", "op_s", "gap_s", "ops_per_call",
                                                "kernel_launches_per_call", "library_calls_per_call",
                                                "host_syncs_per_call")}
    for key in ("by_op_kind", "by_module", "by_module_kind"):
        figs["profile.top." + key] = ["%s %.3f ms" % (r.get("name"), 1e3 * (r.get("s_per_call") or 0))
                                      for r in (p.get(key) or [])[:top]]
    return figs


def gbench_figures(path):
    """The first benchmark of a Google Benchmark JSON file (--benchmark_out_format=json): seconds
    per iteration as call_s, its counters (MFU, a fraction, also as mfu_percent) and its label."""
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    runs = [b for b in j.get("benchmarks", []) if b.get("run_type", "iteration") == "iteration"]
    if not runs:
        return {}
    b = runs[0]
    if b.get("error_occurred"):
        return {"benchmark": b.get("name"), "error": b.get("error_message", "")}
    per_s = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
    figs = {"benchmark": b.get("name"), "call_s": b["real_time"] * per_s, "iterations": b.get("iterations")}
    standard = {"name", "family_index", "per_family_instance_index", "run_name", "run_type", "repetitions",
                "repetition_index", "threads", "iterations", "real_time", "cpu_time", "time_unit", "label",
                "aggregate_name", "aggregate_unit"}
    for k, v in b.items():
        if k not in standard and isinstance(v, (int, float)):
            figs[k] = v
    if isinstance(b.get("MFU"), (int, float)):
        figs["mfu_percent"] = 100.0 * b["MFU"]
    if b.get("label"):
        figs["label"] = b["label"]
    profile = path.replace(".bench.json", ".profile.json")
    if profile != path and os.path.exists(profile):
        with open(profile, encoding="utf-8") as f:
            reports = json.load(f)
        if isinstance(reports.get(b.get("name")), dict):
            figs.update(profile_figures(reports[b.get("name")]))
    return figs


def real_shape_figures(text):
    figs = {}
    pat = r"vc2 (f32|f16|bf16): relative RMS error ([-+0-9.eE]+|nan|inf), max \|err\| ([-+0-9.eE]+|nan|inf), " \
          r"non-finite outputs (\d+)"
    for m in re.finditer(pat, text):
        dt = m.group(1)
        figs[dt + ".relative_rms"] = float(m.group(2))
        figs[dt + ".max_abs_err"] = float(m.group(3))
        figs[dt + ".nonfinite"] = int(m.group(4))
    return figs


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class Running:
    def __init__(self, check, log_path, timeout):
        self.check, self.log_path, self.timeout = check, log_path, timeout
        self.start = time.time()
        self.timed_out = False
        self.budget_limited = False
        self.log = open(log_path, "w", encoding="utf-8", errors="replace")
        self.log.write("# %s\n# command: %s\n# environment: %s\n# timeout: %d s\n\n" % (
            check.name, " ".join(shlex_quote(x) for x in check.command),
            " ".join("%s=%s" % kv for kv in sorted(check.env.items()) if kv[0] not in os.environ or
                     os.environ[kv[0]] != kv[1]), timeout))
        self.log.flush()
        env = dict(os.environ)
        env.update(check.env)
        try:
            self.proc = subprocess.Popen(check.command, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
            self.error = None
        except OSError as e:
            self.proc, self.error = None, str(e)


def shlex_quote(s):
    return s if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", s) else "'" + s.replace("'", "'\\''") + "'"


def finish(r, out, budget_cut):
    c = r.check
    seconds = time.time() - r.start
    rc = r.proc.returncode if r.proc else None
    r.log.close()
    text = open(r.log_path, encoding="utf-8", errors="replace").read()
    note = ""
    if r.error:
        verdict, note = "fail", "could not start: " + r.error
    elif r.timed_out:
        if budget_cut:
            verdict, note = "skip", "stopped after %d s: the time budget (--budget) ran out" % seconds
        else:
            verdict, note = "fail", "timed out after %d s" % r.timeout
    elif c.skip_code is not None and rc == c.skip_code:
        verdict = "skip"
        note = next((l.strip() for l in reversed(text.splitlines()) if "skip" in l.lower()), "skipped (exit %d)" % rc)
    elif rc != 0 and "skipped (no GPU visible)" in text:
        verdict, note = "skip", "no GPU visible"
    elif rc != 0:
        verdict, note = "fail", "exit status %d" % rc
        fails = [l.strip() for l in text.splitlines() if l.startswith("FAIL") or "ERROR:" in l or "error:" in l]
        if fails:
            note += ": " + fails[0][:200]
    elif c.doctest:
        verdict, note = doctest_verdict(text)
    else:
        verdict = "pass"
    figures = {}
    try:
        if c.figures and c.figures[0] == "bench" and os.path.exists(c.figures[1]):
            figures = bench_figures(c.figures[1])
        elif c.figures and c.figures[0] == "gbench" and os.path.exists(c.figures[1]):
            figures = gbench_figures(c.figures[1])
        elif c.figures and c.figures[0] == "file" and os.path.exists(c.figures[1]):
            with open(c.figures[1], encoding="utf-8") as f:
                figures = json.load(f)
        elif c.figures and c.figures[0] == "real_shapes":
            figures = real_shape_figures(text)
    except (OSError, ValueError) as e:
        note = (note + "; " if note else "") + "figures unreadable: %s" % e
    result = {"name": c.name, "group": c.group, "what": c.what, "verdict": verdict, "note": note,
              "seconds": round(seconds, 1), "exit_status": rc, "log": os.path.relpath(r.log_path, out),
              "command": c.command, "figures": figures}
    with open(os.path.join(out, "results", safe_name(c.name) + ".json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    return result


def run_plan(checks, out, cores, budget):
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    os.makedirs(os.path.join(out, "results"), exist_ok=True)
    deadline = time.time() + budget if budget > 0 else None
    queue = list(checks)
    running = []
    results = []
    total = len(checks)

    def report(res):
        results.append(res)
        print("[%d/%d] %s ... %s (%d s)%s" % (len(results), total, res["name"], res["verdict"], res["seconds"],
                                            (": " + res["note"]) if res["note"] and res["verdict"] != "pass" else ""),
              flush=True)

    while queue or running:
        now = time.time()
        for r in list(running):
            if r.proc is None or r.proc.poll() is not None:
                running.remove(r)
                report(finish(r, out, False))
            elif now - r.start > r.timeout:
                r.timed_out = True
                kill_group(r.proc)
                running.remove(r)
                report(finish(r, out, r.budget_limited))
        busy = sum(r.check.processors for r in running)
        exclusive_running = any(r.check.exclusive for r in running)
        started = False
        for c in list(queue):
            if exclusive_running or (c.exclusive and running):
                break
            need = min(c.processors, cores)
            if busy + need > cores and running:
                continue
            left = deadline - time.time() if deadline else None
            path = c.env.get("PATH", os.environ.get("PATH", ""))
            missing = [p for p in c.requires if shutil.which(p, path=path) is None]
            if missing or (left is not None and left < 15):
                queue.remove(c)
                note = ("not started: %s not on PATH" % " and ".join(missing) if missing else
                        "not started: the time budget (--budget %d s) ran out" % budget)
                skipped = {"name": c.name, "group": c.group, "what": c.what, "verdict": "skip",
                           "note": note, "seconds": 0,
                           "exit_status": None, "log": None, "command": c.command, "figures": {}}
                with open(os.path.join(out, "results", safe_name(c.name) + ".json"), "w", encoding="utf-8") as f:
                    json.dump(skipped, f, indent=1)
                report(skipped)
                continue
            timeout = c.timeout if left is None else min(c.timeout, int(left) - 5)
            r = Running(c, os.path.join(out, "logs", safe_name(c.name) + ".log"), timeout)
            r.budget_limited = left is not None and timeout < c.timeout
            queue.remove(c)
            running.append(r)
            busy += need
            started = True
            if c.exclusive:
                break
        if not started:
            time.sleep(0.2)
    return results


# -- the TF32 check --------------------------------------------------------------------------

def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for key, v in header.items():
        if key == "__metadata__" or v.get("dtype") != "F32":
            continue
        a, b = v["data_offsets"]
        tensors[key] = struct.unpack("<%df" % ((b - a) // 4), data[a:b])
    return tensors


def errors(got, ref):
    diff2 = ref2 = 0.0
    max_abs = max_ref = 0.0
    nonfinite = 0
    for key, r in ref.items():
        g = got[key]
        for x, y in zip(g, r):
            if not math.isfinite(x):
                nonfinite += 1
                continue
            d = abs(x - y)
            diff2 += d * d
            ref2 += y * y
            max_abs = max(max_abs, d)
            max_ref = max(max_ref, abs(y))
    return {"max_abs_err": max_abs, "max_rel_err": max_abs / max_ref if max_ref else 0.0,
            "relative_rms": math.sqrt(diff2 / ref2) if ref2 else 0.0, "nonfinite": nonfinite}


def tf32_main(a):
    os.makedirs(a.work, exist_ok=True)
    runs = {"cpu": ["--device", "cpu", "--dtype", "f32"], "cuda_f32": ["--device", "cuda", "--dtype", "f32"],
            "cuda_tf32": ["--device", "cuda", "--dtype", "f32", "--tf32"]}
    outs = {}
    for name, extra in runs.items():
        out = os.path.join(a.work, name + ".safetensors")
        cmd = [a.vinf, "forward", "--model", a.model, "--inputs", a.inputs, "--out", out] + extra
        print("$ " + " ".join(cmd), flush=True)
        rc = subprocess.call(cmd)
        if rc != 0:
            print("tf32: FAIL: the %s forward exited %d" % (name, rc), flush=True)
            return 1
        outs[name] = read_safetensors(out)
    ref = outs["cpu"]
    if not ref or any(set(ref) - set(o) for o in outs.values()):
        print("tf32: FAIL: the outputs do not hold the same F32 tensors: %s" % {k: sorted(v) for k, v in outs.items()})
        return 1
    f32, tf32 = errors(outs["cuda_f32"], ref), errors(outs["cuda_tf32"], ref)
    between = errors(outs["cuda_tf32"], outs["cuda_f32"])
    figures = {"tensors": sorted(ref), "f32_vs_cpu": f32, "tf32_vs_cpu": tf32, "tf32_vs_f32": between,
               "tf32_changed_results": between["max_abs_err"] > 0,
               "bounds": {"f32_relative_rms": 1e-4, "tf32_relative_rms": 1e-2}}
    with open(a.figures, "w", encoding="utf-8") as f:
        json.dump(figures, f, indent=1)
    print(json.dumps(figures, indent=1))
    ok = (f32["nonfinite"] == 0 and tf32["nonfinite"] == 0 and f32["relative_rms"] < 1e-4
          and tf32["relative_rms"] < 1e-2)
    if not figures["tf32_changed_results"]:
        print("tf32: note: --tf32 gave the same numbers as plain f32 (no GEMM of this model took the TF32 path)")
    print("tf32: %s: f32 relative RMS %.3g (bound 1e-4), with --tf32 %.3g (bound 1e-2)" % (
        "ok" if ok else "FAIL", f32["relative_rms"], tf32["relative_rms"]))
    return 0 if ok else 1


# -- the PyTorch reference -------------------------------------------------------------------

def torch_main(a):
    """One run of bench_torch.py; exit 77 with "skipped: REASON" where it cannot run here."""
    script = os.path.join(a.ref, "bench_torch.py")
    if not os.path.isfile(script):
        print("skipped: no PyTorch reference: %s has no bench_torch.py (give gpu-check --torch-ref DIR or "
              "VINF_TORCH_REF)" % a.ref, flush=True)
        return 77
    env = dict(os.environ)
    if TORCH_LD_ENV in env:
        env.pop("LD_LIBRARY_PATH", None)
        if env[TORCH_LD_ENV]:
            env["LD_LIBRARY_PATH"] = env[TORCH_LD_ENV]
    python = shutil.which(a.python, path=env.get("PATH"))
    if python is None:
        print("skipped: no python3 with CUDA torch: %s is not on PATH" % a.python, flush=True)
        return 77
    try:
        probe = subprocess.run([python, "-c", TORCH_PROBE], env=env, capture_output=True, text=True,
                               stdin=subprocess.DEVNULL, timeout=240)
    except subprocess.TimeoutExpired:
        print("FAIL: torch: '%s -c \"import torch\"' took more than 240 s" % python, flush=True)
        return 1
    if probe.returncode != 0:
        lines = [l.strip() for l in (probe.stdout + "\n" + probe.stderr).splitlines() if l.strip()]
        print("\n".join(lines[-20:]))
        print("skipped: no python3 with CUDA torch: %s" % (lines[-1] if lines else "exit status %d" % probe.returncode),
              flush=True)
        return 77
    print("%s: %s" % (python, probe.stdout.strip()), flush=True)
    if os.path.exists(a.json):
        os.remove(a.json)
    cmd = [python, script, a.model] + (["--compile"] if a.compile else []) + ["--json", a.json]
    print("$ " + " ".join(shlex_quote(x) for x in cmd), flush=True)
    rc = subprocess.call(cmd, env=env, stdin=subprocess.DEVNULL)
    if rc != 0:
        print("FAIL: torch: bench_torch.py exited %d" % rc, flush=True)
        return 1
    if not os.path.exists(a.json):
        print("FAIL: torch: bench_torch.py wrote no %s" % a.json, flush=True)
        return 1
    return 0


# -- entry ------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description="the GPU checks of scripts/gpu-check")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--manifest", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--prefix", default="")
    r.add_argument("--mode", choices=["cluster", "bundle"], default="cluster")
    r.add_argument("--only", action="append", default=[])
    r.add_argument("--skip", action="append", default=[])
    r.add_argument("--budget", type=int, default=0)
    r.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    r.add_argument("--list", action="store_true")
    r.add_argument("--system", default="", help="system.json of the machine (gpu-check writes it)")
    r.add_argument("--torch-ref", default="", help="the folder of bench_torch.py (default: reference/torch-gpu "
                                                   "beside the manifest's shared fixtures)")
    t = sub.add_parser("tf32")
    for opt in ("--vinf", "--model", "--inputs", "--work", "--figures"):
        t.add_argument(opt, required=True)
    p = sub.add_parser("torch")
    p.add_argument("--ref", required=True, help="the folder of bench_torch.py")
    p.add_argument("--model", required=True, choices=TORCH_MODELS)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--json", required=True)
    p.add_argument("--python", default="python3")
    a = ap.parse_args()
    if a.cmd == "tf32":
        return tf32_main(a)
    if a.cmd == "torch":
        return torch_main(a)

    with open(a.manifest, encoding="utf-8") as f:
        manifest = json.load(f)
    out = os.path.abspath(a.out)
    checks = plan(manifest, a.prefix, a.mode, out, a.cores, a.torch_ref)
    try:
        only = [re.compile(x) for x in a.only]
        skip = [re.compile(x) for x in a.skip]
    except re.error as e:
        print("gpu-check: error: bad --only/--skip pattern: %s" % e, file=sys.stderr)
        return 2
    if only:
        checks = [c for c in checks if any(p.search(c.name) or p.search(c.group) for p in only)]
    checks = [c for c in checks if not any(p.search(c.name) or p.search(c.group) for p in skip)]
    if a.list:
        for c in checks:
            print("%-12s %-40s %4d s  %s" % (c.group, c.name[:40] if c.group != "unit" else c.name, c.timeout,
                                            "alone" if c.exclusive else "%d core(s)" % c.processors))
        return 0
    if not checks:
        print("gpu-check: error: --only/--skip left no check to run (see --list)", file=sys.stderr)
        return 2
    print("gpu-check: %d checks, up to %d cores at a time%s; logs in %s/logs" % (
        len(checks), a.cores, ", time budget %d s" % a.budget if a.budget else "", out), flush=True)
    results = run_plan(checks, out, a.cores, a.budget)
    rc = subprocess.call([sys.executable, os.path.join(HERE, "report.py"), "--out", out, "--system", a.system])
    failed = [x["name"] for x in results if x["verdict"] == "fail"]
    if rc != 0:
        print("gpu-check: error: the report could not be written", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
