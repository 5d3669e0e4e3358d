"""What a generated program adds to a schedule's timed run: one model per backend.

The simulator (`simulate.Simulator`) times a schedule's ops on the semantics' machine. A run of the
program `clockworks codegen` writes has costs of its own, and they differ by backend:
- `ScheduleOps`: the schedule's ops alone, back to back (`clockworks predict`): nothing added;
- `HostDriven` (the NCCL backend): the host launches every op; the program's start, a progress word
  before every launch and one after the last (`program_mark_us`), and compute ops run as the
  program's stand-in kernels (one to start, one hash kernel per read, one writer per write);
- `NvshmemKernels` (the NVSHMEM backend): each rank's ops run inside its kernels (one, or one per call
  of a run of calls), each op a step of the kernel's blocks (`program_step_us`) after the handoff the
  block plan puts before it (`lowering.nvshmem_plan`), puts on the copy engine issued by the host
  between two kernels, put_signals sent as packets, and a closing quiet and barrier.

Each model reads its decisions from the schedule's `lowering.Lowered` (which ops begin a call's
kernel, which go on the copy engine or as packets, the block plan) and decides none itself. Which
ops an NVSHMEM kernel runs on one thread is the op's cost rule (`costs.Cost.one_thread`).
"""

from __future__ import annotations

from .. import ir
from ..lowering import Lowered, local_blocks, LOCAL_THREADS, nvshmem_blocks, packet_blocks
from ..lowering.nvshmem_plan import syncs_grid
from .costs import COSTS, launch_us, launches_kernel


class ScheduleOps:
    """The schedule's own ops, run back to back: no program around them."""

    backend: str | None = None
    in_kernel = False  # local ops and PE-wide barriers run inside an already running kernel

    def __init__(self, sched: ir.Schedule, consts, mode: str, lowered: Lowered | None = None):
        self.sched, self.c, self.mode, self.lowered = sched, consts, mode, lowered
        self.world = sched.world
        # (rank, op) of the puts on the copy engine, of the ops that begin a kernel of their own (a
        # call each), and of the put_signals sent as packets
        self.engine_ops: set[tuple[int, int]] = set()
        self.call_kernels: set[tuple[int, int]] = set()
        self.packet_sends: set[tuple[int, int]] = set()

    def costs(self) -> tuple[float, float, float, float]:
        """(before the first op, before each op, after the last, the host's issue of a progress word)."""
        return 0.0, 0.0, 0.0, 0.0

    def host_lead_us(self) -> float:
        """How far ahead of the timed span the host may be when it starts issuing (eager mode)."""
        return 0.0

    def host_issue_us(self, rank: int, index: int, op, mark_host: float) -> float:
        """What the host issues before op `index` of `rank` besides the op itself (eager mode)."""
        return mark_host if launches_kernel(op) else 0.0

    def gap(self, sim, rank: int, index: int, op) -> float:
        """What the program runs before op `index` of `rank`, once the op before it is done."""
        return 0.0

    def planned_fence(self, rank: int, index: int) -> bool:
        """Whether the program's blocks fence before op `index` of `rank`."""
        return False

    def emits_nothing(self, rank: int, index: int, op) -> bool:
        """Whether a fence or quiet at op `index` of `rank` emits no code (its order kept otherwise)."""
        return False

    def closes_with_acks(self) -> bool:
        """Whether the run ends once the rank's stores are acknowledged (a closing quiet)."""
        return False

    def runs_beside(self, rank: int, index: int, held: list[int]) -> bool:
        """Whether op `index` of `rank` may start while the puts `held` (ops of the rank whose
        issuing threads still store their bytes) hold their blocks: only where the program runs it
        on another block with nothing between (the schedule alone: one stream, never)."""
        return False

    def block_floor_us(self, op, rank: int, size) -> float:
        """The least time of a local op spread over the program's blocks (`size(rank, region)`: bytes)."""
        return 0.0

    def compute(self, op, traffic: float) -> tuple[int, float, float, float] | None:
        """(kernel starts, HBM bytes, fixed us, least us) of a compute op as the program runs it, or None
        where the op's own cost applies (the schedule alone)."""
        return None

    compute_ceiling_GBs: float | None = None  # the rate of a compute op's stand-in, if the program has one


class HostDriven(ScheduleOps):
    """The NCCL backend's program: the host launches every op, with a progress word before each."""

    backend = "nccl"

    def costs(self) -> tuple[float, float, float, float]:
        c = self.c
        run = c.program_eager_us if self.mode == "eager" else c.program_graph_us
        # a progress word before every op and one after the last
        return run + c.program_mark_us, c.program_mark_us, c.program_mark_us, c.program_mark_host_us

    def host_lead_us(self) -> float:
        return self.c.program_host_lead_us

    def gap(self, sim, rank: int, index: int, op) -> float:
        return sim.mark_us if launches_kernel(op) else 0.0

    def compute(self, op, traffic: float) -> tuple[int, float, float, float] | None:
        # a kernel to start, one hash kernel per read, one writer per write
        warps = sum(local_blocks(r.count) * LOCAL_THREADS // 32 for r in op.reads)
        return 1 + len(op.reads) + len(op.writes), traffic, warps * self.c.program_atomic_us, 0.0

    @property
    def compute_ceiling_GBs(self) -> float:  # the program's stand-in hashes at its own rate
        return self.c.program_compute_GBs


class NvshmemKernels(ScheduleOps):
    """The NVSHMEM backend's program: each rank's ops inside its kernels, planned over blocks."""

    backend = "nvshmem"
    in_kernel = True

    def __init__(self, sched: ir.Schedule, consts, mode: str, lowered: Lowered | None = None):
        super().__init__(sched, consts, mode, lowered)
        self.host_progress = lowered.build.host_progress
        self.engine_ops = {(rank, m) for rank, ms in lowered.engine_ops.items() for m in ms}
        self.call_kernels = {(rank, m) for rank, ms in (lowered.kernel_starts or {}).items() for m in ms}
        self.packet_sends = set(lowered.packets.sends) if lowered.packets is not None else set()
        self._planned: list[dict] | None = None
        self._blocks: list[int] = []  # per rank: the grid of its kernels (the plan's)

    def costs(self) -> tuple[float, float, float, float]:
        c = self.c
        run = c.program_eager_us if self.mode == "eager" else c.program_graph_us
        # one kernel per rank, a step per op; it ends with a quiet and a barrier
        closing = all(p.ops and p.ops[-1].kind == "barrier_all" for p in self.sched.programs)
        rounds = max(1, (self.world - 1).bit_length())
        end = 0.0 if closing else c.barrier_us * rounds
        ops = [p.ops[0] for p in self.sched.programs if p.ops]
        spread = any(not COSTS[op.kind].one_thread for op in ops)  # the first op's, as in `gap`
        first = c.program_step_us + (c.program_host_progress_us if self.host_progress and spread else 0.0)
        return run + launch_us(c, self.mode, "local") + first, c.program_step_us, end, 0.0

    def host_lead_us(self) -> float:
        return self.c.program_host_lead_us - self.c.local_host_us  # ... then the host issues its one kernel

    def host_issue_us(self, rank: int, index: int, op, mark_host: float) -> float:
        issued = super().host_issue_us(rank, index, op, mark_host)
        if (rank, index) in self.engine_ops:  # the host issues the copy, then the next kernel
            issued += 2 * self.c.local_host_us
        if (rank, index) in self.call_kernels:  # the host issues this call's kernel
            issued += self.c.local_host_us
        return issued

    def gap(self, sim, rank: int, index: int, op) -> float:
        """In the kernel: a step before each op that spreads its work over blocks (data moving, local
        work; one thread signals, waits and fences: no step), and the handoff between blocks the
        block plan puts before the op, if any (a grid-wide sync or an arrival counter)."""
        if (rank, index) in self.engine_ops:  # the host's, between two kernels
            return 0.0
        c = self.c
        step = 0.0 if COSTS[op.kind].one_thread else sim.mark_us
        planned = self.handoffs()[rank].get(index)
        if (rank, index) in self.call_kernels:  # a kernel of its own: it starts once the one before has ended
            step += sim._launch("local") + (c.cooperative_launch_us if self.mode == "graph"
                                            and self.cooperative(rank, index) else 0.0)
        elif planned is not None and planned.pre in ("grid", "last"):
            step += c.program_sync_us
        if self.planned_fence(rank, index):  # its blocks fence first (the simulator waits for the acknowledgements)
            step += c.nvshmem_fence_us
        if self.host_progress and not COSTS[op.kind].one_thread:
            # host-mapped progress words: the op's blocks fence after writing theirs, and wait
            # for it to cross PCIe. Measured A/B, the same binaries (results/h200x2/progress):
            # 1.7 us more per call of the one-shot all-reduce with a sync between calls (a put
            # and a reduce over the blocks a call), 2.3 to 2.7 us of the two-shot (two puts and a
            # reduce), at 8 KiB and 1 MiB alike: about 0.85 us per such op, not per byte
            step += c.program_host_progress_us
        return step

    def handoffs(self) -> list[dict]:
        """Per rank, op index -> its step in the block plan (`lowering.nvshmem_plan`: the handoff
        before it, "grid", "last", "block" or "", whether its blocks fence first, whether it is idle)."""
        if self._planned is None:
            self._planned, self._blocks = [{} for _ in range(self.world)], [1] * self.world
            for rank in range(self.world):
                plan = self.lowered.plan(rank)  # the generated program's own plan
                self._planned[rank] = {step.index: step for step in plan.steps}
                self._blocks[rank] = plan.blocks
        return self._planned

    def cooperative(self, rank: int, index: int) -> bool:
        """Whether the call's kernel that begins at op `index` of `rank` is launched cooperatively, as
        the generated code decides (`nvshmem_plan.syncs_grid`: a grid-wide sync or an NVSHMEM
        collective in it), or is the last kernel (it ends the run with every PE meeting)."""
        starts = sorted(m for r, m in self.call_kernels if r == rank)
        later = [m for m in starts if m > index]
        if not later:
            return True
        steps = [step for step in self.lowered.plan(rank).steps if index <= step.index < later[0]]
        return syncs_grid(self.sched, rank, steps)

    def planned_fence(self, rank: int, index: int) -> bool:
        """A publication, a fence's order; a call's kernel whose kernel before ends fenced; outside the
        ops that fence themselves (quiet, barrier_all, sync_all) and the copy engine's (the stream
        orders those)."""
        if (rank, index) in self.engine_ops:
            return False
        step = self.handoffs()[rank].get(index)
        op = self.sched.programs[rank].ops[index]
        if step is None or op.kind in ("quiet", "barrier_all", "sync_all"):
            return False
        return step.fence or ((rank, index) in self.call_kernels and step.end_fence)

    def emits_nothing(self, rank: int, index: int, op) -> bool:
        """A fence op emits no code (its order is kept by the fence planned before the next delivery to
        that PE, `planned_fence`), and neither does a quiet with nothing in flight (an idle step)."""
        step = self.handoffs()[rank].get(index)
        return op.kind == "fence" or (step is not None and step.idle)

    def closes_with_acks(self) -> bool:
        return True

    def runs_beside(self, rank: int, index: int, held: list[int]) -> bool:
        """The block plan runs an op on blocks of its own with no handoff before it (`Step.pre` ""),
        so those blocks start it as soon as their own earlier work is done: beside puts whose blocks
        (none of its own) still store their bytes. The generated code's blocks each walk the op list
        and skip what is not theirs (`cw_nv_mine`, `cw_nv_share`): the puts of a one-shot to three
        peers run on blocks 0, 1 and 2 at once, or on blocks 0-15, 16-31 and 32-47 when each is
        spread over 16. An op whose blocks overlap a held put's, after a handoff, or fenced first
        waits for every held put, as before."""
        if (rank, index) in self.engine_ops or (rank, index) in self.call_kernels:
            return False
        steps = self.handoffs()[rank]
        step = steps.get(index)
        if step is None or step.pre or step.fence or self.planned_fence(rank, index):
            return False
        grid = self._blocks[rank]
        mine = blocks_of(step.who, grid)
        if mine is None:
            return False
        for m in held:
            other = steps.get(m)
            theirs = blocks_of(other.who, grid) if other is not None else None
            if theirs is None or mine & theirs:
                return False
        return True

    def block_floor_us(self, op, rank: int, size) -> float:
        """The generated code spreads a reduce, copy or fill over one block per
        `lowering.NVSHMEM_BLOCK_BYTES` of the bytes it moves (a copy's or fill's destination, a
        reduce's destination and sources), a reduce that reads packets over one block per
        `lowering.PACKET_BLOCK_BYTES` of its destination (`nvshmem_plan.plan_rank`), and each block
        writes its share of the destination at `nvshmem_local_block_GBs`
        (`simulate.Simulator._block_floor` says what measured it)."""
        rate = self.c.nvshmem_local_block_GBs
        if not rate:
            return 0.0
        dst = size(rank, op.dst)
        moved = dst * (1 + len(op.srcs)) if op.kind == "reduce" else dst
        blocks = nvshmem_blocks(moved)
        if op.kind == "reduce" and self.lowered.packets is not None and any(
                self.sched.programs[rank].buffer(src.buffer).role == "packets" for src in op.srcs):
            blocks = packet_blocks(dst)
        return dst / blocks / (rate * 1e3)

    def compute(self, op, traffic: float) -> tuple[int, float, float, float] | None:
        return 1, traffic, 0.0, 0.0

    @property
    def compute_ceiling_GBs(self) -> float:  # the program's stand-in hashes at its own rate
        return self.c.program_compute_GBs


def blocks_of(who, grid: int) -> frozenset[int] | None:
    """The blocks of a kernel of `grid` blocks that run an op planned on `who` (`nvshmem_plan.Who`):
    one block, or the `want` blocks from `base` (mod the grid) an op spread over blocks takes
    (`cw_nv_share`); None where the plan does not name them (the last block to arrive, the host)."""
    grid = max(1, grid)
    if who.kind == "one":
        return frozenset({who.base % grid})
    if who.kind == "all":
        return frozenset((who.base + i) % grid for i in range(min(who.want, grid)))
    return None


MODELS = {None: ScheduleOps, "nccl": HostDriven, "nvshmem": NvshmemKernels}


def program_model(sched: ir.Schedule, consts, mode: str, lowered: Lowered | None) -> ScheduleOps:
    """The model of the program `lowered` describes (None: the schedule's ops alone)."""
    backend = lowered.build.backend if lowered is not None else None
    if backend not in MODELS:
        raise ValueError(f"unknown backend {backend!r}: one of nccl, nvshmem")
    return MODELS[backend](sched, consts, mode, lowered)
