"""Sum up `scripts/gpu/tune_all_h200x2.sh`'s results: per collective and size, the measured winner of
`clockworks tune`, its time and NCCL's in the same validate call, the predicted winner; a Markdown
table (summary.md) and a plot of both against the size (tune_all.png), in the results folder.

    python scripts/summarize_tune_all.py results/h200x2/tune_all
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from clockworks_dist.dsl.message import size_text

FAMILIES = (("allreduce_family", "all-reduce"), ("allgather_family", "all-gather"),
            ("reduce_scatter_family", "reduce-scatter"), ("alltoall_dispatch", "all-to-all"))


def rows(folder: Path) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for family, name in FAMILIES:
        for part in ("small", "large"):
            path = folder / family / part / "tune.json"
            if not path.exists():
                continue
            report = json.loads(path.read_text())
            for row in report["sizes"]:
                won = row.get("winner")
                found.setdefault(name, []).append({
                    "bytes": row["bytes"], "calls": report.get("calls") or 1,
                    "winner": won["label"] if won else None, "time_us": won["time_us"] if won else None,
                    "nccl_us": row.get("nccl_us"), "predicted": row["predicted_winner"]["label"]})
    return found


def markdown(found: dict[str, list[dict]]) -> str:
    lines = ["# clockworks tune on 2 x H200: the measured winner per size against NCCL", "",
             "CUDA graph, median of the timed runs, time per call; bit-exact against the checker's values. Up to",
             "1 MiB each run is 20 back-to-back calls **fused into one kernel per rank** (no launch between",
             "calls; the cheapest separator the checker verifies), from 16 MiB one call per run. These are",
             "tune's kernel figures, not a library call: no user call runs 20 calls in one kernel, and the",
             "library a user calls (`tune --emit`) launches a kernel per call (`scripts/gpu/dispatch_h200x2.sh`",
             "times it per call). NCCL's own collective was measured in the same validate call,",
             "one library call per launch.", "",
             "| collective | size | winner | us per call (fused up to 1 MiB) | NCCL us (library call) | NCCL / ours |",
             "|---|---:|---|---:|---:|---:|"]
    for name, items in found.items():
        for item in sorted(items, key=lambda r: r["bytes"]):
            ratio = (f"{item['nccl_us'] / item['time_us']:.2f}x" if item["time_us"] and item["nccl_us"] else "-")
            lines.append(f"| {name} | {size_text(item['bytes'])} | {item['winner'] or 'none'} | "
                         f"{item['time_us'] or '-'} | {round(item['nccl_us'], 2) if item['nccl_us'] else '-'} | "
                         f"{ratio} |")
    return "\n".join(lines) + "\n"


def plot(found: dict[str, list[dict]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(found), figsize=(4.2 * len(found), 3.6), squeeze=False)
    for ax, (name, items) in zip(axes[0], found.items()):
        items = sorted((r for r in items if r["time_us"]), key=lambda r: r["bytes"])
        x = [r["bytes"] for r in items]
        ax.plot(x, [r["time_us"] for r in items], "o-", label="clockworks tune (generated)")
        ax.plot(x, [r["nccl_us"] for r in items], "s--", label="NCCL")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{name}, 2 x H200")
        ax.set_xlabel("bytes per rank")
        ax.set_ylabel("us per call (CUDA graph)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str]) -> int:
    folder = Path(argv[1] if len(argv) > 1 else "results/h200x2/tune_all")
    found = rows(folder)
    if not found:
        sys.stderr.write(f"{folder}: no <family>/small|large/tune.json here\n")
        return 2
    (folder / "summary.md").write_text(markdown(found))
    plot(found, folder / "tune_all.png")
    print(markdown(found), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
