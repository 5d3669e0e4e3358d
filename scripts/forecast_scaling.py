#!/usr/bin/env python3
"""Forecast, before any run, what `clockworks validate` will measure on a bigger node.

    python scripts/forecast_scaling.py [--topology dgx-h200] [--ranks 4 8]
                                       [--sizes 1KiB,16KiB,256KiB,4MiB,64MiB,1GiB]
                                       [--constants-from h200x2-nv18] [--out results/dgx-h200/forecast]

For every protocol in protocols/ (every variant of a family), at each world size: the checker's
verdict, and for each backend that can generate it (NCCL, NVSHMEM) the timed run of the generated
program (`perf.program.program_us`: what validate's timer sees, one call) in a CUDA graph and
eagerly, with NCCL's own collective for the same operation and bytes beside it (the baseline
validate measures). Sizes are bytes per rank of the main buffer, as validate counts them.

Two sets of constants, side by side: the topology's own (for dgx-h200, uncalibrated: no such node
has been measured) and, with --constants-from, the constants calibrated on another machine with the
same GPU, driver and NCCL (the topology's links and devices kept). Writes OUT/forecast.json and
OUT/forecast.md, stamped with the commit and each topology file's sha256, so that a later run on the
node compares against a forecast made before it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import hashlib
import json
import os
import subprocess
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from clockworks_dist import load_file  # noqa: E402
from clockworks_dist.check import check  # noqa: E402
from clockworks_dist.codegen import program  # noqa: E402
from clockworks_dist.lowering import Build, lower  # noqa: E402
from clockworks_dist.runtime import validate  # noqa: E402
from clockworks_dist.dsl import message  # noqa: E402
from clockworks_dist.dsl import params  # noqa: E402
from clockworks_dist.errors import ClockworksError, CostWarning  # noqa: E402
from clockworks_dist.perf.microbench import MICROBENCHMARKS  # noqa: E402
from clockworks_dist.perf.predict import predict_sizes  # noqa: E402
from clockworks_dist.perf.program import program_us  # noqa: E402
from clockworks_dist.semantics.backends import Unsupported  # noqa: E402
from clockworks_dist.topology import choose_topology  # noqa: E402
from clockworks_dist.topology.calibrated import DATA_DIR  # noqa: E402

BACKENDS = ("nccl", "nvshmem")
MODES = ("graph", "eager")


def parse_sizes(text: str) -> list[int]:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    out = []
    for part in text.split(","):
        part = part.strip()
        unit = next((u for u in units if part.endswith(u)), None)
        out.append(int(part[: -len(unit)]) * units[unit] if unit else int(part))
    return out


def sha256(chosen) -> str:
    """The first 12 hex digits of the chosen topology file's sha256."""
    path = DATA_DIR / chosen.file if (DATA_DIR / chosen.file).is_file() else chosen.file
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()[:12]


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "clockworks_dist", "protocols"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def schedules(path: str):
    """(name, variant label, binding, definition) of every schedule and variant in the file."""
    for defn in load_file(path):
        for binding in defn.variants() or [{}]:
            yield defn.name, params.label(binding), binding, defn


def forecast_one(path: str, binding: dict, world: int, sizes: list[int], topologies: dict, verdict_timeout: float):
    """The rows of one schedule variant at one world size."""
    with params.bind(binding):
        traced, byte_sizes = validate.load_schedules(path, world, sizes, None, None)
        verdict = check(traced[0], timeout=verdict_timeout)
    rows = []
    status = verdict.verdict
    for backend in BACKENDS:
        try:
            program.generate(traced[0], backend)
        except Unsupported as exc:
            rows.append({"backend": backend, "generated": False, "why": str(exc)[:200]})
            continue
        for sched, nbytes in zip(traced, byte_sizes):
            row = {"backend": backend, "generated": True, "bytes": nbytes}
            op = validate.nccl_collective(sched)
            for label, topo in topologies.items():
                for mode in MODES:
                    row[f"{label}_{mode}_us"] = round(
                        program_us(lower(sched, Build(backend)), topo, mode, topo.constants), 3)
                    if op is not None and nbytes % (4 * world) == 0:
                        nccl = predict_sizes(MICROBENCHMARKS[op], topo, world, [nbytes], mode=mode)[0].time_us
                        row[f"{label}_nccl_{mode}_us"] = round(nccl, 3)
            row["nccl_op"] = op
            rows.append(row)
    return status, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topology", default="dgx-h200")
    parser.add_argument("--ranks", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--sizes", default="1KiB,16KiB,256KiB,4MiB,64MiB,1GiB")
    parser.add_argument("--constants-from", default="h200x2-nv18",
                        help="also forecast with this machine's calibrated constants ('' for none)")
    parser.add_argument("--protocols", nargs="*", default=None, help="protocol files (default: protocols/*.py)")
    parser.add_argument("--check-timeout", type=float, default=120.0)
    parser.add_argument("--out", default=os.path.join(ROOT, "results", "dgx-h200", "forecast"))
    args = parser.parse_args()
    warnings.simplefilter("ignore", CostWarning)  # compute ops that state no cost: bound by their traffic
    sizes = parse_sizes(args.sizes)
    own = choose_topology(args.topology)
    topologies = {"own": own.topology}
    files = {"own": {"file": own.file, "sha256": sha256(own), "calibrated": own.calibrated}}
    if not own.calibrated:  # the library's constants: which file, and the error they gave on unseen machines
        from clockworks_dist.topology.calibrated import library_error_text
        from clockworks_dist.topology.library import LIBRARY_FILE

        files["own"]["library"] = hashlib.sha256(LIBRARY_FILE.read_bytes()).hexdigest()[:12]
        with open(os.path.join(ROOT, "results", "h200x4", "scaling", "scaling.json")) as f:
            scaled = json.load(f)["summary"]
        files["own"]["error_band"] = (library_error_text(own.topology) + "; leave one machine out, "
                                      "scripts/results/bench_transfer.md; the generated programs at 4 ranks on a "
                                      f"4 x H200 node left out: median {scaled['left_out_4']['median_pct']}%, max "
                                      f"{scaled['left_out_4']['max_pct']}%, results/h200x4/scaling/scaling.md")
    if args.constants_from:
        source = choose_topology(args.constants_from)
        topologies["transfer"] = own.topology.model_copy(update={"constants": source.topology.constants})
        files["transfer"] = {"file": source.file, "sha256": sha256(source), "calibrated": source.calibrated,
                             "what": f"{own.topology.name}'s links and devices with the constants of {source.file}"}
    paths = args.protocols or sorted(glob.glob(os.path.join(ROOT, "protocols", "*.py")))
    report = {"made": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "commit": commit(),
              "topology": args.topology, "constants": files, "sizes": sizes, "ranks": args.ranks, "schedules": []}
    started = time.monotonic()
    for path in paths:
        for name, variant, binding, _defn in schedules(path):
            for world in args.ranks:
                entry = {"file": os.path.relpath(path, ROOT), "schedule": name, "variant": variant, "ranks": world}
                try:
                    entry["verdict"], entry["rows"] = forecast_one(path, binding, world, sizes, topologies,
                                                                   args.check_timeout)
                except ClockworksError as exc:
                    entry["verdict"], entry["rows"], entry["error"] = "not forecast", [], str(exc)[:300]
                report["schedules"].append(entry)
                print(f"{entry['file']} {variant or ''} {world} ranks: {entry['verdict']} "
                      f"({time.monotonic() - started:.0f} s)", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "forecast.json"), "w") as handle:
        json.dump(report, handle, indent=1)
    with open(os.path.join(args.out, "forecast.md"), "w") as handle:
        handle.write(markdown(report))
    return 0


def size_text(nbytes: int) -> str:
    return message.size_text(nbytes)


def own_constants(own: dict) -> str:
    if own["calibrated"]:
        return "calibrated"
    return f"not calibrated: datasheet links and the library constants, data/library/nccl.yaml sha256 {own['library']}"


def markdown(report: dict) -> str:
    c = report["constants"]
    lines = [f"# Forecast: every protocol on {report['topology']} at {', '.join(map(str, report['ranks']))} ranks", "",
             f"Made {report['made']} at commit {report['commit']} by `python scripts/forecast_scaling.py`, before "
             "any run on such a node: the timed run of each generated program (one call; what `clockworks "
             "validate` times) and NCCL's own collective for the same bytes, in microseconds, CUDA graph and "
             "eager. Sizes are bytes per rank of the main buffer.", "",
             f"- own: {c['own']['file']} (sha256 {c['own']['sha256']}; {own_constants(c['own'])})"]
    if not c["own"]["calibrated"]:
        lines.append(f"- error band: {c['own']['error_band']}")
    if "transfer" in c:
        lines.append(f"- transfer: {c['transfer']['what']} (sha256 {c['transfer']['sha256']}): the same GPU, driver "
                     "and NCCL, measured on two GPUs of the lent 2 x H200 kind")
    lines.append("")
    labels = [k for k in ("own", "transfer") if k in c]
    for entry in report["schedules"]:
        title = f"{entry['schedule']}{' ' + entry['variant'] if entry['variant'] else ''}, {entry['ranks']} ranks"
        lines += [f"## {title}", "", f"{entry['file']}: {entry['verdict']}" + (f" ({entry['error']})"
                                                                              if entry.get("error") else ""), ""]
        rows = entry["rows"]
        for row in rows:
            if not row["generated"]:
                lines.append(f"- {row['backend']}: not generated ({row['why']})")
        done = [r for r in rows if r["generated"]]
        if not done:
            lines.append("")
            continue
        head = ["backend", "bytes"]
        for label in labels:
            head += [f"{label} graph", f"{label} eager", f"{label} NCCL graph"]
        lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in done:
            cells = [r["backend"], size_text(r["bytes"])]
            for label in labels:
                cells += [f"{r[f'{label}_graph_us']:,.2f}", f"{r[f'{label}_eager_us']:,.2f}",
                          f"{r[f'{label}_nccl_graph_us']:,.2f}" if f"{label}_nccl_graph_us" in r else "-"]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
