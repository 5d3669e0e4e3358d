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

from . import hygiene, ir
from .errors import CheckIncomplete, ClockworksError

BACKENDS = ("mpi-cpu", "cupy")
RUN_TIMEOUT_S = 60.0
# The ranks stop waiting this much before --timeout (at most), so they can still say where they were.
REPORT_MARGIN_S = 1.5
EXIT_MATCH, EXIT_FAILED = 0, 1
SEARCH_SHARE = 0.5  # of what is left of --timeout, for the search of every final value


class BackendError(ClockworksError):
    """An unknown backend, or an op the backend cannot run."""


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
                     help=f"the executor: {', '.join(BACKENDS)} (default: mpi-cpu)")
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


# ------------------------------------------------------------------------------ preparing
def _backend(name: str):
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; clockworks run knows {', '.join(BACKENDS)}")
    if name == "cupy":
        from .runtime.cupy_nccl import CUPY

        return CUPY
    from .runtime.mpi_cpu import MPI_CPU

    return MPI_CPU


def gpu_shortage(ranks: int, visible: int) -> str | None:
    """Why `ranks` ranks cannot run on `visible` GPUs (the cupy backend: one GPU per rank), or None."""
    if ranks <= visible:
        return None
    shown = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = f" (CUDA_VISIBLE_DEVICES={shown})" if shown is not None else ""
    if visible == 0:
        return (f"the cupy backend runs one rank per GPU, and no GPU is visible here{where}: run on a machine "
                f"with {ranks} GPUs, or use --backend mpi-cpu")
    return (f"--np {ranks}: the cupy backend runs one rank per GPU, but {visible} GPU(s) are visible here{where}: "
            f"run with --np {visible} or fewer, or use --backend mpi-cpu")


def _require_gpus(ranks: int) -> None:
    """The cupy backend's dependencies, and a GPU for each rank (counted in this process)."""
    from .runtime import cupy_nccl

    cupy_nccl.require_cupy()
    problem = gpu_shortage(ranks, cupy_nccl.visible_gpus())
    if problem:
        raise BackendError(problem)


def _supported(backend, sched: ir.Schedule) -> None:
    """Every op of `sched` is in the backend's table, else `BackendError` with the op and reason."""
    from .semantics.backends import Unsupported

    for program in sched.programs:
        for op in program.ops:
            for each in (op.ops if op.kind == "group" else (op,)):
                try:
                    backend.lookup(each)
                except Unsupported as exc:
                    raise BackendError(f"{exc} (rank {program.rank})") from None


def _schedules(args: argparse.Namespace) -> tuple[list[ir.Schedule], list[int | None]]:
    """The schedules to run: FILE traced at --np ranks (at each of --sizes), or FILE loaded as JSON;
    and the main buffer's bytes per rank of each (None without --sizes)."""
    from . import cli

    if args.file.endswith(".json"):
        if getattr(args, "sizes", None):
            raise ClockworksError(f"--sizes needs a Python file: {args.file} is a schedule traced at fixed sizes")
        sched = _from_json(args.file)
        _bounded(args, sched.world, sched.name)
        if args.np is not None and args.np != sched.world:
            raise ClockworksError(f"{args.file} is a schedule of {sched.world} ranks, but --np is {args.np} "
                                  "(leave --np out, or trace the schedule again at that size)")
        return [sched], [None]
    defs, spent = cli._load(args)
    jobs = [(defn, args.np or (defn.ranks[0] if defn.ranks else 2)) for defn in defs]
    for defn, world in jobs:
        _bounded(args, world, defn.name)
    if not getattr(args, "sizes", None):
        return [sched for sched, _seconds in cli._trace_all(args, jobs, spent)], [None] * len(jobs)
    return _sized(args, jobs, spent)


def _bounded(args: argparse.Namespace, world: int, name: str) -> None:
    """Exit 2 past the ranks this command starts or generates without --max-ranks (`hygiene`); a
    run inside an MPI job has the world its launcher started, and no bound here."""
    command = getattr(args, "command", None)
    if command is None or getattr(args, "inside_mpi", False):
        return
    limit = getattr(args, "max_ranks", None)
    if limit is None:
        limit = hygiene.max_local_ranks() if command == "run" else hygiene.MAX_RANKS
    hygiene.check_ranks(world, limit, f"{command} {name}")


def _sized(args: argparse.Namespace, jobs, spent: float) -> tuple[list[ir.Schedule], list[int | None]]:
    """Each schedule traced at each size of --sizes: its size symbol solved so that the main buffer
    (as `clockworks predict` picks it) holds that many bytes per rank; --size binds the others."""
    from . import cli
    from .perf.predict import parse_sizes, size_binding

    try:
        sizes = parse_sizes(args.sizes)
    except ValueError as exc:
        raise ClockworksError(f"--sizes: {exc}") from None
    schedules, nbytes = [], []
    for defn, world in jobs:
        [(base, _seconds)] = cli._trace_all(args, [(defn, world)], spent)
        for size in sizes:
            binding = {**dict(args.size), **size_binding(defn, world, size, base=base)}
            bound = argparse.Namespace(**{**vars(args), "size": list(binding.items())})
            [(sched, _seconds)] = cli._trace_all(bound, [(defn, world)], spent)
            schedules.append(sched)
            nbytes.append(size)
    return schedules, nbytes


def _from_json(path: str) -> ir.Schedule:
    """The schedule in the JSON file `path`, checked for consistency (`dsl.validate_json`)."""
    from .dsl import validate_json

    return validate_json.load(path)


def _references(args: argparse.Namespace, schedules: list[ir.Schedule]) -> list:
    """The checker's values of each schedule, within what is left of --timeout."""
    from . import cli
    from .dsl import guard
    from .runtime.expected import build_reference

    found = []
    for sched in schedules:
        left = cli._left(args, cli._elapsed(args))
        # the search for every final value may take half of what is left; the run needs the rest
        search = None if left is None else left * SEARCH_SHARE
        try:
            with cli._bound(args, left, f"computing the expected values of {sched.name}"):
                found.append(build_reference(sched, timeout=search))
        except guard.TimeUp:
            raise CheckIncomplete(f"computing the checker's values of {sched.name} did not finish within "
                                  f"{args.timeout:g} s (--timeout)") from None
    return found


# ----------------------------------------------------------------------------------- running
def cmd_run(args: argparse.Namespace, out) -> int:
    """Trace, compute the expected values, run under mpiexec, print the verdict."""
    from .runtime import launch

    backend = _backend(args.backend)
    if launch.inside_mpi_job():
        return _run_inside(args, out, backend)
    # the input first (file, options, sizes, ops the backend lacks), then what the machine lacks
    schedules, nbytes = _schedules(args)
    for sched in schedules:
        _supported(backend, sched)
    if args.backend == "cupy":
        _require_gpus(max(s.world for s in schedules))
    launch.find_mpiexec()
    launch.require_mpi4py()
    references = _references(args, schedules)
    summary = _launch(args, schedules, references, nbytes)
    _print(args, out, summary)
    return EXIT_MATCH if summary["verdict"] == "match" else EXIT_FAILED


def _job(args: argparse.Namespace, schedules, references, left: float | None, nbytes=None):
    from .runtime import job as job_mod
    from .runtime.worker import FAULT_ENV

    deadline = None if left is None else time.time() + left - min(REPORT_MARGIN_S, 0.25 * left)
    nbytes = nbytes or [None] * len(schedules)
    items = [job_mod.Item(name=s.name, world=s.world, schedule_json=s.to_json(), reference=ref, timeout=None,
                          nbytes=size) for s, ref, size in zip(schedules, references, nbytes)]
    return job_mod.Job(items=items, ranks=max(s.world for s in schedules), iters=args.iters, jitter=args.jitter,
                       fault=os.environ.get(FAULT_ENV) or None, deadline=deadline, backend=args.backend)


def _launch(args: argparse.Namespace, schedules, references, nbytes=None) -> dict:
    from . import cli
    from .runtime import launch, verdict

    left = cli._left(args, cli._elapsed(args))
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

    from .runtime import launch, verdict, worker
    from .runtime.progress import Progress

    world = MPI.COMM_WORLD
    if args.np is not None and args.np != world.Get_size():
        raise ClockworksError(f"--np {args.np}, but this MPI job has {world.Get_size()} ranks (leave --np out)")
    args.np = world.Get_size()
    args.inside_mpi = True
    schedules, nbytes = _schedules(args)
    larger = [s for s in schedules if s.world > args.np]
    if larger:
        raise ClockworksError(f"{larger[0].name} has {larger[0].world} ranks, but this MPI job has {args.np}")
    for sched in schedules:
        _supported(backend, sched)
    if args.backend == "cupy":
        from .runtime.cupy_nccl import require_cupy

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
    from . import cli

    return cli._left(args, cli._elapsed(args))


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
