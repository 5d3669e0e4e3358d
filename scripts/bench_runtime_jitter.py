"""How often does `clockworks run --jitter` expose the seeded bugs of protocols/buggy/ on mpi-cpu?

A schedule the checker calls buggy need not fail at run time: a race shows only in some orders,
and MPI may order more than NVSHMEM or NCCL promise. This script runs each seeded bug at the world
size its EXPECT names, `--seeds` times with different jitter seeds (one mpiexec job per bug), and
sorts each run:
- `reference`: every rank ended as the checker's reference execution, postcondition met;
- `other execution`: some value is that of another execution of the checker (a race or
  nondeterminism showed), postcondition met;
- `postcondition fails`: the result is wrong (`expect=`);
- `outside the checker`: a value no execution of the checker leaves (a disagreement, or a torn
  write of a racy region, which the checker's atoms do not model);
- `hang`, `crash`.
A bug whose schedule does not match statically is not run (`clockworks check` reports it before
any execution). Writes scripts/results/bench_runtime_jitter.json and .md.

    python scripts/bench_runtime_jitter.py --seeds 20
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import sys
import time

from clockworks_dist import load_file
from clockworks_dist.runtime import job as job_mod
from clockworks_dist.runtime import launch, verdict
from clockworks_dist.runtime.expected import build_reference
from clockworks_dist.semantics.match import match

HERE = os.path.dirname(os.path.abspath(__file__))
BUGGY = os.path.join(HERE, "..", "protocols", "buggy")
RESULTS = os.path.join(HERE, "results")
KINDS = ("reference", "other execution", "postcondition fails", "outside the checker", "hang", "crash")


def expect_of(path: str) -> dict:
    """The file's `EXPECT = {...}` literal, read without running the file."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "EXPECT" for t in node.targets):
            return ast.literal_eval(node.value)
    raise ValueError(f"{path} declares no EXPECT")


def sort_run(result: dict) -> str:
    """One run's kind (see the module docstring)."""
    if result["verdict"] in ("hang", "crash"):
        return result["verdict"]
    counts = [line.get("compare", {}) for line in result["ranks"]]
    if any(c.get("mismatches") for c in counts):
        return "outside the checker"
    if any(c.get("post_failures") for c in counts):
        return "postcondition fails"
    if any(c.get("other_execution") for c in counts):
        return "other execution"
    return "reference" if result["verdict"] == "match" else result["verdict"]


def run_bug(path: str, seeds: int, timeout: float) -> dict:
    """Every jitter seed of one seeded bug; a hang ends its job, the rest run in a new one."""
    expect = expect_of(path)
    sched = load_file(path)[0].trace(expect["ranks"])
    row = {"protocol": os.path.basename(path), "checker": expect["kind"], "ranks": expect["ranks"],
           "runs": 0, "kinds": dict.fromkeys(KINDS, 0), "examples": {}}
    if match(sched)[1]:
        row["note"] = "does not match statically: not run"
        return row
    reference = build_reference(sched)
    pending = list(range(1, seeds + 1))
    if reference.final is None:  # every execution of the checker deadlocks: one run shows the hang
        row["note"] = "every execution deadlocks: run once"
        pending = [1]
    while pending:
        items = [job_mod.Item(name=sched.name, world=sched.world, schedule_json=sched.to_json(),
                              reference=reference, timeout=timeout, jitter=seed) for seed in pending]
        outcome = launch.run(job_mod.Job(items=items, ranks=sched.world), timeout=None, stall=timeout + 10)
        results = verdict.summarize([sched] * len(items), outcome)["results"]
        done = [r for r in results if r["verdict"] != "not run"]
        for seed, result in zip(pending, done):
            kind = sort_run(result)
            row["kinds"][kind] = row["kinds"].get(kind, 0) + 1
            row["examples"].setdefault(kind, {"seed": seed, "message": result["message"]})
        row["runs"] += len(done)
        pending = pending[len(done):] if done else []
    return row


def markdown(rows: list[dict], seeds: int, seconds: float) -> str:
    """The committed table."""
    head = ["# Seeded bugs under `clockworks run --jitter` (mpi-cpu)", "",
            f"`python scripts/bench_runtime_jitter.py --seeds {seeds}`: each bug of protocols/buggy/ at the world "
            f"size its EXPECT names, once per jitter seed 1..{seeds}; {seconds:.0f} s in all. A run *exposes* the "
            "bug when it does not end as the checker's reference execution with the postcondition met.", "",
            "| protocol | checker | runs | exposed | " + " | ".join(KINDS) + " |",
            "|---|---|---:|---:|" + "---:|" * len(KINDS)]
    for row in rows:
        if row.get("note") and not row["runs"]:
            head.append(f"| {row['protocol']} | {row['checker']} | 0 | - | {row['note']} |" + " |" * (len(KINDS) - 1))
            continue
        exposed = row["runs"] - row["kinds"]["reference"]
        head.append(f"| {row['protocol']} | {row['checker']} | {row['runs']} | {exposed} | "
                    + " | ".join(str(row["kinds"][k]) for k in KINDS) + " |")
    head += ["", "Never exposed, by design: a bitwise-reproducibility bug (the inputs are exact in every order, so "
             "every association gives the same bits), and unfinished deliveries (a run completes every delivery "
             "before it compares, as the checker's terminal states do; within a node MPI's puts land at once). "
             "`outside the checker` stays 0: every value a racy run left is one some execution of the checker "
             "leaves too."]
    return "\n".join(head) + "\n"


def main() -> int:
    """Run every seeded bug; write the JSON and the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per run before it counts as a hang")
    parser.add_argument("--out", default=os.path.join(RESULTS, "bench_runtime_jitter"))
    args = parser.parse_args()
    started = time.monotonic()
    rows = []
    for path in sorted(glob.glob(os.path.join(BUGGY, "*.py"))):
        rows.append(run_bug(path, args.seeds, args.timeout))
        print(f"{rows[-1]['protocol']}: {rows[-1]['kinds']} {rows[-1].get('note', '')}", flush=True)
    seconds = time.monotonic() - started
    with open(args.out + ".json", "w", encoding="utf-8") as handle:
        json.dump({"seeds": args.seeds, "seconds": seconds, "rows": rows}, handle, indent=1)
        handle.write("\n")
    with open(args.out + ".md", "w", encoding="utf-8") as handle:
        handle.write(markdown(rows, args.seeds, seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
