#!/usr/bin/env python3
"""The NVSHMEM backend's direct peer copy against NVSHMEM's own block calls, side by side on GPUs.

    python scripts/bench_nvshmem_copies.py --out DIR [--rounds 3] [--iters 20]

On a machine with 2 GPUs (run from the repository root, NVLink multicast off). For each case below
it generates and builds the program once (`clockworks validate --launcher slurm`, then
`python -m clockworks_dist.codegen.validate build`), then runs the same binary under mpirun in
alternating rounds: without a flag (puts and gets to a load/store-reachable PE move their data with
the generated unrolled 16-byte copy) and with `--library-copies` (NVSHMEM's `nvshmemx_putmem_block`
/ `getmem_block`, the same stores one 16-byte element per thread at a time). Every run checks every
element against the checker's values. Time: the slowest rank per CUDA-graph replay, median over the
runs of each round, then the median over rounds. Writes DIR/bench_nvshmem_copies.{json,md}.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from clockworks_dist.runtime import launch  # noqa: E402

MiB = 1 << 20
CASES = [  # (label, file, --param values, sizes in bytes per rank)
    ("put", "protocols/nvshmem_put_bandwidth.py", [], [MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1024 * MiB]),
    ("allreduce oneshot", "protocols/nvshmem_allreduce_family.py", ["ALGO=oneshot"], [MiB, 64 * MiB, 1024 * MiB]),
    ("allreduce twoshot", "protocols/nvshmem_allreduce_family.py", ["ALGO=twoshot"], [MiB, 64 * MiB, 1024 * MiB]),
]


def prepare(label: str, path: str, params: list[str], sizes: list[int], out: str) -> str:
    folder = os.path.join(out, "build_" + label.replace(" ", "_"))
    command = [sys.executable, "-m", "clockworks_dist.cli", "validate", path, "--np", "2", "--backend", "nvshmem",
               "--launcher", "slurm", "--no-nccl", "--out", folder, "--sizes", ",".join(map(str, sizes))]
    for value in params:
        command += ["--param", value]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=300)
    subprocess.run([sys.executable, "-m", "clockworks_dist.codegen.validate", "build", folder], check=True,
                   stdout=subprocess.DEVNULL, timeout=600)
    return folder


def run_once(binary: str, job: str, library: bool, iters: int, timeout: float) -> dict:
    for stale in glob.glob(os.path.join(job, "rank*.jsonl")) + glob.glob(os.path.join(job, "dump*.bin")):
        os.remove(stale)
    argv = [binary, "--job", job, "--iters", str(iters), "--warmup", "3", "--timeout", str(int(timeout))]
    if library:
        argv.append("--library-copies")
    mpiexec = launch.find_mpiexec()
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    from clockworks_dist.calibrate import runner

    command = runner.mpirun_command(mpiexec, launch.flavor(mpiexec), 2, argv, list(launch.NO_MULTICAST), as_root)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout + 60)
        code = done.returncode
    except subprocess.TimeoutExpired:
        code = None
    lines = []
    for rank in range(2):
        path = os.path.join(job, f"rank{rank}.jsonl")
        if os.path.exists(path):
            lines += [json.loads(line) for line in open(path) if line.strip()]
    statuses = sorted({line.get("status") for line in lines}) or ["none"]
    result = {"exit": code, "status": "/".join(statuses)}
    if len(lines) == 2 and all(line.get("graph_seconds") for line in lines):
        per_run = [max(a, b) * 1e6 for a, b in zip(lines[0]["graph_seconds"], lines[1]["graph_seconds"])]
        result["graph_us"] = statistics.median(per_run)
        result["spread"] = (max(per_run) - min(per_run)) / result["graph_us"]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--deadline", type=float, default=None, help="a time.time() after which no run starts")
    args = parser.parse_args()
    os.environ.update(launch.NO_MULTICAST)  # NVLink multicast off here and (mpirun -x) in every rank
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for label, path, params, sizes in CASES:
        folder = prepare(label, path, params, sizes, args.out)
        for nbytes in sizes:
            binary = [f for f in glob.glob(os.path.join(folder, "build", str(nbytes), "*"))
                      if os.access(f, os.X_OK) and not f.endswith(".cu")][0]
            job = os.path.join(folder, "runs", str(nbytes))
            found = {"direct": [], "library": []}
            for _ in range(args.rounds):
                for mode in ("direct", "library"):
                    if args.deadline and time.time() > args.deadline:
                        break
                    found[mode].append(run_once(binary, job, mode == "library", args.iters, 60))
            row = {"case": label, "bytes": nbytes, "runs": found}
            for mode, results in found.items():
                times = [r["graph_us"] for r in results if "graph_us" in r]
                row[f"{mode}_us"] = statistics.median(times) if times else None
                row[f"{mode}_status"] = sorted({r["status"] for r in results})
            if row["direct_us"] and row["library_us"]:
                row["library_over_direct"] = row["library_us"] / row["direct_us"]
            if label == "put" and row["direct_us"]:
                row["direct_GBs"] = nbytes / row["direct_us"] / 1e3
                row["library_GBs"] = nbytes / row["library_us"] / 1e3 if row["library_us"] else None
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "runs"}), flush=True)
            with open(os.path.join(args.out, "bench_nvshmem_copies.json"), "w") as handle:
                json.dump({"rounds": args.rounds, "iters": args.iters, "rows": rows}, handle, indent=1)
    write_markdown(rows, args)
    return 0


def write_markdown(rows: list[dict], args) -> None:
    def us(v):
        return "-" if v is None else f"{v:,.1f}"

    lines = ["# NVSHMEM backend: direct peer copy vs NVSHMEM's block calls (2 x H200, CUDA graph)", "",
             f"`python scripts/bench_nvshmem_copies.py` ({args.rounds} alternating rounds per mode, {args.iters} "
             "graph replays each; the slowest rank per replay, median per round, median over rounds; every run "
             "checked element by element). Same binary; `--library-copies` switches the copies to "
             "`nvshmemx_putmem_block`.", "",
             "| case | bytes per rank | direct us | library us | library / direct | direct GB/s | library GB/s "
             "| result |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for row in rows:
        gbs = (f"{row['direct_GBs']:.0f}" if row.get("direct_GBs") else "-",
               f"{row['library_GBs']:.0f}" if row.get("library_GBs") else "-")
        ratio = f"{row['library_over_direct']:.2f}x" if row.get("library_over_direct") else "-"
        status = ", ".join(sorted(set(row["direct_status"]) | set(row["library_status"])))
        lines.append(f"| {row['case']} | {row['bytes']:,} | {us(row['direct_us'])} | {us(row['library_us'])} | "
                     f"{ratio} | {gbs[0]} | {gbs[1]} | {status} |")
    with open(os.path.join(args.out, "bench_nvshmem_copies.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
