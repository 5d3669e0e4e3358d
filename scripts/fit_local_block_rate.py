#!/usr/bin/env python3
"""One block's rate for an NVSHMEM kernel's local op (`nvshmem_local_block_GBs`), from the one-PE A/B of a
copy against a reduce of the same destination (scripts/gpu/one_pe_local_h200.sh; no GPU needed here: it
reads the results).

    python scripts/fit_local_block_rate.py [RESULTS_DIR] [--out scripts/results]

Both variants put the input into the PE's own slot and wait for it (the same bytes, the same block), then run
their local op: a copy of the slot (out = x), or a reduce of the slot and the input (out = x + x). The code
generator spreads each over one block per 64 KiB of what it moves (`lowering.nvshmem_blocks`: a copy moves
its destination, a reduce its destination and both sources), so at one size the two differ only in the
local op's work per block; the difference of their measured times (graph, per call, median of the rounds)
is the difference of their block floors. Two rules for a reduce's floor are fitted to those differences by
least squares, one rate each: bytes moved per block (destination and sources), and destination bytes per
block (its sources loaded side by side with the store). Writes OUT/fit_local_block_rate.md.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from clockworks_dist.lowering import nvshmem_blocks  # noqa: E402


def medians(folder: str, local: str) -> dict[int, float]:
    """bytes -> the median over the rounds of the graph median per call."""
    found: dict[int, list[float]] = {}
    for path in sorted(glob.glob(os.path.join(folder, f"local_{local}_r*", "results.json"))):
        with open(path, encoding="utf-8") as handle:
            report = json.load(handle)
        for cell in report["cells"]:
            if cell.get("verdict") == "match":
                found.setdefault(cell["bytes"], []).append(cell["graph"]["median_us"])
    return {n: statistics.median(v) for n, v in found.items()}


def fit(rows: list[tuple[int, float]], rule) -> tuple[float, list[float]]:
    """The rate (GB/s) that best gives `diff = k / rate` over (bytes, diff) rows, k = rule(bytes); residuals."""
    ks = [rule(n) for n, _d in rows]
    x = sum(k * d for k, (_n, d) in zip(ks, rows)) / sum(k * k for k in ks)  # us per byte
    return 1e-3 / x, [d - k * x for k, (_n, d) in zip(ks, rows)]


def per_block(nbytes: float, moved: float) -> float:
    return nbytes / nvshmem_blocks(moved)


RULES = {
    "bytes moved per block (destination and sources)":
        lambda n: per_block(n, n) - per_block(3 * n, 3 * n),
    "destination bytes per block (sources loaded beside the store)":
        lambda n: per_block(n, n) - per_block(n, 3 * n),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", default="results/h200/one_gpu/one_pe_local")
    parser.add_argument("--out", default="scripts/results")
    args = parser.parse_args()
    copy, reduce = medians(args.folder, "copy"), medians(args.folder, "reduce")
    rows = [(n, copy[n] - reduce[n]) for n in sorted(set(copy) & set(reduce))]
    if not rows:
        print(f"no matching copy and reduce cells under {args.folder}", file=sys.stderr)
        return 2
    lines = ["# One block's rate for a kernel's local op, from a copy against a reduce", "",
             f"`python scripts/fit_local_block_rate.py {args.folder}`: one PE on one H200, 20 calls in one kernel, "
             "graph, us per call (median of the rounds); every output bit-exact.", "",
             "| bytes | copy | reduce | copy - reduce |", "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {n} | {copy[n]:.3f} | {reduce[n]:.3f} | {d:+.3f} |" for n, d in rows]
    lines.append("")
    for name, rule in RULES.items():
        rate, residuals = fit(rows, rule)
        worst = max(abs(r) for r in residuals)
        lines += [f"- a reduce's floor by {name}: rate {rate:.1f} GB/s, residuals "
                  + ", ".join(f"{r:+.2f}" for r in residuals) + f" us (largest {worst:.2f})"]
        if rate <= 0:
            lines[-1] += "; a rate below zero: this rule cannot give the differences"
    text = "\n".join(lines) + "\n"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "fit_local_block_rate.md"), "w", encoding="utf-8") as handle:
        handle.write(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
