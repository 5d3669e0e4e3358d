#!/usr/bin/env python3
"""Predicted against measured scaling: the generated programs at 2 and at 4 ranks on one machine.

    python scripts/bench_scaling.py [--results results/h200x4/scaling] [--out results/h200x4/scaling]

Reads what `clockworks validate` measured on the 4 x H200 NVSwitch node at 4 ranks (np4/) and on two of
its GPUs (np2/) (scripts/gpu/machine_h200x4.sh; four protocols' 2-rank cells on a 2 x H200 kind,
scripts/gpu/scaling_np2.sh: every output checked bit for bit, CUDA graph, median
of the timed replays of the slowest rank) and predicts every cell the way validate predicts it
(`perf.program.program_us`: the generated program's model, lowered as validate built it), before
renting: the machine's topology is the one `topology detect` wrote there (h200x4-nvswitch.yaml),
and its constants are the library's fitted with this machine left out (scripts/results/
bench_transfer.json: the NCCL constants fitted on the other machines; the NVSHMEM and generated
programs' constants come from 2 x H200 alone). The library's constants fitted on every machine are
scored too.

Writes OUT/scaling.md, OUT/scaling.json and one plot per protocol (OUT/<protocol>.png: time against
ranks at each size, measured and predicted).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clockworks_dist.dsl import params  # noqa: E402
from clockworks_dist.lowering import lower  # noqa: E402
from clockworks_dist.perf.fit import with_values  # noqa: E402
from clockworks_dist.perf.program import program_us  # noqa: E402
from clockworks_dist.runtime import validate  # noqa: E402
from clockworks_dist.topology import load_topology  # noqa: E402

MACHINE = "h200x4-nvswitch"


def left_out_constants(topo):
    """The topology's constants with the NCCL ones fitted with this machine left out."""
    report = json.loads((ROOT / "scripts" / "results" / "bench_transfer.json").read_text())
    return with_values(topo.constants, report["left_out"][MACHINE]["constants"])


def rows_of(results: Path, topo, consts_by_label: dict) -> list[dict]:
    rows = []
    for path in sorted(results.glob("np*/*/results.json")):
        report = json.loads(path.read_text())
        cells = sorted((c for c in report["cells"] if c.get("verdict") == "match"), key=lambda c: c["bytes"])
        with params.bind(report.get("params") or {}):
            schedules, _ = validate.load_schedules(report["file"], report["ranks"], [c["bytes"] for c in cells],
                                                   report["schedule"], None)
        build = validate.build_of(report)
        for sched, cell in zip(schedules, cells):
            program = lower(sched, build)
            row = {"protocol": report["schedule"], "backend": report["backend"], "ranks": report["ranks"],
                   "bytes": cell["bytes"], "measured_us": cell["graph"]["median_us"],
                   "nccl_us": (cell.get("nccl") or {}).get("graph_us")}
            for label, consts in consts_by_label.items():
                row[f"{label}_us"] = round(program_us(program, topo, "graph", consts, build.calls), 2)
            rows.append(row)
    return rows


def size(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 else f"{n // 1024} KiB"


def error(row: dict, label: str) -> float:
    return (row[f"{label}_us"] / row["measured_us"] - 1) * 100


def plot(rows: list[dict], out: Path) -> list[str]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    for (protocol, backend) in sorted({(r["protocol"], r["backend"]) for r in rows}):
        mine = [r for r in rows if r["protocol"] == protocol and r["backend"] == backend]
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for i, nbytes in enumerate(sorted({r["bytes"] for r in mine})):
            at = sorted((r for r in mine if r["bytes"] == nbytes), key=lambda r: r["ranks"])
            ranks = [r["ranks"] for r in at]
            color = f"C{i}"
            ax.plot(ranks, [r["measured_us"] for r in at], "o-", color=color, label=f"{size(nbytes)} measured")
            ax.plot(ranks, [r["left_out_us"] for r in at], "x--", color=color, label=f"{size(nbytes)} predicted")
        ax.set_xlabel("ranks (GPUs of one 4 x H200 NVSwitch node)")
        ax.set_ylabel("us per call (CUDA graph)")
        ax.set_yscale("log")
        ax.set_xticks([2, 4])
        ax.set_title(f"{protocol} ({backend})", fontsize=10)
        ax.legend(fontsize=7)
        fig.tight_layout()
        name = f"{protocol}_{backend}.png"
        fig.savefig(out / name, dpi=90)
        plt.close(fig)
        written.append(name)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(ROOT / "results" / "h200x4" / "scaling"))
    parser.add_argument("--out", default=str(ROOT / "results" / "h200x4" / "scaling"))
    args = parser.parse_args()
    topo = load_topology(f"{MACHINE}.yaml")  # the detected description: the library's constants
    labels = {"left_out": left_out_constants(topo), "library": topo.constants}
    rows = rows_of(Path(args.results), topo, labels)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    md = ["# Predicted against measured scaling, 2 to 4 GPUs (4 x H200 NVSwitch node)", "",
          "Written by `python scripts/bench_scaling.py`. Measured: `clockworks validate` on the node "
          "(scripts/gpu/machine_h200x4.sh, 2026-11-28): the generated program, every output checked bit for bit "
          "against the checker, CUDA graph, median of 10 timed replays, slowest rank; 2 ranks on GPUs 0-1 of the "
          "same node, except ring_allgather, ring_reduce_scatter, hierarchical_allreduce and "
          "halving_doubling_allreduce, measured at 2 ranks on a lent 2 x H200 kind (two GPUs of an NVSwitch node "
          "as NVML reports it; scripts/gpu/scaling_np2.sh). Predicted: validate's own prediction of the "
          "generated program, with the topology "
          "`topology detect` wrote on the node and the library's constants fitted with this machine left out "
          "(`left out`; the NVSHMEM and generated-program constants come from 2 x H200 alone), and fitted on "
          "every machine (`library`). NCCL: NCCL's own collective of the same size in the same run.", "",
          "| protocol | backend | size | 2 ranks: measured | predicted | error | 4 ranks: measured | predicted | "
          "error | 4/2 measured | 4/2 predicted | NCCL at 4 |",
          "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for (protocol, backend) in sorted({(r["protocol"], r["backend"]) for r in rows}):
        for nbytes in sorted({r["bytes"] for r in rows if r["protocol"] == protocol}):
            at = {r["ranks"]: r for r in rows if r["protocol"] == protocol and r["backend"] == backend
                  and r["bytes"] == nbytes}
            cells = []
            for ranks in (2, 4):
                r = at.get(ranks)
                cells += ([f"{r['measured_us']:,.1f}", f"{r['left_out_us']:,.1f}", f"{error(r, 'left_out'):+.1f}%"]
                          if r else ["-", "-", "-"])
            if 2 in at and 4 in at:
                cells += [f"{at[4]['measured_us'] / at[2]['measured_us']:.2f}",
                          f"{at[4]['left_out_us'] / at[2]['left_out_us']:.2f}"]
            else:
                cells += ["-", "-"]
            nccl = at.get(4, {}).get("nccl_us")
            md.append(f"| {protocol} | {backend} | {size(nbytes)} | " + " | ".join(cells)
                      + (f" | {nccl:,.1f} |" if nccl else " | - |"))
    summary = {}
    for label in labels:
        for ranks in (2, 4):
            errs = sorted(abs(error(r, label)) for r in rows if r["ranks"] == ranks)
            if errs:
                summary[f"{label}_{ranks}"] = {"cells": len(errs), "median_pct": round(statistics.median(errs), 1),
                                               "max_pct": round(errs[-1], 1)}
    md += ["", "| constants | ranks | cells | median |error| | max |error| |", "| --- | ---: | ---: | ---: | ---: |"]
    for key, s in summary.items():
        label, ranks = key.rsplit("_", 1)
        md.append(f"| {label.replace('_', ' ')} | {ranks} | {s['cells']} | {s['median_pct']}% | {s['max_pct']}% |")
    pictures = plot(rows, out)
    md += ["", "Plots: " + ", ".join(f"[{p[:-4]}]({p})" for p in pictures), ""]
    (out / "scaling.md").write_text("\n".join(md))
    (out / "scaling.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
