"""`clockworks run --backend cupy --np 2` on every protocol of protocols/*.py that the backend
supports, at 1 KiB .. 1 GiB per rank (powers of 4, the main buffer's bytes as `clockworks predict`
counts them), every element of every iteration checked against the checker's values.

    python3 scripts/gpu/cupy_sweep.py --out DIR [--deadline EPOCH] [--resume FILE]
    python3 scripts/gpu/cupy_sweep.py --render FILE.json     # only rewrite FILE.md from FILE.json

Per protocol, one job (one mpiexec, one NCCL initialisation) for the small sizes (1 KiB .. 16 MiB,
`SMALL_ITERS` iterations each) and one for the large ones (64 MiB .. 1 GiB, `LARGE_ITERS`); a
protocol with compute kernels (run on the host) runs `HOST_BOUND_ITERS` time at 1 GiB, last.
Protocols with one-sided ops are listed as skipped with the backend's reason. Writes DIR/cupy_run.json
(machine facts, the command, one record per protocol and size: verdict, the slowest rank's median,
min and max time in the ops, algorithm and bus bandwidth) and DIR/cupy_run.md, after every job, so
a run stopped at its time limit keeps what it measured; sizes not run say why. `--resume` keeps the
records of an earlier run that matched and runs the rest.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

SIZES = [1024 * 4 ** k for k in range(11)]  # 1 KiB .. 1 GiB
SPLIT = 16 << 20  # small: up to 16 MiB
SMALL_ITERS, LARGE_ITERS = 20, 5
# Compute kernels run on the host (`numeric.opaque_output` over every byte they read): a protocol
# with them runs once at the largest size, where one iteration takes most of a minute.
HOST_BOUND_ITERS, HOST_BOUND_FROM = 1, 1 << 30
JOB_TIMEOUT_S = {"small": 180, "large": 420, "host": 420}
FIRST_GUESS_S = {"small": 40, "large": 120, "host": 150}  # before a job of that kind has been timed
RANKS = 2


def size_text(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def _run(command: list[str], timeout: float = 60) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return (done.stdout + done.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({' '.join(command)}: {exc})"


def machine() -> dict:
    """What the results were measured on."""
    facts = {"gpus": _run(["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total",
                           "--format=csv,noheader"]).splitlines(),
             "topology": _run(["nvidia-smi", "topo", "-m"]).splitlines()[:4],
             "python": platform.python_version(), "cpus": os.cpu_count(),
             "multicast": {name: os.environ.get(name) for name in
                           ("NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS", "TORCH_SYMM_MEM_DISABLE_MULTICAST")}}
    try:
        import cupy
        from cupy.cuda import nccl

        code = nccl.get_version()
        facts["nccl"] = f"{code // 10000}.{code // 100 % 100}.{code % 100}"
        facts["cupy"] = cupy.__version__
        facts["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
    except Exception as exc:  # noqa: BLE001 (recorded, not fatal)
        facts["nccl"] = f"unknown ({type(exc).__name__}: {exc})"
    from clockworks_dist.runtime import launch

    try:
        mpiexec = launch.find_mpiexec()
        facts["mpiexec"] = _run([mpiexec, "--version"]).splitlines()[0]
        facts["mpi_flavor"] = launch.flavor(mpiexec)
    except Exception as exc:  # noqa: BLE001
        facts["mpiexec"] = str(exc)
    return facts


def protocols() -> tuple[list[tuple[str, tuple, bool]], list[dict]]:
    """(protocol file, busbw factor, whether it has compute kernels) of those the backend runs; and
    the skipped ones with why."""
    import clockworks_dist as cw
    from clockworks_dist.runtime import select
    from clockworks_dist.perf.predict import busbw_factor
    from clockworks_dist.runtime.cupy_nccl import CUPY

    runs, skipped = [], []
    for path in sorted(glob.glob(os.path.join(ROOT, "protocols", "*.py"))):
        name = os.path.basename(path)
        for defn in cw.load_file(path):
            sched = defn.trace(RANKS)
            try:
                select.supported(CUPY, sched)
            except select.BackendError as exc:
                skipped.append({"protocol": name, "schedule": defn.name, "reason": str(exc)})
                continue
            host_bound = any(op.kind == "compute" for program in sched.programs for op in program.ops)
            runs.append((name, busbw_factor(sched), host_bound))
    return runs, skipped


def run_job(protocol: str, sizes: list[int], iters: int, timeout: float, log) -> tuple[list[dict], float]:
    """One `clockworks run` of `protocol` at `sizes`; a record per size."""
    command = [sys.executable, "-m", "clockworks_dist.cli", "run", os.path.join("protocols", protocol), "--backend",
               "cupy", "--np", str(RANKS), "--sizes", ",".join(map(str, sizes)), "--iters", str(iters),
               "--timeout", f"{timeout:.0f}", "--json"]
    started = time.monotonic()
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout + 30, cwd=ROOT,
                              stdin=subprocess.DEVNULL)
        out, err, code = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        out, err, code = "", f"clockworks run did not end within {timeout + 30:.0f} s: {exc}", None
    seconds = time.monotonic() - started
    log.write(f"exit {code} after {seconds:.1f} s\n{err[-3000:]}\n")
    log.flush()
    try:
        summary = json.loads(out)
    except json.JSONDecodeError:
        summary = {"results": [], "error": {"message": (err.strip().splitlines() or ["no output"])[-1]}}
    by_size = {r.get("bytes"): r for r in summary.get("results", [])}
    for result in by_size.values():
        if (result["verdict"] == "hang" and "in the setup" in result["message"]
                and "waiting for" not in result["message"]):
            result["message"] = (f"not finished within the job's {timeout:.0f} s: every rank was still setting up "
                                 "(computing the checker's values on the host, or filling its buffers): "
                                 + result["message"])
    records = []
    for nbytes in sizes:
        result = by_size.get(nbytes)
        if result is None:
            why = summary.get("error", {}).get("message") or f"no result (exit {code})"
            records.append({"protocol": protocol, "bytes": nbytes, "verdict": "not run", "message": why})
            continue
        timing = result.get("time") or {}
        checked = sum(line.get("compare", {}).get("checked", 0) for line in result.get("ranks", []))
        records.append({"protocol": protocol, "schedule": result["schedule"], "bytes": nbytes,
                        "verdict": result["verdict"], "message": result["message"][:600],
                        "iterations": timing.get("iterations"), "median_us": timing.get("median_us"),
                        "min_us": timing.get("min_us"), "max_us": timing.get("max_us"),
                        "elements_checked": checked})
    return records, seconds


def with_bandwidth(record: dict, factor: float) -> dict:
    median = record.get("median_us")
    if median:
        record["algbw_GBs"] = round(record["bytes"] / median / 1e3, 3)
        record["busbw_GBs"] = round(record["algbw_GBs"] * factor, 3)
    return record


def render(report: dict) -> str:
    """The Markdown table of a report."""
    facts = report["machine"]
    lines = ["# `clockworks run --backend cupy` on 2 x H200", "",
             "Every protocol of `protocols/*.py` that the cupy backend runs, at 2 ranks (one GPU each), "
             "1 KiB to 1 GiB per rank (the main buffer's bytes, as `clockworks predict` counts them). "
             "Every element of every iteration is compared with the checker's values, bit for bit. Time: "
             "CUDA events around the ops of one iteration on each rank, the slowest rank per iteration; "
             "median, min and max over the iterations (the first includes CuPy's kernel compilation). "
             "The host issues every op (no CUDA graph), so small sizes measure issue rate and Python. "
             "algbw = bytes per rank / median time; busbw = algbw x nccl-tests' factor for the "
             "postcondition (all-reduce 2(n-1)/n, all-gather, reduce-scatter and all-to-all (n-1)/n, "
             "else 1). Compute kernels (pipeline_1f1b) run on the host (`numeric.opaque_output`), so "
             "their time is host time.", "",
             "```sh", report["command"], "```", "",
             "Machine: " + "; ".join(facts.get("gpus", [])) + f". NCCL {facts.get('nccl')}, CuPy "
             f"{facts.get('cupy')}, CUDA runtime {facts.get('cuda_runtime')}, {facts.get('mpiexec')}, Python "
             f"{facts.get('python')}, {facts.get('cpus')} CPUs. NVLink multicast off: "
             + ", ".join(f"{k}={v}" for k, v in facts.get("multicast", {}).items()) + ".", ""]
    if facts.get("topology"):
        lines += ["```", *(re.sub(r"\x1b\[[0-9;]*m", "", line).rstrip() for line in facts["topology"]), "```", ""]
    for note in report.get("notes", []):
        lines += [note, ""]
    lines += ["| protocol | bytes per rank | verdict | median us | min us | max us | algbw GB/s | busbw GB/s | "
              "iterations | elements checked (both ranks, every iteration) |",
              "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in report["results"]:
        cells = [r["protocol"].removesuffix(".py"), size_text(r["bytes"]), r["verdict"]]
        if r.get("median_us") is not None:
            cells += [f"{r['median_us']:,.1f}", f"{r['min_us']:,.1f}", f"{r['max_us']:,.1f}",
                      f"{r.get('algbw_GBs', 0):,.2f}", f"{r.get('busbw_GBs', 0):,.2f}", str(r["iterations"]),
                      f"{r.get('elements_checked', 0):,}"]
        else:
            cells += ["", "", "", "", "", "", ""]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [r for r in report["results"] if r["verdict"] != "match"]
    if notes:
        lines += ["", "Not matched or not run:", ""]
        lines += [f"- {r['protocol']} at {size_text(r['bytes'])}: {r['message']}" for r in notes]
    if report.get("skipped"):
        lines += ["", "Skipped (the cupy backend does not run them):", ""]
        lines += [f"- {s['protocol']}: {s['reason']}" for s in report["skipped"]]
    return "\n".join(lines) + "\n"


def write(report: dict, out: str) -> None:
    with open(os.path.join(out, "cupy_run.json"), "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1)
        handle.write("\n")
    with open(os.path.join(out, "cupy_run.md"), "w", encoding="utf-8") as handle:
        handle.write(render(report))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="folder for cupy_run.json and cupy_run.md")
    parser.add_argument("--deadline", type=float, help="a time.time() after which no job starts that would not end")
    parser.add_argument("--resume", help="an earlier cupy_run.json: keep its matching records")
    parser.add_argument("--render", help="only write the .md next to this .json")
    args = parser.parse_args()
    if args.render:
        with open(args.render, encoding="utf-8") as handle:
            report = json.load(handle)
        with open(args.render.removesuffix(".json") + ".md", "w", encoding="utf-8") as handle:
            handle.write(render(report))
        return 0
    os.makedirs(args.out, exist_ok=True)
    earlier = {}
    if args.resume and os.path.exists(args.resume):
        with open(args.resume, encoding="utf-8") as handle:
            earlier = {(r["protocol"], r["bytes"]): r for r in json.load(handle)["results"] if r["verdict"] == "match"}
    runs, skipped = protocols()
    small = [s for s in SIZES if s <= SPLIT]
    large = [s for s in SIZES if s > SPLIT]
    report = {"machine": machine(), "skipped": skipped, "results": [],
              "command": f"clockworks run protocols/PROTOCOL.py --backend cupy --np {RANKS} --sizes "
                         f"{','.join(map(str, small))} --iters {SMALL_ITERS} --json   # and --sizes "
                         f"{','.join(map(str, large))} --iters {LARGE_ITERS} (--iters {HOST_BOUND_ITERS} from "
                         f"{size_text(HOST_BOUND_FROM)} for a protocol with compute kernels)"}
    results = {key: record for key, record in earlier.items()}
    took: dict[str, float] = {}
    log = open(os.path.join(args.out, "sweep.log"), "a", encoding="utf-8")  # noqa: SIM115
    jobs = []  # (kind, protocol, factor, sizes, iters): small sizes first, host-bound largest sizes last
    for kind, sizes in (("small", small), ("large", large)):
        for protocol, (factor, _label), host_bound in runs:
            todo = [s for s in sizes if (protocol, s) not in earlier]
            once = [s for s in todo if host_bound and s >= HOST_BOUND_FROM]
            rest = [s for s in todo if s not in once]
            if rest:
                jobs.append((kind, protocol, factor, rest, SMALL_ITERS if kind == "small" else LARGE_ITERS))
            if once:
                jobs.append(("host", protocol, factor, once, HOST_BOUND_ITERS))
    jobs.sort(key=lambda job: ("small", "large", "host").index(job[0]))
    for kind, protocol, factor, todo, iters in jobs:
        guess = took.get(kind, FIRST_GUESS_S[kind])
        left = None if args.deadline is None else args.deadline - time.time()
        if left is not None and left < guess:
            for nbytes in todo:
                results[(protocol, nbytes)] = {"protocol": protocol, "bytes": nbytes, "verdict": "not run",
                                               "message": f"not run: the call's time ran out ({left:.0f} s left, "
                                                          f"a {kind} job takes about {guess:.0f} s)"}
            continue
        timeout = JOB_TIMEOUT_S[kind] if left is None else min(JOB_TIMEOUT_S[kind], left - 5)
        records, seconds = run_job(protocol, todo, iters, timeout, log)
        took[kind] = max(took.get(kind, 0.0), seconds * 1.2)
        for record in records:
            results[(protocol, record["bytes"])] = with_bandwidth(record, factor)
        report["results"] = sorted(results.values(), key=lambda r: (r["protocol"], r["bytes"]))
        write(report, args.out)
        print(f"{protocol} {kind}: {seconds:.1f} s, "
              + ", ".join(f"{size_text(r['bytes'])} {r['verdict']}" for r in records), flush=True)
    report["results"] = sorted(results.values(), key=lambda r: (r["protocol"], r["bytes"]))
    write(report, args.out)
    log.close()
    return 0 if all(r["verdict"] == "match" for r in report["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
