"""Accuracy of the runtime predictor against GPU measurements, next to NCCL's own estimate.

Reads the calibration microbenchmarks (`topologies/measured/raw/calibration_raw.jsonl`, measured by
`clockworks calibrate` on the GPU machine) and the calibrated topology
(`topologies/measured/h200x2-nv18.yaml`). The constants were fitted on every other power-of-two
size; this reports on the cells the fit never saw (held out), by size regime and by op: median, P90
and max absolute percentage error, signed bias, geomean |log ratio|, and the same for NCCL's
estimate (`ncclGroupSimulateEnd`) on the same cells. The predictor reads only the constants.

    python scripts/bench_predictor.py [--raw FILE] [--topology FILE] [--out scripts/results]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clockworks_dist.perf.fit import held_out, load_cells, predict_cell  # noqa: E402
from clockworks_dist.topology import load_topology  # noqa: E402

REGIMES = (("<= 64 KiB", 0, 64 * 1024), ("64 KiB - 16 MiB", 64 * 1024 + 1, 16 * 1024**2 - 1),
           (">= 16 MiB", 16 * 1024**2, 1 << 62))


def stats(pairs: list[tuple[float, float]]) -> dict:
    """Error statistics of (predicted, measured) pairs."""
    if not pairs:
        return {"cells": 0}
    ape = sorted(abs(p - m) / m * 100 for p, m in pairs)
    signed = [(p - m) / m * 100 for p, m in pairs]
    logs = [abs(math.log(p / m)) for p, m in pairs]
    p90 = ape[min(len(ape) - 1, int(math.ceil(0.9 * len(ape))) - 1)]
    return {"cells": len(pairs), "median_ape": round(statistics.median(ape), 2), "p90_ape": round(p90, 2),
            "max_ape": round(ape[-1], 2), "bias_pct": round(statistics.median(signed), 2),
            "geomean_abs_log_ratio": round(math.exp(statistics.fmean(logs)) - 1, 4)}


def other_runs(folder: str, fitted_cells, topo, consts) -> list[dict]:
    """The calibrated model against the held-out cells of other runs, and how much those runs
    differ from the fitted one cell by cell."""
    fitted = {c.key: c.measured_us for c in fitted_cells}
    rows = []
    for path in sorted(Path(folder).glob("*.jsonl")) if folder and Path(folder).is_dir() else []:
        cells, _ = load_cells(str(path))
        for mode in ("graph", "eager"):
            chosen = [c for c in cells if c.mode == mode and held_out(c)]
            if not chosen:
                continue
            ours = [(predict_cell(c, topo, consts), c.measured_us) for c in chosen]
            again = [(c.measured_us, fitted[c.key]) for c in chosen if c.key in fitted]
            rows.append({"run": path.name, "mode": mode, "ours": stats(ours), "run_to_run": stats(again)})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw", default=str(ROOT / "topologies/measured/raw/calibration_raw.jsonl"))
    parser.add_argument("--topology", default=str(ROOT / "topologies/measured/h200x2-nv18.yaml"))
    parser.add_argument("--out", default=str(ROOT / "scripts/results"))
    parser.add_argument("--others", default=str(ROOT / "scripts/results/other_runs"),
                        help="a folder of other runs' calibration_raw files to check the model against")
    args = parser.parse_args(argv)
    cells, provenance = load_cells(args.raw)
    topo = load_topology(args.topology)
    consts = topo.constants
    rows = []
    for cell in cells:
        predicted = predict_cell(cell, topo, consts)
        rows.append({"op": cell.op, "bytes": cell.nbytes, "mode": cell.mode, "blocks": cell.blocks,
                     "measured_us": cell.measured_us, "predicted_us": round(predicted, 3),
                     "nccl_est_us": cell.nccl_est_us, "max_channels": cell.max_channels,
                     "held_out": held_out(cell)})
    test = [r for r in rows if r["held_out"]]
    report = {"provenance": provenance, "cells": len(rows), "held_out_cells": len(test), "groups": []}
    groups = [("all held-out", lambda r: True)]
    groups += [(f"{name}", lambda r, lo=lo, hi=hi: lo <= r["bytes"] <= hi) for name, lo, hi in REGIMES]
    groups += [(f"op={op}", lambda r, op=op: r["op"] == op) for op in sorted({r["op"] for r in test})]
    for mode in ("graph", "eager"):
        for name, pick in groups:
            chosen = [r for r in test if r["mode"] == mode and pick(r)]
            if not chosen:
                continue
            ours = stats([(r["predicted_us"], r["measured_us"]) for r in chosen])
            nccl = stats([(r["nccl_est_us"], r["measured_us"]) for r in chosen if r["nccl_est_us"]])
            report["groups"].append({"mode": mode, "group": name, "ours": ours, "nccl_estimate": nccl})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_predictor.json").write_text(json.dumps({"summary": report, "rows": rows}, indent=1) + "\n")
    lines = ["# Predictor accuracy on held-out cells (2 x H200, NVLink NV18)", "",
             f"{report['held_out_cells']} held-out cells of {report['cells']} "
             "(the fit used the other power-of-two sizes). APE: absolute percentage error of time.", "",
             "| mode | cells | ours: median APE | P90 | max | bias | geomean abs log ratio "
             "| NCCL est: median APE | P90 | max | bias |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for g in report["groups"]:
        o, n = g["ours"], g["nccl_estimate"]
        nccl_cols = (f"{n['median_ape']}% | {n['p90_ape']}% | {n['max_ape']}% | {n['bias_pct']}%" if n.get("cells")
                     else "n/a | | |")
        lines.append(f"| {g['mode']} {g['group']} | {o['cells']} | {o['median_ape']}% | {o['p90_ape']}% | "
                     f"{o['max_ape']}% | {o['bias_pct']}% | {o['geomean_abs_log_ratio']} | {nccl_cols} |")
    others = other_runs(args.others, cells, topo, consts)
    if others:
        lines += ["", "## Other runs on the same kind of machine (never fitted)", "",
                  "The same microbenchmarks run again on freshly started 2 x H200 machines. Run-to-run: how "
                  "much each cell differs from the fitted run; ours: the calibrated model against that run's "
                  "held-out cells.", "",
                  "| run | mode | cells | run-to-run median | P90 | max | ours: median APE | P90 | max |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for row in others:
            d, o = row["run_to_run"], row["ours"]
            lines.append(f"| {row['run']} | {row['mode']} | {o['cells']} | {d['median_ape']}% | {d['p90_ape']}% | "
                         f"{d['max_ape']}% | {o['median_ape']}% | {o['p90_ape']}% | {o['max_ape']}% |")
        report["other_runs"] = others
        (out / "bench_predictor.json").write_text(json.dumps({"summary": report, "rows": rows}, indent=1) + "\n")
    (out / "bench_predictor.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
