"""The happens-before order of a schedule: DESIGN.md's ordering rules, each written once.

Events are named by the program text, never by a state:
- `("op", rank, index)`: the rank executes op `index` (posts it, for an op that completes jointly;
  starts it, for a group); `("op", rank, len(program))` is the rank's end;
- `("delivery", rank, index)`: the delivery of that one-sided op lands at its target;
- `("p2p", send key)` and `("coll", cid)`: a joint step, one event for all its participants (a
  matched send and recv meet; the members of a collective instance, barrier_all and sync_all
  included, have all arrived);
- `("land", key)`: a recv, or a collective member, that writes (`rules.lands`) completes on its own
  rank after the joint step, writing its `dst`;
- `("fence", rank, index, pe)`: a junction, no one's event: the line a fence (or a quiet or barrier_all,
  which complete everything before them anyway) draws between the rank's deliveries to `pe`, so that n
  deliveries on each side take 2n edges instead of n**2.

The rules, each a function yielding the edges `(before, after)` it contributes:
- `program_order`: each op of a rank before its next;
- `joint_completion`: every participant's op -> the joint event -> each participant's next op, through
  the participant's landing when it has one (the members of a group are separate joint events, so
  they stay unordered with each other; a sender goes on before its recv has written, a collective
  member before the others have);
- `issue_to_delivery`: a one-sided op (`ir.DELIVERY_KINDS`) before its delivery;
- `fence_order`: a fence orders the deliveries its rank issued before it to a PE before those issued
  after it to that PE (puts, atomics and signals: `ir.FENCED_KINDS`, not gets);
- `completion`: every delivery a rank issued before a quiet or barrier_all happens before it;
- a signal update before the wait it satisfies. In one execution, the updates a read can have seen:
  every update of a word that has landed happens before an op that then reads the word
  (`signal_reads`, `signal_writes`, from the rules' accesses; `check/hb` applies it). Without an
  execution it is decided by value (`StaticOrder.order_waits`, with a solver the caller brings).

Two consumers build on the same edges (`edges`): `StaticOrder` here, a graph over every event of the
schedule, and `check/hb`, which stamps the events of one execution with vector clocks, each the join
of its predecessors' clocks (`predecessors`). Matching (which recv meets which send, which ops make
a collective) comes from `match`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Iterator, Protocol, Sequence

from .. import ir
from .budget import UNBOUNDED, Deadline
from .match import Key, Matches, match
from .rules import SIG, SIG_READS, When, lands, rule

Event = tuple
Edge = tuple[Event, Event]
Word = tuple[int, str, int]  # a signal word: (rank that holds it, signal, index)

# Ops that complete every delivery their rank issued before them; they draw fence lines too.
COMPLETING_KINDS = frozenset({"quiet", "barrier_all", "team_barrier"})
FENCING_KINDS = COMPLETING_KINDS | {"fence"}


def op_event(rank: int, index: int) -> Event:
    """The event of a rank executing (posting, starting) its op `index`."""
    return ("op", rank, index)


def delivery_event(rank: int, index: int) -> Event:
    """The event of the delivery of a rank's one-sided op `index` landing."""
    return ("delivery", rank, index)


# ------------------------------------------------------------------------------------ the rules
def program_order(program: ir.Program) -> Iterator[Edge]:
    """Each op of a rank before its next; the last before the rank's end."""
    for index in range(len(program.ops)):
        yield op_event(program.rank, index), op_event(program.rank, index + 1)


def landing_event(key: Key) -> Event:
    """The event of a recv or collective member writing its output and completing."""
    return ("land", key)


def has_landing(matches: Matches, key: Key) -> bool:
    """Whether the recv or collective member at `key` completes in a landing of its own (a recv on
    a connection with slots always does: it takes its message there)."""
    op = matches._op(key)
    return lands(op, key[0]) or (op.kind == "recv" and bool(op.slots))


def joints(matches: Matches) -> Iterator[tuple[Event, list[Key]]]:
    """Every joint event with its participants, as `match` paired and grouped them."""
    for send, recv in matches.recv_of.items():
        yield ("p2p", send), [send, recv]
    for cid, members in enumerate(matches.collectives):
        yield ("coll", cid), list(members)


def joint_completion(matches: Matches) -> Iterator[Edge]:
    """Every participant's op -> the joint event -> (its landing ->) the participant's next op. On a
    connection with slots the joint event is the send alone: the recv's op comes before its landing
    but not before the send, and the landing of the recv `slots` messages earlier comes before the
    send (the FIFO had room)."""
    gates = matches.fifo_gates()
    for joint, keys in joints(matches):
        for key in keys:
            rank, index, _ = key
            fifo_recv = joint[0] == "p2p" and joint[1] in gates and key != joint[1]
            if not fifo_recv:
                yield op_event(rank, index), joint
            if has_landing(matches, key):
                yield joint, landing_event(key)
                if fifo_recv:
                    yield op_event(rank, index), landing_event(key)
                yield landing_event(key), op_event(rank, index + 1)
            else:
                yield joint, op_event(rank, index + 1)
    for send, room in gates.items():
        if room is not None:
            yield landing_event(room), ("p2p", send)


def issue_to_delivery(program: ir.Program) -> Iterator[Edge]:
    """A one-sided op before its delivery."""
    for index, op in enumerate(program.ops):
        if op.kind in ir.DELIVERY_KINDS:
            yield op_event(program.rank, index), delivery_event(program.rank, index)


def fence_order(program: ir.Program) -> Iterator[Edge]:
    """Deliveries to a PE issued before a fence -> the fence's line for that PE -> deliveries to it
    issued later; the lines for one PE follow each other."""
    rank = program.rank
    line: dict[int, Event] = {}  # pe -> the last line drawn for deliveries to it
    issued: dict[int, list[int]] = defaultdict(list)  # pe -> deliveries since that line
    for index, op in enumerate(program.ops):
        if op.kind in FENCING_KINDS:
            for pe, done in issued.items():
                here = ("fence", rank, index, pe)
                for earlier in done:
                    yield delivery_event(rank, earlier), here
                if pe in line:
                    yield line[pe], here
                line[pe] = here
            issued = defaultdict(list)
        if op.kind in ir.FENCED_KINDS:
            if op.pe in line:
                yield line[op.pe], delivery_event(rank, index)
            issued[op.pe].append(index)


def completion(program: ir.Program) -> Iterator[Edge]:
    """Every delivery issued since the rank's last quiet or barrier_all -> its next one."""
    issued: list[int] = []
    for index, op in enumerate(program.ops):
        if op.kind in COMPLETING_KINDS:
            for earlier in issued:
                yield delivery_event(program.rank, earlier), op_event(program.rank, index)
            issued = []
        if op.kind in ir.DELIVERY_KINDS:
            issued.append(index)


def edges(schedule: ir.Schedule, matches: Matches) -> Iterator[Edge]:
    """Every edge of the rules above (the signal rule needs values or an execution: not here)."""
    for program in schedule.programs:
        yield from program_order(program)
        yield from issue_to_delivery(program)
        yield from fence_order(program)
        yield from completion(program)
    yield from joint_completion(matches)


def predecessors(schedule: ir.Schedule, matches: Matches) -> dict[Event, list[Event]]:
    """The events each event directly follows, by `edges`."""
    before: dict[Event, list[Event]] = defaultdict(list)
    for earlier, later in edges(schedule, matches):
        before[later].append(earlier)
    return before


def _word(owner: int, ref: ir.SignalRef) -> Word:
    return (owner, ref.signal, ref.index)


def signal_reads(rank: int, op: ir.OpBase) -> tuple[Word, ...]:
    """The signal words whose landed updates happen before an op of `rank` as it executes: a
    fetching atomic's word, and every word of a wait on all its words. A wait_until_any follows only
    the write that satisfied it, which the values tell and this rule does not: none."""
    op_rule = rule(op)
    awaits = op_rule.awaits(op, rank)
    if awaits is not None and not awaits.all:
        return ()
    return tuple(_word(a.owner, a.where) for a in op_rule.accesses(op, rank) if a.space == SIG and a.when == When.ISSUE)


def signal_writes(rank: int, op: ir.OpBase, when: When) -> tuple[Word, ...]:
    """The signal words an op of `rank` updates at `when`: a delivery's as it lands, a fetching
    atomic's as it executes."""
    return tuple(_word(a.owner, a.where) for a in rule(op).accesses(op, rank)
                 if a.space == SIG and a.when == when and a.mode not in SIG_READS)


# ------------------------------------------------------------------------------ the static order
class Keyed(Protocol):
    """A signal update, as `StaticOrder.order_waits` sees it: the op that makes it."""

    key: Key


class StaticOrder:
    """A happens-before order of the schedule derived without exploring it: a graph over every
    event, with the edges of the rules above, and `order_waits` to add the waits' orders by value.

    Every order it claims holds in every execution; events on a cycle (a wait that needs something
    after itself, ranks that each wait for the other's send) never happen, and everything is
    ordered with them. It misses orders that depend on more than this (and then reports a pair an
    execution would order)."""

    MAX_ROUNDS = 32

    def __init__(self, schedule: ir.Schedule, deadline: Deadline = UNBOUNDED, matches: Matches | None = None):
        if matches is None:
            matches, _ = match(schedule, deadline)
        self.deadline = deadline
        self.ids: dict[Event, int] = {}
        self.succ: list[list[int]] = []
        for earlier, later in edges(schedule, matches):
            self.succ[self._id(earlier)].append(self._id(later))
        self.joint = {key: self.ids[joint] for joint, keys in joints(matches) for key in keys}
        self.landing = {key: self.ids[landing_event(key)] for key in self.joint if landing_event(key) in self.ids}
        self.all = (1 << len(self.succ)) - 1
        self.extra = [0] * len(self.succ)  # nodes before a wait, found by value
        self.pre = self._ancestors()

    def _id(self, event: Event) -> int:
        if event not in self.ids:
            self.ids[event] = len(self.succ)
            self.succ.append([])
        return self.ids[event]

    def _ancestors(self) -> list[int]:
        """pre[n]: a bitset of the nodes that happen before n. Nodes that never happen (on or after
        a cycle) get every node."""
        size = len(self.succ)
        succ = [set(targets) for targets in self.succ]
        indegree = [0] * size
        for targets in succ:
            for t in targets:
                indegree[t] += 1
        pre = [0] * size
        done = [False] * size
        ready = [n for n in range(size) if indegree[n] == 0]
        while ready:
            n = ready.pop()
            if n & 1023 == 0:
                self.deadline.check("the static happens-before order")
            done[n] = True
            pre[n] |= self.extra[n]
            carried = pre[n] | (1 << n)
            for t in succ[n]:
                pre[t] |= carried
                indegree[t] -= 1
                if indegree[t] == 0:
                    ready.append(t)
        dead = 0
        for n in range(size):
            if not done[n] or pre[n] >> n & 1:
                dead |= 1 << n
        if dead:
            pre = [self.all if (n_pre & dead or dead >> n & 1) else n_pre for n, n_pre in enumerate(pre)]
        return pre

    def happens_before(self, a: Event, b: Event) -> bool:
        """True if event `a` happens before event `b` in every execution."""
        return bool(self.pre[self.ids[b]] >> self.ids[a] & 1)

    def _ends(self, key: Key, at_delivery: bool) -> tuple[int, int]:
        """(start, completion) nodes of an op's effect: its issue and its delivery, or its joint
        event and its landing (a recv's or collective member's accesses last until it completes),
        or its own execution."""
        op = self.ids[op_event(key[0], key[1])]
        delivery = self.ids.get(delivery_event(key[0], key[1]))
        if at_delivery and delivery is not None:
            return op, delivery
        node = self.joint.get(key, op)
        return node, self.landing.get(key, node)

    def ordered(self, a: Key, b: Key, a_at_delivery: bool = True, b_at_delivery: bool = True) -> bool:
        """True if op a's effect completes before op b's starts, in every execution. An effect at
        delivery spans the op's issue to its landing, so this asks more than
        `check.hb.HappensBefore.ordered`, which compares the landings themselves."""
        _, done = self._ends(a, a_at_delivery)
        start, _ = self._ends(b, b_at_delivery)
        return bool(self.pre[start] >> done & 1)

    def unordered(self, a: Key, b: Key, a_at_delivery: bool = True, b_at_delivery: bool = True) -> bool:
        """True if neither op's effect is ordered before the other's: they may be concurrent."""
        return not self.ordered(a, b, a_at_delivery, b_at_delivery) and \
            not self.ordered(b, a, b_at_delivery, a_at_delivery)

    # -- waits, by value -------------------------------------------------------------------------
    def order_waits(self, waits: Sequence[tuple[Key, Sequence[Keyed]]],
                    can_return: Callable[[int, list], bool | None]) -> None:
        """Signal update -> wait, by value: x happens before wait w if the updates of w's word that
        can reach w and do not come after x cannot satisfy w, for then w returns only once some
        update after x has landed. `waits[n]` is a wait's key and the updates that can reach it;
        `can_return(n, updates)` says whether some subset and order of `updates` satisfies wait n
        (None: undecided). Iterated to a fixpoint, since each new order can exclude more updates
        from other waits (a dissemination barrier needs a few rounds)."""
        for _ in range(self.MAX_ROUNDS):
            if not self._order_waits_once(waits, can_return):
                break
            self.pre = self._ancestors()

    def _order_waits_once(self, waits, can_return) -> bool:
        """Add to each wait the nodes that must precede it by value; True if any was new."""
        changed = False
        for number, (key, reachable) in enumerate(waits):
            self.deadline.check("the static happens-before order")
            w = self.ids[op_event(key[0], key[1])]
            if self.pre[w] == self.all:
                continue  # never returns
            if can_return(number, []) is not False:
                continue  # satisfied with no update at all: orders nothing
            updates, covers = self._landing(w, reachable)
            found = 0
            for chosen, members in self._classes(w, covers).items():
                rest = [u for n, u in enumerate(updates) if n not in chosen]
                if can_return(number, rest) is False:
                    found |= members
            if found & ~self.extra[w]:
                self.extra[w] |= found
                changed = True
        return changed

    def _landing(self, w: int, reachable: Sequence[Keyed]) -> tuple[list, list[int]]:
        """The updates that land, and not only after wait `w` is done; for each, the nodes up to
        its landing."""
        updates, covers = [], []
        for update in reachable:
            rank, index, _ = update.key
            land = self.ids.get(delivery_event(rank, index), self.ids[op_event(rank, index)])
            if self.pre[land] == self.all or self.pre[self.ids[op_event(rank, index)]] >> w & 1:
                continue
            updates.append(update)
            covers.append(self.pre[land] | (1 << land))
        return updates, covers

    def _classes(self, w: int, covers: list[int]) -> dict[frozenset, int]:
        """The candidate predecessors of wait `w`, split into classes by which updates (numbers
        into `covers`) they precede: every node of a class excludes the same updates."""
        candidates = 0
        for cover in covers:
            candidates |= cover
        candidates &= ~(self.pre[w] | (1 << w))
        classes = {frozenset(): candidates} if candidates else {}
        for n, cover in enumerate(covers):
            split: dict[frozenset, int] = {}
            for signature, members in classes.items():
                inside, outside = members & cover, members & ~cover
                if inside:
                    split[signature | {n}] = inside
                if outside:
                    split[signature] = outside
            classes = split
        return classes


__all__ = ["COMPLETING_KINDS", "FENCING_KINDS", "Edge", "Event", "StaticOrder", "Word", "completion",
           "delivery_event", "edges", "fence_order", "has_landing", "issue_to_delivery", "joint_completion", "joints",
           "landing_event", "op_event",
           "predecessors", "program_order", "signal_reads", "signal_writes"]
