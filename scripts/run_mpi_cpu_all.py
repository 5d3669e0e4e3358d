#!/usr/bin/env python3
"""Every protocol (every variant of a family) run under mpiexec with the mpi-cpu executor at N ranks,
each result checked element for element against the checker's values.

    python scripts/run_mpi_cpu_all.py [--np 8] [--sizes 1KiB,64KiB,1MiB] [--iters 3] [--jitter 2026]
                                      [--out results/mpi-cpu/8ranks]

One `clockworks run --json` per schedule variant (a seeded jitter shakes the orderings); writes
OUT/runs.json (each run's JSON and exit code) and OUT/README.md (a table). Exit 1 if any run
mismatched, hung or crashed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from clockworks_dist import load_file  # noqa: E402
from clockworks_dist.dsl import params  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--np", type=int, default=8)
    parser.add_argument("--sizes", default="1KiB,64KiB,1MiB")
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--jitter", type=int, default=2026)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--out", default=os.path.join(ROOT, "results", "mpi-cpu", "8ranks"))
    args = parser.parse_args()
    runs = []
    for path in sorted(glob.glob(os.path.join(ROOT, "protocols", "*.py"))):
        for defn in load_file(path):
            for binding in defn.variants() or [{}]:
                cmd = [sys.executable, "-m", "clockworks_dist.cli", "run", os.path.relpath(path, ROOT), "--np",
                       str(args.np), "--schedule", defn.name, "--sizes", args.sizes, "--iters", str(args.iters),
                       "--jitter", str(args.jitter), "--timeout", str(args.timeout), "--json"]
                for name, value in binding.items():
                    cmd += ["--param", f"{name}={value}"]
                started = time.monotonic()
                done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout + 60)
                seconds = time.monotonic() - started
                try:
                    result = json.loads(done.stdout)
                except ValueError:
                    result = None
                runs.append({"file": os.path.relpath(path, ROOT), "schedule": defn.name,
                             "variant": params.label(binding), "rc": done.returncode, "seconds": round(seconds, 1),
                             "result": result, "stderr": done.stderr[-2000:] if done.returncode else ""})
                print(f"{runs[-1]['file']} {runs[-1]['variant']}: rc={done.returncode} {seconds:.0f} s", flush=True)
    os.makedirs(args.out, exist_ok=True)
    meta = {"made": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "np": args.np,
            "sizes": args.sizes, "iters": args.iters, "jitter": args.jitter}
    with open(os.path.join(args.out, "runs.json"), "w") as handle:
        json.dump({**meta, "runs": runs}, handle, indent=1)
    ok = sum(1 for r in runs if r["rc"] == 0)
    lines = [f"# Every protocol under mpi-cpu at {args.np} ranks", "",
             f"`python scripts/run_mpi_cpu_all.py` ({meta['made']}): `clockworks run --backend mpi-cpu --np {args.np} "
             f"--sizes {args.sizes} --iters {args.iters} --jitter {args.jitter}` for every schedule and variant in "
             "protocols/; each rank a process, every element (and signal word) of every iteration compared with "
             f"the checker's values. {ok} of {len(runs)} runs match.", "",
             "| protocol | variant | exit | result | seconds |", "| --- | --- | ---: | --- | ---: |"]
    for r in runs:
        if r["result"]:
            ranks = [rank for res in r["result"].get("results", []) for rank in res.get("ranks", [])]
            checked = sum((rank.get("compare") or {}).get("checked", 0) for rank in ranks)
            what = f"{r['result'].get('verdict')}: {checked:,} values checked over the sizes and ranks"
        else:
            what = (r["stderr"].strip().splitlines() or ["no output"])[-1][:120]
        lines.append(f"| {r['file']} {r['schedule']} | {r['variant'] or '-'} | {r['rc']} | {what} | {r['seconds']} |")
    with open(os.path.join(args.out, "README.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")
    return 0 if ok == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
