"""How a schedule becomes a program: the steps between the schedule the user wrote and the program
a backend emits, decided once here and read by the emitters, the simulator's program model and the
tuner.

- `repeat`: K back-to-back calls as one schedule (signal epochs, the calls' separation), and where
  each call starts (a kernel per call);
- `packets`: put_signals sent as flag-in-data packets, the rewritten schedule the checker verifies;
- `nvshmem_plan`: the NVSHMEM block plan (which blocks run each op, what each waits for, which puts
  go on the copy engine);
- `blocks`: how generated code spreads an op's work over thread blocks.

`Build` holds every knob in one frozen object; `lower(schedule, build)` runs the steps in order and
returns a `Lowered`: the schedule that runs (and that the checker verifies) with each decision.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from .. import ir
from ..errors import ClockworksError
from . import packets as packets_mod
from .nvshmem_plan import RankPlan, copy_engine_ops, monotone_words, plan_rank, touch_index
from .repeat import BETWEEN, call_starts, repeat
from .blocks import (  # noqa: F401  (the block rules, read by the emitters and the simulator)
    LOCAL_MAX_BLOCKS, LOCAL_THREADS, NVSHMEM_BLOCK_BYTES, NVSHMEM_MAX_BLOCKS, PACKET_BLOCK_BYTES, local_blocks,
    nvshmem_blocks, packet_blocks,
)

BACKENDS = ("nccl", "nvshmem")  # the emitted programs; a `Build` of another backend lowers nothing


class LoweringError(ClockworksError):
    """A `Build` whose knobs do not go together (a lowering the backend does not have, no calls)."""


@dataclass(frozen=True)
class Build:
    """Every knob of how a schedule becomes a program, in one frozen object (the command line's
    `--calls`, `--between`, `--fuse-calls`, `--packets`, `--copy-engine`, `--host-progress`).

    - `calls` > 1: the program runs `calls` back-to-back calls of the schedule, separated by
      `between` (`repeat`); an NVSHMEM program then launches a kernel per call, as a library call
      would, unless `fuse_calls` keeps them in one kernel;
    - `packets` > 0 (NVSHMEM): put_signals of at most that many bytes go as flag-in-data packets
      (`packets.lower`); the rewritten schedule is the one checked, run and compared;
    - `copy_engine` > 0 (NVSHMEM): puts and put_signals of at least that many bytes are issued by the
      host on the copy engine between two kernels (`nvshmem_plan.copy_engine_ops`);
    - `host_progress` (NVSHMEM): the program's progress words are host-mapped (how programs were
      built before they moved to GPU memory): a cost of the run, no change to the schedule."""

    backend: str = "nccl"
    calls: int = 1
    between: str = "barrier"
    fuse_calls: bool = False
    packets: int = 0
    copy_engine: int = 0
    host_progress: bool = False

    def __post_init__(self) -> None:
        if self.calls < 1:
            raise LoweringError(f"--calls {self.calls}: a run has at least one call")
        if self.between not in BETWEEN:
            raise LoweringError(f"unknown separator {self.between!r} between calls; one of {', '.join(BETWEEN)}")
        for knob, value in (("--packets", self.packets), ("--copy-engine", self.copy_engine)):
            if value < 0:
                raise LoweringError(f"{knob} {value}: a size in bytes is at least 0 (0: off)")
            if value and self.backend != "nvshmem":
                raise LoweringError(f"{knob} is a lowering of the nvshmem backend: add --backend nvshmem")

    @property
    def kernel_per_call(self) -> bool:
        """Each call of a run of `calls` is an NVSHMEM kernel of its own (a library call's launch)."""
        return self.backend == "nvshmem" and self.calls > 1 and not self.fuse_calls


@dataclass(frozen=True, eq=False)
class Lowered:
    """A schedule lowered by a `Build`: the schedule the program runs and the checker verifies, and
    every decision the emitters, the simulator's program model and the tuner read (none of them
    decides again).

    - `source`: the schedule as the user wrote it (one call);
    - `sched`: what runs: `calls` calls of it, its put_signals as packets where `build.packets` says;
    - `kernel_starts`: per rank, the op that begins each call's kernel after the first (a kernel per
      call), else None;
    - `packets`: the packets lowering (`packets.Lowered`: which ops send, wait, unpack), else None;
    - `engine_ops`: per rank, the ops the copy engine moves (empty without `build.copy_engine`)."""

    build: Build
    source: ir.Schedule
    sched: ir.Schedule
    kernel_starts: dict[int, list[int]] | None = None
    packets: packets_mod.Lowered | None = None
    engine_ops: dict[int, frozenset[int]] = field(default_factory=dict)

    @functools.cached_property
    def _touches(self) -> tuple[dict, set]:
        return touch_index(self.sched), monotone_words(self.sched)

    @functools.lru_cache(maxsize=None)  # one plan per rank; the object is frozen and hashed by identity
    def plan(self, rank: int) -> RankPlan:
        """The NVSHMEM block plan of `rank` (`nvshmem_plan.plan_rank`) for this lowering."""
        return plan_rank(self.sched, rank, *self._touches, packets=self.packets,
                         splits=frozenset((self.kernel_starts or {}).get(rank, ())),
                         copy_engine=self.engine_ops.get(rank, frozenset()))


def lower(sched: ir.Schedule, build: Build = Build()) -> Lowered:
    """The steps from a schedule to a program, in order (each may raise its own error naming the
    knob: `repeat.RepeatError`, `LoweringError`):
    1. `calls` > 1: where each call's kernel begins (a kernel per call), then `repeat`;
    2. `packets`: put_signals as packets, and the kernel starts moved with the ops after each wait;
    3. `copy_engine`: the puts the copy engine moves, read off the schedule that runs."""
    threaded = next((p for p in sched.programs if p.threads), None)
    if threaded is not None:
        thread = threaded.threads[0]
        raise LoweringError(f"{thread.loc}: rank {threaded.rank} runs threads ({thread.kind} {thread.name} ...): the "
                            "lowering makes one program per rank and does not lower threads yet")
    source = sched
    starts = None
    if build.calls > 1:
        if build.kernel_per_call:
            starts = call_starts(sched, build.calls, build.between)
        sched = repeat(sched, build.calls, build.between)
    packets = None
    if build.packets:
        packets = packets_mod.lower(sched, build.packets)
        sched = packets.sched
        starts = packets.remap(starts) if starts else starts
    engine = {}
    if build.copy_engine:
        engine = {rank: copy_engine_ops(sched, rank, build.copy_engine, packets) for rank in range(sched.world)}
    return Lowered(build, source, sched, starts, packets, engine)


def as_built(sched: ir.Schedule, build: Build, kernel_starts: dict[int, list[int]] | None = None,
             packets: packets_mod.Lowered | None = None) -> Lowered:
    """A schedule already lowered elsewhere (read back from a results folder: the K-call schedule of
    a run, its kernel starts read off it) described as a `Lowered` of `build`; the copy-engine
    decision is still this module's."""
    engine = {}
    if build.copy_engine:
        engine = {rank: copy_engine_ops(sched, rank, build.copy_engine, packets) for rank in range(sched.world)}
    return Lowered(build, sched, sched, kernel_starts, packets, engine)
