"""Depth-first search in place: one path at a time, with the bookkeeping of each state updated
from what the last action changed instead of recomputed.

The search holds a single state, a `Work`, walks it forward with `Model.execute`, and backtracks by
undoing the Work's journal. Per state it keeps:

- the enabled actions: per rank (its current op's step or sends), per collective (a count of the
  members that have arrived), per delivery in flight (the earliest fence epoch in flight per issuer
  and PE). After an action only the ranks it moved, their p2p peers, the owners of the signal words
  it changed and the issuers whose deliveries it launched or landed are looked at again;
- the accesses of every enabled action and posted op, by the rank whose memory they touch. A data
  race is a conflicting pair of them (`Observer.race_pair`); only pairs with a newly enabled action
  or newly posted op are checked, since any other pair was there, and checked, in the state before.
  Every pair co-enabled in a visited state is checked in the first state of the path where both are
  there, so the races found are those a check of every pair in every visited state finds;
- the stubborn set: an enabled action that is a stubborn set of its own (`Reducer.alone`, decided
  once per action from the program text) if there is one, else the closure of `Reducer.choose`.

Stored states. When the stubborn set holds one action, the state has one successor and there is
nothing to come back to, so the state is not stored: only states where the search branches are
kept (frozen, compared exactly), to cut the branches that meet again there. A state reached again
between branch points is explored again, which costs time, never a state: the state space is
finite and acyclic (every action consumes an op or a delivery), so the search ends, and everything
reachable is still reached. `states` counts the states visited. The journal is dropped whenever no
branch is pending: a path without branches then takes memory for its actions only (the path is
the counterexample of whatever is found on it).

The bookkeeping is a function of the state: `_rebuild` computes it from scratch (at the start and
after each backtrack), and `CHECK_INCREMENTAL` makes the search compare the two at every state
(the property tests turn it on).

Cost at scale. A ring all-reduce never branches, so its search is one path of (ops + landings)
actions and costs the same per action at any size; what grows is the number of actions. The
shortcuts taken for that keep the transition system and the bookkeeping exactly as they were, so
the arguments above and in `por` hold unchanged: the tracer shares one IR object among equal
values (`dsl.trace._Interner`), and `Model` compiles an access or a span once per region object
(memos keyed by identity, each holding its object, so an identity is never reused while its entry
lives) and gives every op the values it would compute on its own; each indexed tag keeps the
accesses it was indexed with (`live`), which are its footprint, fixed by the program text.
"""

from __future__ import annotations

import heapq
import time
from typing import Callable

from ..semantics.budget import RELEASE_S, Deadline
from ..semantics.machine import MEM, Coll, Deliver, Model, Post, State, Work, build
from ..semantics.rules import Sync
from .explore import Outcome, compact
from .por import Reducer
from .properties import Observer

CHECK_INCREMENTAL = False  # compare the incremental bookkeeping with a rebuild at every state
_KIND = {"step": 0, "p2p": 1, "coll": 2, "deliver": 3}  # `por`'s order of seeds


class DepthFirst:
    """A stack, for `explore`: the frontier search's depth-first order, kept for comparison with
    `depth_first` (`check` runs depth-first searches on `depth_first`)."""

    name = "dfs"

    def __init__(self) -> None:
        self._stack: list = []

    def push(self, state) -> None:
        self._stack.append(state)

    def pop(self):
        return self._stack.pop()

    def __len__(self) -> int:
        return len(self._stack)

    def __iter__(self):
        return iter(self._stack)


def depth_first(model: Model, *, reduction: bool = True, max_states: int | None = None,
                deadline: Deadline | None = None, progress: Callable[..., None] | None = None) -> Outcome:
    """Search the state space of `model` depth first, in place; stop at `max_states` visited
    states or at the deadline (then the outcome is incomplete). `progress(states, transitions,
    seconds, depth=, length=)` is called now and then: `depth`, the actions on the current path,
    of `length` in a complete execution (a search that never branches ends at that depth)."""
    return _Search(model, reduction, deadline or Deadline(None)).run(max_states, progress)


class _Search:
    def __init__(self, model: Model, reduction: bool, deadline: Deadline):
        self.model = model
        self.deadline = deadline
        self.work = Work(model.initial())
        self.path: list[tuple] = []  # never rebound: the observer's callback holds the list, not the search
        path = self.path  # (a callback holding `self` would tie the search into a cycle, which only the
        # cycle collector frees: 0.65 s of a 128-rank ring's check, after the check, and its memory
        # until then; without the cycle the search is freed as soon as it returns)
        self.observer = Observer(model, lambda _state: list(path), deadline)
        self.reducer = Reducer(model, deadline) if reduction else None
        world = model.world
        self.barrier_all = [sync is Sync.BARRIER_ALL for sync in model.coll_sync]
        self.team_barriers = any(quiets is not None for quiets in model.coll_quiets)
        # (rank, index) -> the ranks whose sends meet the recvs of that op: they wake when it is posted
        self.senders: dict[tuple[int, int], tuple[int, ...]] = {}
        shared: dict[tuple, tuple] = {}  # a ring's ops have the same one sender: one tuple each
        for (rank, index, _sub), send in model.matches.send_of.items():
            found = self.senders.get((rank, index), ()) + (send[0],)
            self.senders[(rank, index)] = shared.setdefault(found, found)
        # connections with slots: a send wakes when the recv `slots` messages back completes (its rank
        # leaves that op, or the member completes), and a message's landing when its recv is posted
        self.fifo_landings: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {}  # (rank, index) -> landings
        for skey, room in model.gate.items():
            if room is not None:
                self.senders[room[:2]] = self.senders.get(room[:2], ()) + (skey[0],)
        for at, (rank, index, _sub) in model.gated.items():
            self.fifo_landings[(rank, index)] = self.fifo_landings.get((rank, index), ()) + (at,)
        self.has_colls = bool(model.coll_members)
        # rank -> the actors that wait on its signal words: itself, and its threads (`semantics.threads`)
        self.residents: list[list[int]] = [[] for _ in range(world)]
        for actor, home in enumerate(model.home):
            self.residents[home].append(actor)
        self.ends: list[State] = []
        self.pool: dict = {}  # the parts of the states kept (branch points, ends), one copy each
        self.first_path: list[tuple] | None = None
        self._clear(world)

    # -- bookkeeping --------------------------------------------------------------------------
    def _clear(self, world: int) -> None:
        self.acts: list[tuple] = [()] * world  # rank -> its enabled actions, collectives aside
        self.posts: list[tuple] = [()] * world  # rank -> its posted ops' tags
        self.arrived = [0] * len(self.model.coll_members)
        self.colls: dict[int, tuple] = {}  # enabled collectives
        self.delivs: dict[tuple[int, int], tuple] = {}  # enabled deliveries, by (issuer, index)
        self.lanes: dict[tuple[int, int], dict[tuple[int, int], int]] = {}  # (issuer, PE) -> fenced key -> epoch
        self.lonely: set[tuple] = set()  # enabled actions that are stubborn sets of their own
        self.queue: list[tuple] = []  # the same, as a heap by (kind, `_rank`): stale entries skipped
        self.index: dict[int, dict[tuple, list[tuple]]] = {}  # owner -> tag -> [(lo, hi, mode, tag)]
        self.count = 0  # enabled actions
        self.fresh: dict[tuple, None] = {}  # tags enabled or posted since the last visit, still there
        self.live: dict[tuple, tuple] = {}  # every indexed tag -> its accesses

    def _rebuild(self) -> None:
        """The bookkeeping of the current state, from scratch."""
        model, work = self.model, self.work
        self._clear(model.world)
        for rank in range(model.world):
            self._set_acts(rank, tuple(model.rank_enabled(work, rank, collectives=False)))
            self._set_posts(rank, self._posted(rank))
            for cid in self._arrival(rank, work.pcs[rank], work.done[rank]):
                self.arrived[cid] += 1
        for cid in range(len(self.arrived)):
            self._check_coll(cid)
        for key in work.flight:
            self._launched(key)
        for key in work.flight:
            self._check_delivery(key)

    def _snapshot(self) -> tuple:
        return (tuple(self.acts), tuple(self.posts), tuple(self.arrived), dict(self.colls), dict(self.delivs),
                {k: dict(v) for k, v in self.lanes.items() if v}, set(self.lonely), self.count,
                {o: {t: sorted(e) for t, e in tags.items()} for o, tags in self.index.items() if tags})

    def _arrival(self, rank: int, pc: int, done: int) -> tuple[int, ...]:
        """The collectives `rank` has arrived at and whose sources are not yet read: its current op's,
        or the grouped collectives of its current group (`Model.arrived`)."""
        model = self.model
        if pc >= model.nops[rank]:
            return ()
        c = model.code[rank][pc]
        if c.colls:
            n = len(c.members)
            return tuple(cid for sub, cid in c.colls if not (done >> sub) & 1 and not (done >> (n + sub)) & 1)
        if done or c.cid is None:
            return ()
        return (c.cid,)

    def _posted(self, rank: int) -> tuple:
        """The tags of `rank`'s posted ops that have not completed (`Model.posted_accesses`)."""
        work = self.work
        pc = work.pcs[rank]
        entries = self.model.posted_fp.get((rank, pc))
        if entries is None:
            return ()
        done = work.done[rank]
        if not done:
            return tuple(build(Post, ("post", rank, pc, sub)) for sub, _ in entries)
        # a grouped collective whose sources are read (bit n + sub): its landing holds its accesses
        n = len(self.model.code[rank][pc].members)
        return tuple(build(Post, ("post", rank, pc, sub)) for sub, _ in entries
                     if not (done if sub is None else (done >> sub) & 1 or (done >> (n + sub)) & 1))

    def _accesses(self, tag: tuple) -> tuple:
        model = self.model
        if tag[0] == "post":
            _, rank, pc, sub = tag
            for s, accesses in model.posted_fp[(rank, pc)]:
                if s == sub:
                    return accesses
        return model.footprint(tag)

    def _index_add(self, tag: tuple) -> None:
        accesses = self.live[tag] = self._accesses(tag)
        index = self.index
        sig_races = self.model.sig_races
        for owner, space, lo, hi, mode in accesses:
            if space != MEM:
                if not sig_races:
                    continue
                owner = -1 - owner  # a signal word: races only beside a plain store (`Observer.race_pair`)
            tags = index.get(owner)
            if tags is None:
                tags = index[owner] = {}
            entries = tags.get(tag)
            if entries is None:
                tags[tag] = [(lo, hi, mode, tag)]
            else:
                entries.append((lo, hi, mode, tag))
        self.fresh[tag] = None

    def _index_remove(self, tag: tuple) -> None:
        index = self.index
        sig_races = self.model.sig_races
        for owner, space, _lo, _hi, _mode in self.live.pop(tag):
            if space == MEM:
                index[owner].pop(tag, None)
            elif sig_races:
                index[-1 - owner].pop(tag, None)
        self.fresh.pop(tag, None)

    def _enable(self, action: tuple) -> None:
        self.count += 1
        self._index_add(action)
        if self.reducer is not None and self.reducer.alone(action):
            self.lonely.add(action)
            heapq.heappush(self.queue, (_KIND[action[0]], self._rank(action), action))

    def _disable(self, action: tuple) -> None:
        self.count -= 1
        self._index_remove(action)
        self.lonely.discard(action)

    def _set_acts(self, rank: int, new: tuple) -> None:
        old = self.acts[rank]
        if old == new:
            return
        self.acts[rank] = new
        for action in old:
            if action not in new:
                self._disable(action)
        for action in new:
            if action not in old:
                self._enable(action)

    def _set_posts(self, rank: int, new: tuple) -> None:
        old = self.posts[rank]
        if old == new:
            return
        self.posts[rank] = new
        for tag in old:
            if tag not in new:
                self._index_remove(tag)
        for tag in new:
            if tag not in old:
                self._index_add(tag)

    def _held(self, cid: int) -> bool:
        """Whether a delivery that barrier `cid` waits for is in flight (a team barrier: its members')."""
        if self.model.coll_quiets[cid] is None:  # barrier_all: a one-sided delivery, not a landing
            deliveries = self.model.deliveries
            return any(deliveries[(entry[0], entry[1])].completes is None for entry in self.work.flight)
        return self.model.team_held(cid, self.work.flight)

    def _check_coll(self, cid: int) -> None:
        ready = self.arrived[cid] == len(self.model.coll_members[cid]) and not (
            self.barrier_all[cid] and self._held(cid))
        if ready and cid not in self.colls:
            self.colls[cid] = action = build(Coll, ("coll", cid))
            self._enable(action)
        elif not ready and cid in self.colls:
            self._disable(self.colls.pop(cid))

    def _launched(self, key: tuple[int, int]) -> None:
        d = self.model.deliveries[key]
        if d.fenced:
            self.lanes.setdefault((d.issuer, d.pe), {})[key] = d.epoch

    def _check_delivery(self, key: tuple[int, int]) -> None:
        d = self.model.deliveries[key]
        blocked = False
        if d.fenced and d.epoch:
            blocked = min(self.lanes[(d.issuer, d.pe)].values()) < d.epoch
        elif key in self.model.gated:  # a message in a FIFO lands once its recv is posted
            blocked = not self.model.posted(self.work, self.model.gated[key])
        if not blocked and key not in self.delivs:
            self.delivs[key] = action = build(Deliver, ("deliver", *key))
            self._enable(action)
        elif blocked and key in self.delivs:
            self._disable(self.delivs.pop(key))

    def _update(self, changes: list[tuple]) -> None:
        """Bring the bookkeeping up to date with `changes`, the journal of the last action."""
        model, work = self.model, self.work
        old_pc: dict[int, int] = {}  # rank -> its pc before the action, if it changed
        old_done: dict[int, int] = {}
        ranks: set[int] = set()  # ranks whose own enabled actions may have changed
        launched, landed = [], []
        for entry in changes:
            what = entry[0]
            if what == "mem":  # memory changes no enabled action
                continue
            if what == "pc":
                if entry[1] not in old_pc:
                    old_pc[entry[1]] = entry[2]
            elif what == "done":
                if entry[1] not in old_done:
                    old_done[entry[1]] = entry[2]
            elif what == "sig":
                ranks.update(self.residents[entry[1]])  # a wait of that rank (or its threads) may change
            elif what == "launch":
                launched.append((entry[1], entry[2]))
                ranks.add(entry[1])  # its quiet
            elif what == "land":
                key = (entry[1][0], entry[1][1])
                landed.append(key)
                ranks.add(key[0])
        pcs, done, senders_of, colls = work.pcs, work.done, self.senders, self.has_colls
        for rank in old_pc.keys() | old_done.keys():
            pc, now = old_pc.get(rank, pcs[rank]), pcs[rank]
            ranks.add(rank)
            senders = senders_of.get((rank, pc))  # a send is enabled once its recv is posted
            if senders:
                ranks.update(senders)
            if now != pc:
                senders = senders_of.get((rank, now))
                if senders:
                    ranks.update(senders)
            if colls:
                before = self._arrival(rank, pc, old_done.get(rank, done[rank]))
                after = self._arrival(rank, now, done[rank])
                if before != after:
                    for cid in before:
                        if cid not in after:
                            self.arrived[cid] -= 1
                            self._check_coll(cid)
                    for cid in after:
                        if cid not in before:
                            self.arrived[cid] += 1
                            self._check_coll(cid)
            self._set_posts(rank, self._posted(rank))
            if self.fifo_landings:
                for at in self.fifo_landings.get((rank, now), ()) + self.fifo_landings.get((rank, pc), ()):
                    if at in work.flight:
                        self._check_delivery(at)
        flight = work.flight
        if not landed and not launched:
            for rank in ranks:
                self._set_acts(rank, tuple(model.rank_enabled(work, rank, collectives=False)))
            return
        recheck: set[tuple[int, int]] = set()
        for key in landed:
            if key in self.delivs:
                self._disable(self.delivs.pop(key))
            d = model.deliveries[key]
            if d.fenced:
                lane = self.lanes[(d.issuer, d.pe)]
                del lane[key]
                recheck.update(lane)
        for key in launched:
            self._launched(key)
            recheck.add(key)
        for key in recheck:
            if key in flight:
                self._check_delivery(key)
        emptied = (len(flight) - len(launched) + len(landed) == 0) != (not flight)  # barrier_all waits for none
        if emptied or self.team_barriers and (launched or landed):  # a team barrier: for its members' only
            for cid, barrier in enumerate(self.barrier_all):
                if barrier and self.arrived[cid] == len(model.coll_members[cid]):
                    self._check_coll(cid)
        for rank in ranks:
            self._set_acts(rank, tuple(model.rank_enabled(work, rank, collectives=False)))

    # -- the search -----------------------------------------------------------------------------
    def _enabled(self) -> list[tuple]:
        """Every enabled action, in `Model.enabled`'s order."""
        model, work = self.model, self.work
        out: list[tuple] = []
        for rank in range(model.world):
            out += self.acts[rank]
            pc = work.pcs[rank]
            if pc < model.nops[rank]:
                c = model.code[rank][pc]
                for cid in (c.cid,) if not c.colls else tuple(cid for _sub, cid in c.colls):
                    if cid is not None and cid in self.colls and model.coll_members[cid][0][0] == rank:
                        out.append(self.colls[cid])
        out += [self.delivs[key] for key in sorted(self.delivs)]
        return out

    def _choose(self) -> list[tuple]:
        if self.count == 0:
            return []
        if self.reducer is None:
            return self._enabled()
        if self.lonely:  # the first in `Reducer.choose`'s order of seeds
            queue = self.queue
            while queue[0][2] not in self.lonely:
                heapq.heappop(queue)
            return [queue[0][2]]
        self.reducer.forget()
        return self.reducer.choose(self.work, self._enabled())

    def _visit(self) -> None:
        """The properties of the current state: races among its new pairs, or its end."""
        if self.count == 0:
            state = compact(self.work.freeze(), self.pool)
            self.observer.terminal(state)
            self.ends.append(state)
            if self.first_path is None and self.model.done(state) and not state.in_flight:
                self.first_path = list(self.path)
            return
        index, observer, state = self.index, self.observer, None
        live, sig_races = self.live, self.model.sig_races
        for tag in self.fresh:
            for owner, space, lo, hi, mode in live[tag]:
                if space != MEM:
                    if not sig_races:
                        continue
                    owner = -1 - owner
                mine = (lo, hi, mode, tag)
                for other, entries in index[owner].items():
                    if other == tag or other[0] == "post" and tag[0] == "post":
                        continue
                    for entry in entries:
                        if entry[0] < hi and lo < entry[1]:
                            # in the order of `Observer._races`' sweep: by start, then as enabled
                            if (entry[0], self._rank(other)) <= (lo, self._rank(tag)):
                                observer.race_pair(state, owner, entry, mine)
                            else:
                                observer.race_pair(state, owner, mine, entry)

    def _rank(self, tag: tuple) -> tuple:
        """Where `tag` comes in `Model.enabled`'s order (posted ops after every action)."""
        kind = tag[0]
        if kind == "step":
            return (0, tag[1], 0)
        if kind == "p2p":
            return (0, tag[1], tag[3] or 0)
        if kind == "coll":
            return (0, self.model.coll_members[tag[1]][0][0], 0)
        if kind == "deliver":
            return (1, tag[1], tag[2])
        return (2, tag[1], -1 if tag[3] is None else tag[3])

    def _step(self, action: tuple) -> None:
        work = self.work
        mark = work.mark()
        self.model.execute(work, action)
        self.path.append(action)
        self._update(work.changes(mark))
        if CHECK_INCREMENTAL:
            self._verify()

    def _verify(self) -> None:
        incremental, fresh = self._snapshot(), self.fresh
        self._rebuild()
        rebuilt = self._snapshot()
        assert incremental == rebuilt, f"incremental bookkeeping differs from a rebuild after {self.path[-1]}"
        self.fresh = fresh

    def run(self, max_states: int | None, progress) -> Outcome:
        start = time.perf_counter()
        work, path = self.work, self.path
        self._rebuild()
        stack: list[tuple[int, int, list]] = []  # branches pending: (journal mark, depth, actions left)
        visited: set[State] = set()
        pool = self.pool
        states = transitions = 0
        stopped_by = None
        last_report = start
        length = _execution_length(self.model)
        while True:
            chosen = self._choose()
            if len(chosen) > 1:
                snapshot = work.freeze()
                if snapshot in visited:
                    chosen = None  # explored from here already
                else:
                    visited.add(compact(snapshot, pool))
            if chosen is not None:
                states += 1
                self._visit()
                self.fresh = {}
                if self.deadline.expired((len(visited) + len(self.ends)) * RELEASE_S):
                    stopped_by = "timeout"
                    break
                if states & 255 == 0 and progress is not None:
                    now = time.perf_counter()
                    if now - last_report > 0.25:
                        progress(states, transitions, now - start, depth=len(path), length=length)
                        last_report = now
                if max_states is not None and states >= max_states and (chosen or stack):
                    stopped_by = "max_states"
                    break
            if chosen:
                if len(chosen) > 1:
                    stack.append((work.mark(), len(path), chosen[:-1]))
                self._step(chosen[-1])  # the last first, as a stack of the chosen actions would
                transitions += 1
                if not stack:
                    work.journal.clear()  # nothing to come back to
                continue
            if not stack:
                break
            mark, depth, left = stack[-1]
            action = left.pop()
            if not left:
                stack.pop()
            work.undo(mark)
            del path[depth:]
            self._rebuild()
            self.fresh = {}  # the branch point, visited already
            self._step(action)
            transitions += 1
            if not stack:
                work.journal.clear()
        return Outcome(states=states, transitions=transitions, seconds=time.perf_counter() - start,
                       complete=stopped_by is None, stopped_by=stopped_by, observer=self.observer,
                       terminals=self.ends, first_path=self.first_path,
                       order=self.reducer._order if self.reducer is not None else None, stored=len(visited))


def _execution_length(model: Model) -> int:
    """The actions of one complete execution: every op that runs alone, every send meeting its
    recv, every collective, every delivery and landing (for progress: a search that never branches
    visits one more state than this)."""
    alone = sum(1 for row in model.code for c in row if c.sync is not Sync.P2P and c.cid is None)
    return alone + len(model.matches.recv_of) + len(model.coll_members) + len(model.deliveries)
