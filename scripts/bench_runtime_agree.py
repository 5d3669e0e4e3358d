"""Do the checker and the mpi-cpu executor agree? Run N random verified schedules for real.

Draws random schedules with the property tests' strategy (tests/test_por_properties.py: `plans`,
`build`), keeps those the checker verifies, and runs them all under one `mpiexec` per chunk of
`--chunk` schedules (a driver looping over them, not one launch per schedule), with `--jitter`
random delays before ops. Every element and signal word of every rank must hold a value some
execution of the checker leaves; a schedule where one does not is a disagreement: a bug in the
executor or in the semantics.

Two ways are known in which MPI (and NCCL) order less than the checker's semantics:
- a send's source is read at any time after its group is posted, not when the send completes:
  verified schedules with a group whose members overlap, one of them writing, are run apart
  (protocols/runtime/group_send_reads_own_recv.py);
- a send completes with its recv, and a collective on every member, in one joint step in the
  checker; in MPI a send completes once matched and a collective on one member before another
  has written its output (protocols/runtime/get_after_allreduce.py, put_races_recv_reduce.py).
  Each disagreement is run again `--again` times with joint completion (`--joint`: an
  acknowledgement after each recv, a barrier after each collective); one that then matches is
  of this kind, any other is unexplained.

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
from clockworks_dist.runtime.known import group_member_overlap  # noqa: E402

RESULTS = os.path.join(HERE, "results")
SHOWN = 5  # disagreements written out in full


def draw(wanted: int, seed_value: int, deadline: float) -> tuple[list, list, dict]:
    """Verified schedules (until `wanted` of them, or the deadline) and the counts of the others;
    drawn in rounds of fresh examples, seeds `seed_value`, `seed_value` + 1, ..."""
    verified, overlapping = [], []
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
        elif group_member_overlap(sched):
            overlapping.append(sched)
        else:
            verified.append(sched)

    round_seed = seed_value
    while len(verified) < wanted and time.monotonic() < deadline:
        examples = max(100, 4 * (wanted - len(verified)))
        seed(round_seed)(settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                                  suppress_health_check=list(HealthCheck))(given(props.plans())(one)))()
        round_seed += 1
    return verified, overlapping, counts


def run_all(schedules: list[ir.Schedule], chunk: int, jitter: int | None, joint: bool = False,
            iters: int = 1) -> tuple[list[dict], float]:
    """Run every schedule, `chunk` per mpiexec job; one result per schedule."""
    results, seconds = [], 0.0
    for start in range(0, len(schedules), chunk):
        part = schedules[start:start + chunk]
        items = [job_mod.Item(name=s.name, world=s.world, schedule_json=s.to_json(), reference=build_reference(s),
                              timeout=30.0, joint=joint) for s in part]
        job = job_mod.Job(items=items, ranks=max(s.world for s in part), jitter=jitter, iters=iters)
        outcome = launch.run(job, timeout=None, stall=60.0)
        seconds += outcome.seconds
        results += verdict.summarize(part, outcome)["results"]
        print(f"  ran {start + len(part)} / {len(schedules)} ({outcome.seconds:.1f} s)", flush=True)
    return results, seconds


def disagreements(schedules: list[ir.Schedule], results: list[dict], chunk: int, jitter: int | None,
                  again: int) -> list[dict]:
    """The schedules whose run did not match, with their listing and JSON, each run `again` more
    times with joint completion: `joint_completion` says whether every one of those matched."""
    found, differ = [], []
    for sched, result in zip(schedules, results):
        if result["verdict"] != "match":
            differ.append(sched)
            found.append({"verdict": result["verdict"], "message": result["message"],
                          "listing": render_listing(sched), "schedule": json.loads(sched.to_json())})
    if differ:
        joint, _seconds = run_all(differ, chunk, jitter, joint=True, iters=again)
        for entry, result in zip(found, joint):
            entry["joint_completion"] = result["verdict"] == "match"
    return found


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
        "| | schedules | agree | disagree | of which joint completion explains | unexplained |",
        "|---|---:|---:|---:|---:|---:|",
        f"| verified by the checker | {c['verified']:,} | {c['verified'] - c['disagree']:,} | {c['disagree']:,} | "
        f"{c['joint']:,} | {c['unexplained']:,} |",
        f"| verified, with a group whose members overlap | {c['overlapping']:,} | "
        f"{c['overlapping'] - c['overlap_disagree']:,} | {c['overlap_disagree']:,} | - | - |", "",
        f"Drawn {c['drawn']:,} schedules: {c['not_matched']:,} do not match statically, {c['not_verified']:,} "
        f"are not verified (a violation, or incomplete), and are not run. Run time: {report['run_seconds']:.0f} s "
        f"in {report['jobs']} mpiexec job(s); drawing and checking: {report['draw_seconds']:.0f} s.", "",
        "A disagreement is an element or signal word that holds a value no execution of the checker leaves, "
        "or a run that hangs or crashes. Both known kinds are the checker's semantics promising more order than "
        "MPI or NCCL give, so the checker misses a race there:",
        "- a send's source is read when the send completes in the checker, at any time after its group is "
        "posted in MPI and NCCL (protocols/runtime/group_send_reads_own_recv.py);",
        "- a send and its recv, and a collective, complete in one joint step in the checker; in MPI a send "
        "completes once matched, before the receiver has written (or reduced into) its buffer, and a collective "
        "completes on one member before another has written its output (protocols/runtime/get_after_allreduce.py, "
        "put_races_recv_reduce.py). A disagreement that matches in every one of "
        f"{report['again']} runs with joint completion (`clockworks run --joint`) is counted as this kind.",
    ]
    for title, key in (("Disagreements", "disagreements"), ("With overlapping group members (first few)",
                                                             "overlap_examples")):
        if report[key]:
            lines += ["", f"## {title}", ""]
            for found in report[key][:SHOWN]:
                why = "matches with joint completion" if found.get("joint_completion") else "unexplained"
                lines += [f"- {found['verdict']} ({why}): {found['message']}", "", "```", found["listing"], "```", ""]
    return "\n".join(lines) + "\n"


def main() -> int:
    """Draw, run, and write the JSON and the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=1000, help="verified schedules to run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jitter", type=int, default=7, help="seed of the random delays before ops")
    parser.add_argument("--chunk", type=int, default=2500, help="schedules per mpiexec job")
    parser.add_argument("--again", type=int, default=20, help="runs of a disagreement with joint completion")
    parser.add_argument("--minutes", type=float, default=60.0, help="stop drawing after this long")
    parser.add_argument("--out", default=os.path.join(RESULTS, "bench_runtime_agree"))
    args = parser.parse_args()
    started = time.monotonic()
    verified, overlapping, counts = draw(args.schedules, args.seed, started + args.minutes * 60)
    drawn_at = time.monotonic()
    print(f"drew {counts['drawn']:,}: {len(verified):,} verified, {len(overlapping):,} verified with overlapping "
          f"group members ({drawn_at - started:.0f} s)", flush=True)
    results, run_seconds = run_all(verified, args.chunk, args.jitter)
    known, known_seconds = run_all(overlapping, args.chunk, args.jitter) if overlapping else ([], 0.0)
    found = disagreements(verified, results, args.chunk, args.jitter, args.again)
    known_found = disagreements(overlapping, known, args.chunk, args.jitter, args.again)
    counts.update(verified=len(verified), disagree=len(found), overlapping=len(overlapping),
                  overlap_disagree=len(known_found),
                  joint=sum(f["joint_completion"] for f in found),
                  unexplained=sum(not f["joint_completion"] for f in found))
    report = {"wanted": args.schedules, "seed": args.seed, "jitter": args.jitter, "again": args.again,
              "commit": _commit(),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "counts": counts, "draw_seconds": drawn_at - started, "run_seconds": run_seconds + known_seconds,
              "jobs": -(-len(verified) // args.chunk) + -(-len(overlapping) // args.chunk),
              "disagreements": found, "overlap_examples": known_found[:SHOWN]}
    with open(args.out + ".json", "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1)
        handle.write("\n")
    with open(args.out + ".md", "w", encoding="utf-8") as handle:
        handle.write(markdown(report))
    print(f"{len(verified):,} verified schedules: {len(found)} disagreements ({counts['unexplained']} unexplained); "
          f"{len(overlapping)} with overlapping group members: {len(known_found)} disagree. Wrote {args.out}.json "
          "and .md")
    return 1 if counts["unexplained"] else 0


if __name__ == "__main__":
    sys.exit(main())
