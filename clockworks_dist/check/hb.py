"""The happens-before order of one execution, by vector clocks.

Events: each rank's execution of each op; joint ops (send/recv pairs, collectives) are one event
shared by the participants; each delivery of a one-sided op is an event of its own. Edges: program
order; joint completion; issue -> delivery; delivery -> a wait_until or fetching atomic that reads
the signal it updated; delivery -> the issuer's quiet or barrier_all; every member's prior deliveries
-> barrier_all; fence order between deliveries to the same PE.

For schedules the checker verifies, every execution has this same order: the predictor replays it,
and the symbolic checks ask it which accesses may be concurrent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .match import Key
from .model import SIG, Model, State

Clock = dict


def _join(a: Clock, b: Clock) -> Clock:
    out = dict(a)
    for k, v in b.items():
        if out.get(k, 0) < v:
            out[k] = v
    return out


@dataclass
class HappensBefore:
    """Vector-clock stamps of one execution's events, and the order between them."""

    events: list[tuple] = field(default_factory=list)  # (event id, owner, clock, op keys, action)
    op_event: dict[Key, int] = field(default_factory=dict)  # op -> execution event
    effect_event: dict[Key, int] = field(default_factory=dict)  # op -> delivery event if it has one
    actions: list[tuple] = field(default_factory=list)

    def _before(self, i: int, j: int) -> bool:
        if i == j:
            return False
        _, owner, clock_i, _, _ = self.events[i]
        return clock_i[owner] <= self.events[j][2].get(owner, 0)

    def ordered(self, a: Key, b: Key) -> bool:
        """True if op a's effect happens before op b's effect in this execution."""
        ea, eb = self.effect_event.get(a), self.effect_event.get(b)
        if ea is None or eb is None:
            return False
        return self._before(ea, eb)

    def unordered(self, a: Key, b: Key) -> bool:
        """True if neither op's effect is ordered before the other's: they may be concurrent."""
        return not self.ordered(a, b) and not self.ordered(b, a)

    def edges(self) -> list[tuple[int, int]]:
        """Immediate predecessor edges between events (for the predictor's dependency graph)."""
        out = []
        for j, (_, owner_j, clock_j, _, _) in enumerate(self.events):
            preds = [i for i in range(j) if self._before(i, j)]
            for i in preds:
                if not any(self._before(i, k) and self._before(k, j) for k in preds if k != i):
                    out.append((i, j))
        return out


def happens_before(model: Model, actions: list[tuple]) -> HappensBefore:
    """Stamp the events of the execution `actions` (a path from the initial state)."""
    hb = HappensBefore(actions=list(actions))
    clocks: list[Clock] = [{("r", r): 0} for r in range(model.world)]
    issue_clock: dict[tuple[int, int], Clock] = {}
    delivered: dict[int, Clock] = {r: {} for r in range(model.world)}
    sig_clock: dict[tuple[int, int], Clock] = {}
    landed: dict[tuple[int, int], Clock] = {}
    state: State = model.initial()

    def stamp(owner, clock, keys, action) -> int:
        index = len(hb.events)
        hb.events.append((index, owner, dict(clock), tuple(keys), action))
        return index

    for action in actions:
        kind = action[0]
        if kind == "step":
            rank, index = action[1], action[2]
            c = model.code[rank][index]
            clock = clocks[rank]
            for owner, space, lo, _hi, _mode in c.footprint:
                if space == SIG:
                    clock = _join(clock, sig_clock.get((owner, lo), {}))
            if c.kind in ("quiet",):
                clock = _join(clock, delivered[rank])
            clock[("r", rank)] = clock.get(("r", rank), 0) + 1
            clocks[rank] = clock
            event = stamp(("r", rank), clock, [(rank, index, None)], action)
            for owner, space, lo, _hi, _mode in c.footprint:
                if space == SIG and c.kind == "fetch_atomic":
                    sig_clock[(owner, lo)] = _join(sig_clock.get((owner, lo), {}), clock)
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
            for rank, _, _ in keys:
                clock = _join(clock, clocks[rank])
                if kind == "coll" and model.coll_kind[action[1]] == "barrier_all":
                    clock = _join(clock, delivered[rank])
            for rank, _, _ in keys:
                clock[("r", rank)] = clock.get(("r", rank), 0) + 1
            for rank, _, _ in keys:
                clocks[rank] = dict(clock)
            for key in keys:
                event = stamp(("r", key[0]), clock, [key], action)
                hb.op_event[key] = event
                hb.effect_event[key] = event
        else:
            issuer, index = action[1], action[2]
            d = model.deliveries[(issuer, index)]
            clock = dict(issue_clock[(issuer, index)])
            for (i, j), other in landed.items():
                e = model.deliveries[(i, j)]
                if i == issuer and e.target == d.target and e.epoch < d.epoch:
                    clock = _join(clock, other)
            owner = ("d", issuer, index)
            clock[owner] = 1
            event = stamp(owner, clock, [(issuer, index, None)], action)
            hb.effect_event[(issuer, index, None)] = event
            landed[(issuer, index)] = clock
            delivered[issuer] = _join(delivered[issuer], clock)
            for target, space, lo, _hi, _mode in d.footprint:
                if space == SIG:
                    sig_clock[(target, lo)] = _join(sig_clock.get((target, lo), {}), clock)
        state = model.apply(state, action)
    return hb
