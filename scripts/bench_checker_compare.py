"""The checker at two commits, side by side in one run: median seconds of `check()` (search and
symbolic checks, no bound) over a few protocols, and the ratio new/old. Each commit is exported to
a temporary folder and run in its own Python process, alternately, so machine noise hits both.
Each process starts in its exported tree (`python -c` puts the working directory first on the
path, before PYTHONPATH: started from the repository, both sides would run the checkout).

    python scripts/bench_checker_compare.py --old e2b8619 --new HEAD --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CASES = [("ring_allreduce.py", 8), ("ring_allreduce.py", 32), ("nvshmem_oneshot_allreduce.py", 8),
         ("direct_alltoall.py", 16), ("dissemination_barrier.py", 16)]
RUN = """
import sys, time
import clockworks_dist as cw
from clockworks_dist.check import check
sched = cw.load_file(sys.argv[1])[0].trace(int(sys.argv[2]))
started = time.perf_counter()
result = check(sched, timeout=None)
print(time.perf_counter() - started, result.states, result.verdict)
"""


def export(rev: str, into: str) -> str:
    """The tree of `rev`, unpacked under `into`."""
    archive = os.path.join(into, f"{rev}.tar")
    subprocess.run(["git", "archive", "-o", archive, rev], cwd=ROOT, check=True)
    folder = os.path.join(into, rev)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="e2b8619")
    parser.add_argument("--new", default="HEAD")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {rev: export(rev, tmp) for rev in (args.old, args.new)}
        print(f"| protocol | ranks | states (old) | states (new) | old s | new s | new/old |")
        print("|---|---|---|---|---|---|---|")
        for name, world in CASES:
            seconds: dict[str, list[float]] = {rev: [] for rev in trees}
            states = {}
            for _ in range(args.repeat):
                for rev, tree in trees.items():
                    out = subprocess.run([sys.executable, "-c", RUN, os.path.join(tree, "protocols", name), str(world)],
                                         capture_output=True, text=True, check=True, cwd=tree,
                                         env={**os.environ, "PYTHONPATH": tree})
                    elapsed, count, verdict = out.stdout.split()
                    seconds[rev].append(float(elapsed))
                    states[rev] = f"{int(count):,} {verdict}"
            old, new = (statistics.median(seconds[rev]) for rev in (args.old, args.new))
            print(f"| {name} | {world} | {states[args.old]} | {states[args.new]} | {old:.3f} | {new:.3f} | "
                  f"{new / old:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
