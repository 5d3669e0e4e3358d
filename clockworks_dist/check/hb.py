"""The happens-before order of one execution.

The events and edges are those of `semantics.order`: each op a rank executes, each joint completion
(one event shared by its participants), each delivery and landing, the fence lines; and the signal
rule applied as the execution says: every update of a word that has landed happens before an op
that then reads the word (a line of junctions per word, one after each update, so that a read
needs one edge whatever the number of updates before it).

The order is a `must.Order`: each rank's op events form a chain with clocks over the chains, and
the events off the chains (deliveries, joint steps, landings, the members of a group, which run
concurrently) are placed by their clocks and by the first chain events after them. A clock is a
vector of one tick per rank, so it stays the size of the world whatever the number of deliveries
an execution makes (a clock per delivery made the one-shot all-reduce's order cubic in the ranks).

For schedules the checker verifies, every execution has this same order; the symbolic checks ask
it which accesses may be concurrent.
"""

from __future__ import annotations

from ..semantics.budget import UNBOUNDED, Deadline
from ..semantics.machine import Action, Model
from ..semantics.match import Key
from ..semantics.order import (Word, delivery_event, edges, has_landing, landing_event, op_event, signal_reads,
                               signal_writes)
from ..semantics.rules import Sync, When
from .must import Order


class HappensBefore:
    """The order of one execution's events, asked about ops by key `(rank, index, sub)`."""

    def __init__(self, model: Model, order: Order, actions: list[Action]):
        self.model = model
        self.order = order
        self.actions = list(actions)

    def _event(self, key: Key, at_delivery: bool) -> int | None:
        """An op's event: its delivery (at delivery), or its landing (a recv or collective member
        that writes, at delivery), or its joint step, or its own execution."""
        model, ids = self.model, self.order.ids
        rank, index, sub = key
        if at_delivery and (rank, index) in model.deliveries:
            return ids.get(delivery_event(rank, index))
        c = model.code[rank][index]
        if c.cid is not None:
            joint = ("coll", c.cid)
        elif c.sync is Sync.P2P:
            send = key if key in model.matches.recv_of else model.matches.send_of.get(key)
            if send is None:
                return None
            joint = ("p2p", send)
        else:
            return ids.get(op_event(rank, index))
        if at_delivery and has_landing(model.matches, key):
            return ids.get(landing_event(key))
        return ids.get(joint)

    def ordered(self, a: Key, b: Key, a_at_delivery: bool = True, b_at_delivery: bool = True) -> bool:
        """True if op a's effect happens before op b's effect in this execution. An op's effect is
        its delivery when it has one; with `*_at_delivery=False` it is the op's own execution (a
        blocking put reads its source there, DESIGN.md)."""
        ea, eb = self._event(a, a_at_delivery), self._event(b, b_at_delivery)
        if ea is None or eb is None:
            return False
        return self.order.before(ea, eb)

    def unordered(self, a: Key, b: Key, a_at_delivery: bool = True, b_at_delivery: bool = True) -> bool:
        """True if neither op's effect is ordered before the other's: they may be concurrent."""
        return not self.ordered(a, b, a_at_delivery, b_at_delivery) and \
            not self.ordered(b, a, b_at_delivery, a_at_delivery)


def happens_before(model: Model, actions: list[Action], deadline: Deadline = UNBOUNDED) -> HappensBefore:
    """The order of the execution `actions` (a path from the initial state to the end)."""
    order = Order(model.world, deadline)
    for earlier, later in edges(model.sched, model.matches):
        order.edge(earlier, later)
    programs = model.sched.programs
    latest: dict[Word, tuple] = {}  # word -> the junction after its last landed update

    def updated(words, event: tuple) -> None:
        for word in words:
            line = ("word", word, len(order.events))
            if word in latest:
                order.edge(latest[word], line)
            order.edge(event, line)
            latest[word] = line

    for number, action in enumerate(actions):
        if number & 255 == 0:
            deadline.check("the happens-before order")
        kind = action.kind
        if kind == "step":
            rank, index = action.rank, action.index
            op = programs[rank].ops[index]
            for word in signal_reads(rank, op):
                if word in latest:
                    order.edge(latest[word], op_event(rank, index))
            updated(signal_writes(rank, op, When.ISSUE), op_event(rank, index))
        elif kind == "deliver" and action.index >= 0:
            issuer, index = action.issuer, action.index
            updated(signal_writes(issuer, programs[issuer].ops[index], When.DELIVERY), delivery_event(issuer, index))
    order.finish()
    return HappensBefore(model, order, actions)
