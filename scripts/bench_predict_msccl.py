"""Predicted times of the MSCCL corpus's all-reduce algorithms beside NCCL's own all-reduce, on the
shipped 8-GPU DGX files. These are predictions of the model, not measurements: no GPU ran them.

Each algorithm of corpus/msccl/ whose collective is allreduce is imported (`importers.msccl`) and
predicted as `clockworks predict FILE.xml -t TOPOLOGY --sizes ...` does (its thread blocks timed
concurrently, every step priced with the file's protocol on one channel); NCCL's all-reduce on the
same topology and world is predicted with NCCL's own choice of algorithm, protocol and channels
(`perf.microbench.allreduce_op`). A file that cannot be predicted gets its reason.

Writes scripts/results/bench_predict_msccl.md (and .json).

    python scripts/bench_predict_msccl.py [--sizes 96KiB,1536KiB,24MiB]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from pathlib import Path

from clockworks_dist import load_file
from clockworks_dist.errors import ClockworksError
from clockworks_dist.perf.costs import RunConditions
from clockworks_dist.perf.microbench import MICROBENCHMARKS
from clockworks_dist.perf.predict import parse_sizes, predict_sizes
from clockworks_dist.topology import load_topology

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus" / "msccl"
OUT = ROOT / "scripts" / "results"
TOPOLOGIES = ("dgx-h100", "dgx-h200")
# whole numbers of chunks for every all-reduce file (8, 24 and 64 chunks of float32)
SIZES = "96KiB,1536KiB,24MiB"


def rows_for(path: Path, topo, sizes: list[int]) -> list[dict]:
    defn = load_file(str(path))[0]
    alg = defn.alg
    base = {"file": path.name, "topology": topo.name, "gpus": alg.ngpus, "proto": alg.proto,
            "thread_blocks": sum(len(g.tbs) for g in alg.gpus), "max_bytes": None}
    try:
        started = time.perf_counter()
        found = predict_sizes(defn, topo, alg.ngpus, sizes, conditions=RunConditions(protocol=alg.proto))
        seconds = time.perf_counter() - started
    except ClockworksError as exc:
        return [{**base, "bytes": n, "error": str(exc).split(" (run ")[0]} for n in sizes]
    nccl = predict_sizes(MICROBENCHMARKS["allreduce"], topo, alg.ngpus, sizes)
    out = []
    for mine, theirs in zip(found, nccl):
        protocol = next(iter({p.protocol for _, p in theirs.timeline.plans}), "")
        algorithm = next(iter({p.algorithm for _, p in theirs.timeline.plans}), "")
        out.append({**base, "bytes": mine.nbytes, "msccl_us": round(mine.time_us, 2),
                    "msccl_busbw_GBs": round(mine.busbw_GBs, 1), "nccl_us": round(theirs.time_us, 2),
                    "nccl_busbw_GBs": round(theirs.busbw_GBs, 1), "nccl_plan": f"{algorithm} {protocol}",
                    "ratio": round(mine.time_us / theirs.time_us, 2), "simulate_s": round(seconds / len(sizes), 2)})
    return out


def size_text(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def render(rows: list[dict], commit: str) -> str:
    lines = [
        "# MSCCL all-reduce algorithms against NCCL's all-reduce: predicted, not measured", "",
        f"`python scripts/bench_predict_msccl.py` at commit {commit}. Every number below is the model's prediction "
        "on the shipped, uncalibrated topology files (datasheet links, the library's constants); no GPU ran "
        "any of them. The MSCCL files are priced as `clockworks predict` says (`priced as:`): each step's "
        "send and recv as an NCCL send/recv with the file's protocol on one channel (its thread block), one "
        "kernel per GPU, dependency flags as NVSHMEM signals, and the whole message in one pass (MSCCL's "
        "runtime loops over a large message in pieces, which overlaps the steps of one piece with the next; "
        "the model does not, so it is pessimistic past the sizes a file was written for). NCCL's all-reduce "
        "is predicted with the algorithm, protocol and channels NCCL itself picks (`nccl plan`). The two "
        "topology files have the same NVLink fabric and constants and differ in HBM; their rows came out "
        "the same (no cell here is bound by HBM).", "",
        "| file | GPUs | proto | blocks | topology | bytes per rank | MSCCL (us) | busbw | NCCL (us) | busbw | "
        "NCCL plan | MSCCL / NCCL |",
        "| --- | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    refused = set()
    for r in rows:
        if "error" in r:
            if (r["file"], r["topology"]) not in refused:  # one row for the file on each topology
                refused.add((r["file"], r["topology"]))
                lines.append(f"| {r['file']} | {r['gpus']} | {r['proto']} | {r['thread_blocks']} | {r['topology']} | "
                             f"any | not predicted: {r['error']} | | | | | |")
            continue
        lines.append(f"| {r['file']} | {r['gpus']} | {r['proto']} | {r['thread_blocks']} | {r['topology']} | "
                     f"{size_text(r['bytes'])} | {r['msccl_us']:,.2f} | {r['msccl_busbw_GBs']} | {r['nccl_us']:,.2f} | "
                     f"{r['nccl_busbw_GBs']} | {r['nccl_plan']} | {r['ratio']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=SIZES, help=f"bytes per rank (default {SIZES})")
    args = parser.parse_args()
    sizes = parse_sizes(args.sizes)
    files = [p for p in sorted(CORPUS.glob("*.xml")) if load_file(str(p))[0].alg.coll == "allreduce"]
    rows = []
    for name in TOPOLOGIES:
        topo = load_topology(name)
        for path in files:
            rows += rows_for(path, topo, sizes)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    (OUT / "bench_predict_msccl.json").write_text(json.dumps(
        {"python": platform.python_version(), "commit": commit, "sizes": sizes, "rows": rows}, indent=1) + "\n")
    (OUT / "bench_predict_msccl.md").write_text(render(rows, commit))
    print(render(rows, commit))


if __name__ == "__main__":
    main()
