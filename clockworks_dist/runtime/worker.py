"""One rank of a job: run each schedule of the job, compare its memory with the checker's values,
and write one JSON line per schedule.

    mpiexec -n N python -m clockworks_dist.runtime.worker JOBDIR

(the launcher, `runtime.launch`, starts it; JOBDIR holds the job, the progress file, and
`rank<k>.jsonl`, where rank k appends its lines). A line says: `rank`, `item` (the schedule's
index in the job), `schedule`, `world`, `status` (`match`, `mismatch`, `timeout`: a wait passed its
deadline, `stopped`: another rank died, `error`: this rank raised), `seconds` (each iteration's
time in the ops), `compare` (`compare.Comparison`), and for a rank that stopped, `op` (index,
member, text, file, line) and `waiting` (what it waited for).

A rank that stops (timeout, error, a dead peer) ends the job: it writes its line and exits without
finalising MPI (requests may be pending); the launcher collects what every rank wrote.

Test hook: `CLOCKWORKS_RUN_FAULT=RANK:OP:ACTION` makes rank RANK, before op OP of every schedule,
`raise` (an exception), `exit` (os._exit(1)), `kill` (SIGKILL itself), `hang` (sleep in Python
without waiting on anything), or `corrupt` (add 1 to element 0 of its first buffer after its last
op, OP ignored): how the tests make a run crash, hang and mismatch on purpose.
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import os
import signal
import sys
import time
import traceback

import numpy as np

from .. import ir
from ..semantics.rules import describe
from . import job as job_mod
from .compare import FIRST, Comparison, annotate, compare_rank
from .expected import expect_rank
from .progress import Phase, Progress

FAULT_ENV = "CLOCKWORKS_RUN_FAULT"
OPEN_MPI_ENV = "OMPI_COMM_WORLD_SIZE"  # set in every rank Open MPI's mpirun starts
EXIT_STOPPED = 3
STOP_GRACE_S = 1.0  # a rank that stopped waits this long before it exits


class Fault:
    """The test hook of the module docstring, parsed from `spec` (RANK:OP:ACTION)."""

    ACTIONS = ("raise", "exit", "kill", "hang", "corrupt")

    def __init__(self, spec: str):
        rank, index, action = spec.split(":")
        if action not in self.ACTIONS:
            raise ValueError(f"{FAULT_ENV}: unknown action {action!r}; one of {', '.join(self.ACTIONS)}")
        self.rank, self.index, self.action = int(rank), int(index), action

    def before(self, ex, index: int) -> None:
        """Called before each op: act when it is the op of the spec."""
        if ex.rank != self.rank:
            return
        last = index == len(ex.program.ops) - 1
        if self.action == "corrupt":
            if last:
                ex.after_run = self.corrupt
            return
        if index != self.index:
            return
        if self.action == "raise":
            raise RuntimeError(f"fault injected before op {index} ({FAULT_ENV})")
        if self.action == "exit":
            os._exit(1)
        if self.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        while True:  # hang: no MPI call, no deadline check; only the launcher can end it
            time.sleep(0.1)

    @staticmethod
    def corrupt(ex) -> None:
        """Add 1 to element 0 of the rank's first buffer."""
        first = ex.program.buffers[0].name
        ex.buffers[first][0] += 1


# ---------------------------------------------------------------------------------- one item
def _where(sched: ir.Schedule, rank: int, row: dict) -> dict | None:
    """The op a rank's progress row points at: index, member, text, file, line."""
    ops = sched.programs[rank].all_ops()  # threads one after another, as the progress row counts them
    index = row["op"]
    if not 0 <= index < len(ops):
        return None
    op = ops[index]
    member = row["member"] if op.kind == "group" and 0 <= row["member"] < len(op.ops) else None
    shown = op.ops[member] if member is not None else op
    return {"index": index, "member": member, "text": describe(shown), "file": shown.loc.file,
            "line": shown.loc.line}


def _merge(total: Comparison | None, part: Comparison) -> Comparison:
    if total is None:
        return part
    total.checked += part.checked
    total.mismatches += part.mismatches
    total.other_execution += part.other_execution
    total.post_checked += part.post_checked
    total.post_failures += part.post_failures
    total.first += part.first[:max(0, FIRST - len(total.first))]
    return total


# The executor of each backend: module of this package, class (see `semantics.backends`).
EXECUTORS = {"mpi-cpu": "mpi_cpu", "cupy": "cupy_nccl"}


def executor_class(backend: str):
    """The `Executor` class of `backend` (its module is imported now: cupy only where it runs)."""
    return importlib.import_module(f".{EXECUTORS[backend]}", __package__).Executor


def run_item(item: job_mod.Item, index: int, job: job_mod.Job, rank: int, comm, progress: Progress,
             failed) -> dict:
    """Run one schedule on this rank (`comm` holds its ranks) and return its JSON line.

    An executor times each iteration itself when it has `elapsed()` (GPU events around its ops),
    else the host's clock around `run()`; it compares its memory itself when it has `compare()`
    (on the device, with the same outcome as `compare_rank`)."""
    from .mpi_cpu import Stopped

    sched = ir.Schedule.from_json(item.schedule_json)
    deadline = min(time.time() + (item.timeout if item.timeout is not None else 1e9), job.deadline or 1e18)
    fault = Fault(job.fault) if job.fault else None
    jitter = item.jitter if item.jitter is not None else job.jitter
    backend = item.backend or job.backend
    line = {"rank": rank, "item": index, "schedule": item.name, "world": item.world, "status": "match",
            "seconds": []}
    if item.nbytes is not None:
        line["bytes"] = item.nbytes
    ex = executor_class(backend)(sched, rank, comm, deadline, progress, jitter=jitter, failed=failed,
                                 hook=fault.before if fault else None)
    total = expect = None
    try:
        expect = expect_rank(item.reference, rank) if item.reference is not None else None
        ex.setup()
        for iteration in range(job.iters):
            progress.set(Phase.SETUP, iteration=iteration)
            ex.reset()
            started = time.perf_counter()
            ex.run()
            host = time.perf_counter() - started
            getattr(ex, "after_run", lambda _ex: None)(ex)
            # the caller reads the rank's outputs when its program ends, before the barrier that
            # `settle` adds: a delivery still in flight into an output then shows as a mismatch
            ended = ex.at_end() if expect is not None and hasattr(ex, "at_end") else None
            ex.settle()
            line["seconds"].append(ex.elapsed() if hasattr(ex, "elapsed") else host)
            progress.set(Phase.COMPARING)
            if expect is not None:
                part = (ex.compare(expect, iteration) if hasattr(ex, "compare")
                        else compare_rank(expect, as_read(expect, ended, ex.memory()), ex.signals.copy(), iteration))
                total = _merge(total, part)
        ex.close()
    except Stopped as exc:
        line.update(status=exc.status, message=str(exc), waiting=exc.detail)
    except Exception as exc:  # noqa: BLE001 (a rank that raises is reported with its op, not lost)
        line.update(status="error", message=f"{type(exc).__name__}: {exc}",
                    traceback=traceback.format_exc(limit=8))
    if line["status"] != "match":
        line["op"] = _where(sched, rank, _row(progress))
        line["phase"] = Phase(int(progress.row[1])).name.lower()
    if total is not None:
        annotate(item.reference, total.first)
        line["compare"] = total.to_json()
        if line["status"] == "match" and not total.ok:
            line["status"] = "mismatch"
    if expect is None and line["status"] == "match":
        line["status"] = "ran"  # no execution of the checker finishes: nothing to compare with
    return line


def as_read(expect, ended: dict | None, settled: dict) -> dict:
    """The memory a run leaves, as its checks read it: the outputs (`BufferExpect.at_end`) as they
    were when the rank's program ended (`ended`), everything else (scratch, inputs) once the run
    has settled, every delivery landed."""
    if ended is None:
        return settled
    for name, want in expect.buffers.items():
        if want.at_end is not None and name in ended and name in settled:
            n = len(want.at_end)
            settled[name][:n] = np.where(want.at_end, ended[name][:n], settled[name][:n])
    return settled


def _row(progress: Progress) -> dict:
    return {"op": int(progress.row[4]), "member": int(progress.row[5])}


# ------------------------------------------------------------------------------------ the job
class Reporter:
    """Writes this rank's lines, and one at once when another rank dies.

    MPICH's mpiexec (even with -disable-auto-cleanup) sends SIGUSR1 to the other ranks when one
    dies, and SIGKILLs them moments later (Open MPI's mpirun sends SIGTERM, then SIGKILL): the
    handler writes a `stopped` line with the op this rank is in (its progress word) right away,
    and flags the failure, so a rank waiting on the dead one stops too and writes a fuller line
    (what it waited for) if it still has the time.
    The launcher keeps the last line of each rank."""

    def __init__(self, rank: int, progress: Progress, emit):
        self.rank, self.progress, self.emit = rank, progress, emit
        self.item: tuple[int, job_mod.Item, ir.Schedule] | None = None
        self.seen = False

    def failed(self) -> bool:
        """Whether another rank of the job died."""
        return self.seen

    def notice(self, signum=None, frame=None) -> None:
        """SIGUSR1: another rank died."""
        self.seen = True
        if self.item is None:
            return
        index, item, sched = self.item
        self.item = None  # one such line per schedule
        self.emit({"rank": self.rank, "item": index, "schedule": item.name, "world": item.world,
                   "status": "stopped", "message": "another rank of the job died", "seconds": [],
                   "op": _where(sched, self.rank, _row(self.progress)),
                   "phase": Phase(int(self.progress.row[1])).name.lower()})


def run_job(job: job_mod.Job, rank: int, world_comm, progress: Progress, emit,
            reporter: Reporter | None = None) -> int:
    """Run every item this rank takes part in; `emit(line)` each line. Returns 0, or
    `EXIT_STOPPED` once an item stopped (the rest of the job is not run)."""
    from mpi4py import MPI

    failed = reporter.failed if reporter is not None else (lambda: False)
    for index, item in enumerate(job.items):
        progress.set(Phase.SETUP, schedule=index, iteration=0)
        comm = world_comm.Split(0 if rank < item.world else MPI.UNDEFINED, rank)
        if comm == MPI.COMM_NULL:
            continue
        if reporter is not None:
            reporter.item = (index, item, ir.Schedule.from_json(item.schedule_json))
        line = run_item(item, index, job, rank, comm, progress, failed)
        if reporter is not None:
            reporter.item = None
        emit(line)
        if line["status"] not in ("match", "mismatch", "ran"):
            return EXIT_STOPPED
        comm.Free()
        progress.set(Phase.DONE)
    longest = max((item.timeout or 1e9 for item in job.items), default=0.0)
    if not _meet_at_end(world_comm, failed, min(longest, (job.deadline or 1e18) - time.time()) + 5.0):
        return EXIT_STOPPED
    # from here on, a rank that exits is the normal end, not a failure
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if reporter is not None and signal.getsignal(signal.SIGTERM) == reporter.notice:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    progress.set(Phase.FINISHED)
    return 0


def _meet_at_end(world_comm, failed, seconds: float) -> bool:
    """Every rank of the job meets before any exits (a rank that left a job of several schedules
    early would look dead to the others). False if a rank died or `seconds` passed."""
    request = world_comm.Ibarrier()
    deadline = time.monotonic() + seconds
    while not request.Test():
        if failed() or time.monotonic() > deadline:
            return False
        time.sleep(1e-3)
    return True


def _record_signals(path: str) -> None:
    """Have Python's C signal handler write each signal's number to `path` the moment it arrives,
    before any Python code runs: mpiexec may kill this rank right after its SIGUSR1."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.set_blocking(fd, False)
    signal.set_wakeup_fd(fd, warn_on_full_buffer=False)


def main(argv: list[str] | None = None) -> int:
    """Entry point of one rank: `python -m clockworks_dist.runtime.worker JOBDIR`."""
    argv = sys.argv[1:] if argv is None else argv
    directory = argv[0]
    job = job_mod.read(directory)
    faulthandler.enable()  # a crash in C code prints where Python was
    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    progress = Progress(os.path.join(directory, job_mod.PROGRESS_FILE), rank)
    progress.start()
    with open(job_mod.results_file(directory, rank), "a", encoding="utf-8") as out:
        def emit(line: dict) -> None:
            out.write(json.dumps(line) + "\n")
            out.flush()

        reporter = Reporter(rank, progress, emit)
        signal.signal(signal.SIGUSR1, reporter.notice)
        if OPEN_MPI_ENV in os.environ:  # Open MPI's mpirun ends the other ranks with SIGTERM instead
            signal.signal(signal.SIGTERM, reporter.notice)
        _record_signals(job_mod.signals_file(directory, rank))
        code = run_job(job, rank, MPI.COMM_WORLD, progress, emit, reporter)
    if code:
        # the others may still be writing where they were: leave them the time (the launcher
        # ends the job anyway), then exit without finalising MPI (requests may be pending)
        time.sleep(STOP_GRACE_S)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
