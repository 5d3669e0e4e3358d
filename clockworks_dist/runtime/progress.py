"""Progress words: where each rank is, readable by the launcher even when the rank is stuck in C code
or was killed (the CPU counterpart of the progress words in host-mapped memory of generated GPU
code, DESIGN.md "Faults").

One small file per job, memory-mapped by every rank and by the launcher: a row of int64 per rank,
`FIELDS` below. A rank writes its row with plain stores (no system call per op); the launcher reads
the rows when a run hangs or a rank dies, and names each rank's current op and its file:line.
"""

from __future__ import annotations

import enum
import os
import time

import numpy as np

FIELDS = ("pid", "phase", "schedule", "iteration", "op", "member", "beat")  # beat: CLOCK_MONOTONIC in us
WIDTH = len(FIELDS)


class Phase(enum.IntEnum):
    """What a rank is doing."""

    NOT_STARTED = 0
    SETUP = 1  # creating communicators and windows
    RUNNING = 2  # executing op `op` (a group's member `member`, when it waits for one)
    SETTLING = 3  # after the last op: completing deliveries, then a barrier
    COMPARING = 4
    DONE = 5  # this schedule is finished
    FINISHED = 6  # every schedule of the job is finished


def create(path: str, ranks: int) -> None:
    """Make the progress file of a job with `ranks` ranks (every row NOT_STARTED, op -1)."""
    rows = np.zeros((ranks, WIDTH), dtype=np.int64)
    rows[:, FIELDS.index("op")] = -1
    rows[:, FIELDS.index("member")] = -1
    rows.tofile(path)


class Progress:
    """One rank's row (writer) or every row (reader) of a progress file."""

    def __init__(self, path: str | None, rank: int | None = None):
        self.rank = rank
        if path is None or not os.path.exists(path):  # no launcher watches: keep the row in memory
            self.rows = np.zeros((max(rank or 0, 0) + 1, WIDTH), dtype=np.int64)
        else:
            self.rows = np.memmap(path, dtype=np.int64, mode="r+" if rank is not None else "r").reshape(-1, WIDTH)
        self.row = self.rows[rank] if rank is not None else None

    def start(self) -> None:
        """Record this process's pid (the launcher watches it)."""
        self.row[0] = os.getpid()
        self.row[1] = Phase.SETUP

    def set(self, phase: Phase, schedule: int | None = None, iteration: int | None = None, op: int = -1,
            member: int = -1) -> None:
        """Record a phase (and, when given, the schedule, iteration, op and member)."""
        row = self.row
        if schedule is not None:
            row[2] = schedule
        if iteration is not None:
            row[3] = iteration
        row[4] = op
        row[5] = member
        row[1] = phase

    def op(self, index: int) -> None:
        """Now running op `index`."""
        self.row[4] = index
        self.row[5] = -1
        self.row[1] = Phase.RUNNING
        self.beat()

    def beat(self) -> None:
        """A sign of life: the launcher tells the rank that died first by the last one."""
        self.row[6] = time.monotonic_ns() // 1000

    def member(self, sub: int) -> None:
        """The group's member `sub` is the first one not complete yet."""
        self.row[5] = sub

    def read(self) -> list[dict]:
        """Every row, as dicts of `FIELDS` (the phase by name)."""
        found = []
        for row in np.array(self.rows):
            entry = dict(zip(FIELDS, (int(v) for v in row)))
            entry["phase"] = Phase(entry["phase"]).name.lower()
            found.append(entry)
        return found
