"""The NVSHMEM block plan: which thread blocks run each op of a rank, and what an op waits for
across blocks and kernels. Part of lowering a schedule for the NVSHMEM backend: the emitter renders
it (`codegen/nvshmem.py`, whose docstring states the rules the plan follows), the simulator's
program model prices it (`perf/simulate.py`), and the tuner counts its copy-engine puts.

Derived from the rules' accesses (`semantics.rules`) and the happens-before rules
(`semantics.order`); never from an op's kind where a rule answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import ir
from ..semantics.rules import SIG, SIG_READS, Mode, When, rule
from ..semantics.words import only_grows
from .blocks import NVSHMEM_BLOCK_BYTES, NVSHMEM_MAX_BLOCKS, nvshmem_blocks, packet_blocks

THREADS = 512  # threads per block
BLOCK_BYTES = NVSHMEM_BLOCK_BYTES  # an op takes one more block per this many bytes ...
MAX_BLOCKS = NVSHMEM_MAX_BLOCKS  # ... up to one block per SM of an H200 (the predictor uses the same rule)
READ_MODES = frozenset({Mode.READ, Mode.ATOMIC_READ, *SIG_READS})


@dataclass(frozen=True)
class Who:
    """Which thread blocks run an op: `all` (spread over `want` blocks from `base`, any of them may
    touch any part), `one` (block `base` mod the grid), `last` (the last block to arrive); `host`: no
    block, the host issues it on the stream between two kernels (a put on the copy engine)."""

    kind: str
    base: int = 0
    want: int = 1

    def same_block(self, other: "Who") -> bool:
        """Both surely run on one and the same block."""
        return self.kind == other.kind == "one" and self.base == other.base

    def __str__(self) -> str:
        if self.kind == "host":
            return "the copy engine, between two kernels"
        if self.kind == "one":
            return f"block {self.base}"
        return "the last block to arrive" if self.kind == "last" else f"{self.want} blocks"


@dataclass(frozen=True)
class Touch:
    """Elements [start, stop) of buffer or signal `key` in `owner`'s memory, read or written."""

    space: int
    owner: int
    key: str
    start: int
    stop: int
    write: bool

    def conflicts(self, other: "Touch") -> bool:
        return (self.space == other.space and self.owner == other.owner and self.key == other.key
                and self.start < other.stop and other.start < self.stop and (self.write or other.write))

    def __str__(self) -> str:
        where = f"{self.key}[{self.start}]" if self.space == SIG else f"{self.key}[{self.start}:{self.stop}]"
        return where if self.owner < 0 else f"{where} of rank {self.owner}"


@dataclass
class Item:
    """What an earlier op did, for the ops after it: which blocks, which memory when issued."""

    index: int
    op: ir.OpBase
    who: Who
    touches: list[Touch]
    observable: list[Touch]
    pes: list[int]  # targets of its fenced deliveries


@dataclass
class Need:
    """Why an op must come after `item` across blocks, and whether a fence is part of it."""

    item: Item
    why: str
    fence: bool
    fence_op: int | None = None


@dataclass
class Step:
    """How one op runs: `who`, and `pre`: "" (nothing before it), "block" (`__syncthreads` in its
    block), "last" (every block arrives, the last runs it), "grid" (a grid-wide sync first); `fence`:
    the blocks fence before the handoff; `needs`: the reasons."""

    index: int
    who: Who
    pre: str = ""
    fence: bool = False
    needs: list[Need] = field(default_factory=list)
    counter: int | None = None  # arrival counter of a "last" handoff (or of a spread put_signal's signal)
    signal_counter: int | None = None
    hash_slot: int | None = None
    fence_pes: list[int] = field(default_factory=list)  # a fence op: the PEs whose order it keeps
    used_by: list[int] = field(default_factory=list)  # a fence op: the ops that keep its order
    idle: bool = False  # a quiet with nothing in flight, a fence with nothing to order
    # The op begins a kernel of its own (a call of `--calls`); `end_fence`: every block of the kernel
    # before fences its own work first (the kernel boundary is then the grid-wide sync of "grid").
    kernel_start: bool = False
    end_fence: bool = False
    # A put or put_signal run inside the reduce before it (`fusable_put`): each block stores its share of
    # the sums into this rank's destination and straight into the peer's, so the put emits no copy of
    # its own (a put_signal: only its signal, after the blocks' fences)
    fused: bool = False


@dataclass
class RankPlan:
    rank: int
    steps: list[Step]
    blocks: int  # blocks the kernel wants
    counters: int
    hash_slots: int
    kernels: int = 1  # one, or one per call (`splits`), not counting the copy engine's puts between them


def _touch(access, rank: int) -> Touch:
    where = access.where
    owner = access.owner
    if isinstance(where, ir.SignalRef):
        return Touch(SIG, owner, where.signal, where.index, where.index + 1, access.mode not in READ_MODES)
    return Touch(0, owner, where.buffer, where.start, where.stop, access.mode not in READ_MODES)


def _touches(op, rank: int, when: tuple) -> list[Touch]:
    return [_touch(a, rank) for a in rule(op).accesses(op, rank) if a.when in when]


def touch_index(sched: ir.Schedule) -> dict[tuple, list[tuple[Touch, int]]]:
    """Every access of every rank's ops, by the memory it touches: (space, owner, key) -> (touch, rank)."""
    found: dict[tuple, list[tuple[Touch, int]]] = {}
    for program in sched.programs:
        for op in program.ops:
            for member in (op.ops if isinstance(op, ir.Group) else (op,)):
                for t in _touches(member, program.rank, (When.ISSUE, When.DELIVERY, When.JOINT)):
                    found.setdefault((t.space, t.owner, t.key), []).append((t, program.rank))
    return found


def _observable(t: Touch, rank: int, index: dict) -> bool:
    """Another rank touches the same memory, one of the two writing: what this rank did there must be
    visible to it before this rank's signal lets it go on."""
    return any(other != rank and t.conflicts(u) for u, other in index.get((t.space, t.owner, t.key), ()))


def monotone_words(sched: ir.Schedule) -> set[tuple[int, str, int]]:
    """Signal words (owner, signal, index) that only ever grow in a run (`semantics.words.only_grows`),
    so a ge/gt comparison that holds stays true."""
    return only_grows(sched)


def _publishes(op, rank: int) -> bool:
    """The op updates a signal word (a waiter may go on once it sees the update)."""
    return any(a.space == SIG and a.mode not in READ_MODES for a in rule(op).accesses(op, rank))


def _want(nbytes: int) -> int:
    return nvshmem_blocks(nbytes)


def _bytes(sched: ir.Schedule, rank: int, region: ir.Region, owner: int | None = None) -> int:
    decl = sched.programs[rank if owner is None else owner].buffer(region.buffer)
    return region.count * ir.DTYPE_BYTES[decl.dtype]


def _op_bytes(sched: ir.Schedule, rank: int, op) -> int:
    """The bytes an op moves, which decide how many blocks it takes (0: a one-word op)."""
    if isinstance(op, (ir.Put, ir.PutSignal, ir.Get, ir.GetNbi, ir.Copy, ir.Fill)):
        return _bytes(sched, rank, op.dst if isinstance(op, (ir.Get, ir.GetNbi, ir.Copy, ir.Fill)) else op.src)
    if isinstance(op, ir.LocalReduce):
        return _bytes(sched, rank, op.dst) * (1 + len(op.srcs))
    if isinstance(op, ir.Compute):
        return sum(_bytes(sched, rank, r) for r in (*op.reads, *op.writes))
    return 0


def staged(op, rank: int) -> ir.Region | None:
    """The source that must be copied first: it overlaps the op's destination at another offset
    (an element would be read after another thread wrote it). Such ops run on one block."""
    pairs = []
    if isinstance(op, (ir.Put, ir.PutSignal)) and op.pe == rank:
        pairs = [(op.src, op.dst)]
    elif isinstance(op, (ir.Get, ir.GetNbi)) and op.pe == rank:
        pairs = [(op.src, op.dst)]
    elif isinstance(op, ir.Copy):
        pairs = [(op.src, op.dst)]
    elif isinstance(op, ir.LocalReduce):
        pairs = [(src, op.dst) for src in op.srcs]
    for src, dst in pairs:
        if src.buffer == dst.buffer and src.start != dst.start and src.start < dst.stop and dst.start < src.stop:
            return src
    return None


def fusable_put(sched: ir.Schedule, rank: int, m: int, packets=None, splits=frozenset()) -> bool:
    """Op m of `rank` is a put or put_signal (not sent as packets) to another PE whose source is exactly
    the destination of the reduce right before it (not one that reads packets, in the same kernel, no
    source overlapping its destination at another offset): the code may then run the two as one pass,
    each thread storing its sums into this rank's destination and into the peer's (as NCCL's
    reduce-and-send does), instead of writing the sums, then reading them again to put them. What the
    put sends is what the reduce wrote (the same values, read back from registers rather than memory),
    and nothing runs between the two; `plan_rank` fuses them only where the put waits for nothing but
    the reduce, so no other order changes."""
    return fused_reduce(sched, rank, m, packets, splits) is not None


def fused_reduce(sched: ir.Schedule, rank: int, m: int, packets=None, splits=frozenset()) -> int | None:
    """The index of the reduce that op m may run inside (`fusable_put`): the reduce right before it, or
    before the puts of the same destination to other PEs right before it (a put to each peer of the
    two-shot's all-gather, say), all in one kernel; None where op m is no such put."""
    ops = sched.programs[rank].ops
    sends = packets.sends if packets is not None else {}
    reads = getattr(packets, "reads", None) or {}

    def put_of(k: int, region: ir.Region | None) -> bool:
        op = ops[k]
        return (isinstance(op, (ir.Put, ir.PutSignal)) and (rank, k) not in sends and op.pe != rank
                and staged(op, rank) is None and k not in splits
                and (region is None or (op.src.buffer, op.src.start, op.src.stop) == region))

    if not put_of(m, None):
        return None
    src = (ops[m].src.buffer, ops[m].src.start, ops[m].src.stop)
    r = m - 1
    pes = {ops[m].pe}
    while r >= 0 and put_of(r, src) and ops[r].pe not in pes:
        pes.add(ops[r].pe)
        r -= 1
    if r < 0 or not isinstance(ops[r], ir.LocalReduce) or (rank, r) in reads or staged(ops[r], rank) is not None:
        return None
    return r if (ops[r].dst.buffer, ops[r].dst.start, ops[r].dst.stop) == src else None


def copy_engine_ops(sched: ir.Schedule, rank: int, min_bytes: int, packets=None) -> frozenset[int]:
    """The ops of `rank` that the copy engine moves (`--copy-engine SIZE`): every put and put_signal of
    at least `min_bytes` bytes, unless it is sent as packets or its source overlaps its destination
    (a copy engine's copy of overlapping memory is undefined; `staged` copies those first, in a kernel).
    A put the blocks could run inside the reduce before it (`fusable_put`) goes on the copy engine too:
    asked for, the copy engine takes precedence (which of the two is faster is the tuner's to measure).
    Each is issued by the host on the rank's stream between two kernels (`nvshmemx_putmem[_signal]_on_stream`,
    which on a peer reached over NVLink is a peer cudaMemcpyAsync, then for put_signal the signal's write);
    0: none."""
    if min_bytes <= 0:
        return frozenset()
    sends = packets.sends if packets is not None else {}
    return frozenset(m for m, op in enumerate(sched.programs[rank].ops)
                     if isinstance(op, (ir.Put, ir.PutSignal)) and (rank, m) not in sends
                     and staged(op, rank) is None and _op_bytes(sched, rank, op) >= min_bytes)


def _next_signals(sched: ir.Schedule, rank: int, m: int) -> bool:
    """The op after op m is a one-block op that updates a signal word too."""
    ops = sched.programs[rank].ops
    if m + 1 >= len(ops):
        return False
    nxt = ops[m + 1]
    return _publishes(nxt, rank) and _want(_op_bytes(sched, rank, nxt)) == 1


def _what(t: Touch, rank: int) -> str:
    """A touch as the comments name it (the rank's own memory without its number)."""
    return str(Touch(t.space, -1 if t.owner == rank else t.owner, t.key, t.start, t.stop, t.write))


def plan_rank(sched: ir.Schedule, rank: int, index: dict | None = None, monotone: set | None = None,
              packets=None, splits=frozenset(), copy_engine=frozenset()) -> RankPlan:
    """Who runs each op of `rank` and what it waits for across blocks (the module docstring).
    `packets` (`packets.Lowered`): its put_signals send packets (twice the bytes, the flag in each).
    `splits`: the ops that begin a kernel of their own (the calls of `--calls`, one kernel each).
    `copy_engine` (`copy_engine_ops`): puts the host issues on the stream, each between the kernel
    before it and one that begins after it.

    A kernel boundary is planned as a grid-wide sync, fenced when anything before it is unpublished
    or awaits a fence: every block of the kernel before fences its own work (thread 0's
    nvshmem_fence after __syncthreads, as `cw_nv_grid_sync` does), and the next kernel on the stream
    starts after every block of that one has finished, its writes visible to the next kernel's
    threads: at least the ordering a grid-wide sync gives, so what the plan derives for one kernel
    holds across the boundary. Deliveries stay in flight across it (a boundary is no quiet).

    A put on the copy engine starts once the kernel before it has finished (stream order), after that
    boundary: so everything before it in program order, on any block, is ordered before it, fenced
    where a fence or a publication needs one, exactly as for the first op of a kernel. Nothing after it
    on the stream starts before its copy (and, for put_signal, its signal's write) has completed: every
    later op follows its issue and its delivery, more order than the semantics asks for (a delivery
    may land any time before the next quiet), never less."""
    sends = packets.sends if packets is not None else {}
    reads = packets.reads if packets is not None else {}
    n_ops = len(sched.programs[rank].ops)

    def want_of(m: int, op) -> int:
        """The blocks op m takes: a packet send and a reduce that reads packets one per
        `blocks.PACKET_BLOCK_BYTES` of payload, a wait one, any other op one per `NVSHMEM_BLOCK_BYTES`."""
        if (rank, m) in sends:
            return packet_blocks(_op_bytes(sched, rank, op))
        if (rank, m) in reads:
            return packet_blocks(_bytes(sched, rank, op.dst))
        return _want(_op_bytes(sched, rank, op))

    splits = frozenset(splits) | copy_engine | {m + 1 for m in copy_engine if m + 1 < n_ops}
    # With packets, a rank whose every op fits one block runs them all on block 0: each op then
    # follows the ones it depends on by a __syncthreads, never by a handoff between blocks.
    compact = bool(sends) and all(want_of(m, op) == 1 for m, op in enumerate(sched.programs[rank].ops))
    index = touch_index(sched) if index is None else index
    monotone = monotone_words(sched) if monotone is None else monotone
    program = sched.programs[rank]
    steps: list[Step] = []
    pending: list[Item] = []  # since the last grid-wide sync: what each op touched when issued
    unpublished: list[Item] = []  # observable touches not yet fenced by every block
    since_fence: dict[int, list[Item]] = {}  # pe -> deliveries since the last fence
    fenced: dict[int, list[tuple[Item, int]]] = {}  # pe -> deliveries a fence orders before later ones
    in_flight: list[Item] = []  # deliveries since the last quiet or barrier_all
    rotation = ones = counters = hash_slots = 0  # rotation: the next free block, for ops with no one to follow
    most_ones = 0  # the most independent one-block ops of one kernel (a kernel per call: each starts afresh)
    widest = 1

    def cleared(fence: bool) -> None:
        nonlocal pending, unpublished, since_fence, fenced
        pending = []
        if fence:
            unpublished, since_fence, fenced = [], {}, {}

    fences_after = {m for m, op in enumerate(program.ops) if isinstance(op, ir.Fence)}
    ends: dict[int, bool] = {}  # a kernel's first op -> whether the kernel before ends with a fence
    for m, op in enumerate(program.ops):
        boundary = m in splits
        end_fence = boundary and bool(unpublished or fenced or (since_fence and any(f > m for f in fences_after)))
        if boundary:
            cleared(True)  # the kernel before ended fenced where anything needed it (end_fence)
            ends[m] = end_fence
            # nothing of the kernel before runs beside this one: its ops start again from block 0, so
            # the grid (every kernel of the rank has the same) is the widest kernel's, not their sum
            most_ones, rotation, ones = max(most_ones, ones), 0, 0
        if isinstance(op, ir.Fence):
            step = Step(m, Who("all"))
            for pe, items in since_fence.items():
                fenced.setdefault(pe, []).extend((item, m) for item in items)
                step.fence_pes.append(pe)
            since_fence = {}
            step.idle = not step.fence_pes
            steps.append(step)
            continue
        if team_op(sched, op):
            # An NVSHMEM team op: a grid-wide sync, block 0 calls NVSHMEM, then a grid-wide sync
            # (`team_step`); nothing of it is pending after that last sync.
            step, completes, done = team_step(sched, rank, m, op, index, bool(unpublished or fenced))
            cleared(step.fence)
            if completes:
                in_flight = []
            if done is not None:
                unpublished.append(done)
            steps.append(step)
            continue
        if isinstance(op, (ir.Quiet, ir.BarrierAll, ir.SyncAll)):
            step = Step(m, Who("all"), pre="grid", fence=True)
            if isinstance(op, ir.Quiet) and not in_flight:
                step.pre, step.fence, step.idle = "", False, True
            else:
                step.fence = not isinstance(op, ir.SyncAll) or bool(unpublished or fenced)
                cleared(step.fence)
                if not isinstance(op, ir.SyncAll):
                    in_flight = []
            steps.append(step)
            continue
        touches = _touches(op, rank, (When.ISSUE,))
        now = touches + _touches(op, rank, (When.DELIVERY,))  # deliveries are performed as the op runs
        if m in copy_engine:  # between two kernels: the boundary before it orders everything (docstring)
            who = Who("host")
            item = Item(m, op, who, touches, [t for t in now if _observable(t, rank, index)], [op.pe])
            pending.append(item)
            if item.observable:
                unpublished.append(item)
            since_fence.setdefault(op.pe, []).append(item)
            in_flight.append(item)
            steps.append(Step(m, who))
            continue
        publishes = _publishes(op, rank)
        pes = [op.pe] if rule(op).fenced else []

        def needs_of(want: int) -> tuple[list[Need], bool]:
            """What op m waits for across blocks on `want` blocks, and whether its signal is a spread one."""
            needs: list[Need] = []
            for item in pending:
                hit = next((t for t in now for u in item.touches if t.conflicts(u)), None)
                if hit is not None:
                    verb = "writes" if any(u.write and u.conflicts(hit) for u in item.touches) else "reads"
                    needs.append(Need(item, f"{_what(hit, rank)}: op {item.index} ({item.op.loc.file}:"
                                            f"{item.op.loc.line}) {verb} it first", False))
            # a spread put_signal's signal goes out from the last block to arrive: it publishes there
            spread = isinstance(op, ir.PutSignal) and want > 1 and (rank, m) not in sends
            if publishes and not spread:
                for item in unpublished:
                    what = " and ".join(f"{'writes' if t.write else 'reads'} {_what(t, rank)}"
                                        for t in item.observable[:2])
                    needs.append(Need(item, f"its signal lets another rank go on, and op {item.index} "
                                            f"({item.op.loc.file}:{item.op.loc.line}) {what}, which that rank may "
                                            "touch then", True))
            for pe in pes:
                for item, fence_at in fenced.get(pe, []):
                    fop = program.ops[fence_at]
                    needs.append(Need(item, f"the fence at {fop.loc.file}:{fop.loc.line} orders op {item.index}'s "
                                            f"delivery to PE {pe} before this one", True, fence_at))
            unique: dict[int, Need] = {}
            for need in needs:
                kept = unique.get(need.item.index)
                if kept is None or (need.fence and not kept.fence):
                    unique[need.item.index] = need
            return list(unique.values()), spread

        want = 1 if isinstance(op, (ir.WaitUntil, ir.WaitUntilAll, ir.WaitUntilAny)) else want_of(m, op)
        if staged(op, rank) is not None:
            want = 1
        fuse = None
        r = fused_reduce(sched, rank, m, packets, splits)
        if r is not None and steps[r].who.kind in ("one", "all") and all(steps[k].fused for k in range(r + 1, m)):
            # run inside the reduce before it (with the fused puts between), on its blocks, where it waits
            # for nothing but that reduce: each block then puts the sums it made itself, so no order
            # across blocks is needed
            joint = steps[r].who
            trial, spread = needs_of(joint.want if joint.kind == "all" else 1)
            if all(n.item.index == r for n in trial):
                fuse, want, needs, spread_signal = joint, (joint.want if joint.kind == "all" else 1), trial, spread
        if fuse is None:
            needs, spread_signal = needs_of(want)
        if fuse is not None:
            who = fuse
            step = Step(m, who, fence=any(n.fence for n in needs), needs=needs, fused=True)
        elif isinstance(op, (ir.WaitUntil, ir.WaitUntilAll, ir.WaitUntilAny)):
            who = Who("all")
            step = Step(m, who, pre="grid" if needs else "", fence=any(n.fence for n in needs), needs=needs)
        elif want == 1:
            blocks = {n.item.who.base for n in needs if n.item.who.kind == "one"}
            others = [n for n in needs if n.item.who.kind != "one"]
            if compact:
                who = Who("one", 0)
                step = Step(m, who, pre="block" if needs else "", fence=any(n.fence for n in needs), needs=needs)
            elif not needs:
                who = Who("one", rotation)
                rotation += 1
                ones += 1
                step = Step(m, who)
            elif not others and len(blocks) == 1:
                who = Who("one", blocks.pop())
                step = Step(m, who, pre="block", fence=any(n.fence for n in needs), needs=needs)
            elif publishes and _next_signals(sched, rank, m):
                # a run of signals (to each peer, say), each after every block's work: one grid-wide sync
                # lets them all go out at once, each from a block of its own
                who = Who("one", rotation)
                rotation += 1
                ones += 1
                step = Step(m, who, pre="grid", fence=any(n.fence for n in needs), needs=needs)
            else:
                who = Who("last")
                step = Step(m, who, pre="last", fence=any(n.fence for n in needs), needs=needs, counter=counters)
                counters += 1
        else:
            who = Who("all", rotation, want)
            rotation += want
            step = Step(m, who, pre="grid" if needs else "", fence=any(n.fence for n in needs), needs=needs)
        for need in needs:
            if need.fence_op is not None and m not in steps[need.fence_op].used_by:
                steps[need.fence_op].used_by.append(m)
        if step.pre == "grid":
            cleared(step.fence)
        if spread_signal:
            step.signal_counter = counters
            counters += 1
        if isinstance(op, ir.Compute):
            if want > 1:
                step.hash_slot = hash_slots
                hash_slots += 1
                pending = []  # its reads are hashed by every block, then a grid-wide sync, then the writes
        widest = max(widest, want)
        # A wait read is observable (every block must have polled before the rank's next signal lets a
        # peer change the word again), unless the word only grows and the wait is ge/gt: it stays true.
        steady = getattr(op, "cmp", None) in ("ge", "gt") and not isinstance(op, ir.FetchAtomic)
        observable = [t for t in touches if _observable(t, rank, index)
                      and not (steady and t.space == SIG and (t.owner, t.key, t.start) in monotone)]
        item = Item(m, op, who, touches, observable, pes)
        pending.append(item)
        if observable:
            unpublished.append(item)
        for pe in pes:
            since_fence.setdefault(pe, []).append(item)
        if op.kind in ir.DELIVERY_KINDS:
            in_flight.append(item)
        steps.append(step)
    for m, end_fence in ends.items():
        steps[m].kernel_start, steps[m].end_fence = True, end_fence
    # each independent one-block op of a kernel on a block of its own
    blocks = max(widest, min(MAX_BLOCKS, max(most_ones, ones)))
    return RankPlan(rank, steps, max(1, blocks), counters, hash_slots,
                    sum(kind == "kernel" for kind, _steps in kernel_spans(steps)))


# The team collectives (ir's collectives on a team communicator: team_reduce, team_fcollect,
# team_alltoall, team_broadcast) and the team sync (a barrier on a team).
TEAM_COLLECTIVES = (ir.AllReduce, ir.AllGather, ir.AllToAll, ir.Broadcast)


def team_of(sched: ir.Schedule, comm: str) -> ir.TeamOf | None:
    """The NVSHMEM team communicator `comm` is (None: the world or an NCCL communicator)."""
    if comm == "world":
        return None
    try:
        return sched.comm(comm).team
    except KeyError:
        return None


def team_op(sched: ir.Schedule, op) -> bool:
    """An NVSHMEM team op: a split, a team barrier, a team sync or a team collective."""
    if isinstance(op, (ir.TeamSplit, ir.TeamBarrier)):
        return True
    return isinstance(op, (*TEAM_COLLECTIVES, ir.Barrier)) and team_of(sched, op.comm) is not None


def team_step(sched: ir.Schedule, rank: int, m: int, op, index: dict, unpublished: bool
              ) -> tuple[Step, bool, Item | None]:
    """How a team op runs (`team_op`), as barrier_all and sync_all do: a grid-wide sync, block 0 calls
    NVSHMEM (one thread, or the block's threads for a collective that moves data), then a grid-wide
    sync, so every block's later work follows it. Returns (the step, whether it completes the rank's
    deliveries, what of it a later signal must publish).

    - team_barrier (nvshmem_barrier(team): a quiet, then the members meet): every block's quiet
      first, as barrier_all's; it completes the rank's deliveries.
    - team_split (the team is made on the host at setup, `codegen/nvshmem.py`) and team_sync: the
      members of the parent (of the team) meet, and nothing completes: as sync_all, fenced where
      something is unpublished.
    - a team collective: always fenced first, since NVSHMEM's collective may read this rank's
      source and write its destination from the other members (by NVLink loads and stores), which
      the rules' accesses (each member's own buffers) do not show. Its destination, written by the
      collective, is observable when another rank touches it, and is then published (fenced) before
      this rank's next signal, from block 0, which ran it."""
    if isinstance(op, ir.TeamBarrier):
        return Step(m, Who("all"), pre="grid", fence=True), True, None
    if isinstance(op, (ir.TeamSplit, ir.Barrier)):
        return Step(m, Who("all"), pre="grid", fence=unpublished), False, None
    step = Step(m, Who("all"), pre="grid", fence=True)
    who = Who("one", 0)
    touches = _touches(op, rank, (When.JOINT,))
    observable = [t for t in touches if t.write and _observable(t, rank, index)]
    return step, False, (Item(m, op, who, touches, observable, []) if observable else None)


def syncs_grid(sched: ir.Schedule, rank: int, steps: list[Step]) -> bool:
    """Whether a kernel made of `steps` (of `rank`) needs every one of its blocks resident at once, so a
    cooperative launch: one of its blocks waits for all the others (a grid-wide sync: a step after
    one, `pre == "grid"`; a quiet that is not idle, `cw_nv_quiet_all`; a spread compute's hashed sum,
    `cw_nv_grid_sum`), or it calls an NVSHMEM collective (barrier_all, sync_all, a team op: NVSHMEM's
    collective launch). Any other kernel's blocks never wait for one another: each runs its ops in
    order, hands over by an arrival counter (the last block to arrive goes on; the others do not
    wait) or waits for another PE's word, so it runs on whichever blocks are resident and may be
    launched plainly, whatever its grid (`codegen.nvshmem`'s `cw_nv_launch`, the library's
    `cwl_launch`, and the program model's price of the launch read this one answer)."""
    program = sched.programs[rank]
    for step in steps:
        op = program.ops[step.index]
        if step.pre == "grid" or step.hash_slot is not None:
            return True
        if isinstance(op, ir.Quiet) and not step.idle:
            return True
        if isinstance(op, (ir.BarrierAll, ir.SyncAll)) or team_op(sched, op):
            return True
    return False


def kernel_spans(steps: list[Step]) -> list[tuple[str, list[Step]]]:
    """A rank's run in stream order: ("kernel", its steps) and ("host", [a copy engine's put]). A kernel
    with no step is left out, except the last, which ends the run (every block's quiet, every PE meeting)."""
    spans: list[tuple[str, list[Step]]] = [("kernel", [])]
    for step in steps:
        if step.who.kind == "host":
            spans += [("host", [step]), ("kernel", [])]
        elif step.kernel_start and spans[-1][1]:
            spans.append(("kernel", [step]))
        else:
            spans[-1][1].append(step)
    return [span for k, span in enumerate(spans) if span[0] == "host" or span[1] or k == len(spans) - 1]


