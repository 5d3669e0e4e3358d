#!/usr/bin/env python3
"""How well the predictor does on a machine it was never fitted on: leave one machine out.

    python scripts/bench_transfer.py [--machines A B ...] [--out scripts/results] [--write-library]

For every measured machine (topologies/measured/machines/index.yaml: its raw NCCL microbenchmarks and its
topology), the library's constants are fitted on the other machines alone (`perf.library.fit_across`)
and the left-out machine's NCCL all-reduce, all-gather and reduce-scatter (CUDA graph, 8 KiB to
1 GiB, every size) are predicted on its own topology, next to NCCL's own estimate
(`ncclGroupSimulateEnd`) of the same cells. Then the constants are fitted on every machine at once
(the training half of each: every other power of two) and scored on the held-out half: the accuracy
on machines that were calibrated.

Writes OUT/bench_transfer.json and OUT/bench_transfer.md (per left-out machine, per collective, per
size band). With --write-library, also the shipped library file (topology/data/library/nccl.yaml):
the constants fitted on every machine, the machines, and the leave-one-out error as the error to
expect on an unmeasured machine. The fit starts from the model's defaults (with NCCL's channel
counts on these machines, 24 collective and 32 point-to-point), so no left-out machine's constants
reach its own prediction; the library file's other constants (NVSHMEM, launches, generated programs)
are those calibrated on 2 x H200.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from clockworks_dist.perf import library as lib  # noqa: E402
from clockworks_dist.perf.fit import get_value  # noqa: E402
from clockworks_dist.topology import load_topology  # noqa: E402
from clockworks_dist.topology.library import LIBRARY_FILE  # noqa: E402
from clockworks_dist.topology.model import DATA_DIR, Constants  # noqa: E402


def start() -> Constants:
    return Constants(nccl_max_channels=24, nccl_p2p_max_channels=32)


def table(rows: list[lib.Scored]) -> list[str]:
    lines = ["| collective | band | cells | ours: median | ours: max | bias | NCCL's estimate: median | max |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for op in lib.SCORED_OPS + ("all",) + lib.P2P_OPS:
        for band, low, high in lib.BANDS + (("all sizes", 0, 1 << 62),):
            chosen = [r for r in rows if (r.op == op or op == "all" and r.op in lib.SCORED_OPS)
                      and low <= r.nbytes <= high]
            s = lib.summary(chosen)
            if not s["cells"]:
                continue
            lines.append(f"| {op} | {band} | {s['cells']} | {s['median_pct']}% | {s['max_pct']}% | "
                         f"{s['bias_pct']:+}% | {s.get('nccl_median_pct', '-')}% | {s.get('nccl_max_pct', '-')}% |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", nargs="*", help="machine names (default: every measured machine)")
    parser.add_argument("--out", default=str(ROOT / "scripts" / "results"))
    parser.add_argument("--write-library", action="store_true", help="also write the shipped library file")
    parser.add_argument("--max-nfev", type=int, default=60)
    args = parser.parse_args()
    machines = lib.shipped_machines(args.machines)
    report = {"machines": {m.name: {"what": m.what, "gpu": m.gpu, "ranks": m.ranks, "nccl": m.nccl,
                                    "cells": sum(c.op in lib.SCORED_OPS and not c.max_channels for c in m.cells)}
                           for m in machines},
              "left_out": {}, "calibrated": {}}
    md = ["# The predictor on a machine it was never fitted on (leave one machine out)", "",
          "Written by `python scripts/bench_transfer.py`. NCCL 2.28.9's all-reduce, all-gather and "
          "reduce-scatter, 8 KiB to 1 GiB, CUDA graph (nccl-tests conventions, median of the timed "
          "replays), each machine's own measurements (topologies/measured/machines/index.yaml). "
          "|error| = |predicted / measured - 1|. NCCL's estimate is `ncclGroupSimulateEnd` on the same "
          "cells.", ""]
    every = []
    for name, (consts, rows) in lib.leave_one_out(machines, start(), max_nfev=args.max_nfev).items():
        every += rows
        collectives = [r for r in rows if r.op in lib.SCORED_OPS]
        report["left_out"][name] = {"summary": lib.summary(collectives),
                                    "p2p": lib.summary([r for r in rows if r.op in lib.P2P_OPS]),
                                    "constants": {p: get_value(consts, p) for p, _, _ in
                                                  lib.FITTED + lib.P2P_FITTED + [(t, 0, 0) for t, _, _ in lib.TIES]},
                                    "cells": [r.__dict__ for r in rows]}
        others = [m.name for m in machines if m.name != name]
        md += [f"## Left out: {name} ({report['machines'][name]['what']})", "",
               f"Fitted on {', '.join(others)} only.", ""] + table(rows) + [""]
    report["left_out_all"] = lib.summary([r for r in every if r.op in lib.SCORED_OPS])
    report["left_out_p2p"] = lib.summary([r for r in every if r.op in lib.P2P_OPS])
    fitted, fit_summary = lib.fit_across(machines, start(), max_nfev=args.max_nfev)
    held = []
    for m in machines:
        rows = [r for r in lib.score(m, fitted, lib.SCORED_OPS + lib.P2P_OPS) if round(math.log2(r.nbytes)) % 2 == 0
                and r.nbytes != max(c.nbytes for c in m.cells)]
        held += rows
        report["calibrated"][m.name] = lib.summary(rows)
    report["calibrated_all"] = lib.summary([r for r in held if r.op in lib.SCORED_OPS])
    report["fit"] = fit_summary
    report["fitted"] = {p: get_value(fitted, p) for p, _, _ in
                        lib.FITTED + lib.P2P_FITTED + [(t, 0, 0) for t, _, _ in lib.TIES]}
    md += ["## Every machine left out, together", ""] + table(every) + [""]
    md += ["## Fitted on every machine, scored on the sizes the fit did not read (calibrated machines)", "",
           "The training half is every other power of two (8, 32, 128 KiB, ...) and 1 GiB; these rows are "
           "the other half.", ""] + table(held) + [""]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_transfer.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "bench_transfer.md").write_text("\n".join(md))
    print("\n".join(md))
    if args.write_library:
        write_library(machines, fitted, report)
    return 0


def write_library(machines: list[lib.Machine], fitted: Constants, report: dict) -> None:
    """The shipped library file: 2 x H200's calibrated constants, the NCCL collective constants fitted
    across every machine over them, the machines, and the leave-one-out error."""
    base = load_topology(DATA_DIR / "measured" / "h200x2-nv18.yaml").constants.model_dump()
    fitted_data = fitted.model_dump()
    for path, _, _ in lib.FITTED + lib.P2P_FITTED + [(p, 0, 0) for p, _, _ in lib.TIES]:
        *parents, name = path.split(".")
        src, dst = fitted_data, base
        for parent in parents:
            src, dst = src[parent], dst[parent]
        dst[name] = src[name]
    for name, (*kinds, value) in lib.SHARED.items():
        base[name] = {**base[name], **{kind: value for kind in kinds}}
    base["nccl_chunk_GBs"] = fitted_data["nccl_chunk_GBs"]
    left = report["left_out_all"]
    document = {
        "library": {"nccl": machines[0].nccl, "nvshmem": (machines[0].provenance.get("wheels") or {})
                    .get("nvidia-nvshmem-cu13")},
        "date": datetime.date.today().isoformat(),
        "method": "scripts/bench_transfer.py --write-library: NCCL's collective and point-to-point constants "
                  "(perf/library.py FITTED, P2P_FITTED and TIES) fitted across every machine below at once; the "
                  "other constants (NVSHMEM, launches, generated programs) as calibrated on 2 x H200 "
                  "(measured/h200x2-nv18.yaml)",
        "fitted_on": [{"machine": m.name, "gpu": m.gpu, "ranks": m.ranks, "what": m.what} for m in machines],
        "expected_error": {
            "how": "leave one machine out: fitted on the other machines, NCCL all-reduce, all-gather and "
                   "reduce-scatter on the one left out, 8 KiB to 1 GiB, CUDA graph (scripts/results/"
                   "bench_transfer.md)",
            "median_pct": left["median_pct"], "max_pct": left["max_pct"], "cells": left["cells"],
            "nccl_estimate_median_pct": left.get("nccl_median_pct"), "nccl_estimate_max_pct": left.get("nccl_max_pct"),
            "p2p_median_pct": report["left_out_p2p"].get("median_pct"),
            "p2p_max_pct": report["left_out_p2p"].get("max_pct"),
            "per_machine": {name: {k: v for k, v in entry["summary"].items() if k in ("median_pct", "max_pct")}
                            for name, entry in report["left_out"].items()},
        },
        "constants": base,
    }
    header = ("# What NCCL, NVSHMEM and CUDA launches cost apart from the machine (topology/library.py): the\n"
              "# constants every topology file that `clockworks calibrate` did not write starts from.\n")
    LIBRARY_FILE.parent.mkdir(parents=True, exist_ok=True)
    LIBRARY_FILE.write_text(header + yaml.safe_dump(document, sort_keys=False, width=110))
    print(f"wrote {LIBRARY_FILE.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
