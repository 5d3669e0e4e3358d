"""`clockworks run FILE --backend mpi-cpu|cupy --np N`: run a schedule for real and check every
element against the checker's values.

The command traces each schedule of FILE at N ranks (with `--sizes`, once per size of its main
buffer), computes the checker's final values (`runtime.expected`), starts `mpiexec` itself
(`runtime.launch`; or, started inside an MPI job, runs as one of its ranks), and prints the verdict
of each schedule: results match, mismatch, hang or crash, with the first mismatches (rank, buffer,
element, expected as a term and as a number, got) or each rank's op and file:line, and the time in
the ops (the slowest rank per iteration: median, min, max). `--json` prints one JSON object with
every rank's line. Backends: `mpi-cpu` (numpy and MPI, `runtime.mpi_cpu`), `cupy` (CuPy and NCCL,
one GPU per rank, `runtime.cupy_nccl`).

Exit codes: 0 results match, 1 a mismatch, a hang or a crash, 2 bad input (the file, an option, an
unknown backend, an op the backend cannot run, no mpiexec or mpi4py, no CuPy, more ranks than
GPUs), 3 the time bound passed before the run started (loading, tracing, the expected values), 4
an internal error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .. import hygiene, ir
from ..dsl import bounded
from ..runtime import select
from ..errors import CheckIncomplete, ClockworksError

RUN_TIMEOUT_S = 60.0
# The ranks stop waiting this much before --timeout (at most), so they can still say where they were.
REPORT_MARGIN_S = 1.5
EXIT_MATCH, EXIT_FAILED = 0, 1
SEARCH_SHARE = 0.5  # of what is left of --timeout, for the search of every final value


def add_parser(sub, positive, size_arg, seconds) -> None:
    """The `run` subcommand (`positive`, `size_arg`, `seconds`: the CLI's argument types)."""
    run = sub.add_parser("run", help="run a schedule with a real communication library; check every element",
                         description="Run each schedule of FILE under mpiexec (one process per rank; with --backend "
                                     "cupy, one GPU per rank) and compare every element with the checker's expected "
                                     "values.",
                         epilog="exit codes: 0 results match, 1 mismatch, hang or crash, 2 bad input, "
                                "3 out of time before the run, 4 internal error")
    run.add_argument("file", metavar="FILE", help="a Python file defining @cw.schedule functions, or a schedule "
                                                  "as JSON (clockworks show --json)")
    run.add_argument("--backend", default="mpi-cpu", metavar="NAME",
                     help=f"the executor: {', '.join(select.BACKENDS)} (default: mpi-cpu)")
    run.add_argument("--np", metavar="N", type=positive,
                     help="ranks (default: the schedule's first declared size, else 2)")
    run.add_argument("--max-ranks", metavar="N", type=positive, default=None,
                     help=f"the most ranks run starts here (default: {hygiene.RANKS_PER_CORE} per available core, at "
                          f"least {hygiene.MIN_LOCAL_RANKS}: {hygiene.max_local_ranks()} on this machine); raise it "
                          "to oversubscribe further")
    run.add_argument("--schedule", metavar="NAME", help="only the schedule NAME (default: every one in FILE)")
    run.add_argument("--size", metavar="NAME=VALUE", type=size_arg, nargs="+", action="extend", default=[],
                     help="bind a symbolic size, e.g. --size CHUNK=1024")
    run.add_argument("--sizes", metavar="RANGE",
                     help="run each schedule at these bytes per rank of its main buffer (as clockworks predict): "
                          "1KiB..1GiB (powers of two) or a list 1KiB,4KiB,16KiB; every size in one mpiexec job")
    run.add_argument("--iters", metavar="K", type=positive, default=1,
                     help="run each schedule K times (inputs reset each time); every time is checked")
    run.add_argument("--timeout", metavar="S", type=seconds, default=RUN_TIMEOUT_S,
                     help=f"end everything within S seconds: a hang is reported with each rank's op "
                          f"(default: {RUN_TIMEOUT_S:g}; 0 or 'none' for no bound)")
    run.add_argument("--jitter", metavar="SEED", type=int,
                     help="sleep a random while (up to 2 ms) before half the ops, seeded: shakes out orderings")
    run.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    run.add_argument("--debug", action="store_true", help="print tracebacks of errors in the input")


def _references(args: argparse.Namespace, schedules: list[ir.Schedule]) -> list:
    """The checker's values of each schedule, within what is left of --timeout."""
    from ..dsl import guard
    from ..runtime.expected import build_reference

    found = []
    for sched in schedules:
        left = bounded.left(args, bounded.elapsed(args))
        # the search for every final value may take half of what is left; the run needs the rest
        search = None if left is None else left * SEARCH_SHARE
        try:
            with bounded.bound(args, left, f"computing the expected values of {sched.name}"):
                found.append(build_reference(sched, timeout=search))
        except guard.TimeUp:
            raise CheckIncomplete(f"computing the checker's values of {sched.name} did not finish within "
                                  f"{args.timeout:g} s (--timeout)") from None
    return found


# ----------------------------------------------------------------------------------- running
def cmd_run(args: argparse.Namespace, out) -> int:
    """Trace, compute the expected values, run under mpiexec, print the verdict."""
    from ..runtime import launch

    backend = select.backend(args.backend)
    if launch.inside_mpi_job():
        return _run_inside(args, out, backend)
    # the input first (file, options, sizes, ops the backend lacks), then what the machine lacks
    schedules, nbytes = bounded.schedules(args)
    for sched in schedules:
        select.supported(backend, sched)
    if args.backend == "cupy":
        select.require_gpus(max(s.world for s in schedules))
    launch.find_mpiexec()
    launch.require_mpi4py()
    references = _references(args, schedules)
    summary = _launch(args, schedules, references, nbytes)
    _print(args, out, summary)
    return EXIT_MATCH if summary["verdict"] == "match" else EXIT_FAILED


def _job(args: argparse.Namespace, schedules, references, left: float | None, nbytes=None):
    from ..runtime import job as job_mod
    from ..runtime.worker import FAULT_ENV

    deadline = None if left is None else time.time() + left - min(REPORT_MARGIN_S, 0.25 * left)
    nbytes = nbytes or [None] * len(schedules)
    items = [job_mod.Item(name=s.name, world=s.world, schedule_json=s.to_json(), reference=ref, timeout=None,
                          nbytes=size) for s, ref, size in zip(schedules, references, nbytes)]
    return job_mod.Job(items=items, ranks=max(s.world for s in schedules), iters=args.iters, jitter=args.jitter,
                       fault=os.environ.get(FAULT_ENV) or None, deadline=deadline, backend=args.backend)


def _launch(args: argparse.Namespace, schedules, references, nbytes=None) -> dict:
    from ..runtime import launch, verdict

    left = bounded.left(args, bounded.elapsed(args))
    if left is not None and left <= 0:
        raise CheckIncomplete(f"--timeout {args.timeout:g} s passed before the run could start")
    job = _job(args, schedules, references, left, nbytes)
    outcome = launch.run(job, timeout=left)
    summary = verdict.summarize(schedules, outcome)
    summary.update(backend=args.backend, np=job.ranks)
    if summary["verdict"] in ("crash", "hang") and outcome.stderr.strip():
        summary["mpiexec_stderr"] = outcome.stderr
    _annotate(summary, references, nbytes)
    return summary


def _annotate(summary: dict, references, nbytes) -> None:
    """Each result's note from the checker and, with --sizes, its bytes per rank."""
    for result, ref, size in zip(summary["results"], references, nbytes or [None] * len(references)):
        if ref.note:
            result["note"] = ref.note
        if size is not None:
            result["bytes"] = size


def _print(args: argparse.Namespace, out, summary: dict) -> None:
    if args.json:
        out.json(summary)
        return
    for i, result in enumerate(summary["results"]):
        if i:
            out.text("")
        size = f", {result['bytes']:,} bytes per rank" if result.get("bytes") is not None else ""
        out.text(f"{result['schedule']}, {result['world']} ranks{size}, {summary['backend']}: {result['message']}")
        if result.get("note"):
            out.text(f"  note: {result['note']}")
        timing = result.get("time")
        if timing:
            out.text(f"  time in the ops (slowest rank): median {timing['median_us']:g} us, min "
                     f"{timing['min_us']:g}, max {timing['max_us']:g} over {timing['iterations']} iteration(s)")
    if summary.get("mpiexec_stderr") and args.debug:
        out.text("mpiexec's stderr:\n" + summary["mpiexec_stderr"])


# ------------------------------------------------------------------------- inside an MPI job
def _run_inside(args: argparse.Namespace, out, backend) -> int:
    """Started by the user's mpiexec: this process is one rank. Every rank traces (deterministic)
    and computes the expected values itself, runs, and prints its JSON line; rank 0 then gathers
    the lines (bounded by --timeout) and prints the verdict. Every wait of the run is bounded, but
    no launcher watches here: an MPI call that never returns (creating a window, a flush towards
    a dead rank) is ended by the user's mpiexec, not by --timeout."""
    from mpi4py import MPI

    from ..runtime import launch, verdict, worker
    from ..runtime.progress import Progress

    world = MPI.COMM_WORLD
    if args.np is not None and args.np != world.Get_size():
        raise ClockworksError(f"--np {args.np}, but this MPI job has {world.Get_size()} ranks (leave --np out)")
    args.np = world.Get_size()
    args.inside_mpi = True
    schedules, nbytes = bounded.schedules(args)
    larger = [s for s in schedules if s.world > args.np]
    if larger:
        raise ClockworksError(f"{larger[0].name} has {larger[0].world} ranks, but this MPI job has {args.np}")
    for sched in schedules:
        select.supported(backend, sched)
    if args.backend == "cupy":
        from ..runtime.cupy_nccl import require_cupy

        require_cupy()
    references = _references(args, schedules)
    job = _job(args, schedules, references, _remaining(args), nbytes)
    rank = world.Get_rank()
    progress = Progress(None, rank)
    lines: list[dict] = []

    def emit(line: dict) -> None:
        lines.append(line)
        if args.json:  # stdout is one JSON document: rank 0's summary, which holds every line
            return
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()

    worker.run_job(job, rank, world, progress, emit)
    gathered = _gather(world, lines, job.deadline)
    if rank != 0:
        return EXIT_MATCH if all(line["status"] == "match" for line in lines) else EXIT_FAILED
    outcome = launch.Outcome(lines=gathered, rows=[])
    summary = verdict.summarize(schedules, outcome)
    summary.update(backend=args.backend, np=args.np)
    _annotate(summary, references, nbytes)
    _print(args, out, summary)
    return EXIT_MATCH if summary["verdict"] == "match" else EXIT_FAILED


def _remaining(args: argparse.Namespace) -> float | None:
    return bounded.left(args, bounded.elapsed(args))


def _gather(world, lines: list[dict], deadline: float | None) -> list[dict]:
    """Rank 0 receives every rank's lines (nonblocking, until `deadline`); others send theirs."""
    until = (deadline or time.time() + RUN_TIMEOUT_S) + REPORT_MARGIN_S
    if world.Get_rank() != 0:
        request = world.isend(lines, dest=0, tag=11)
        while not request.Test() and time.time() < until:
            time.sleep(1e-3)
        return lines
    found = list(lines)
    pending = {source: world.irecv(source=source, tag=11) for source in range(1, world.Get_size())}
    while pending and time.time() < until:
        for source, request in list(pending.items()):
            done, value = request.test()
            if done:
                found += value
                del pending[source]
        time.sleep(1e-3)
    return found
