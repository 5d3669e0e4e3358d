"""A job: the schedules one `mpiexec` runs, one after another, with their expected values.

The launcher writes it once (`write`), every rank reads it (`read`): a pickle in a private
directory the launcher created, next to the progress file and each rank's result lines. Running
many schedules in one job (the random-schedule tests, the agreement benchmark) pays for the start
of MPI and Python once.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field

from .expected import Reference

JOB_FILE = "job.pkl"
PROGRESS_FILE = "progress.bin"


@dataclass
class Item:
    """One schedule to run: its IR as JSON, the checker's values, and its time bound."""

    name: str
    world: int
    schedule_json: str
    reference: Reference | None
    timeout: float | None  # seconds for this schedule on each rank (None: no bound)
    jitter: int | None = None  # this schedule's seed of random delays (None: the job's)
    backend: str | None = None  # the executor (`semantics.backends` name); None: the job's
    nbytes: int | None = None  # the main buffer's bytes per rank, when the run sweeps sizes (`--sizes`)


@dataclass
class Job:
    """What every rank runs: the items in order, each `iters` times, with the options of the run."""

    items: list[Item]
    ranks: int  # processes in the job: the largest world of the items
    iters: int = 1
    jitter: int | None = None  # seed of the random delays before ops (None: none)
    fault: str | None = None  # test hook: RANK:OP:ACTION (see `worker.Fault`)
    deadline: float | None = None  # a `time.time()` by which every rank stops waiting (None: none)
    backend: str = "mpi-cpu"  # the executor of every item that names none
    extra: dict = field(default_factory=dict)


def signals_file(directory: str, rank: int) -> str:
    """Where rank `rank`'s signal handler writes the number of each signal it receives, as it
    arrives (`signal.set_wakeup_fd`): the launcher reads it to tell a rank that died first from
    one mpiexec killed after it."""
    return os.path.join(directory, f"signals{rank}.bin")


def results_file(directory: str, rank: int) -> str:
    """Where rank `rank` appends its JSON lines."""
    return os.path.join(directory, f"rank{rank}.jsonl")


def write(directory: str, job: Job) -> str:
    """Write `job` into `directory` (created by the caller, private); returns the file's path."""
    path = os.path.join(directory, JOB_FILE)
    with open(path, "wb") as handle:
        pickle.dump(job, handle, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def read(directory: str) -> Job:
    """The job the launcher wrote into `directory` (a file this package wrote, not user input)."""
    with open(os.path.join(directory, JOB_FILE), "rb") as handle:
        return pickle.load(handle)
