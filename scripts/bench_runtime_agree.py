"""Checker against the mpi-cpu executor on random schedules: every schedule the checker verifies,
run under MPI, must match the checker's values element for element.

Schedules come from the property tests' generator (tests/test_por_properties.py): random sends,
recvs, groups, collectives, puts, gets, signals, atomics, waits, fences, quiets and local ops over 2
or 3 ranks. Those the checker verifies run in a few mpiexec jobs (a driver looping over them, not
one launch each), with `--jitter`: random delays before ops, seeded. A disagreement (a mismatch, a
hang or a crash) is a bug in one of the two, listed in full in the JSON. Earlier runs found three:
the checker completed a send with its recv, and a collective on every member, in one step, and read
a send's source only when it met its recv; MPI does neither, and the checker now models what it
does (protocols/buggy/get_after_allreduce.py, put_races_recv_reduce.py, group_send_reads_own_recv.py).

    python scripts/bench_runtime_agree.py --schedules 10000 --seed 1 --jitter 7

writes scripts/results/bench_runtime_agree.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

import test_por_properties as props  # noqa: E402
from clockworks_dist import ir  # noqa: E402
from clockworks_dist.check import check  # noqa: E402
from clockworks_dist.report.text import render_listing  # noqa: E402
from clockworks_dist.runtime import job as job_mod  # noqa: E402
from clockworks_dist.runtime import launch, verdict  # noqa: E402
from clockworks_dist.runtime.expected import build_reference  # noqa: E402

RESULTS = os.path.join(HERE, "results")
SHOWN = 5  # disagreements written out in full


def draw(wanted: int, seed_value: int, deadline: float) -> tuple[list, dict]:
    """Verified schedules (until `wanted` of them, or the deadline) and the counts of the others;
    drawn in rounds of fresh examples, seeds `seed_value`, `seed_value` + 1, ..."""
    verified = []
    counts = {"drawn": 0, "not_matched": 0, "not_verified": 0}

    def one(plan) -> None:
        if len(verified) >= wanted or time.monotonic() > deadline:
            return
        counts["drawn"] += 1
        sched = props.build(plan)
        if not props.matched(sched):
            counts["not_matched"] += 1
        elif check(sched).verdict != "verified":
            counts["not_verified"] += 1
        else:
            verified.append(sched)

    round_seed = seed_value
    while len(verified) < wanted and time.monotonic() < deadline:
        examples = max(100, 4 * (wanted - len(verified)))
        seed(round_seed)(settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                                  suppress_health_check=list(HealthCheck))(given(props.plans())(one)))()
        round_seed += 1
    return verified, counts


def run_all(schedules: list[ir.Schedule], chunk: int, jitter: int | None) -> tuple[list[dict], float]:
    """Run every schedule, `chunk` per mpiexec job; one result per schedule."""
    results, seconds = [], 0.0
    for start in range(0, len(schedules), chunk):
        part = schedules[start:start + chunk]
        items = [job_mod.Item(name=s.name, world=s.world, schedule_json=s.to_json(), reference=build_reference(s),
                              timeout=30.0) for s in part]
        job = job_mod.Job(items=items, ranks=max(s.world for s in part), jitter=jitter)
        outcome = launch.run(job, timeout=None, stall=60.0)
        seconds += outcome.seconds
        results += verdict.summarize(part, outcome)["results"]
        print(f"  ran {start + len(part)} / {len(schedules)} ({outcome.seconds:.1f} s)", flush=True)
    return results, seconds


def disagreements(schedules: list[ir.Schedule], results: list[dict]) -> list[dict]:
    """The schedules whose run did not match, with their listing and JSON."""
    return [{"verdict": result["verdict"], "message": result["message"], "listing": render_listing(sched),
             "schedule": json.loads(sched.to_json())}
            for sched, result in zip(schedules, results) if result["verdict"] != "match"]


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=HERE, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def markdown(report: dict) -> str:
    """The committed summary."""
    c = report["counts"]
    lines = [
        "# Checker vs mpi-cpu executor on random schedules", "",
        f"`python scripts/bench_runtime_agree.py --schedules {report['wanted']} --seed {report['seed']} "
        f"--jitter {report['jitter']}` at commit {report['commit']}, {report['machine']}.", "",
        "| drawn | not matched statically | checker finds a violation | verified and run | agree | disagree |",
        "|---|---|---|---|---|---|",
        f"| {c['drawn']:,} | {c['not_matched']:,} | {c['not_verified']:,} | {c['verified']:,} | "
        f"{c['verified'] - c['disagree']:,} | {c['disagree']:,} |", "",
        f"Drawing and checking took {report['draw_seconds']:.0f} s; running took {report['run_seconds']:.0f} s in "
        f"{report['jobs']} mpiexec job(s). A disagreement is a mismatch against every execution of the checker, "
        "or a run that hangs or crashes; each is listed in full in the JSON.", "",
    ]
    for found in report["disagreements"][:SHOWN]:
        lines += [f"- {found['verdict']}: {found['message']}", "", "```", found["listing"], "```", ""]
    return "\n".join(lines)


def main() -> int:
    """Draw, run, and write the JSON and the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=1000, help="verified schedules to run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jitter", type=int, default=7, help="seed of the random delays before ops")
    parser.add_argument("--chunk", type=int, default=2500, help="schedules per mpiexec job")
    parser.add_argument("--minutes", type=float, default=60.0, help="stop drawing after this long")
    parser.add_argument("--out", default=os.path.join(RESULTS, "bench_runtime_agree"))
    args = parser.parse_args()
    started = time.monotonic()
    verified, counts = draw(args.schedules, args.seed, started + args.minutes * 60)
    drawn_at = time.monotonic()
    print(f"drew {counts['drawn']:,}: {len(verified):,} verified ({drawn_at - started:.0f} s)", flush=True)
    results, run_seconds = run_all(verified, args.chunk, args.jitter)
    found = disagreements(verified, results)
    counts.update(verified=len(verified), disagree=len(found))
    report = {"wanted": args.schedules, "seed": args.seed, "jitter": args.jitter, "commit": _commit(),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "counts": counts, "draw_seconds": drawn_at - started, "run_seconds": run_seconds,
              "jobs": -(-len(verified) // args.chunk), "disagreements": found}
    with open(args.out + ".json", "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1)
        handle.write("\n")
    with open(args.out + ".md", "w", encoding="utf-8") as handle:
        handle.write(markdown(report))
    print(f"{len(verified):,} verified schedules: {len(found)} disagreements. Wrote {args.out}.json and .md")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
