#!/usr/bin/env python3
"""The predictor against the generated programs' measured times (no GPU needed: it reads results).

    python scripts/bench_predict_generated.py [RESULTS_DIR ...] [--topology FILE] [--no-fit]
                                              [--out scripts/results]

For every `results.json` that `clockworks validate` wrote under the folders given (default: the
committed 2 x H200 ones: validate, tune, tune_all, calls, packets), each cell's schedule is traced
again at its size (and family variant; a run of K calls as the K-call schedule), and its timed run
of the generated program is predicted (`perf.program`: the schedule's ops plus the program's own
costs) with the calibrated topology of the machine it ran on, in graph and eager mode, and compared
with the measured median. Left out, with the reason in the output: runs timed from Python (the cupy
executor). Cells whose put_signals were sent as packets (`--packets`) are predicted as such
(`lowering.Lowered.packets`) and scored on their own, in no fit. NVSHMEM runs measured before the
generated code's progress words moved to GPU memory (HOST_PROGRESS_BEFORE) are predicted as built
with host-mapped words (`lowering.Build.host_progress`).

Train and held out: within each results file the cells are sorted by size and alternate, the
first trained, the second held out, and so on. The constants of the generated program's run and of
plain kernels (FITTED) are fitted on the training cells only, least squares on log-time, graph
cells for the graph constants and eager cells for the eager ones, starting from the topology's; the
held-out cells are never read by the fit. Writes OUT/bench_predict_generated.{json,md}: every
cell, the fitted constants, and the median and largest |error| of the held-out cells per schedule,
per backend and regime (below 1 MiB, 1 to 64 MiB, above), and in all, with the topology's constants
and with the fitted ones, and for each held-out cell past 15% which part of its predicted time
dominates (fixed costs, or bytes moving).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from clockworks_dist.runtime import validate  # noqa: E402
from clockworks_dist.lowering import lower  # noqa: E402
from clockworks_dist.dsl import params  # noqa: E402
from clockworks_dist.errors import CostWarning  # noqa: E402
from clockworks_dist.perf import fit  # noqa: E402
from clockworks_dist.perf.network import from_topology  # noqa: E402
from clockworks_dist.perf.program import program_conditions, program_us  # noqa: E402
from clockworks_dist.perf.simulate import Simulator  # noqa: E402
from clockworks_dist.topology import load_topology  # noqa: E402

DEFAULT_DIRS = ["results/h200x2/validate", "results/h200x2/tune", "results/h200x2/tune_all", "results/h200x2/calls",
                "results/h200x2/packets"]
MiB = 1 << 20
# What the fit sets, per mode: a plain kernel's start and the host's issue of one (LOCAL) and the
# generated program's own costs. --keep-local keeps the topology's plain-kernel constants instead
# (e.g. the kernel microbenchmark's, calibrate/bench_kernels.cu) and fits only the program's.
# One block's rate for a kernel's local op (nvshmem_local_block_GBs) is not fitted here: it is measured
# by its own one-GPU A/B of a copy against a reduce (scripts/fit_local_block_rate.py).
FITTED = {
    "graph": [("program_graph_us", 0.01, 50.0), ("program_mark_us", 0.01, 20.0),
              ("program_step_us", 0.01, 20.0), ("program_sync_us", 0.01, 20.0),
              ("program_compute_GBs", 10.0, 5000.0),
              ("program_atomic_us", 1e-5, 0.1), ("nvshmem_reverse_share", 0.001, 1.0), ("barrier_us", 0.05, 20.0),
              ("program_host_progress_us", 0.001, 5.0)],
    "eager": [("program_eager_us", 0.01, 50.0), ("program_mark_host_us", 0.01, 20.0),
              ("program_host_lead_us", 0.01, 50.0)],
}
LOCAL = {"graph": [("local_graph_launch_us", 0.05, 20.0)],
         "eager": [("local_host_us", 0.5, 60.0), ("local_eager_launch_us", 0.01, 10.0)]}
MODES = ("graph", "eager")
# NVSHMEM programs generated before their progress words moved from host-mapped memory to GPU
# memory (2026-11-23 08:27 UTC) fence on PCIe writes: runs measured before then are predicted with
# `lowering.Build.host_progress` (results/h200x2/progress measures the same binaries both ways).
HOST_PROGRESS_BEFORE = "2026-11-23T08:27:17+00:00"
TARGETS = {"graph": (0.05, 0.15), "eager": (0.08, None)}  # held-out median, max per schedule


def regime(nbytes: int) -> str:
    return "< 1 MiB" if nbytes < MiB else "1-64 MiB" if nbytes <= 64 * MiB else "> 64 MiB"


def binding_of(path: str, report: dict) -> dict:
    """The variant a results folder measured: recorded by validate, else named by tune's folder."""
    if report.get("params") is not None:
        return report["params"]
    folder = os.path.basename(os.path.dirname(path))
    found = {}
    for part in folder.split("_") if "=" in folder else []:
        name, _, value = part.partition("=")
        found[name] = int(value) if value.lstrip("-").isdigit() else value
    return found


def cells(dirs: list[str]) -> tuple[list[dict], list[dict]]:
    """(the cells to predict, each with its schedule; what was left out and why)."""
    out, left = [], []
    for path in sorted(p for d in dirs for p in glob.glob(os.path.join(d, "**", "results.json"), recursive=True)):
        report = json.load(open(path))
        where = os.path.relpath(path)
        if report.get("backend") not in ("nccl", "nvshmem"):
            left.append({"results": where, "cells": len(report.get("cells", [])),
                         "why": f"backend {report.get('backend')}: timed from Python, not a generated program"})
            continue
        names = (report.get("machine") or {}).get("gpu_names") or []
        topo, _ = validate.pick_topology(None, report["ranks"], names)
        binding = binding_of(path, report)
        measured = sorted((c for c in report["cells"] if c.get("verdict") == "match"), key=lambda c: c["bytes"])
        kept = measured
        limit = (report.get("packets") or {}).get("max_bytes") or 0  # lowered as validate lowered it
        if not kept:
            continue
        calls = report.get("calls") or 1
        # validate records where the progress words were (`progress_words`); older runs say it by their date
        recorded = report.get("progress_words")
        host_progress = recorded == "host" if recorded else \
            report["backend"] == "nvshmem" and report.get("date_utc", "") < HOST_PROGRESS_BEFORE
        with params.bind(binding):
            schedules, _ = validate.load_schedules(report["file"], report["ranks"], [c["bytes"] for c in kept],
                                                   report["schedule"], None)
        position = 0  # the train / held-out alternation counts the cells with nothing sent as packets
        for sched, cell in zip(schedules, kept):
            # lowered as validate lowered it (its results say how: `validate.build_of`)
            build = validate.build_of({**report, "progress_words": "host" if host_progress else "gpu"})
            program = lower(sched, build)
            low = program.packets if program.packets is not None and program.packets.channels else None
            label = params.label(binding) + (f", packets <= {limit // 1024} KiB" if low is not None else "")
            row = {"schedule": report["schedule"], "variant": label, "backend": report["backend"],
                   "bytes": cell["bytes"], "regime": regime(cell["bytes"]), "calls": calls,
                   "held_out": low is None and position % 2 == 1, "results": where,
                   "host_progress": host_progress,
                   "kernels": report.get("kernels") or "one", "packets": len(low.channels) if low else 0,
                   "_sched": program.sched, "_topo": topo, "_program": program}
            for mode in MODES:
                got = (cell.get(mode) or {}).get("median_us")
                if got:
                    row[f"{mode}_us"] = got
            out.append(row)
            position += low is None
    return out, left


def predict(row: dict, mode: str, consts) -> float:
    return program_us(row["_program"], row["_topo"], mode, consts, row["calls"])


# Where the fit starts for constants the topology leaves at their "until fitted" value (a start on a
# bound can leave a constant there).
START = {"program_graph_us": 3.0, "program_eager_us": 3.0, "program_mark_us": 1.0, "program_mark_host_us": 1.0,
         "program_step_us": 1.0, "program_atomic_us": 0.001, "nvshmem_reverse_share": 0.2,
         "program_host_lead_us": 3.0, "program_sync_us": 1.0, "program_host_progress_us": 0.8}


def fit_constants(rows: list[dict], start) -> tuple[object, dict]:
    """The FITTED constants on the training cells, graph then eager, from `start` (those at 0 from
    START)."""
    consts = fit.with_values(start, {path: value for path, value in START.items() if not fit.get_value(start, path)})
    summary = {}
    for mode in MODES:
        train = [(row, row[f"{mode}_us"]) for row in rows
                 if not row["held_out"] and not row["packets"] and f"{mode}_us" in row]
        best = None
        # max-min sharing makes the cost piecewise smooth: a second start for the share of the
        # reverse direction, and the fit with the lower cost is kept
        for again in ({}, {"nvshmem_reverse_share": 0.5}) if mode == "graph" else ({},):
            found = fit.least_squares_fit(train, lambda row, c, m=mode: predict(row, m, c), FITTED[mode],
                                          fit.with_values(consts, again), workers=1)
            if best is None or found[1]["cost"] < best[1]["cost"]:
                best = found
        consts, summary[mode] = best
    return consts, summary


def bytes_share(row: dict, mode: str, consts) -> float:
    """The fraction of the predicted run that bytes moving take on its critical path (the rest is
    fixed costs: launches, protocol latencies, the program's own)."""
    topo = row["_topo"]
    network = from_topology(topo, row["_sched"].world)
    conditions = program_conditions(row["_program"])
    timeline = Simulator(row["_sched"], network, consts, mode, conditions=conditions).run()
    moving = 0.0
    for rec in timeline.critical:
        if rec.detail.get("flow_us"):
            moving += rec.detail["flow_us"]
        elif rec.kind in ("reduce", "copy", "fill", "compute"):
            moving += max(0.0, rec.end - rec.start - consts.local_graph_launch_us)
    return min(1.0, moving / timeline.total_us) if timeline.total_us > 0 else 0.0


def summary(rows: list[dict], key, which: str) -> list[dict]:
    groups: dict = {}
    for row in rows:
        groups.setdefault(key(row), []).append(row)
    out = []
    for name, members in sorted(groups.items()):
        entry = {"group": name, "cells": len(members)}
        for mode in MODES:
            errors = [abs(r[f"{mode}_{which}_error"]) for r in members if f"{mode}_{which}_error" in r]
            if errors:
                entry[f"{mode}_median"], entry[f"{mode}_max"] = statistics.median(errors), max(errors)
        out.append(entry)
    return out


def table(title: str, entries: list[dict], targets: bool = False) -> list[str]:
    head = "| group | cells | graph median abs error | graph max | eager median | eager max |"
    rule = "| --- | ---: | ---: | ---: | ---: | ---: |"
    if targets:
        head, rule = head + " meets the targets |", rule + " --- |"
    lines = [f"### {title}", "", head, rule]
    for e in entries:
        pct = [f"{e[k]:.1%}" if k in e else "-" for k in ("graph_median", "graph_max", "eager_median", "eager_max")]
        line = f"| {e['group']} | {e['cells']} | " + " | ".join(pct) + " |"
        if targets:
            line += f" {meets(e)} |"
        lines.append(line)
    return lines + [""]


def meets(entry: dict) -> str:
    """Which held-out targets a group meets: graph median and max, eager median."""
    misses = []
    (g_median, g_max), (e_median, _) = TARGETS["graph"], TARGETS["eager"]
    if entry.get("graph_median", 0) > g_median:
        misses.append("graph median")
    if entry.get("graph_max", 0) > g_max:
        misses.append("graph max")
    if entry.get("eager_median", 0) > e_median:
        misses.append("eager median")
    return "yes" if not misses else "no: " + ", ".join(misses)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="*", default=DEFAULT_DIRS)
    parser.add_argument("--topology", default=None,
                        help="predict with this topology file (default: each run's machine's calibrated one)")
    parser.add_argument("--no-fit", action="store_true", help="only the topology's constants: fit nothing")
    parser.add_argument("--keep-local", action="store_true",
                        help="keep the topology's plain-kernel constants (local_*, e.g. as the kernel microbenchmark "
                             "measured them) and fit only the generated program's own")
    parser.add_argument("--out", default="scripts/results")
    args = parser.parse_args()
    if not args.keep_local:
        for mode in MODES:
            FITTED[mode][:0] = LOCAL[mode]
    warnings.simplefilter("ignore", CostWarning)  # the corpus's compute ops state no cost: the stand-in runs
    rows, left = cells(args.dirs)
    if args.topology:
        topo = load_topology(args.topology)
        for row in rows:
            row["_topo"] = topo
    shipped = rows[0]["_topo"].constants
    fitted, fit_summary = (shipped, {}) if args.no_fit else fit_constants(rows, shipped)
    for row in rows:
        for which, consts in (("shipped", shipped), ("fitted", fitted)):
            for mode in MODES:
                if f"{mode}_us" in row:
                    predicted = predict(row, mode, consts)
                    row[f"{mode}_{which}_us"] = round(predicted, 2)
                    row[f"{mode}_{which}_error"] = (predicted - row[f"{mode}_us"]) / row[f"{mode}_us"]
        for mode in MODES:
            error = row.get(f"{mode}_fitted_error")
            if row["held_out"] and error is not None and abs(error) > 0.15:
                share = bytes_share(row, mode, fitted)
                row[f"{mode}_dominant"] = (f"bytes moving ({share:.0%} of the predicted time)" if share >= 0.5
                                           else f"fixed costs ({1 - share:.0%} of the predicted time)")
    held = [r for r in rows if r["held_out"] and not r["packets"]]
    sent = [r for r in rows if r["packets"]]  # put_signals sent as packets: in no fit, scored on their own
    schedule_key = lambda r: f"{r['schedule']} {r['variant']} ({r['backend']})".replace("  ", " ")  # noqa: E731
    report = {"dirs": args.dirs, "left_out": left, "split": "per results file, cells sorted by size: even positions "
              "train the fit, odd positions are held out", "fitted_constants": {
                  path: fit.get_value(fitted, path) for mode in MODES for path, _, _ in FITTED[mode]},
              "shipped_constants": {path: fit.get_value(shipped, path)
                                    for mode in MODES for path, _, _ in FITTED[mode]},
              "fit": fit_summary}
    for which in ("shipped", "fitted"):
        report[which] = {"overall": summary(held, lambda r: f"held out, {r['backend']}", which),
                         "every_cell": summary([r for r in rows if not r["packets"]],
                                               lambda r: f"every cell (trained too), {r['backend']}", which),
                         "by_regime": summary(held, lambda r: f"{r['backend']}, {r['regime']}", which),
                         "by_schedule": summary(held, schedule_key, which),
                         "all_held_out": summary(held, lambda r: "held out, all", which),
                         "packets": summary(sent, lambda r: "packets, every cell (in no fit)", which),
                         "packets_by_schedule": summary(sent, schedule_key, which)}
    report["cells"] = [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_predict_generated.json"), "w") as handle:
        json.dump(report, handle, indent=1)
    lines = ["# Predicted vs measured: the generated programs on 2 x H200", "",
             "`python scripts/bench_predict_generated.py`: every committed `clockworks validate` cell that matched, "
             "predicted as a timed run of the generated program (`perf/program.py`) with the machine's calibrated "
             "topology; error = (predicted - measured) / measured; |error| summarised over the held-out cells.", "",
             f"Split: {report['split']}. {len(rows) - len(held) - len(sent)} training cells, {len(held)} held out; "
             f"{len(sent)} cells whose put_signals went as flag-in-data packets (`--packets`) are in no fit and "
             "scored on their own (a packet send: its data and flag in one stream of twice the bytes, no fence, no "
             "separate signal; `lowering.Lowered.packets`). The fit sets "
             "only the constants below (the generated program's own costs, NVSHMEM puts both ways at once, a PE "
             "barrier's round" + ("; with --keep-local, a plain kernel's start and the host's issue of one stay the "
                                  "topology's" if args.keep_local
                                  else ", a plain kernel's start and the host's issue of one")
             + "), starting from the topology's; the held-out cells are never read by it. When the topology's "
             "values came from this fit, the two columns agree.", ""]
    built_so = sorted({r["results"] for r in rows if r["host_progress"]})
    if built_so:
        lines += [f"Predicted as built with host-mapped progress words (NVSHMEM runs measured before "
                  f"{HOST_PROGRESS_BEFORE}, when the words moved to GPU memory; `program_host_progress_us` per op "
                  "the kernel's blocks run):", ""] + [f"- {where}" for where in built_so]
        lines.append("")
    if left:
        lines += ["Left out:", ""] + [f"- {item['results']}: {item['cells']} cell(s), {item['why']}" for item in left]
        lines.append("")
    lines += ["## The constants", "", "| constant | topology's | fitted on the training cells |",
              "| --- | ---: | ---: |"]
    lines += [f"| {path} | {report['shipped_constants'][path]:g} | {report['fitted_constants'][path]:g} |"
              for mode in MODES for path, _, _ in FITTED[mode]]
    lines.append("")
    targets = ("Targets, held out: graph median <= 5% and max <= 15% per schedule; eager median <= 8%.")
    for which, title in (("fitted", "With the fitted constants"), ("shipped", "With the topology's constants")):
        lines += [f"## {title}", "", targets, ""]
        lines += table("In all", report[which]["all_held_out"] + report[which]["overall"]
                       + report[which]["every_cell"])
        lines += table("Per backend and regime", report[which]["by_regime"])
        lines += table("Per schedule", report[which]["by_schedule"], targets=True)
        if sent:
            lines += table("Put_signals sent as packets (`--packets`), every cell, in no fit",
                           report[which]["packets"] + report[which]["packets_by_schedule"])
    misses = [r for r in held for mode in MODES if f"{mode}_dominant" in r]
    if misses:
        lines += ["## Held-out cells past 15% (fitted constants)", "",
                  "| schedule | backend | bytes | calls | mode | measured us | predicted us | error | dominant part |",
                  "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | --- |"]
        for r in held:
            for mode in MODES:
                if f"{mode}_dominant" in r:
                    lines.append(f"| {r['schedule']} {r['variant']} | {r['backend']} | {r['bytes']} | {r['calls']} | "
                                 f"{mode} | {r[f'{mode}_us']} | {r[f'{mode}_fitted_us']} | "
                                 f"{r[f'{mode}_fitted_error']:+.1%} | {r[f'{mode}_dominant']} |")
        lines.append("")
    lines += ["## Every cell (fitted constants)", "",
              "| schedule | backend | bytes | calls | held out | graph us | predicted | error | eager us | predicted "
              "| error |",
              "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        cols = []
        for mode in MODES:
            if f"{mode}_us" in r:
                cols += [f"{r[f'{mode}_us']}", f"{r[f'{mode}_fitted_us']}", f"{r[f'{mode}_fitted_error']:+.1%}"]
            else:
                cols += ["-", "-", "-"]
        lines.append(f"| {r['schedule']} {r['variant']} | {r['backend']} | {r['bytes']} | {r['calls']} | "
                     f"{'yes' if r['held_out'] else 'no'} | " + " | ".join(cols) + " |")
    with open(os.path.join(args.out, "bench_predict_generated.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines[:60]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
