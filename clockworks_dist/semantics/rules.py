"""One rule per op class: what each op of the IR means, written once for every engine.

A rule states, for its op class:
- `sync`: how the op synchronises (`Sync`): alone on its rank, with its matched peer, with the
  members of a communicator, as a delivery that lands later, as a blocking remote access, or as a
  block until a comparison, a quiet or a barrier holds;
- `accesses(op, rank)`: every region and signal word it touches, whose memory (a world rank), with
  which `Mode`, and when (`When`: at issue, at delivery, or jointly with the ops it matches);
- `flows(op, rank)` (ops of one rank) or `collective_flows(ops, ranks)` (one collective instance):
  the data movement as `Move`s, region to region with an optional combine. The chunk maps of the
  collectives exist here and nowhere else; the machine applies them to symbolic values, the atom
  layout aligns on them, the simulator and the DSL's shape checks size them;
- `awaits(op, rank)`: the signal words a wait reads and how it combines their comparisons;
- `describe(op)`: one code-like line, as the user wrote it;
- `signal_effect(op)`: what it does to a signal word (add, set, read, clear, any), which the
  reduction's wrap-around proof, the z3 wait check, the simulator and the emitters read.

The signal and atomic arithmetic (uint64, modulo 2**64) is in `arithmetic`; DESIGN.md's terms for
each op are the docstrings of its rule below. The machine (`machine.Model`) dispatches on
`rule.sync`, never on an op's kind.

## Adding an op (the checklist)
Every file an added op needs; `tests/test_add_an_op.py` fails, naming the file, when an item marked
[guarded] is forgotten for any class of `ir.OP_CLASSES`.
1. `ir.py`: a frozen class (fields `src`, `dst`, `peer` or `pe`, `signal`), its place in the `Op`
   union (`OP_CLASSES` and `KINDS` derive from it), and in the op groups that restate its rule:
   `DELIVERY_KINDS` (sync DELIVERY), `FENCED_KINDS` (`fenced`), `WAIT_KINDS` (sync WAIT),
   `COLLECTIVE_KINDS` (sync COLLECTIVE) [guarded], `ONE_SIDED_KINDS` (an NVSHMEM-style op).
2. Here: its rule in one block, registered in `RULES` [guarded]: `sync`, `accesses`, `flows` (or
   `collective_flows` and `scale`), `awaits` for a wait [guarded], `signal_effect` for every op
   that touches a signal word on `pe` [guarded: the reduction's wrap-around proof,
   `machine.Model._may_wrap`, is unsound without it], `word_update` for a delivery that updates a
   word, `fenced`, `fetches`, `describe`.
3. `dsl/trace.py`: the `Rank` method, validating its arguments (file, line, rank, op) and with a
   docstring that states the semantics (`help(r.put_signal)`) [guarded];
   `dsl/validate_json.py`: `_REMOTE` / `_REMOTE_SIGNALS`, the fields that live on `pe` [guarded].
4. `perf/costs.py`: its `COSTS` entry (launch or not, fixed latencies; bytes come from `flows`)
   [guarded]; `Cost.one_thread` and `Cost.holds`, which the NVSHMEM program model
   (`perf/programs.py`) and the simulator read, derive from that entry. Kind branches left in
   `perf/simulate.py` and `perf/programs.py`: fence and quiet, put_signal's separate signal,
   barrier_all's quiet, an in-place NCCL collective on one rank.
5. Every backend table (`semantics.backends`): an implementation, or an `UNSUPPORTED` entry with
   its reason: `runtime/mpi_cpu.py`, `runtime/cupy_nccl.py`, `codegen/nccl.py`,
   `codegen/nvshmem.py` (its table, and the waits' `wait_until_all`/`_any` choice),
   `perf/simulate.py` [guarded by tests/test_semantics.py, test_runtime.py, test_runtime_cupy.py].
   The NVSHMEM block plan (`lowering/nvshmem_plan.py`) reads `accesses`, `fenced` and `signal_effect`.
   `lowering/packets.py` (was `codegen/packets.py`) reads `signal_effect` (and names `fetch_atomic`).
6. `lowering/repeat.py` (was `repeat.py`): `_updates` and `_shift`, the epochs of every signal
   word an op updates and the shifted values of sets and waits (or a `RepeatError` that refuses it) [guarded].
7. A collective: `semantics/match.py` (its parameters compared across members), `perf/nccl.py`,
   `perf/nccl_tuning.py` and `topology/model.py` (`NCCL_KINDS`: its bandwidth and latency), and
   `check/symbolic/sizes.py`; a PE-wide barrier: `semantics/match.py` (`barrier_all`, `sync_all`)
   and `semantics/order.py` (`COMPLETING_KINDS`, `FENCING_KINDS` if it completes deliveries).
8. If it waits or delivers, the z3 wait check (`check/symbolic/waits.py`) reads `awaits`,
   `signal_effect` and `ir.WAIT_KINDS`; `check/symbolic/deliveries.py` reads `ir.DELIVERY_KINDS`.
9. Tests: a unit test per DESIGN.md sentence about the op (a correct schedule that verifies and a
   buggy twin), the op in `every_op` of `tests/test_semantics.py`, in the hypothesis strategy of
   `tests/test_por_properties.py` (or in `NOT_IN_POR_STRATEGY` of `tests/test_add_an_op.py`, with
   the reason) [guarded], and a seeded bug in `protocols/buggy/` with `EXPECT` and a `# BUG` line
   where it makes sense.
10. DESIGN.md: the op's paragraph in "Semantics", the source of truth this rule implements.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .. import ir
from .arithmetic import word_effect
from .backends import Backend, register


class Sync(enum.Enum):
    """How an op synchronises with the rest of the schedule (DESIGN.md, "Semantics")."""

    LOCAL = "local"  # runs alone on its rank (local kernels; fence, whose effect is on deliveries)
    P2P = "p2p"  # a send or recv (or a group of them) completes with its FIFO-matched partner
    COLLECTIVE = "collective"  # the k-th collective of every member of a communicator, together
    DELIVERY = "delivery"  # issued now, lands later as an action of its own (ordered by fence)
    REMOTE = "remote"  # one blocking transition that touches another PE's memory (get, fetch atomics)
    WAIT = "wait"  # blocks until a comparison on signal words of its own rank holds
    QUIET = "quiet"  # blocks until every delivery the rank issued has landed
    BARRIER_ALL = "barrier_all"  # quiet, then a barrier over every PE
    SYNC_ALL = "sync_all"  # a barrier over every PE that does not wait for deliveries


class When(enum.Enum):
    """When an access happens: as the op executes on its rank, when its delivery lands, or in the
    joint transition of a matched send/recv or collective."""

    ISSUE = "issue"
    DELIVERY = "delivery"
    JOINT = "joint"

    # Members are singletons compared by identity: hash them so, in C (Enum's own hash is a
    # Python method, and the model's memos are keyed by `when`).
    __hash__ = object.__hash__


class Mode(str, enum.Enum):
    """How an access touches memory (`MEM`) or a signal word (`SIG`). Two overlapping accesses race
    when one writes and they are not both atomic (`conflicting`)."""

    READ = "r"
    WRITE = "w"
    ATOMIC_ADD = "aa"  # an atomic add or inc on a data word
    ATOMIC_OTHER = "ax"  # another atomic update: set, and, or, xor, swap, compare-swap
    ATOMIC_READ = "ar"  # an atomic fetch that writes nothing back
    SIG_READ = "sr"  # a wait or a fetch reads the word
    SIG_READ_MONOTONE = "sm"  # a ge/gt wait on a word whose adds are proven never to wrap
    SIG_ADD = "sa"
    SIG_SET = "ss"  # any other signal update
    SIG_STORE = "sw"  # a plain (non-atomic) store to a signal word: races with every other access

    def __str__(self) -> str:
        return self.value

    # Equal to its code, so it hashes as its code does; str's own slot, not a Python method: every
    # `mode in WRITE_MODES` of the checker's inner loops hashes a mode.
    __hash__ = str.__hash__

    @property
    def verb(self) -> str:
        """What an access of this mode does, in a race report."""
        return _VERBS[self]


_VERBS = {Mode.READ: "reads", Mode.WRITE: "writes", Mode.ATOMIC_ADD: "atomically updates",
          Mode.ATOMIC_OTHER: "atomically updates", Mode.ATOMIC_READ: "atomically reads",
          Mode.SIG_READ: "reads", Mode.SIG_READ_MONOTONE: "reads", Mode.SIG_ADD: "adds to", Mode.SIG_SET: "sets",
          Mode.SIG_STORE: "stores to (a plain write)"}
MEM, SIG = 0, 1  # the two spaces of an access: buffer elements (as atoms), signal words
SIG_READS = frozenset({Mode.SIG_READ, Mode.SIG_READ_MONOTONE})
ATOMIC_MODES = frozenset({Mode.ATOMIC_ADD, Mode.ATOMIC_OTHER, Mode.ATOMIC_READ})
WRITE_MODES = frozenset({Mode.WRITE, Mode.ATOMIC_ADD, Mode.ATOMIC_OTHER})
SIG_UPDATES = frozenset({Mode.SIG_ADD, Mode.SIG_SET, Mode.SIG_STORE})  # the accesses that change a signal word


def conflicting(m1: Mode, m2: Mode) -> bool:
    """Two overlapping memory accesses race (DESIGN.md): at least one writes, and they are not both
    atomic. Two reads never race, an atomic fetch beside a plain load included. On a signal word, only a
    plain store (`SIG_STORE`) races: with every other access of the word, a wait's read included."""
    if m1 is Mode.SIG_STORE or m2 is Mode.SIG_STORE:
        return True
    if m1 not in WRITE_MODES and m2 not in WRITE_MODES:
        return False
    return not (m1 in ATOMIC_MODES and m2 in ATOMIC_MODES)


def dependent(space: int, m1: Mode, m2: Mode) -> bool:
    """Overlapping accesses whose order can matter. Reads commute with reads, and adds with adds
    (addition modulo 2**64 is commutative, wrapping or not). A `ge`/`gt` wait commutes with an add
    only when it reads with SIG_READ_MONOTONE, which the machine grants just for words whose adds
    can never wrap (then adding never makes the condition false again)."""
    if space == MEM:
        if m1 not in WRITE_MODES and m2 not in WRITE_MODES:
            return False
        return not (m1 == Mode.ATOMIC_ADD and m2 == Mode.ATOMIC_ADD)
    if m1 in SIG_READS and m2 in SIG_READS:
        return False
    pair = {m1, m2}
    return not (pair == {Mode.SIG_ADD} or pair == {Mode.SIG_ADD, Mode.SIG_READ_MONOTONE})


@dataclass(frozen=True)
class Access:
    """`op.<field>` touches `where` (a region or a signal word) in `owner`'s memory."""

    field: str
    owner: int
    where: ir.Region | ir.SignalRef
    mode: Mode
    when: When

    @property
    def space(self) -> int:
        return SIG if isinstance(self.where, ir.SignalRef) else MEM


Place = tuple[int, ir.Region]  # (world rank, region of that rank's buffer)


@dataclass(frozen=True)
class Move:
    """Data flow: every place in `dsts` receives, element by element, the combine (`combine`, a
    reduction op) of the places in `srcs` in their order, or a copy of `srcs[0]` when `combine` is
    None. `fill` writes the constant `value` instead (no srcs); `opaque` names a compute kernel
    whose every output is an unknown function of all it reads. Sources are read before any
    destination is written (in-place collectives are well defined)."""

    dsts: tuple[Place, ...]
    srcs: tuple[Place, ...] = ()
    combine: str | None = None
    value: float | None = None
    opaque: str | None = None


@dataclass(frozen=True)
class Awaits:
    """A wait: the words of its own rank it compares with `cmp value`, all of them or any one."""

    words: tuple[ir.SignalRef, ...]
    cmp: str
    value: int
    all: bool = True


class Rule:
    """The meaning of one op class. Subclasses override what their op does."""

    op_class: type
    sync: Sync = Sync.LOCAL
    fetches = False  # a fetching atomic: updates a word on `pe` and returns its old value
    fenced = False  # a delivery that fence orders per target PE (puts, atomics, signals; not gets)

    def accesses(self, op, rank: int) -> tuple[Access, ...]:
        return ()

    def signal_effect(self, op) -> tuple[ir.SignalRef, str, int] | None:
        """What the op does to a signal word at `op.pe`: (word, effect, value). Effects: `add`;
        `set` (compare_swap may also leave the word as it was); `read`, no change (fetch); `clear`,
        bits only cleared (and); `any`, any value (or, xor). None for ops that touch no signal
        word at `op.pe`. Every rule whose `accesses` touch a signal word there must say how:
        the reduction (`machine.Model._may_wrap`) proves ge/gt waits commute with adds from it,
        and `tests/test_add_an_op.py` fails when a rule forgets."""
        return None

    def word_update(self, op) -> tuple[ir.SignalRef | ir.Region, str, int] | None:
        """A delivery's update of one word at `op.pe`: (word, op for `arithmetic.atomic_result`,
        operand), applied when it lands, after its data."""
        return None

    def flows(self, op, rank: int) -> tuple[Move, ...]:
        """The data an op of one rank moves (joint ops: see `collective_flows`, `p2p_flow`)."""
        return ()

    def awaits(self, op, rank: int) -> Awaits | None:
        return None

    def scale(self, members: int) -> tuple[int, int]:
        """(source elements, destination elements) per unit of its data flow, for shape checks:
        1 to 1 but for all_gather (1 to `members`) and reduce_scatter (`members` to 1)."""
        return 1, 1

    def describe(self, op) -> str:
        return f"{op.kind}()"


def _on(comm: str) -> str:
    return "" if comm == "world" else f", comm={comm}"


def _connection(op) -> str:
    """A send's or recv's channel and slots, as the DSL call writes them (nothing for the defaults)."""
    return (f", channel={op.channel}" if op.channel else "") + (f", slots={op.slots}" if op.slots else "")


def chunks(region: ir.Region, parts: int) -> list[ir.Region]:
    """`region` cut into `parts` equal consecutive chunks (the collectives' chunk maps)."""
    size = region.count // parts
    return [ir.Region(buffer=region.buffer, start=region.start + i * size, stop=region.start + (i + 1) * size)
            for i in range(parts)]


# ------------------------------------------------------------------------------ point to point
class SendRule(Rule):
    """Rendezvous (NCCL semantics): the send completes only together with the recv it matches,
    first-in-first-out per (communicator, channel, sender, receiver); `src` is read then. On a
    connection with slots (`ir.Send.slots` > 0, MSCCL's and NCCL's FIFOs), the send reads `src` and
    completes on its own once the message `slots` before it on the connection has been received
    (a full FIFO blocks the sender); the recv takes the message when it is posted (`Model`)."""

    op_class, sync = ir.Send, Sync.P2P

    def accesses(self, op, rank):
        return (Access("src", rank, op.src, Mode.READ, When.JOINT),)

    def describe(self, op):
        return f"send(peer={op.peer}, {op.src}{_on(op.comm)}{_connection(op)})"


class RecvRule(Rule):
    """Completes with its matched send: `dst` receives the send's `src`, or `dst reduce src` (the
    received data on the right)."""

    op_class, sync = ir.Recv, Sync.P2P

    def accesses(self, op, rank):
        found = (Access("dst", rank, op.dst, Mode.WRITE, When.JOINT),)
        if op.reduce:
            found += (Access("dst", rank, op.dst, Mode.READ, When.JOINT),)
        return found

    def describe(self, op):
        red = f", reduce={op.reduce}" if op.reduce else ""
        return f"recv(peer={op.peer}, {op.dst}{red}{_on(op.comm)}{_connection(op)})"


def lands(op, rank: int) -> bool:
    """Whether a recv or a collective member completes on its own rank after the joint step (its
    *landing*, a step of its own): a recv writes its `dst` there, a collective member its `dst`, and
    a member of a collective whose sources are read until each member is done
    (`CollectiveRule.reads_until_done`) holds its `src` until then, writing or not (a member of a
    reduce that is not its root). Sends and barriers have nothing to hold."""
    r = rule(op)
    accesses = r.accesses(op, rank)
    if getattr(r, "reads_until_done", False) and any(a.when is When.JOINT and a.owner == rank for a in accesses):
        return True
    return any(a.when is When.JOINT and a.mode in WRITE_MODES and a.owner == rank for a in accesses)


def p2p_flow(send: ir.Send, send_rank: int, recv: ir.Recv, recv_rank: int) -> Move:
    """What a matched send and recv move."""
    if recv.reduce is None:
        return Move(dsts=((recv_rank, recv.dst),), srcs=((send_rank, send.src),))
    return Move(dsts=((recv_rank, recv.dst),), srcs=((recv_rank, recv.dst), (send_rank, send.src)),
                combine=recv.reduce)


class GroupRule(Rule):
    """ncclGroupStart/End: every member is posted at once; each completes with its own partner, in
    any order, and the group ends when all have."""

    op_class, sync = ir.Group, Sync.P2P

    def accesses(self, op, rank):
        return tuple(a for member in op.ops for a in rule(member).accesses(member, rank))

    def describe(self, op):
        return "group(" + "; ".join(describe(m) for m in op.ops) + ")"


# -------------------------------------------------------------------------------- collectives
class CollectiveRule(Rule):
    """A collective: once every member's k-th collective on the communicator has arrived, the
    sources are read (one joint step); each member then completes on its own, writing its `dst`
    when it does (its landing), as NCCL and MPI complete a collective per rank: a member may finish
    and go on while another still writes its output.

    Before that, from a member's arrival, its `src` and its own `dst` are in flight (`Model.posted_accesses`):
    NCCL's kernel on a member starts when the member calls the collective and pushes its first chunks into
    the buffer slots its connections hold in the peers' memory before they have called it.

    `reads_until_done`: a member may complete before another member's `src` has been read in full
    (member i of a reduce_scatter or all_to_all needs only chunk i of each source; a member of a reduce
    that is not its root writes nothing, and in NCCL's chain toward the root it is done once its last chunk
    is in the next member's buffer), so a member's source counts as read until that member completes;
    for the other collectives every member's output depends on every element of every source, so no
    member completes before all are read."""

    sync = Sync.COLLECTIVE
    reads_until_done = False

    def accesses(self, op, rank):
        found = []
        if getattr(op, "src", None) is not None:
            found.append(Access("src", rank, op.src, Mode.READ, When.JOINT))
        if getattr(op, "dst", None) is not None:
            found.append(Access("dst", rank, op.dst, Mode.WRITE, When.JOINT))
        return tuple(found)

    def collective_flows(self, ops: list, ranks: list[int]) -> list[Move]:
        """The moves of one instance; `ops[i]` is the op of member `ranks[i]` (communicator order)."""
        return []


class AllReduceRule(CollectiveRule):
    """Every member's dst = the reduction of every member's src, in communicator order."""

    op_class = ir.AllReduce

    def collective_flows(self, ops, ranks):
        return [Move(dsts=tuple((r, op.dst) for r, op in zip(ranks, ops)),
                     srcs=tuple((r, op.src) for r, op in zip(ranks, ops)), combine=ops[0].op)]

    def describe(self, op):
        return f"all_reduce({op.src} -> {op.dst}, {op.op}{_on(op.comm)})"


class AllGatherRule(CollectiveRule):
    """Chunk j of every member's dst = member j's src."""

    op_class = ir.AllGather

    def collective_flows(self, ops, ranks):
        n = len(ops)
        cut = [chunks(op.dst, n) for op in ops]
        return [Move(dsts=tuple((r, cut[i][j]) for i, r in enumerate(ranks)), srcs=((ranks[j], ops[j].src),))
                for j in range(n)]

    def scale(self, members):
        return 1, members

    def describe(self, op):
        return f"all_gather({op.src} -> {op.dst}{_on(op.comm)})"


class ReduceScatterRule(CollectiveRule):
    """Member i's dst = the reduction over members of chunk i of their src."""

    op_class = ir.ReduceScatter
    reads_until_done = True

    def collective_flows(self, ops, ranks):
        n = len(ops)
        cut = [chunks(op.src, n) for op in ops]
        return [Move(dsts=((r, op.dst),), srcs=tuple((ranks[j], cut[j][i]) for j in range(n)), combine=op.op)
                for i, (r, op) in enumerate(zip(ranks, ops))]

    def scale(self, members):
        return members, 1

    def describe(self, op):
        return f"reduce_scatter({op.src} -> {op.dst}, {op.op}{_on(op.comm)})"


class BroadcastRule(CollectiveRule):
    """Every member's dst = the root's src."""

    op_class = ir.Broadcast

    def collective_flows(self, ops, ranks):
        root = ranks.index(ops[0].root)
        return [Move(dsts=tuple((r, op.dst) for r, op in zip(ranks, ops)), srcs=((ranks[root], ops[root].src),))]

    def describe(self, op):
        return f"broadcast({op.src} -> {op.dst}, root={op.root}{_on(op.comm)})"


class ReduceToRule(CollectiveRule):
    """NCCL reduce: the root's dst = the reduction of every member's src (no dst elsewhere)."""

    op_class = ir.ReduceTo
    reads_until_done = True

    def collective_flows(self, ops, ranks):
        dsts = tuple((r, op.dst) for r, op in zip(ranks, ops) if op.dst is not None)
        return [Move(dsts=dsts, srcs=tuple((r, op.src) for r, op in zip(ranks, ops)), combine=ops[0].op)]

    def describe(self, op):
        return f"reduce_to(root={op.root}, {op.src} -> {op.dst}, {op.op}{_on(op.comm)})"


class AllToAllRule(CollectiveRule):
    """Chunk j of member i's src lands in chunk i of member j's dst."""

    op_class = ir.AllToAll
    reads_until_done = True

    def collective_flows(self, ops, ranks):
        n = len(ops)
        src_cut = [chunks(op.src, n) for op in ops]
        dst_cut = [chunks(op.dst, n) for op in ops]
        return [Move(dsts=((ranks[j], dst_cut[j][i]),), srcs=((ranks[i], src_cut[i][j]),))
                for i in range(n) for j in range(n)]

    def describe(self, op):
        return f"all_to_all({op.src} -> {op.dst}{_on(op.comm)})"


class BarrierRule(CollectiveRule):
    """Every member of the communicator arrives before any leaves; moves no data."""

    op_class = ir.Barrier

    def describe(self, op):
        return f"barrier({op.comm})"


# ------------------------------------------------------------------------------ NVSHMEM teams
class TeamSplitRule(CollectiveRule):
    """nvshmem_team_split_strided(parent, start, stride, size): a collective over the parent team
    (NVSHMEM_TEAM_WORLD when `comm` is "world"), called by every parent member in the same order
    with the same arguments (`match`: else a collective mismatch naming both lines), members of the
    new team or not. It completes as one joint step once every parent member has reached it, as a
    `sync_all` of the parent: NVSHMEM agrees on the new team with a reduction over the parent, so no
    member returns before every member has arrived. It moves no data and completes no delivery."""

    op_class = ir.TeamSplit

    def describe(self, op):
        parent = "" if op.comm == "world" else f", parent={op.comm}"
        return f"team_split_strided({op.team}, start={op.start}, stride={op.stride}, size={op.size}{parent})"


class TeamBarrierRule(CollectiveRule):
    """nvshmem_barrier(team): every member of the team completes its own deliveries (a quiet), then
    the members meet; deliveries of ranks outside the team stay in flight. (nvshmem_team_sync is a
    `barrier` on the team: the members meet and nothing is completed.)"""

    op_class, sync = ir.TeamBarrier, Sync.BARRIER_ALL

    def describe(self, op):
        return f"team_barrier({op.comm})"


# ---------------------------------------------------------------------------------- one-sided
def _signal_mode(how: str) -> Mode:
    return Mode.SIG_ADD if how == "add" else Mode.SIG_SET


class PutRule(Rule):
    """Writes local `src` into `dst` on `pe` as a delivery that lands later, ordered only by fence
    (same PE) and completed by quiet or barrier_all. Blocking: `src` is read at issue (reusable once
    the call returns); nbi: `src` is read when the delivery lands."""

    op_class, sync = ir.Put, Sync.DELIVERY
    fenced = True

    def accesses(self, op, rank):
        src_when = When.DELIVERY if op.nbi else When.ISSUE
        return (Access("dst", op.pe, op.dst, Mode.WRITE, When.DELIVERY),
                Access("src", rank, op.src, Mode.READ, src_when))

    def flows(self, op, rank):
        return (Move(dsts=((op.pe, op.dst),), srcs=((rank, op.src),)),)

    def describe(self, op):
        return f"put(pe={op.pe}, {op.dst} <- {op.src}{', nbi' if op.nbi else ''})"


class PutSignalRule(PutRule):
    """A put whose delivery also updates `signal` on `pe` (set or add), after the data: one
    delivery, so a reader that sees the signal sees the data."""

    op_class = ir.PutSignal

    def accesses(self, op, rank):
        return super().accesses(op, rank) + (
            Access("signal", op.pe, op.signal, _signal_mode(op.sig_op), When.DELIVERY),)

    def word_update(self, op):
        return op.signal, op.sig_op, op.value

    def signal_effect(self, op):
        return op.signal, op.sig_op, op.value

    def describe(self, op):
        return (f"put_signal(pe={op.pe}, {op.dst} <- {op.src}, {op.signal} {op.sig_op} {op.value}"
                f"{', nbi' if op.nbi else ''})")


class SignalUpdateRule(Rule):
    """Updates `signal` on `pe` (set, or add modulo 2**64) as a delivery."""

    op_class, sync = ir.SignalUpdate, Sync.DELIVERY
    fenced = True

    def accesses(self, op, rank):
        return (Access("signal", op.pe, op.signal, _signal_mode(op.sig_op), When.DELIVERY),)

    def word_update(self, op):
        return op.signal, op.sig_op, op.value

    def signal_effect(self, op):
        return op.signal, op.sig_op, op.value

    def describe(self, op):
        return f"signal_op(pe={op.pe}, {op.signal} {op.sig_op} {op.value})"


class AtomicRule(Rule):
    """A non-fetching atomic on one word on `pe` (a signal word or a data element), as a delivery.
    Adds and incs commute with each other; the arithmetic is `arithmetic.atomic_result`."""

    op_class, sync = ir.Atomic, Sync.DELIVERY
    fenced = True

    def accesses(self, op, rank):
        commutes = op.op in ("add", "inc")
        if isinstance(op.target, ir.SignalRef):
            mode = Mode.SIG_ADD if commutes else Mode.SIG_SET
        else:
            mode = Mode.ATOMIC_ADD if commutes else Mode.ATOMIC_OTHER
        return (Access("target", op.pe, op.target, mode, When.DELIVERY),)

    def word_update(self, op):
        return op.target, op.op, op.value

    def signal_effect(self, op):
        if not isinstance(op.target, ir.SignalRef):
            return None
        return (op.target, *word_effect(op.op, op.value))

    def describe(self, op):
        return f"atomic_{op.op}(pe={op.pe}, {op.target}, {op.value})"


class GetRule(Rule):
    """Blocking get: one transition that reads `src` on `pe` and writes local `dst`."""

    op_class, sync = ir.Get, Sync.REMOTE

    def accesses(self, op, rank):
        return (Access("src", op.pe, op.src, Mode.READ, When.ISSUE),
                Access("dst", rank, op.dst, Mode.WRITE, When.ISSUE))

    def flows(self, op, rank):
        return (Move(dsts=((rank, op.dst),), srcs=((op.pe, op.src),)),)

    def describe(self, op):
        return f"get(pe={op.pe}, {op.dst} <- {op.src})"


class GetNbiRule(GetRule):
    """Non-blocking get (nvshmem_get_nbi): returns at once; the data is read on `pe` and lands in
    local `dst` as a delivery of its own, complete only after the rank's next quiet (or
    barrier_all). Fence does not order it (NVSHMEM's fence orders puts, atomics and signals only);
    reading `dst` before the quiet races with the delivery."""

    op_class, sync = ir.GetNbi, Sync.DELIVERY

    def accesses(self, op, rank):
        return (Access("src", op.pe, op.src, Mode.READ, When.DELIVERY),
                Access("dst", rank, op.dst, Mode.WRITE, When.DELIVERY))

    def describe(self, op):
        return f"get_nbi(pe={op.pe}, {op.dst} <- {op.src})"


class FetchAtomicRule(Rule):
    """A fetching atomic: one blocking transition that updates the word on `pe`
    (`arithmetic.fetch_result`) and writes its old value into local `into`. `fetch` only reads."""

    op_class, sync = ir.FetchAtomic, Sync.REMOTE
    fetches = True

    def accesses(self, op, rank):
        reads_only = op.op == "fetch"
        if isinstance(op.target, ir.SignalRef):
            mode = Mode.SIG_READ if reads_only else Mode.SIG_SET
        else:
            mode = Mode.ATOMIC_READ if reads_only else Mode.ATOMIC_OTHER
        return (Access("target", op.pe, op.target, mode, When.ISSUE),
                Access("into", rank, op.into, Mode.WRITE, When.ISSUE))

    def signal_effect(self, op):
        if not isinstance(op.target, ir.SignalRef):
            return None
        return (op.target, *word_effect(op.op.removeprefix("fetch_"), op.value))

    def describe(self, op):
        extra = f", cond={op.cond}" if op.op == "compare_swap" else ""
        return f"{op.op}(pe={op.pe}, {op.target}, {op.value}{extra} -> {op.into})"


class SignalStoreRule(Rule):
    """A plain store to the rank's own signal word (`*sig = value`, the common "reset the flag" line):
    it runs on the rank, alone, and is not atomic. Under DESIGN.md's race rule (a plain write races
    with anything), it races with every access to the word that can happen in either order with it:
    a remote `signal_op`, `put_signal` or atomic that may still land, or a wait that may read it. A
    reset is safe once nothing else can touch the word until the reset is done: the peer's next update
    is issued only after something the reset happens before (a signal back, a barrier)."""

    op_class = ir.SignalStore

    def accesses(self, op, rank):
        return (Access("signal", op.pe, op.signal, Mode.SIG_STORE, When.ISSUE),)

    def signal_effect(self, op):
        return op.signal, "set", op.value

    def word_update(self, op):
        return op.signal, "set", op.value

    def describe(self, op):
        return f"signal_store({op.signal} = {op.value})"


class WaitRule(Rule):
    """Blocks until the rank's own signal word compares true (unsigned) with `value`. The write that
    satisfied it happens before everything after the wait."""

    op_class, sync = ir.WaitUntil, Sync.WAIT

    def accesses(self, op, rank):
        return tuple(Access("signal", rank, word, Mode.SIG_READ, When.ISSUE)
                     for word in self.awaits(op, rank).words)

    def awaits(self, op, rank):
        return Awaits(words=(op.signal,), cmp=op.cmp, value=op.value)

    def describe(self, op):
        return f"wait_until({op.signal} {op.cmp} {op.value})"


class WaitAllRule(WaitRule):
    """nvshmem_wait_until_all: blocks until every listed word compares true at once."""

    op_class = ir.WaitUntilAll

    def awaits(self, op, rank):
        return Awaits(words=op.signals, cmp=op.cmp, value=op.value, all=True)

    def describe(self, op):
        return f"wait_until_all([{', '.join(map(str, op.signals))}] {op.cmp} {op.value})"


class WaitAnyRule(WaitRule):
    """nvshmem_wait_until_any: blocks until at least one listed word compares true; only a write
    that made one true orders what follows."""

    op_class = ir.WaitUntilAny

    def awaits(self, op, rank):
        return Awaits(words=op.signals, cmp=op.cmp, value=op.value, all=False)

    def describe(self, op):
        return f"wait_until_any([{', '.join(map(str, op.signals))}] {op.cmp} {op.value})"


class FenceRule(Rule):
    """Orders the rank's deliveries to each PE: those issued before it land before those issued
    after it, per target PE. It does not wait, and does not order gets."""

    op_class = ir.Fence


class QuietRule(Rule):
    """Blocks until every delivery the rank issued has landed."""

    op_class, sync = ir.Quiet, Sync.QUIET


class BarrierAllRule(CollectiveRule):
    """nvshmem_barrier_all: a quiet on every PE, then a barrier over every PE."""

    op_class, sync = ir.BarrierAll, Sync.BARRIER_ALL

    def describe(self, op):
        return "barrier_all()"


class SyncAllRule(CollectiveRule):
    """nvshmem_sync_all: a barrier over every PE; deliveries in flight stay in flight."""

    op_class, sync = ir.SyncAll, Sync.SYNC_ALL

    def describe(self, op):
        return "sync_all()"


# -------------------------------------------------------------------------------------- local
class LocalReduceRule(Rule):
    """dst = srcs[0] op srcs[1] op ..., left to right, element by element."""

    op_class = ir.LocalReduce

    def accesses(self, op, rank):
        return tuple(Access("srcs", rank, src, Mode.READ, When.ISSUE) for src in op.srcs) + (
            Access("dst", rank, op.dst, Mode.WRITE, When.ISSUE),)

    def flows(self, op, rank):
        return (Move(dsts=((rank, op.dst),), srcs=tuple((rank, s) for s in op.srcs), combine=op.op),)

    def describe(self, op):
        sym = {"sum": " + ", "prod": " * "}.get(op.op)
        body = sym.join(map(str, op.srcs)) if sym else f"{op.op}({', '.join(map(str, op.srcs))})"
        return f"{op.dst} = {body}"


class CopyRule(Rule):
    """dst = src on the rank."""

    op_class = ir.Copy

    def accesses(self, op, rank):
        return (Access("src", rank, op.src, Mode.READ, When.ISSUE), Access("dst", rank, op.dst, Mode.WRITE, When.ISSUE))

    def flows(self, op, rank):
        return (Move(dsts=((rank, op.dst),), srcs=((rank, op.src),)),)

    def describe(self, op):
        return f"{op.dst} = {op.src}"


class FillRule(Rule):
    """Every element of dst = value."""

    op_class = ir.Fill

    def accesses(self, op, rank):
        return (Access("dst", rank, op.dst, Mode.WRITE, When.ISSUE),)

    def flows(self, op, rank):
        return (Move(dsts=((rank, op.dst),), value=op.value),)

    def describe(self, op):
        return f"{op.dst} = {op.value:g}"


class ComputeRule(Rule):
    """An opaque kernel: reads every region of `reads`, then writes every element of `writes` with
    an unknown function of all it read. Its stated cost (`us`, `flops`, `bytes`) is the
    performance model's: no access, flow or value here reads it."""

    op_class = ir.Compute

    def accesses(self, op, rank):
        return tuple(Access("reads", rank, r, Mode.READ, When.ISSUE) for r in op.reads) + tuple(
            Access("writes", rank, w, Mode.WRITE, When.ISSUE) for w in op.writes)

    def flows(self, op, rank):
        return (Move(dsts=tuple((rank, w) for w in op.writes), srcs=tuple((rank, r) for r in op.reads),
                     opaque=op.name),)

    def describe(self, op):
        reads = ", ".join(map(str, op.reads)) or "-"
        writes = ", ".join(map(str, op.writes)) or "-"
        cost = [f"{name}={getattr(op, name):g}" for name in ("us", "flops", "bytes") if getattr(op, name) is not None]
        return f"compute {op.name}(reads {reads}; writes {writes}{''.join('; ' + c for c in cost)})"



# ------------------------------------------------------------------ synchronisation inside a rank
# Events and thread barriers order the threads of one rank. The machine runs them as what they are
# made of, signal words of the rank (`threads.expand`, which replaces each by its lowering, stated in
# the rules below), so the reduction and its proofs for signal words cover them unchanged. They touch
# no buffer element and no signal word the user declared.
class RecordEventRule(Rule):
    """cudaEventRecord: record number k of event e sets e's word k of the rank (a signal to the
    rank itself) once the thread's earlier ops have run. It completes none of the thread's puts: a
    delivery in flight stays in flight, as at a kernel's end."""

    op_class = ir.RecordEvent

    def describe(self, op):
        return f"record_event({op.event}, record {op.record})"


class WaitEventRule(Rule):
    """cudaStreamWaitEvent: waits until e's word k is set (k = the record it names), so what the
    recording thread did before record k happens before what this thread does after the wait. With
    no record before it (k = 0) nothing ever sets the word: the checker reports a deadlock naming the
    event (CUDA would skip the wait and leave the threads unordered)."""

    op_class = ir.WaitEvent

    def describe(self, op):
        if op.record == 0:
            return f"wait_event({op.event}, never recorded before this wait)"
        return f"wait_event({op.event}, record {op.record})"


class ThreadBarrierRule(Rule):
    """A barrier of the listed threads: at its k-th arrival, thread i adds 1 to the barrier's word i
    of the rank, then waits until every listed thread's word is at least k. What each did before the
    barrier happens before what any does after it; it completes no delivery."""

    op_class = ir.ThreadBarrier

    def describe(self, op):
        return f"thread_barrier({op.name}, threads=[{', '.join(op.threads)}])"


def _registry() -> dict[type, Rule]:
    found: dict[type, Rule] = {}
    stack = list(Rule.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if "op_class" in cls.__dict__:
            found[cls.op_class] = cls()
    return found


RULES: dict[type, Rule] = _registry()
register(Backend("semantics", table=RULES))  # the rules themselves: the checker's machine runs them all

_BY_KIND: dict[str, Rule] = {cls.model_fields["kind"].default: r for cls, r in RULES.items()}


def rule(op) -> Rule:
    """The rule of an op (or of an op kind)."""
    return _BY_KIND[op if isinstance(op, str) else op.kind]


def describe(op) -> str:
    """A one-line, code-like rendering of an op, as the user would have written it."""
    return rule(op).describe(op)


def signal_effect(op) -> tuple[ir.SignalRef, str, int] | None:
    """What an op does to a signal word at `op.pe` (`Rule.signal_effect`), or None."""
    return rule(op).signal_effect(op)


def collective_flows(ops: list, ranks: list[int]) -> list[Move]:
    """The moves of one collective instance (`ops[i]` on member `ranks[i]`, communicator order)."""
    return rule(ops[0]).collective_flows(ops, ranks)
