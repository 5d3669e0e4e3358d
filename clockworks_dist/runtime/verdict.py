"""The lines of a job summed up, per schedule: results match, mismatch, hang or crash.

A hang or crash names each rank's op and the user's file:line, in the shape of the checker's
deadlock report ("rank 0 is in send(peer=1, x[0:4]) at ring.py:14, waiting for its matching recv
on rank 1"): from the rank's own line when it could write one (it timed out in a wait, or raised),
else from its progress word (it died, or was stuck where it could not look at the clock).
"""

from __future__ import annotations

import statistics

from .. import ir
from . import compare
from .launch import Outcome
from .progress import Phase

VERDICTS = ("match", "ran", "mismatch", "hang", "crash", "not run")  # from best to worst
FIRST_SHOWN = 3


def _worst(verdicts: list[str]) -> str:
    return max(verdicts, key=VERDICTS.index) if verdicts else "match"


def summarize(schedules: list[ir.Schedule], outcome: Outcome) -> dict:
    """The job's verdict and one result per schedule (`schedules[i]` is item i)."""
    results = [_result(index, sched, outcome) for index, sched in enumerate(schedules)]
    return {"verdict": _worst([r["verdict"] for r in results]), "results": results,
            "seconds": round(outcome.seconds, 3)}


def _result(index: int, sched: ir.Schedule, outcome: Outcome) -> dict:
    lines = sorted((line for line in outcome.lines if line["item"] == index), key=lambda line: line["rank"])
    by_rank = {line["rank"]: line for line in lines}
    here = [r for r in range(sched.world) if r < len(outcome.rows) and outcome.rows[r]["schedule"] == index]
    result = {"schedule": sched.name, "world": sched.world, "ranks": lines}
    if len(by_rank) == sched.world and all(line["status"] in ("match", "ran", "mismatch") for line in lines):
        result.update(_finished(lines))
    elif not lines and not here:
        result.update(verdict="not run", message="not run: the job stopped at an earlier schedule")
    else:
        result.update(_stopped(sched, by_rank, outcome))
    result["time"] = _timing(lines)
    return result


def _finished(lines: list[dict]) -> dict:
    """Every rank ran to the end: match, or the first mismatches."""
    if all(line["status"] == "ran" for line in lines):
        return {"verdict": "ran", "message": "ran to the end; no execution of the checker finishes, so there "
                                             "are no expected values to compare with"}
    bad = [line for line in lines if line["status"] == "mismatch"]
    checked = sum(line.get("compare", {}).get("checked", 0) for line in lines)
    iterations = max(1, min(len(line["seconds"]) for line in lines))
    if not bad:
        each = f", in each of {iterations} iterations" if iterations > 1 else ""
        return {"verdict": "match", "message": f"results match: {checked // iterations:,} elements and signal words "
                                               f"equal the checker's values{each}"}
    records = [record for line in bad for record in line["compare"]["first"]]
    wrong = sum(line["compare"]["mismatches"] for line in bad)
    post = sum(line["compare"]["post_failures"] for line in bad)
    parts = []
    if wrong:
        parts.append(f"{wrong:,} of {checked:,} values differ from every execution of the checker")
    if post:
        parts.append(f"{post:,} elements fail the postcondition")
    ranks = ", ".join(str(line["rank"]) for line in bad)
    shown = "; ".join(compare.describe(record) for record in records[:FIRST_SHOWN])
    return {"verdict": "mismatch", "message": f"mismatch: {' and '.join(parts)} (rank(s) {ranks}); {shown}"}


def _stopped(sched: ir.Schedule, by_rank: dict[int, dict], outcome: Outcome) -> dict:
    """Some rank did not finish: who raised or died (crash), else who waited for what (hang)."""
    raised = [r for r, line in by_rank.items() if line["status"] == "error"]
    dead = [r for r in outcome.dead if r < sched.world and r not in by_rank]
    timed_out = [r for r, line in by_rank.items() if line["status"] == "timeout"]
    states = [_state(sched, rank, by_rank.get(rank), outcome) for rank in range(sched.world)]
    if not by_rank and all(rank >= len(outcome.rows) or not outcome.rows[rank]["pid"] for rank in range(sched.world)):
        said = outcome.stderr.strip().splitlines()[-3:]
        return {"verdict": "crash", "crashed": list(range(sched.world)),
                "message": f"no rank started (mpiexec exited with code {outcome.returncode})"
                           + (": " + " / ".join(said) if said else "")}
    if raised or dead:
        first = [states[r] for r in raised + dead]
        others = [s for r, s in enumerate(states) if r not in raised and r not in dead]
        message = "crash: " + "; ".join(first) + ("; when the job stopped, " + "; ".join(others) if others else "")
        return {"verdict": "crash", "message": message, "crashed": sorted(raised + dead)}
    why = "the deadline passed" if timed_out or outcome.stopped_by == "deadline" else "no rank moved"
    return {"verdict": "hang", "message": f"hang ({why}): " + "; ".join(states),
            "stuck": [r for r in range(sched.world) if by_rank.get(r, {}).get("status") not in ("match", "mismatch")]}


def _state(sched: ir.Schedule, rank: int, line: dict | None, outcome: Outcome) -> str:
    """Where one rank was, from its line or else its progress word."""
    if line is not None and line["status"] in ("match", "mismatch", "ran"):
        return f"rank {rank} finished"
    if line is not None:
        where = _op_text(line.get("op")) or PHASES.get(line.get("phase"), "an unknown place")
        if line["status"] == "error":
            return f"rank {rank} raised {line.get('message')} in {where}"
        waiting = f", waiting for {line['waiting']}" if line.get("waiting") else ""
        verb = "is in" if line["status"] == "timeout" else "was in"
        return f"rank {rank} {verb} {where}{waiting}"
    row = outcome.rows[rank] if rank < len(outcome.rows) else None
    where = _progress_where(sched, rank, row)
    if rank in outcome.dead:
        return f"rank {rank} died (its process ended without a result; killed?) in {where}"
    if rank in outcome.killed:
        return f"rank {rank} was in {where} (mpiexec ended it after another rank died)"
    if row is None or row["pid"] == 0:
        return f"rank {rank} never started (see mpiexec's output)"
    return f"rank {rank} is stuck in {where} (it could not report: busy outside a wait, or in C code)"


def _op_text(op: dict | None) -> str | None:
    if not op:
        return None
    return f"{op['text']} at {op['file']}:{op['line']}"


def _progress_where(sched: ir.Schedule, rank: int, row: dict | None) -> str:
    if row is None:
        return "an unknown place"
    phase = row["phase"]
    ops = sched.programs[rank].ops
    if phase == Phase.RUNNING.name.lower() and 0 <= row["op"] < len(ops):
        op = ops[row["op"]]
        if op.kind == "group" and 0 <= row["member"] < len(op.ops):
            op = op.ops[row["member"]]
        from ..semantics.rules import describe

        return f"{describe(op)} at {op.loc.file}:{op.loc.line}"
    return PHASES.get(phase, phase)


PHASES = {"setup": "the setup (communicators, windows) or the barrier before the run",
          "settling": "the end of the run (its ops done; completing deliveries, then a barrier)",
          "comparing": "the comparison", "not_started": "its start", "running": "an op"}


def _timing(lines: list[dict]) -> dict | None:
    """Per iteration the slowest rank's time in the ops; median, min and max over iterations (us)."""
    runs = [line["seconds"] for line in lines if line.get("seconds")]
    if not runs:
        return None
    iterations = min(len(run) for run in runs)
    slowest = [max(run[i] for run in runs) for i in range(iterations)]
    return {"iterations": iterations, "median_us": round(statistics.median(slowest) * 1e6, 1),
            "min_us": round(min(slowest) * 1e6, 1), "max_us": round(max(slowest) * 1e6, 1)}
