"""What must happen before what, in every execution prefix: the order the reduction reads to find
one-sided deliveries, waits and the reads after them that are stubborn sets of their own.

A fact "x before y" claims: in every execution prefix from the initial state in which y has
happened, x happened earlier. The facts are `semantics.order`'s edges (program order, joint
completion, issue before delivery, fence order, quiet), with the completion of a barrier_all
attached to the barrier itself (a rank may arrive with deliveries in flight; the barrier fires
when none is), and one rule by value, derived to a fixpoint:

- a wait on all its words returns only when each word satisfies its condition; the word's value
  then comes from the updates of it that landed before the wait, and none of those happens after
  the wait. So if the updates that do not happen after the wait, all but U, cannot satisfy the
  condition in any subset and order (`_cannot_satisfy`, a sound test by the largest value they can
  reach), U happens before the wait. (A one-shot's wait for its peer's signal set to 1: the set to
  2 of the next iteration comes after a barrier the wait precedes, so the set to 1 happens before
  it; a counting barrier's wait for 2 needs both adds of 1.)

Each fact holds given the facts it was derived from, so every fact holds. Facts that close a cycle
say its events never happen (each would have to happen before itself); they and everything after
them are "dead" here, and anything is said to be ordered with them, which is vacuously true.

Representation: each rank's op events form a chain (`("op", rank, index)` has tick index + 1 on
its rank); every event carries a clock (per rank, the last tick of that rank known to happen
before it, or at it), computed in topological order as the join of its predecessors' clocks. Other
events (deliveries, joint steps, landings, fence lines) tick no chain: such an event x happens
before y if y's clock reaches one of x's anchors (the first chain events after x) or y follows x
through such events alone. Clocks are numpy vectors, and an event with one predecessor shares its
predecessor's vector, so only joins cost memory.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..semantics.arithmetic import COMPARE, MASK64
from ..semantics.budget import UNBOUNDED, Deadline
from ..semantics.machine import Action, Model
from ..semantics.order import delivery_event, edges, has_landing, landing_event, op_event
from ..semantics.rules import Sync, rule

MAX_ROUNDS = 16


class Order:
    """Events, the edges between them, and per event a clock over the ranks' chains of op events
    (see the module docstring); `before(x, y)` once `finish()` has computed the clocks."""

    def __init__(self, world: int, deadline: Deadline = UNBOUNDED):
        self.world = world
        self.deadline = deadline
        self.ids: dict[tuple, int] = {}
        self.events: list[tuple] = []
        self.succ: list[list[int]] = []
        self.chain: list = []
        self.dead: list[bool] = []
        self._anchors: dict[int, tuple] = {}

    def node(self, event: tuple) -> int:
        """The number of `event`, added if new (an op event ticks its rank's chain)."""
        found = self.ids.get(event)
        if found is None:
            found = self.ids[event] = len(self.events)
            self.events.append(event)
            self.succ.append([])
            self.chain.append((event[1], event[2] + 1) if event[0] == "op" else None)
        return found

    def edge(self, earlier: tuple, later: tuple) -> None:
        self.succ[self.node(earlier)].append(self.node(later))

    def finish(self) -> None:
        """Every event's clock, in topological order; events never reached (on or after a cycle)
        are dead. An event's clock is its vector and its top tick: its own for an op event, its
        predecessor's when it has one predecessor and ticks no chain itself."""
        size = len(self.events)
        preds: list[list[int]] = [[] for _ in range(size)]
        for n, targets in enumerate(self.succ):
            for t in targets:
                preds[t].append(n)
        indegree = [len(p) for p in preds]
        zero = np.zeros(self.world, dtype=np.int32)
        vector: list = [None] * size
        top: list = [None] * size
        chain = self.chain
        ready = [n for n in range(size) if indegree[n] == 0]
        done = [False] * size
        steps = 0
        while ready:
            n = ready.pop()
            steps += 1
            if steps & 4095 == 0:
                self.deadline.check("the happens-before order")
            done[n] = True
            before = preds[n]
            mine = chain[n]
            if not before:
                vector[n], top[n] = zero, mine
            elif len(before) == 1 and (top[before[0]] is None or mine is not None and top[before[0]][0] == mine[0]):
                vector[n], top[n] = vector[before[0]], mine or top[before[0]]
            elif len(before) == 1 and mine is None:
                vector[n], top[n] = vector[before[0]], top[before[0]]
            else:
                joined = vector[before[0]].copy()
                for p in before[1:]:
                    np.maximum(joined, vector[p], out=joined)
                for p in before:
                    tick = top[p]
                    if tick is not None and joined[tick[0]] < tick[1]:
                        joined[tick[0]] = tick[1]
                vector[n], top[n] = joined, mine
            for t in self.succ[n]:
                indegree[t] -= 1
                if indegree[t] == 0:
                    ready.append(t)
        self.vector, self.top = vector, top
        self.dead = [not d for d in done]
        self._anchors = {}

    def reaches(self, n: int, rank: int, tick: int) -> bool:
        """Whether event n's clock has rank's tick `tick` (that op event happens before n, or is n)."""
        top = self.top[n]
        if top is not None and top[0] == rank and top[1] >= tick:
            return True
        return bool(self.vector[n][rank] >= tick)

    def anchors(self, n: int) -> tuple[tuple[tuple[int, int], ...], frozenset[int]]:
        """For an event on no chain: the first chain events after it, and the events after it
        reached through events on no chain alone."""
        found = self._anchors.get(n)
        if found is None:
            chain_ticks, off = set(), set()
            work = list(self.succ[n])
            while work:
                t = work.pop()
                if self.chain[t] is not None:
                    chain_ticks.add(self.chain[t])
                elif t not in off:
                    off.add(t)
                    work.extend(self.succ[t])
            found = self._anchors[n] = (tuple(chain_ticks), frozenset(off))
        return found

    def before(self, x: int, y: int) -> bool:
        """x happens before y (dead events: vacuously ordered with everything)."""
        if x == y:
            return False
        if self.dead[x] or self.dead[y]:
            return True
        own = self.chain[x]
        if own is not None:
            return self.reaches(y, own[0], own[1])
        ticks, off = self.anchors(x)
        if y in off:
            return True
        return any(self.reaches(y, rank, tick) for rank, tick in ticks)


class MustOrder(Order):
    """`before(x, y)`: event x happens before event y in every execution prefix where y happens."""

    def __init__(self, model: Model, deadline: Deadline = UNBOUNDED):
        super().__init__(model.world, deadline)
        self.model = model
        barrier_of = {(r, i): ("coll", cid) for cid, members in enumerate(model.coll_members)
                      if model.coll_sync[cid] is Sync.BARRIER_ALL for r, i, _sub in members}
        for earlier, later in edges(model.sched, model.matches):
            if earlier[0] == "delivery" and later[0] == "op" and (later[1], later[2]) in barrier_of:
                later = barrier_of[(later[1], later[2])]  # barrier_all waits for deliveries as it fires
            self.edge(earlier, later)
        waits = self._wait_words()
        for _ in range(MAX_ROUNDS):
            self.finish()
            found = self._wait_facts(waits)
            if not found:
                break
            for earlier, later in found:
                self.succ[earlier].append(later)

    def _wait_words(self) -> list[tuple[int, str, int, list[tuple[int, str, int]]]]:
        """(wait event, comparison, value, every update of the word as (landing event, effect,
        value)) for every awaited word of every wait on all its words."""
        model = self.model
        updates: dict[tuple[int, int], list[tuple[int, str, int]]] = defaultdict(list)
        for program in model.sched.programs:
            for index, op in enumerate(program.ops):
                effect = rule(op).signal_effect(op)
                if effect is None:
                    continue
                ref, how, value = effect
                if how == "read":  # a fetch: no change
                    continue
                key = (program.rank, index)
                land = delivery_event(*key) if key in model.deliveries else op_event(*key)
                updates[(op.pe, model.sig_word(ref))].append((self.node(land), how, value))
        found = []
        for rank, row in enumerate(model.code):
            for c in row:
                if c.awaits is None:
                    continue
                words, cmp, value, every = c.awaits
                if not every:
                    continue
                wait = self.node(op_event(rank, c.index))
                for word in words:
                    found.append((wait, cmp, value, updates.get((model.home[rank], word), [])))  # a thread: its rank's
        return found

    def _wait_facts(self, waits: list) -> list[tuple[int, int]]:
        """The value rule's new facts, given the order so far: an update the wait cannot do
        without (the others that can land before it cannot satisfy it) happens before it."""
        new = []
        for wait, cmp, value, updates in waits:
            if self.dead[wait]:
                continue
            # u[0] is the update's landing event: plain tuples, as a NamedTuple's field read costs this fixpoint
            able = [u for u in updates if not self.dead[u[0]] and not self.before(wait, u[0])]
            for u in able:
                if not self.before(u[0], wait) and _cannot_satisfy(cmp, value, [o for o in able if o is not u]):
                    new.append((u[0], wait))
        return new

    def happens_before(self, a: tuple, b: tuple) -> bool:
        """`before` on events named as `semantics.order` names them (False for unknown ones)."""
        x, y = self.ids.get(a), self.ids.get(b)
        return x is not None and y is not None and self.before(x, y)

    # -- accesses -----------------------------------------------------------------------------------
    def span(self, rank: int, index: int, sub, phase: int) -> tuple[int, int] | None:
        """(first, last) events between which an access of op (rank, index, sub) happens: as it
        executes (phase 0), from its post to its completion (phase 1: a send may read its src, a
        collective member its buffers, until it completes), as its delivery lands (phase 2)."""
        if phase == 0:
            n = self.ids.get(op_event(rank, index))
            return None if n is None else (n, n)
        if phase == 2:
            n = self.ids.get(delivery_event(rank, index))
            return None if n is None else (n, n)
        start = self.ids.get(op_event(rank, index))
        end = self.ids.get(self._completion(rank, index, sub))
        return None if start is None or end is None else (start, end)

    def _completion(self, rank: int, index: int, sub) -> tuple:
        model = self.model
        key = (rank, index, sub)
        cid = model.matches.cid_of.get(key)  # a collective, alone or in a group
        if cid is not None:
            return landing_event(key) if has_landing(model.matches, key) else ("coll", cid)
        if key in model.matches.recv_of:
            return ("p2p", key)
        send = model.matches.send_of.get(key)
        if send is None:
            return ("never", key)
        return landing_event(key) if has_landing(model.matches, key) else ("p2p", send)

    def action_event(self, action: Action) -> int | None:
        """The event an action of the machine is."""
        kind = action.kind
        if kind == "step":
            return self.ids.get(op_event(action.rank, action.index))
        if kind == "p2p":
            return self.ids.get(("p2p", action.key))
        if kind == "coll":
            return self.ids.get(("coll", action.cid))
        d = self.model.deliveries[action.key]
        if d.completes is not None:
            return self.ids.get(landing_event(d.completes))
        return self.ids.get(delivery_event(action.issuer, action.index))

    def ordered(self, entry: tuple, action: Action) -> bool:
        """Whether the access `entry` = (rank, index, sub, mode, phase) is ordered with `action`:
        over before it starts, or starting only after it."""
        rank, index, sub, _mode, phase = entry
        span = self.span(rank, index, sub, phase)
        event = self.action_event(action)
        if span is None or event is None:
            return False
        first, last = span
        return self.before(last, event) or self.before(event, first)


def _cannot_satisfy(cmp: str, value: int, updates: list[tuple[int, str, int]]) -> bool:
    """True only if no subset of `updates`, landed in any order on a word starting at 0, leaves it
    satisfying `cmp value`. The word ends as the last set's value (or 0) plus the adds after it,
    so for ge and gt it is at most the largest set plus every add, when that cannot wrap; for eq
    without adds it is 0 or a set's value. Anything else (and, or, xor, ne, lt, le, a possible
    wrap) is taken as satisfiable."""
    test = COMPARE[cmp]
    if test(0, value):
        return False
    sets = [v for _, how, v in updates if how == "set"]
    adds = [v for _, how, v in updates if how == "add"]
    if len(sets) + len(adds) < len(updates):
        return False
    if cmp in ("ge", "gt", "eq"):
        most = max(sets, default=0) + sum(adds)
        if most > MASK64:
            return False
        if cmp == "eq" and not adds:
            return value not in sets
        return most < value if cmp in ("ge", "eq") else most <= value
    return not updates
