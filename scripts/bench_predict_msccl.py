"""Predicted times of the MSCCL corpus's all-reduce algorithms, and of the MSCCL++ corpus's all-reduce
plans, beside NCCL's own all-reduce, on the shipped 8-GPU DGX files. These are predictions of the model,
not measurements: no GPU ran them.

Each algorithm of corpus/msccl/ whose collective is allreduce is imported (`importers.msccl`) and
predicted as `clockworks predict FILE.xml -t TOPOLOGY --sizes ...` does (its thread blocks timed
concurrently, every step priced with the file's protocol on one channel); NCCL's all-reduce on the
same topology and world is predicted with NCCL's own choice of algorithm, protocol and channels
(`perf.microbench.allreduce_op`). Each MSCCL++ plan of corpus/mscclpp/ whose collective is allreduce
is predicted the same way (`importers.mscclpp`, the same `importers.imported` path: the message size
sets the plan's chunk; puts, gets and packets priced as its `priced as:` line says). A file that cannot
be predicted gets its reason.

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
from clockworks_dist.perf.microbench import MICROBENCHMARKS
from clockworks_dist.perf.predict import imported_conditions, parse_sizes, predict_sizes
from clockworks_dist.topology import load_topology

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus" / "msccl"
PLANS = ROOT / "corpus" / "mscclpp"
OUT = ROOT / "scripts" / "results"
TOPOLOGIES = ("dgx-h100", "dgx-h200")
# whole numbers of chunks for every all-reduce file (8, 24 and 64 chunks of float32; the plans' 2, 4, 8,
# 16 and 32)
SIZES = "96KiB,1536KiB,24MiB"


def blocks_of(defn) -> tuple[int, int]:
    """(GPUs, thread blocks in all) of an imported MSCCL file or MSCCL++ plan."""
    if hasattr(defn, "alg"):
        return defn.alg.ngpus, sum(len(g.tbs) for g in defn.alg.gpus)
    gpus = defn.plan.top["gpus"]
    return len(gpus), sum(len(g.get("threadblocks", [])) for g in gpus)


def rows_for(path: Path, topo, sizes: list[int]) -> list[dict]:
    defn = load_file(str(path))[0]
    gpus, blocks = blocks_of(defn)
    base = {"file": path.name, "topology": topo.name, "gpus": gpus, "proto": defn.protocol,
            "thread_blocks": blocks, "max_bytes": None}
    try:
        started = time.perf_counter()
        found = predict_sizes(defn, topo, gpus, sizes, conditions=imported_conditions(defn))
        seconds = time.perf_counter() - started
    except ClockworksError as exc:
        return [{**base, "bytes": n, "error": str(exc).split(" (run ")[0]} for n in sizes]
    nccl = predict_sizes(MICROBENCHMARKS["allreduce"], topo, gpus, sizes)
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
        "# MSCCL all-reduce algorithms and MSCCL++ all-reduce plans against NCCL's all-reduce: predicted, not "
        "measured", "",
        f"`python scripts/bench_predict_msccl.py` at commit {commit}. Every number below is the model's prediction "
        "on the shipped, uncalibrated topology files (datasheet links, the library's constants); no GPU ran "
        "any of them. The MSCCL files are priced as `clockworks predict` says (`priced as:`): each step's "
        "send and recv as an NCCL send/recv with the file's protocol on one channel (its thread block), one "
        "kernel per GPU, dependency flags as NVSHMEM signals, and the whole message in one pass (MSCCL's "
        "runtime loops over a large message in pieces, which overlaps the steps of one piece with the next; "
        "the model does not, so it is pessimistic past the sizes a file was written for). NCCL's all-reduce "
        "is predicted with the algorithm, protocol and channels NCCL itself picks (`nccl plan`). The two "
        "topology files have the same NVLink fabric and constants and differ in HBM; their rows came out "
        "the same (no cell here is bound by HBM). The MSCCL++ plans (the .json rows) are predicted through the "
        "same path: the message size sets the plan's chunk (bytes per rank of its input, which the executor "
        "divides into the plan's chunks), each memory-channel put or get is an NVSHMEM transfer by one thread "
        "block, each LL packet write the packet path (twice the bytes, no fence), signals NVSHMEM signals, one "
        "kernel per GPU; 2-GPU plans run on two GPUs of the 8-GPU topology, against NCCL on 2 GPUs.", "",
        "| file | GPUs | proto | blocks | topology | bytes per rank | file's (us) | busbw | NCCL (us) | busbw | "
        "NCCL plan | file / NCCL |",
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
    files += [p for p in sorted(PLANS.glob("*.json")) if json.loads(p.read_text()).get("collective") == "allreduce"]
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
