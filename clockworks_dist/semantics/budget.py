"""One time bound for every phase of a check: compiling the model, the search, the happens-before
order and the symbolic proofs. `--timeout` is a promise to the user, so each phase's loops ask the
same `Deadline`, and a phase that runs out raises `OutOfTime`, which `check` turns into an
incomplete result (never "verified")."""

from __future__ import annotations

import contextlib
import gc
import time
from typing import Iterator

CENTURY_S = 100 * 365 * 86400.0


class OutOfTime(Exception):
    """The deadline passed inside `phase` (a few words for the user: "the z3 size proofs")."""

    def __init__(self, phase: str):
        super().__init__(phase)
        self.phase = phase


class Deadline:
    """A wall-clock bound; `None` seconds means unbounded."""

    def __init__(self, seconds: float | None):
        if seconds is not None and not seconds >= 0:  # nan too: it would switch the bound off
            raise ValueError(f"a time bound is a non-negative number of seconds or None, got {seconds!r}")
        # no bound: None, or a bound no run can reach (inf, 1e400, or anything past a century)
        bounded = seconds is not None and seconds < CENTURY_S
        self.end = time.monotonic() + seconds if bounded else None

    def remaining(self) -> float | None:
        """Seconds left (never negative), or None when unbounded."""
        return None if self.end is None else max(0.0, self.end - time.monotonic())

    def expired(self, reserve: float = 0.0) -> bool:
        """Whether the bound has passed, or will within `reserve` seconds (time kept back for work
        that cannot look at the bound, such as freeing a search's stored states)."""
        return self.end is not None and time.monotonic() + reserve > self.end

    def check(self, phase: str) -> None:
        """Raise `OutOfTime(phase)` once the bound has passed."""
        if self.end is not None and time.monotonic() > self.end:
            raise OutOfTime(phase)


UNBOUNDED = Deadline(None)
# The time a search keeps back per stored state, to free its states before the deadline: freeing took
# 0.27 us (dfs) to 0.5 us (bfs) a stored state (scripts/results/bench_checker_memory.md); twice that
# and more for slower machines.
RELEASE_S = 1e-6


@contextlib.contextmanager
def cycle_collector_paused(collect_after: bool = False) -> Iterator[None]:
    """Python's cycle collector off for the duration (then on again, if it was). Tracing and
    checking a schedule allocate millions of long-lived objects that form no cycles (ops, regions,
    states, the compiled model), and each pass of the collector walks all of them: at 128 ranks
    that was close to half of the model's compile and two thirds of the trace.

    Everything allocated meanwhile is still in the youngest generation when the collector is on
    again, so its next pass walks all of it. `collect_after` (tracing: the schedule outlives the
    trace) makes that pass at once, over the two younger generations only, which moves the
    survivors to the oldest generation, where passes are rare: the first walk over a schedule is
    paid by its trace, not by whatever runs next (the check of a 128-rank ring took 1.5 s more under
    the profiler). The pass walks what the trace allocated, not the process's whole heap: a full
    collection there cost 0.24 s per trace in a process holding a test session and scipy, 204 of
    the 217 s of a calibration fit that traces 840 times. A check leaves little behind: its model is
    freed when it returns."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
            if collect_after:
                gc.collect(1)  # generations 0 and 1; the survivors move to the oldest
