#!/usr/bin/env python3
"""One table over the results folders `clockworks validate` wrote (one per protocol and backend):

    python scripts/validate_summary.py results/h200x2/validate

writes DIR/README.md: per protocol, backend and size, the result check, the measured median (eager
and CUDA graph), the prediction and its error, NCCL's own collective and the speedup against it.
"""

from __future__ import annotations

import argparse
import glob
import json
import os


def _us(value) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _pct(value) -> str:
    return "-" if value is None else f"{value * 100:+.0f}%"


def _x(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def rows(report: dict) -> list[str]:
    out = []
    for cell in report["cells"]:
        eager, graph = cell.get("eager") or {}, cell.get("graph") or {}
        predicted, error = cell.get("predicted") or {}, cell.get("error") or {}
        nccl, speed = cell.get("nccl") or {}, cell.get("speedup_vs_nccl") or {}
        out.append(" | ".join([
            report["schedule"], report["backend"], cell["size"], cell["verdict"],
            _us(eager.get("median_us")), _us(graph.get("median_us")),
            f"{_us(predicted.get('eager_us'))} / {_us(predicted.get('graph_us'))}",
            f"{_pct(error.get('eager'))} / {_pct(error.get('graph'))}",
            f"{nccl.get('op') or '-'} {_us(nccl.get('eager_us'))} / {_us(nccl.get('graph_us'))}",
            f"{_x(speed.get('eager'))} / {_x(speed.get('graph'))}",
            f"{cell.get('elements_checked', 0):,}"]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    args = parser.parse_args(argv)
    reports = [json.load(open(path, encoding="utf-8"))
               for path in sorted(glob.glob(os.path.join(args.folder, "*", "results.json")))]
    if not reports:
        parser.error(f"no results.json under {args.folder}")
    first = reports[0]
    gpus = ", ".join(first.get("machine", {}).get("gpu_names") or []) or "?"
    lines = [
        f"# `clockworks validate` on {len(first.get('machine', {}).get('gpu_names') or [])} x GPU ({gpus})",
        "",
        f"NCCL {first.get('nccl_version')}; NVLink multicast off (NCCL_NVLS_ENABLE=0, NVSHMEM_DISABLE_NVLS=1, "
        "TORCH_SYMM_MEM_DISABLE_MULTICAST=1). Each row: one generated program (or executor) at one size, "
        f"{first.get('warmup')} warm-up runs, then {first.get('iters')} timed runs eagerly and {first.get('iters')} "
        "as replays of a CUDA graph; inputs written again before each run, outside the timed span; CUDA events "
        "around the ops of each run; the slowest rank per run; median over the runs. Every element and signal "
        "word of every rank is compared bit for bit with the checker's values after the first and the last run "
        "of each mode. Predicted: `clockworks predict` with the calibrated topology; error = (predicted - "
        "measured) / measured. NCCL: its own collective for the schedule's postcondition at the same bytes "
        "(calibrate/bench_nccl.cu, per launch over back-to-back launches); speedup = NCCL's time / ours. Each "
        "protocol's folder has results.json (every rank's line), results.md and results.png.",
        "",
        "Written by `scripts/gpu/validate_h200x2.sh` and `python scripts/validate_summary.py "
        f"{args.folder}`.",
        "",
        "| protocol | backend | size | result | eager us | graph us | predicted eager / graph us | error eager / graph "
        "| NCCL eager / graph us | speedup vs NCCL eager / graph | comparisons |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for report in reports:
        lines += ["| " + row + " |" for row in rows(report)]
    cells = [c for r in reports for c in r["cells"]]
    matched = sum(c["verdict"] == "match" for c in cells)
    lines += ["", f"{matched} of {len(cells)} cells match; {sum(c.get('elements_checked', 0) for c in cells):,} "
                  "comparisons in all."]
    with open(os.path.join(args.folder, "README.md"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines[-1:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
