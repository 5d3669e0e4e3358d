"""The checker on the MSCCL++ corpus: every execution plan of corpus/mscclpp/ and every seeded bug, imported
(`importers.mscclpp`) and checked with the default search, one after another in one process.

Writes scripts/results/bench_import_mscclpp.md (and .json): per file, its shape (GPUs, thread blocks, ops), the
verdict and kinds found (or the refusal), the states the search visited and the seconds the check took
(median of `--repeat` runs, import excluded), and the import's own seconds.

    python scripts/bench_import_mscclpp.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from clockworks_dist.check import check
from clockworks_dist.errors import ScheduleError
from clockworks_dist.importers.mscclpp import to_schedule
from clockworks_dist.importers.mscclpp_json import parse

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus" / "mscclpp"
OUT = ROOT / "scripts" / "results"


def measure(path: Path, repeat: int) -> dict:
    raw = json.loads(path.read_text())
    row = {"file": str(path.relative_to(CORPUS)), "gpus": len(raw["gpus"]),
           "thread_blocks": sum(len(g["threadblocks"]) for g in raw["gpus"]),
           "ops": sum(len(tb["ops"]) for g in raw["gpus"] for tb in g["threadblocks"])}
    started = time.perf_counter()
    try:
        sched = to_schedule(parse(str(path)))
    except ScheduleError as exc:
        return {**row, "verdict": "refused", "complete": True, "kinds": [f"line {exc.line}: {exc.op}"], "states": 0,
                "check_s": 0.0, "import_s": time.perf_counter() - started}
    imported = time.perf_counter() - started
    runs = [check(sched, timeout=600) for _ in range(repeat)]
    result = runs[-1]
    return {**row, "verdict": result.verdict, "complete": result.complete, "kinds": sorted(result.kinds()),
            "states": result.states, "check_s": statistics.median(r.seconds for r in runs), "import_s": imported}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="checks per file; the median is reported")
    args = parser.parse_args()
    paths = sorted(CORPUS.glob("*.json")) + sorted((CORPUS / "buggy").glob("*.json"))
    rows = [measure(p, args.repeat) for p in paths]
    (OUT / "bench_import_mscclpp.json").write_text(json.dumps(
        {"python": platform.python_version(), "machine": platform.machine(), "repeat": args.repeat, "rows": rows},
        indent=2) + "\n")
    lines = ["# The checker on the MSCCL++ corpus", "",
             f"`python scripts/bench_import_mscclpp.py --repeat {args.repeat}`: each plan imported, then checked "
             "with the default search (depth first, partial-order reduction), one process, one core; check seconds "
             f"are the median of {args.repeat} runs (import excluded, listed apart). A refused plan names the op "
             "and line the importer stops at.", "",
             "| file | GPUs | thread blocks | ops | verdict | found | states | check s | import s |",
             "| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['file']} | {r['gpus']} | {r['thread_blocks']} | {r['ops']} | {r['verdict']}"
                     f"{'' if r['complete'] else ' (incomplete)'} | {', '.join(r['kinds']) or '-'} | {r['states']:,} | "
                     f"{r['check_s']:.2f} | {r['import_s']:.3f} |")
    total = sum(r["check_s"] for r in rows)
    lines += ["", f"{len(rows)} files, {total:.1f} s of checking in all."]
    (OUT / "bench_import_mscclpp.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
