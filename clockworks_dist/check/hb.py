"""The happens-before order of one execution, by vector clocks.

The events and edges are those of `semantics.order`: each op a rank executes, each joint completion
(one event shared by its participants), each delivery; every event is stamped with the join of its
predecessors' clocks there. A junction (a fence line, the post of an op that completes jointly, a
group's start) is no one's event: its clock is the join of its predecessors' when first needed. The
signal rule is applied as the execution says: every update of a word that has landed happens before
an op that then reads the word.

Clock components: `("r", rank)` for a rank's own events, `("m", rank, index, sub)` for one member
of a group (members run concurrently: each starts from the rank's clock at the group), and
`("d", rank, index)` for a delivery. When a group ends, the rank ticks its own component; member
components older than that tick are folded away, so clocks stay small.

For schedules the checker verifies, every execution has this same order; the symbolic checks ask
it which accesses may be concurrent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..semantics.budget import UNBOUNDED, Deadline
from ..semantics.machine import Model
from ..semantics.match import Key
from ..semantics.order import (Event, Word, delivery_event, has_landing, joints, landing_event, op_event,
                               predecessors, signal_reads, signal_writes)
from ..semantics.rules import When

Clock = dict


@dataclass
class HappensBefore:
    """Vector-clock stamps of one execution's events, and the order between them."""

    events: list[tuple] = field(default_factory=list)  # (event id, own ticks, clock, op keys, action)
    op_event: dict[Key, int] = field(default_factory=dict)  # op -> execution event
    effect_event: dict[Key, int] = field(default_factory=dict)  # op -> delivery event if it has one
    actions: list[tuple] = field(default_factory=list)
    group_end: dict[tuple[int, int], int] = field(default_factory=dict)  # (rank, index) -> rank tick

    def _before(self, i: int, j: int) -> bool:
        if i == j:
            return False
        _, own, _, _, _ = self.events[i]
        clock_j = self.events[j][2]
        for component, value in own:
            if clock_j.get(component, 0) >= value:
                return True
            if component[0] == "m":
                end = self.group_end.get((component[1], component[2]))
                if end is not None and clock_j.get(("r", component[1]), 0) >= end:
                    return True
        return False

    def _event(self, key: Key, at_delivery: bool) -> int | None:
        return (self.effect_event if at_delivery else self.op_event).get(key)

    def ordered(self, a: Key, b: Key, a_at_delivery: bool = True, b_at_delivery: bool = True) -> bool:
        """True if op a's effect happens before op b's effect in this execution. An op's effect is
        its delivery when it has one; with `*_at_delivery=False` it is the op's own execution (a
        blocking put reads its source there, DESIGN.md)."""
        ea, eb = self._event(a, a_at_delivery), self._event(b, b_at_delivery)
        if ea is None or eb is None:
            return False
        return self._before(ea, eb)

    def unordered(self, a: Key, b: Key, a_at_delivery: bool = True, b_at_delivery: bool = True) -> bool:
        """True if neither op's effect is ordered before the other's: they may be concurrent."""
        return not self.ordered(a, b, a_at_delivery, b_at_delivery) and \
            not self.ordered(b, a, b_at_delivery, a_at_delivery)


class _Stamper:
    """Clocks of the events stamped so far and of the junctions computed from them."""

    def __init__(self, model: Model, hb: HappensBefore):
        self.model, self.hb = model, hb
        self.before = predecessors(model.sched, model.matches)
        self.participants = dict(joints(model.matches))
        self.clocks: dict[Event, Clock] = {}
        self.updates: dict[Word, Clock] = {}  # signal word -> the join of its updates landed so far

    def join(self, *clocks: Clock) -> Clock:
        """The componentwise maximum of `clocks` (the first copied whole: pass the largest first)."""
        out = dict(clocks[0]) if clocks else {}
        for clock in clocks[1:]:
            for k, v in clock.items():
                if out.get(k, 0) < v:
                    out[k] = v
        self.fold(out)
        return out

    def fold(self, clock: Clock) -> None:
        """Drop the member components of groups that `clock` has seen end."""
        for k in [k for k in clock if k[0] == "m"]:
            end = self.hb.group_end.get((k[1], k[2]))
            if end is not None and clock.get(("r", k[1]), 0) >= end:
                del clock[k]

    def tick(self, clock: Clock, component: tuple) -> tuple:
        clock[component] = clock.get(component, 0) + 1
        return component, clock[component]

    def clock(self, event: Event) -> Clock:
        """The clock of a stamped event, or of a junction: the join of its predecessors'."""
        if event not in self.clocks:
            self.clocks[event] = self.arrive(event)
        return self.clocks[event]

    def arrive(self, event: Event, *extra: Clock) -> Clock:
        """The join of an event's predecessors' clocks (and of `extra`). An op that follows a group
        ends the group: the rank ticks, and the members' components fold into that tick."""
        clock = self.join(*(self.clock(earlier) for earlier in self.before.get(event, ())), *extra)
        if self._after_group(event):
            _, tick = self.tick(clock, ("r", event[1]))
            self.hb.group_end[(event[1], event[2] - 1)] = tick
            self.fold(clock)
        return clock

    def _after_group(self, event: Event) -> bool:
        """Is `event` the op that follows a group on its rank?"""
        if event[0] != "op" or event[2] == 0:
            return False
        return self.model.sched.programs[event[1]].ops[event[2] - 1].kind == "group"

    def stamp(self, event: Event, own: list, clock: Clock, keys, action) -> int:
        self.clocks[event] = clock
        index = len(self.hb.events)
        self.hb.events.append((index, tuple(own), dict(clock), tuple(keys), action))
        return index

    def step(self, action, rank: int, index: int) -> None:
        """A rank executes an op alone: after the updates of the signal words it reads, and, if it
        updates one as it executes (a fetching atomic), before what later reads it."""
        op = self.model.sched.programs[rank].ops[index]
        clock = self.arrive(op_event(rank, index), *(self.updates.get(word, {}) for word in signal_reads(rank, op)))
        own = [self.tick(clock, ("r", rank))]
        event = self.stamp(op_event(rank, index), own, clock, [(rank, index, None)], action)
        self.hb.op_event[(rank, index, None)] = event
        self.hb.effect_event[(rank, index, None)] = event
        self.update(signal_writes(rank, op, When.ISSUE), clock)

    def update(self, words: tuple[Word, ...], clock: Clock) -> None:
        """Later readers of `words` follow the event whose clock is `clock`."""
        for word in words:
            self.updates[word] = self.join(self.updates.get(word, {}), clock)

    def joint(self, action, joint: Event) -> None:
        """One event for every participant of a joint step; a participant with a landing ticks there
        instead, and the event ticks a component of its own."""
        keys = self.participants[joint]
        clock = self.join(*(self.clock(op_event(rank, index)) for rank, index, _ in keys))
        own = [self.tick(clock, ("r", rank) if sub is None else ("m", rank, index, sub)) for rank, index, sub in keys
               if not has_landing(self.model.matches, (rank, index, sub))]
        if not own:
            own = [self.tick(clock, ("j", joint))]
        event = self.stamp(joint, own, clock, keys, action)
        for key in keys:
            self.hb.op_event[key] = event
            self.hb.effect_event[key] = event

    def land(self, action, key) -> None:
        """A recv or collective member completes: after its joint step, before its rank's next op."""
        rank, index, sub = key
        clock = self.arrive(landing_event(key))
        own = [self.tick(clock, ("r", rank) if sub is None else ("m", rank, index, sub))]
        self.hb.effect_event[key] = self.stamp(landing_event(key), own, clock, [key], action)

    def deliver(self, action, issuer: int, index: int) -> None:
        """A delivery lands: after its issue and the fences before it; before what later reads the
        signal word it updates."""
        landing = self.model.deliveries[(issuer, index)].completes
        if landing is not None:
            self.land(action, landing)
            return
        clock = self.arrive(delivery_event(issuer, index))
        own = [self.tick(clock, ("d", issuer, index))]
        event = self.stamp(delivery_event(issuer, index), own, clock, [(issuer, index, None)], action)
        self.hb.effect_event[(issuer, index, None)] = event
        self.update(signal_writes(issuer, self.model.sched.programs[issuer].ops[index], When.DELIVERY), clock)


def happens_before(model: Model, actions: list[tuple], deadline: Deadline = UNBOUNDED) -> HappensBefore:
    """Stamp the events of the execution `actions` (a path from the initial state)."""
    hb = HappensBefore(actions=list(actions))
    stamper = _Stamper(model, hb)
    for number, action in enumerate(actions):
        if number & 255 == 0:
            deadline.check("the happens-before order")
        kind = action[0]
        if kind == "step":
            stamper.step(action, action[1], action[2])
        elif kind == "p2p":
            stamper.joint(action, ("p2p", (action[1], action[2], action[3])))
        elif kind == "coll":
            stamper.joint(action, ("coll", action[1]))
        else:
            stamper.deliver(action, action[1], action[2])
    return hb
