"""Loading a user's schedule file and tracing it, each within what is left of a time bound.

The file is Python we run, so it may loop forever, swallow the timeout or block in C code: `bound`
stops it from another thread and, if it will not stop, ends the process with exit 3 naming the
user's line. `schedules(options)` is what every command that runs a schedule loads: FILE traced at
`np` ranks (at each of `sizes`), or a schedule saved as JSON.

`options` is any object with the attributes of `LoadOptions` (the command line's namespace has
them); a caller outside the command line builds a `LoadOptions`.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import sys
import sysconfig
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import hygiene, ir
from ..errors import EXIT_INCOMPLETE, CheckIncomplete, ClockworksError, UsageError
from . import guard, validate_json
from .load import load_file
from .message import parse_sizes, size_binding
from .trace import ScheduleDef

# The package's own files: never the user's line.
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# If code we run ignores the time bound this much longer (it swallows the timeout, or is stuck in C
# code), the process ends: exit 3.
STUCK_S = 5.0


@dataclass
class LoadOptions:
    """What to load and how long it may take: the command line's options, for a caller without one."""

    file: str
    schedule: str | None = None  # the one schedule of `file` to load (None: every one)
    np: int | None = None  # ranks to trace at (None: the schedule's first `ranks`, else 2)
    sizes: str | None = None  # "1KiB..1GiB" or "4096,1MiB": bytes per rank of the main buffer
    size: list[tuple[str, int]] = field(default_factory=list)  # the other size symbols
    param: list[tuple[str, str]] = field(default_factory=list)  # family parameters
    timeout: float | None = None  # seconds for the whole load, from `started`
    started: float = field(default_factory=time.monotonic)
    json: bool = False  # if the process must end, say so as one JSON object on stdout too
    command: str | None = None  # the command's name for the rank bound (None: no bound)
    max_ranks: int | None = None
    inside_mpi: bool = False


def elapsed(args: LoadOptions) -> float:
    return time.monotonic() - args.started


def left(args: LoadOptions, spent: float) -> float | None:
    """What is left of --timeout after `spent` seconds (None: no bound)."""
    return None if args.timeout is None else args.timeout - spent


# Code that is neither ours nor the user's: the standard library and the installed packages.
_NOT_USERS = tuple(os.path.abspath(p) + os.sep for p in {sysconfig.get_paths()[key] for key in
                                                          ("stdlib", "platstdlib", "purelib", "platlib")})


def _user_line(here: str) -> str | None:
    """file:line of the user's code the main thread runs now (from another thread): the innermost
    frame under the file `here` (the bounded block runs there) that is neither clockworks, nor the
    standard library (contextlib.py is not to blame), nor an installed package; None when none is."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if path == here:
            return None
        if not path.startswith(_HERE) and not path.startswith(_NOT_USERS) and not path.startswith("<"):
            return f"{os.path.basename(path)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


@contextlib.contextmanager
def bound(args: LoadOptions, seconds: float | None, what: str,
           report: Callable[[], tuple[int, str] | None] | None = None):
    """A time bound for `what` ("loading ring.py"); if the code defeats it, the process ends: with
    what `report()` gives (exit code, stdout), the result found so far, else exit 3. The process
    ends from another thread while the main thread is stuck; once the block is over, it does not
    (the main thread prints the output then: one document on stdout, never two)."""
    lock = threading.Lock()
    over = False
    # the file whose `with bound(...)` this is (its caller, past contextlib's __enter__)
    here = os.path.abspath(sys._getframe(2).f_code.co_filename)

    def stuck() -> None:
        with lock:  # held until the process ends: the main thread cannot finish the block meanwhile
            if over:
                return
            line = _user_line(here)
            if line is None:  # our own code: the checker has its deadline, and freeing what it stored ran over
                message = (f"{what} did not finish within {args.timeout:g} s (--timeout) and could not be "
                           f"stopped {STUCK_S:g} s later")
            else:
                message = (f"{line}: {what} did not finish within {args.timeout:g} s (--timeout), and the code "
                           "running does not let itself be stopped (it catches the timeout, or it is stuck in C code)")
            reported = report() if report is not None else None
            if reported is not None:
                code, text = reported
                with contextlib.suppress(Exception):  # the results printed before this one, still buffered
                    sys.stdout.flush()
                guard.end_process(code, f"clockworks: warning: {message}; its result so far:\n", text)
                return
            out = json.dumps({"verdict": "incomplete", "error": {"type": "TimeUp", "message": message}}) + "\n"
            guard.end_process(EXIT_INCOMPLETE, f"clockworks: error: {message}\n", out if args.json else None)

    try:
        with guard.time_bound(seconds, on_stuck=stuck, grace=STUCK_S):
            yield
    finally:
        with lock:
            over = True


def too_late(exc: guard.TimeUp, what: str, args: LoadOptions) -> CheckIncomplete:
    where = f"{exc.where}: " if exc.where else ""
    who = f"rank {exc.rank}: " if exc.rank is not None else ""
    return CheckIncomplete(f"{where}{who}{what} did not finish within {args.timeout:g} s (--timeout; raise it, "
                           "or look for an endless loop there)")


def load(args: LoadOptions) -> tuple[list[ScheduleDef], float]:
    """The selected schedules of FILE, and the seconds spent so far (the load is bounded by --timeout)."""
    try:
        with bound(args, left(args, elapsed(args)), f"loading {args.file}"):
            defs = load_file(args.file)
    except guard.TimeUp as exc:
        exc.where = exc.where or os.path.basename(args.file)
        raise too_late(exc, "loading the file", args) from None
    return select(defs, args.schedule, args.file), elapsed(args)


def trace_all(args: LoadOptions, jobs: list[tuple[ScheduleDef, int]],
               spent: float) -> list[tuple[ir.Schedule, float]]:
    """Trace each (schedule, world size), each within what `spent` left of --timeout; the schedules,
    and the seconds each trace took."""
    traced = []
    for defn, world in jobs:
        started = time.monotonic()
        try:
            with bound(args, left(args, spent), f"tracing {defn.name} at {world} ranks"):
                sched = defn.trace(world, sizes=dict(args.size) or None,
                                   params=dict(getattr(args, "param", None) or ()) or None)
        except guard.TimeUp as exc:
            exc.where = exc.where or f"{defn.loc.file}:{defn.loc.line}"
            raise too_late(exc, f"tracing {defn.name} at {world} ranks", args) from None
        traced.append((sched, time.monotonic() - started))
    return traced


def select(defs: list[ScheduleDef], name: str | None, path: str) -> list[ScheduleDef]:
    if name is None:
        return defs
    chosen = [d for d in defs if d.name == name]
    if not chosen:
        raise UsageError(f"{path}: no schedule named {name!r}; it defines {', '.join(d.name for d in defs)}")
    return chosen



def schedules(args: LoadOptions) -> tuple[list[ir.Schedule], list[int | None]]:
    """The schedules to run: FILE traced at --np ranks (at each of --sizes), or FILE loaded as JSON;
    and the main buffer's bytes per rank of each (None without --sizes)."""
    if args.file.endswith(".json"):
        if getattr(args, "sizes", None):
            raise ClockworksError(f"--sizes needs a Python file: {args.file} is a schedule traced at fixed sizes")
        sched = from_json(args.file)
        check_world(args, sched.world, sched.name)
        if args.np is not None and args.np != sched.world:
            raise ClockworksError(f"{args.file} is a schedule of {sched.world} ranks, but --np is {args.np} "
                                  "(leave --np out, or trace the schedule again at that size)")
        return [sched], [None]
    defs, spent = load(args)
    jobs = [(defn, args.np or (defn.ranks[0] if defn.ranks else 2)) for defn in defs]
    for defn, world in jobs:
        check_world(args, world, defn.name)
    if not getattr(args, "sizes", None):
        return [sched for sched, _seconds in trace_all(args, jobs, spent)], [None] * len(jobs)
    return sized(args, jobs, spent)


def check_world(args: LoadOptions, world: int, name: str) -> None:
    """Exit 2 past the ranks this command starts or generates without --max-ranks (`hygiene`); a
    run inside an MPI job has the world its launcher started, and no bound here."""
    command = getattr(args, "command", None)
    if command is None or getattr(args, "inside_mpi", False):
        return
    limit = getattr(args, "max_ranks", None)
    if limit is None:
        limit = hygiene.max_local_ranks() if command == "run" else hygiene.MAX_RANKS
    hygiene.check_ranks(world, limit, f"{command} {name}")


def sized(args: LoadOptions, jobs, spent: float) -> tuple[list[ir.Schedule], list[int | None]]:
    """Each schedule traced at each size of --sizes: its size symbol solved so that the main buffer
    (as `clockworks predict` picks it) holds that many bytes per rank; --size binds the others."""
    try:
        sizes = parse_sizes(args.sizes)
    except ValueError as exc:
        raise ClockworksError(f"--sizes: {exc}") from None
    schedules, nbytes = [], []
    for defn, world in jobs:
        [(base, _seconds)] = trace_all(args, [(defn, world)], spent)
        for size in sizes:
            binding = {**dict(args.size), **size_binding(defn, world, size, base=base)}
            at_size = copy.copy(args)
            at_size.size = list(binding.items())
            [(sched, _seconds)] = trace_all(at_size, [(defn, world)], spent)
            schedules.append(sched)
            nbytes.append(size)
    return schedules, nbytes


def from_json(path: str) -> ir.Schedule:
    """The schedule in the JSON file `path`, checked for consistency (`dsl.validate_json`); an MSCCL++
    execution plan is imported (`importers.mscclpp`)."""
    from ..importers import mscclpp_json

    text = mscclpp_json.read_text(path)
    if mscclpp_json.looks_like_plan(text):
        from ..importers.mscclpp import ImportedPlan

        plan = ImportedPlan(path, text=text)
        return plan.trace(plan.world)
    return validate_json.load(path)




def load_sized(path: str, ranks: int | None = None, sizes=None, schedule: str | None = None,
               timeout: float | None = None, size_bindings: dict[str, int] | None = None,
               params: dict[str, str] | None = None) -> tuple[list[ir.Schedule], list[int | None]]:
    """The schedules of `path` traced at `ranks` (at each of `sizes`: "1KiB..1GiB", "4096,1MiB" or a
    list of byte counts per rank of the main buffer; `size_bindings`: the other size symbols), within
    `timeout` seconds; and the main buffer's bytes per rank of each (None without `sizes`)."""
    if isinstance(sizes, (list, tuple)):
        sizes = ",".join(str(int(size)) for size in sizes)
    return schedules(LoadOptions(file=path, np=ranks, sizes=sizes or None, size=list((size_bindings or {}).items()),
                                 param=list((params or {}).items()), schedule=schedule, timeout=timeout))
