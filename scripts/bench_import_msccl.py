"""The checker on the MSCCL corpus: every published algorithm of corpus/msccl/ and every seeded bug,
imported (`importers.msccl`) and checked with the default search, one after another in one process.

Writes scripts/results/bench_import_msccl.md (and .json): per file, its shape (GPUs, thread blocks,
steps), the verdict and kinds found, the states the search visited and the seconds the check took
(median of `--repeat` runs, import excluded), and the import's own seconds.

    python scripts/bench_import_msccl.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from clockworks_dist.check import check
from clockworks_dist.importers.msccl import to_schedule
from clockworks_dist.importers.msccl_xml import parse

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus" / "msccl"
OUT = ROOT / "scripts" / "results"


def measure(path: Path, repeat: int) -> dict:
    started = time.perf_counter()
    alg = parse(path)
    sched = to_schedule(alg)
    imported = time.perf_counter() - started
    runs = [check(sched, timeout=600) for _ in range(repeat)]
    result = runs[-1]
    return {
        "file": str(path.relative_to(CORPUS)), "gpus": alg.ngpus, "thread_blocks": sum(len(g.tbs) for g in alg.gpus),
        "steps": sum(len(tb.steps) for g in alg.gpus for tb in g.tbs), "verdict": result.verdict,
        "complete": result.complete, "kinds": sorted(result.kinds()), "states": result.states,
        "check_s": statistics.median(r.seconds for r in runs), "import_s": imported,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="checks per file; the median is reported")
    args = parser.parse_args()
    rows = [measure(p, args.repeat) for p in sorted(CORPUS.glob("*.xml")) + sorted((CORPUS / "buggy").glob("*.xml"))]
    (OUT / "bench_import_msccl.json").write_text(json.dumps(
        {"python": platform.python_version(), "machine": platform.machine(), "repeat": args.repeat, "rows": rows},
        indent=2) + "\n")
    lines = ["# The checker on the MSCCL corpus", "",
             f"`python scripts/bench_import_msccl.py --repeat {args.repeat}`: each file imported, then checked with "
             "the default search (depth first, partial-order reduction), one process, one core; check seconds are "
             f"the median of {args.repeat} runs (import excluded, listed apart).", "",
             "| file | GPUs | thread blocks | steps | verdict | found | states | check s | import s |",
             "| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['file']} | {r['gpus']} | {r['thread_blocks']} | {r['steps']} | {r['verdict']}"
                     f"{'' if r['complete'] else ' (incomplete)'} | {', '.join(r['kinds']) or '-'} | {r['states']:,} | "
                     f"{r['check_s']:.2f} | {r['import_s']:.3f} |")
    total = sum(r["check_s"] for r in rows)
    lines += ["", f"{len(rows)} files, {total:.1f} s of checking in all."]
    (OUT / "bench_import_msccl.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
