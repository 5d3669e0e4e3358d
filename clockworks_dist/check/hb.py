"""The happens-before order of one execution, by vector clocks.

Events: each rank's execution of each op; joint ops (send/recv pairs, collectives) are one event
shared by the participants; each delivery of a one-sided op is an event of its own. Edges: program
order; joint completion; issue -> delivery; delivery -> a wait_until or fetching atomic that reads
the signal it updated; delivery -> the issuer's quiet or barrier_all; every member's prior deliveries
-> barrier_all; fence order between deliveries to the same PE.

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
from ..semantics.match import Key
from ..semantics.machine import SIG, SIG_READ, Model, State

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
    def __init__(self, model: Model, hb: HappensBefore):
        self.model, self.hb = model, hb
        self.clocks: list[Clock] = [{} for _ in range(model.world)]
        self.groups: dict[int, list] = {}  # rank -> [index, clock at start, joined clock, members left]

    def join(self, a: Clock, b: Clock) -> Clock:
        out = dict(a)
        for k, v in b.items():
            if out.get(k, 0) < v:
                out[k] = v
        for k in [k for k in out if k[0] == "m"]:
            end = self.hb.group_end.get((k[1], k[2]))
            if end is not None and out.get(("r", k[1]), 0) >= end:
                del out[k]
        return out

    def tick(self, clock: Clock, component: tuple) -> tuple:
        clock[component] = clock.get(component, 0) + 1
        return component, clock[component]

    def stamp(self, own: list, clock: Clock, keys, action) -> int:
        index = len(self.hb.events)
        self.hb.events.append((index, tuple(own), dict(clock), tuple(keys), action))
        return index

    def base(self, rank: int, index: int) -> Clock:
        entry = self.groups.get(rank)
        if entry is None or entry[0] != index:
            members = len(self.model.code[rank][index].members)
            entry = self.groups[rank] = [index, dict(self.clocks[rank]), dict(self.clocks[rank]), members]
        return entry[1]

    def member_done(self, rank: int, index: int, clock: Clock) -> None:
        entry = self.groups[rank]
        entry[2] = self.join(entry[2], clock)
        entry[3] -= 1
        if entry[3] == 0:
            done = entry[2]
            _, tick = self.tick(done, ("r", rank))
            self.hb.group_end[(rank, index)] = tick
            self.clocks[rank] = self.join(done, {})
            del self.groups[rank]


def happens_before(model: Model, actions: list[tuple], deadline: Deadline = UNBOUNDED) -> HappensBefore:
    """Stamp the events of the execution `actions` (a path from the initial state)."""
    hb = HappensBefore(actions=list(actions))
    st = _Stamper(model, hb)
    clocks = st.clocks
    issue_clock: dict[tuple[int, int], Clock] = {}
    delivered: dict[int, Clock] = {r: {} for r in range(model.world)}
    sig_clock: dict[tuple[int, int], Clock] = {}
    landed: dict[tuple[int, int], Clock] = {}
    for number, action in enumerate(actions):
        if number & 255 == 0:
            deadline.check("the happens-before order")
        kind = action[0]
        if kind == "step":
            rank, index = action[1], action[2]
            c = model.code[rank][index]
            clock = clocks[rank]
            for owner, space, lo, _hi, _mode in c.footprint:
                if space == SIG:
                    clock = st.join(clock, sig_clock.get((owner, lo), {}))
            if c.kind == "quiet":
                clock = st.join(clock, delivered[rank])
            clock = dict(clock)
            own = [st.tick(clock, ("r", rank))]
            clocks[rank] = clock
            event = st.stamp(own, clock, [(rank, index, None)], action)
            if c.kind == "fetch_atomic":  # an update of the word: later readers see it
                for owner, space, lo, _hi, mode in c.footprint:
                    if space == SIG and mode != SIG_READ:
                        sig_clock[(owner, lo)] = st.join(sig_clock.get((owner, lo), {}), clock)
            hb.op_event[(rank, index, None)] = event
            hb.effect_event[(rank, index, None)] = event
            if c.delivery is not None:
                issue_clock[(rank, index)] = dict(clock)
        elif kind in ("p2p", "coll"):
            if kind == "p2p":
                skey = (action[1], action[2], action[3])
                keys = [skey, model.matches.recv_of[skey]]
            else:
                keys = [(r, i, None) for r, i in model.coll_members[action[1]]]
            clock: Clock = {}
            for rank, index, sub in keys:
                clock = st.join(clock, st.base(rank, index) if sub is not None else clocks[rank])
                if kind == "coll" and model.coll_kind[action[1]] == "barrier_all":
                    clock = st.join(clock, delivered[rank])
            own = [st.tick(clock, ("r", rank) if sub is None else ("m", rank, index, sub))
                   for rank, index, sub in keys]
            event = st.stamp(own, clock, keys, action)  # one joint event for every participant
            for key in keys:
                rank, index, sub = key
                hb.op_event[key] = event
                hb.effect_event[key] = event
                if sub is None:
                    clocks[rank] = dict(clock)
                else:
                    st.member_done(rank, index, clock)
        else:
            issuer, index = action[1], action[2]
            d = model.deliveries[(issuer, index)]
            clock = dict(issue_clock[(issuer, index)])
            for (i, j), other in landed.items():
                e = model.deliveries[(i, j)]
                if i == issuer and e.target == d.target and e.epoch < d.epoch:
                    clock = st.join(clock, other)
            own = [st.tick(clock, ("d", issuer, index))]
            event = st.stamp(own, clock, [(issuer, index, None)], action)
            hb.effect_event[(issuer, index, None)] = event
            landed[(issuer, index)] = clock
            delivered[issuer] = st.join(delivered[issuer], clock)
            for target, space, lo, _hi, _mode in d.footprint:
                if space == SIG:
                    sig_clock[(target, lo)] = st.join(sig_clock.get((target, lo), {}), clock)
    return hb
