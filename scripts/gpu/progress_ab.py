#!/usr/bin/env python3
"""Where NVSHMEM kernels write their progress words, measured side by side (2 GPUs, repository root).

    python3 scripts/gpu/progress_ab.py --out DIR

Builds the all-reduce family at 20 back-to-back calls per run (one-shot with a sync between calls,
two-shot with nothing between: what the checker verifies) at 8 KiB and 1 MiB, then runs each binary
in alternating rounds: progress words in GPU memory (the default) and with --host-progress (host-mapped
words, as before). Every run checks every element. Time per call: the slowest rank per CUDA-graph
replay / 20, median per round, median over rounds. Writes DIR/progress_ab.json and .md.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.getcwd())

from clockworks_dist.calibrate import runner  # noqa: E402
from clockworks_dist.runtime import launch  # noqa: E402

CALLS = 20
CASES = [("oneshot", "sync"), ("twoshot", "none")]
SIZES = [8192, 1 << 20]


def prepare(algo: str, between: str, out: str) -> str:
    folder = os.path.join(out, f"build_{algo}_{between}")
    subprocess.run([sys.executable, "-m", "clockworks_dist.cli", "validate", "protocols/nvshmem_allreduce_family.py",
                    "--param", f"ALGO={algo}", "--np", "2", "--backend", "nvshmem", "--launcher", "slurm",
                    "--no-nccl", "--calls", str(CALLS), "--between", between, "--out", folder,
                    "--sizes", ",".join(map(str, SIZES))], check=True, stdout=subprocess.DEVNULL, timeout=300)
    return folder


def run_once(binary: str, job: str, host: bool) -> dict:
    for stale in glob.glob(os.path.join(job, "rank*.jsonl")):
        os.remove(stale)
    argv = [binary, "--job", job, "--iters", "10", "--warmup", "2", "--timeout", "30"] + (
        ["--host-progress"] if host else [])
    mpiexec = launch.find_mpiexec()
    command = runner.mpirun_command(mpiexec, launch.flavor(mpiexec), 2, argv, list(launch.NO_MULTICAST),
                                    os.geteuid() == 0)
    try:
        code = subprocess.run(command, capture_output=True, text=True, timeout=90).returncode
    except subprocess.TimeoutExpired:
        code = None
    lines = [json.loads(x) for r in range(2) if os.path.exists(os.path.join(job, f"rank{r}.jsonl"))
             for x in open(os.path.join(job, f"rank{r}.jsonl")) if x.strip()]
    out = {"exit": code, "status": sorted({x.get("status") for x in lines})}
    if len(lines) == 2 and all(x.get("graph_seconds") for x in lines):
        per = [max(a, b) * 1e6 / CALLS for a, b in zip(lines[0]["graph_seconds"], lines[1]["graph_seconds"])]
        out["us_per_call"] = statistics.median(per)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.update(launch.NO_MULTICAST)
    os.makedirs(args.out, exist_ok=True)
    folders = {case: prepare(*case, args.out) for case in CASES}
    jobs = [subprocess.Popen([sys.executable, "-m", "clockworks_dist.runtime.validate", "build", f])
            for f in folders.values()]
    if any(job.wait(timeout=400) for job in jobs):
        print("a build failed")
        return 2
    rows = []
    for (algo, between), folder in folders.items():
        for size in SIZES:
            binary = next(f for f in glob.glob(os.path.join(folder, "build", str(size), "*"))
                          if os.access(f, os.X_OK) and not f.endswith(".cu"))
            job = os.path.join(folder, "runs", str(size))
            found = {"gpu": [], "host": []}
            for _ in range(args.rounds):
                for mode in ("gpu", "host"):
                    found[mode].append(run_once(binary, job, mode == "host"))
            row = {"variant": f"ALGO={algo}, {between} between calls", "bytes": size, "runs": found}
            for mode, results in found.items():
                times = [r["us_per_call"] for r in results if "us_per_call" in r]
                row[f"{mode}_us"] = statistics.median(times) if times else None
                row[f"{mode}_status"] = sorted({s for r in results for s in r["status"]})
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "runs"}), flush=True)
    json.dump({"calls": CALLS, "rounds": args.rounds, "rows": rows}, open(os.path.join(args.out, "progress_ab.json"),
                                                                         "w"), indent=1)
    lines = ["| variant | bytes per rank | GPU-memory words, us per call | host-mapped words, us per call | host / GPU "
             "| result |", "| --- | ---: | ---: | ---: | ---: | --- |"]
    for row in rows:
        ratio = f"{row['host_us'] / row['gpu_us']:.2f}x" if row["gpu_us"] and row["host_us"] else "-"
        fmt = [f"{row[k]:.2f}" if row[k] else "-" for k in ("gpu_us", "host_us")]
        lines.append(f"| {row['variant']} | {row['bytes']:,} | {fmt[0]} | {fmt[1]} | {ratio} | "
                     f"{', '.join(sorted(set(row['gpu_status']) | set(row['host_status'])))} |")
    open(os.path.join(args.out, "progress_ab.md"), "w").write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
