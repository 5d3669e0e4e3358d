"""Memory per stored state, and the time to free the stored states, of the depth-first (`dfs`,
the default) and breadth-first (`bfs`) searches.

Each case runs in a fresh subprocess: it traces `SCHEDULE` (every rank puts into its neighbour's
buffer and copies it back, K times: many interleavings, all racing), compiles the model, records the
peak resident memory, runs the search alone (`check._search`, no symbolic phases) and records the
peak again; bytes per stored state = the growth of the peak / the states the search stores (dfs: the
branch points it keeps; bfs: every state it reaches, with its parent link). Then it drops the
outcome and times how long freeing it takes (the part of a check that runs after its search and
cannot look at the deadline).

    python scripts/bench_checker_memory.py [--k 2] [--ranks 4] [--strategies dfs bfs] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SCHEDULE = '''
import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)
K = cw.param("K", [1, 2, 3, 4])


@cw.schedule(ranks=(4,))
def puts_and_copies(r):
    s = r.symmetric("s", count=CHUNK, role="output")
    x = r.buffer("x", count=CHUNK, role="input")
    for _ in range(K):
        r.put((r.rank + 1) % r.world, s, x)
        r.copy(x, s)
'''


def _peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def worker(strategy: str, k: int, ranks: int) -> dict:
    sys.path.insert(0, str(REPO))
    from clockworks_dist import load_file
    from clockworks_dist.check import Model, _search, match
    from clockworks_dist.semantics.budget import cycle_collector_paused

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "puts_and_copies.py"
        path.write_text(SCHEDULE)
        sched = load_file(str(path))[0].trace(ranks, params={"K": k})
    with cycle_collector_paused():  # as check() runs it
        matches, _ = match(sched)
        model = Model(sched, matches)
        gc.collect()
        before = _peak_bytes()
        started = time.perf_counter()
        outcome = _search(model, strategy, reduction=True, max_states=None)
        seconds = time.perf_counter() - started
        after = _peak_bytes()
        states, stored = outcome.states, outcome.stored
        started = time.perf_counter()
        del outcome
        freed = time.perf_counter() - started
    return {"strategy": strategy, "k": k, "ranks": ranks, "states": states, "stored": stored,
            "search_seconds": round(seconds, 2), "peak_growth_mb": round((after - before) / 2**20, 1),
            "bytes_per_stored_state": round((after - before) / stored) if stored else None,
            "free_seconds": round(freed, 3),
            "free_us_per_stored_state": round(freed / stored * 1e6, 2) if stored else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--strategies", nargs="+", default=["dfs", "bfs"])
    parser.add_argument("--out", help="write the records as JSON here")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        strategy, k, ranks = args.worker
        print(json.dumps(worker(strategy, int(k), int(ranks))))
        return
    records = []
    for strategy in args.strategies:
        proc = subprocess.run([sys.executable, __file__, "--worker", strategy, str(args.k), str(args.ranks)],
                              capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"})
        record = json.loads(proc.stdout.strip().splitlines()[-1])
        records.append(record)
        print(json.dumps(record))
    if args.out:
        Path(args.out).write_text(json.dumps(records, indent=2) + "\n")


if __name__ == "__main__":
    main()
