#!/usr/bin/env python3
"""The predictor against the generated programs' measured times (no GPU needed: it reads results).

    python scripts/bench_predict_generated.py [RESULTS_DIR ...] [--out scripts/results]

For every `results.json` that `clockworks validate` wrote under the folders given (default: the
committed 2 x H200 ones), each cell's schedule is traced again at its size (and family variant),
predicted with the calibrated topology of the machine it ran on, in graph and eager mode, and
compared with the measured median. Writes OUT/bench_predict_generated.{json,md}: every cell, and
the median and largest |error| per schedule and backend, per regime (below 1 MiB, 1 to 64 MiB,
above), and in all. The measurements were never read by the predictor.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from clockworks_dist.codegen import validate  # noqa: E402
from clockworks_dist.dsl import params  # noqa: E402

DEFAULT_DIRS = ["results/h200x2/validate", "results/h200x2/tune"]
MiB = 1 << 20


def regime(nbytes: int) -> str:
    return "< 1 MiB" if nbytes < MiB else "1-64 MiB" if nbytes <= 64 * MiB else "> 64 MiB"


def binding_of(path: str, report: dict) -> dict:
    """The variant a results folder measured: recorded by validate, else named by tune's folder."""
    if report.get("params"):
        return report["params"]
    folder = os.path.basename(os.path.dirname(path))
    found = {}
    for part in folder.split("_") if "=" in folder else []:
        name, _, value = part.partition("=")
        found[name] = int(value) if value.lstrip("-").isdigit() else value
    return found


def cells(dirs: list[str]) -> list[dict]:
    out = []
    for path in sorted(p for d in dirs for p in glob.glob(os.path.join(d, "**", "results.json"), recursive=True)):
        report = json.load(open(path))
        if report.get("backend") not in ("nccl", "nvshmem"):
            continue  # the cupy executor is timed from Python: not a generated program
        names = (report.get("machine") or {}).get("gpu_names") or []
        topo, _ = validate.pick_topology(None, report["ranks"], names)
        binding = binding_of(path, report)
        measured = [c for c in report["cells"] if c.get("verdict") == "match"]
        with params.bind(binding):
            schedules, _ = validate.load_schedules(report["file"], report["ranks"], [c["bytes"] for c in measured],
                                                   report["schedule"], None)
        for sched, cell in zip(schedules, measured):
            row = {"schedule": report["schedule"], "variant": params.label(binding), "backend": report["backend"],
                   "bytes": cell["bytes"], "regime": regime(cell["bytes"]), "results": os.path.relpath(path)}
            for mode in ("graph", "eager"):
                got = (cell.get(mode) or {}).get("median_us")
                if got:
                    predicted = validate.predict_cell(sched, topo, mode)
                    row[f"{mode}_us"], row[f"{mode}_predicted_us"] = got, round(predicted, 2)
                    row[f"{mode}_error"] = (predicted - got) / got
            out.append(row)
    return out


def summary(rows: list[dict], key) -> list[dict]:
    groups: dict = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    out = []
    for name, members in sorted(groups.items()):
        entry = {"group": name, "cells": len(members)}
        for mode in ("graph", "eager"):
            errors = [abs(r[f"{mode}_error"]) for r in members if f"{mode}_error" in r]
            if errors:
                entry[f"{mode}_median"], entry[f"{mode}_max"] = statistics.median(errors), max(errors)
        out.append(entry)
    return out


def table(title: str, entries: list[dict]) -> list[str]:
    lines = [f"## {title}", "", "| group | cells | graph median abs error | graph max | eager median | eager max |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for e in entries:
        pct = [f"{e[k]:.1%}" if k in e else "-" for k in ("graph_median", "graph_max", "eager_median", "eager_max")]
        lines.append(f"| {e['group']} | {e['cells']} | " + " | ".join(pct) + " |")
    return lines + [""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="*", default=DEFAULT_DIRS)
    parser.add_argument("--out", default="scripts/results")
    args = parser.parse_args()
    rows = cells(args.dirs)
    by_schedule = summary(rows, lambda r: f"{r['schedule']} {r['variant']} ({r['backend']})".replace("  ", " "))
    by_regime = summary(rows, lambda r: f"{r['backend']}, {r['regime']}")
    overall = summary(rows, lambda r: r["backend"])
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_predict_generated.json"), "w") as handle:
        json.dump({"dirs": args.dirs, "cells": rows, "by_schedule": by_schedule, "by_regime": by_regime,
                   "overall": overall}, handle, indent=1)
    lines = ["# Predicted vs measured: the generated programs on 2 x H200", "",
             "`python scripts/bench_predict_generated.py` (every committed `validate` cell that matched; the "
             "prediction recomputed with today's predictor and the machine's calibrated topology; error = "
             "(predicted - measured) / measured; |error| summarised).", ""]
    lines += table("In all", overall) + table("Per backend and regime", by_regime)
    lines += table("Per schedule", by_schedule)
    with open(os.path.join(args.out, "bench_predict_generated.md"), "w") as handle:
        handle.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
