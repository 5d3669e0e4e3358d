"""Partial-order reduction by stubborn sets.

At each state the search explores only the enabled actions of a *stubborn set* T, built by closure
from one seed action. T holds actions (a rank's current op, one member of its group, a joint
send/recv or collective, a delivery or a landing), and *frozen* ranks, all of whose current actions are in T and
which therefore cannot move on a path that avoids T. Closure rules, for every action t of T:
  - t enabled: every action that could, on a path that avoids T, be executed and be *dependent* on
    t joins T: if it is a current action of its rank, that action; if it lies further ahead in the
    rank's program, the rank is frozen. Dependent = overlapping footprints where the order can
    matter (`model.dependent`): anything but two accesses that write nothing (plain reads, atomic
    fetches), two atomic adds to a data word, two signal reads, two signal adds, and a signal add
    against a `ge`/`gt` wait on a word whose adds provably never wrap around 2**64
    (`Model._may_wrap`). Each independence claim holds as stated: reads change nothing; addition
    modulo 2**64 commutes, wrapping or not; and a `ge`/`gt` condition that holds stays true under
    an add only if the add cannot wrap, which is proven per word from the schedule (the largest
    value a set can write plus the sum of every add that can reach the word fits in 64 bits), and
    otherwise not assumed. This covers disabling too: the only action that can be disabled is
    wait_until, by a signal write that is dependent on it.
  - t disabled: a necessary enabling set joins T: the partners not yet posted (send/recv,
    collectives: they are frozen), the deliveries that must land first (quiet, barrier_all, fence
    order), and every action or rank that may still update the awaited signal word (wait_until).
Posted accesses (`Model.posted_accesses`: a send's source, a collective member's source and own
destination) happen from the moment the rank reaches the op, before it meets anyone, so the ranks the
op needs do not bound them: one ahead of the actor counts if the actor can reach the op avoiding T
(its rank is frozen), and one at the actor's current op is posted beside t in this very state, which
shows the conflict (`check.properties`). Skipping them because the op's partners are frozen lost a
race in breadth-first search: a rank reached a collective whose destination another rank's get read.
"Could execute on a path avoiding T": a rank cannot pass its current op while one of its pending
actions is in T, nor any op that needs a frozen rank, so its future stops there (its horizon).
Anything else it may still do counts, including the deliveries of puts it has yet to issue, except
a delivery a fence holds behind a delivery of T (`_fenced_out`). Fences. A fence has no footprint
and commutes with everything; its effect is the rule that a delivery d from issuer i to PE p in
fence epoch e is disabled while a delivery from i to p of an earlier epoch is in flight
(`Model.delivery_blocked`). Claim: if such an earlier delivery d' is in flight in s and d' is in T,
then d (in flight, or issued later on the path) cannot land on any path from s that avoids T.
Proof: d' leaves the in-flight set only by its own landing, an action of T; so d' stays in flight
along the path, and d stays disabled. Such a d is therefore neither "executable avoiding T" when
collecting dependents (it cannot write what t reads), nor a signal update that lets a wait be
passed when computing how far a rank can run avoiding T (`_limits`, `_may_update`). Without this,
a put, a fence and a put_signal per peer (DeepEP's dispatch) made every reader of the put's data
look reachable ahead of the put's own delivery: the closure froze every rank and the reduction
vanished (30,439 states at 6 PEs, 253 with it). The claim uses T's membership only, which grows
during the closure: a check made against a smaller T excludes less and stays sound.

Actions alone (`Reducer.alone`). {t} is a stubborn set in every state where t is enabled if no
access of the program text that is dependent on t's footprint can happen on a path avoiding t
from such a state. Decided once per action, with "can happen" over-approximated from the text
alone: an access is excluded only if it is past or held. Past: an op the action's rank has
already passed (whenever t is enabled, its ranks stand at t's op, so their earlier ops have run),
except the deliveries of earlier one-sided ops, which may still be in flight. Held: t's op itself,
its ranks' later ops (a rank cannot pass an op whose action is t, and a group completes only when
every member has), and, for a one-sided delivery, its issuer's deliveries that a fence orders
after it (the fence claim above). Other members of a group stay current and can run, so they are
never held. An access is also excluded if the static order (`must.MustOrder`: facts "x happens
before y in every execution prefix where y happens", from the ordering rules and, by value, from
the updates a wait can return after) puts it wholly before t's event or wholly after it: one
before t has happened in any state where t is enabled (else executing t there would give a prefix
where t happens without it), and one after t cannot happen on a path that avoids t. This makes a
one-sided delivery alone when its target reads the data only after waiting for the signal that
implies it, and each wait alone when its word's other updates come after a barrier it precedes:
the one-shot, two-shot and dispatch protocols then never compute a closure. Every other access,
of any rank, at any point of its program, counts. This is the
closure from seed t with "could execute on a path avoiding T" widened to the whole program: if
the closure of the widened relation stays {t}, so does the closure below, and D1 and D2 hold as
argued there (t is enabled and, with no dependent writer of its signal words left, cannot be
disabled). The in-place search (`dfs`) takes such an action whenever one is enabled: a ring
all-reduce then never computes a closure, and its search costs the same per state at any size.
The decision reads only memory that some access other than its owner's own (as the owner runs or
meets its peers) touches (`_index_foreign`); memory no such access touches has no entry there nor
in the owner's own table built for it, so skipping it drops no access that could count.

Collectives inside a group (`with r.group():`). A collective member (rank, index, sub) of a group
moves by its collective's joint step, one action for every member (`Coll`, enabled once each member
has arrived: its rank stands at the op and the member has neither completed nor had its sources
read), then, if it writes, by its own landing; `action_of` names the joint step, so a frozen rank's
current actions (`_current`) hold it beside its group's sends and recvs. The rules above then apply
as they are, each for these reasons. Held: a group's rank moves only by its members' actions and
passes the group when the last one completes, so it cannot pass the group while one of its pending
actions is in T; its other members stay current and may run alone, as the horizon and the limits
already allow for sends and recvs. Enabled stays enabled (D2): a member stops being arrived only by
the joint step itself (it reads the sources and completes the member or launches its landing), and
its rank leaves the group only after that. Disabled: the members whose ranks stand before their op
are frozen (`_enablers`); a member at its op that is no longer arrived means the joint step has
fired, and it is never enabled again, so nothing need join T for it. Commuting (D1): the joint step
and another member's action on the same rank set different bits of the rank's done word, and the
rank moves on when the last bit is set, in either order; memory is compared through the footprints
as for any action, a collective member's own accesses (its sources and its own destination,
`Model._member_footprint`) included. How far a rank runs (`_completes`): a group holding a
collective member passes only if every member's rank of that collective is not frozen and can reach
its op (at most its limit), as for a collective outside a group; this ignores whether the joint step
is itself in T for an op ahead, which only lets a rank look further than it can (more dependents,
never fewer). Alone: a joint step holds every member at its op, and the other members of each
member's group, current beside it, count with their accesses to their rank's memory, as for a
meeting or a landing of a recv in a group; `_index_foreign` lists a collective member's accesses
under its group's member index. The static order (`MustOrder`) makes each member's joint step and
landing events of their own, unordered with the group's other members (`semantics.order`), and
tests/test_must.py walks random grouped collectives against it. The property test with grouped
collectives (all-reduces and all-gathers on two communicators beside sends and recvs, posted in a
different order per rank, now and then ungrouped) compares the reduced, unreduced and breadth-first
searches.

Why this is sound. These are Valmari's strong stubborn-set conditions D1 (every t in T commutes with
any sequence of actions outside T) and D2 (the enabled actions of T stay enabled along such
sequences). The state space is finite and acyclic (every action consumes an op or a delivery), so
no cycle proviso is needed, and the reduced search reaches:
  - every terminal state, hence every deadlock and every final memory (wrong and nondeterministic
    results, bitwise reproducibility) [Valmari 1991; Godefroid 1996, thm 4.3];
  - for every pair of conflicting actions co-enabled in some reachable state, a state where a
    conflicting pair is co-enabled (data races). Sketch: let s be reduced-reachable, w a path to a
    state where t1, t2 conflict and are co-enabled. If w uses an action of T(s), move the first such
    action to the front (D1) and recurse on a shorter w. Else if t1 is in T(s), t2 is dependent on
    t1 and reachable avoiding T, so the closure put t2's actor in T: both are enabled at s. Else pick
    an enabled action of T(s): it commutes with w, t1 and t2 and keeps them enabled, and the search
    takes it; since every path has at most (ops + deliveries) actions, this step cannot repeat
    forever. For an action alone, the second case has no t2: an access that is past, held or
    statically ordered with t1 is never enabled beside it (ordered before: it has happened
    wherever t1 is enabled; after: executing it first would contradict the order).
The property tests compare this search against the unreduced one on random schedules, and
tests/test_must.py checks on random walks that every order `MustOrder` claims holds.
"""

from __future__ import annotations

import bisect

from ..semantics.budget import UNBOUNDED, Deadline
from ..semantics.machine import MEM, SIG, Action, Coll, Deliver, Model, P2P, State, Step, dependent
from ..semantics.rules import SIG_UPDATES
from .must import MustOrder
from ..semantics.rules import Sync

MAX_SEEDS = 6
_ORDER = {"step": 0, "p2p": 1, "coll": 2, "deliver": 3}
ISSUE, JOINT, DELIVERY = 0, 1, 2  # when an op's access happens: as it runs, jointly with peers, as it lands


class Reducer:
    """Chooses a stubborn subset of the enabled actions."""

    def __init__(self, model: Model, deadline: Deadline = UNBOUNDED):
        self.model = model
        self.deadline = deadline
        self._order: MustOrder | None = None
        self._indexed = False  # the closure's tables, built on its first use (`_index`)
        self._flight_state, self._flight_table = None, {}
        self._held: dict[tuple[int, int], int] = {}  # see `_fenced_out`
        self._alone: dict[tuple, bool] = {}
        self._foreign: dict | None = None
        self._local: dict = {}

    def _index(self) -> None:
        """The tables of the closure, for a search that needs one (a ring never does)."""
        if self._indexed:
            return
        self._indexed = True
        model = self.model
        # owner -> space -> actor -> [(index, sub, lo, hi, mode, others)] sorted by index
        self.by_actor: list[list[dict[int, list[tuple]]]] = []
        for owner in range(model.world):
            spaces = []
            for space in (MEM, SIG):
                table: dict[int, list[tuple]] = {}
                for actor, index, sub, lo, hi, mode, others in model.accessors[owner][space]:
                    table.setdefault(actor, []).append((index, sub, lo, hi, mode, others))
                for entries in table.values():
                    entries.sort(key=lambda e: e[0])
                spaces.append(table)
            self.by_actor.append(spaces)
        self._keys = {(o, s, a): [e[0] for e in entries]
                      for o in range(model.world) for s in (MEM, SIG) for a, entries in self.by_actor[o][s].items()}
        self.joint_index = [[j[0] for j in joints] for joints in model.joints]
        self.has_waits = any(c.sync is Sync.WAIT for row in model.code for c in row)
        # accesses an op makes when its delivery lands, not when it is issued: (owner, space,
        # actor, index, lo, hi, mode); a fence may hold these back behind a delivery of T
        self.at_delivery: set[tuple] = set()
        # accesses a posted op makes from the moment its rank reaches it, before it meets anyone
        # (`Model.posted_accesses`: a send's source, a collective member's source and own destination):
        # (owner, space, actor, index, sub, lo, hi, mode). The ranks such an op needs do not bound them
        self.posted: set[tuple] = {
            (owner, space, rank, index, sub, lo, hi, mode)
            for (rank, index), entries in model.posted_fp.items() if index < model.nops[rank]
            for sub, accesses in entries for owner, space, lo, hi, mode in accesses}
        for row in model.code:
            for c in row:
                if c.delivery is not None and c.delivery.fenced:
                    for owner, space, lo, hi, mode in c.delivery.footprint:
                        if (owner, space, lo, hi, mode) not in c.footprint:
                            self.at_delivery.add((owner, space, c.rank, c.index, lo, hi, mode))

    def forget(self) -> None:
        """The state may have changed in place (a `Work`): drop what was cached for it."""
        self._flight_state = None

    def choose(self, state: State, enabled: list[Action]) -> list[Action]:
        """A stubborn subset of `enabled`, the enabled actions of `state`: the smallest closure
        from up to `MAX_SEEDS` seeds (steps first), in `enabled`'s order."""
        if len(enabled) <= 1:
            return enabled
        self._index()
        best = enabled
        enabled_set = set(enabled)
        for seed in sorted(enabled, key=lambda a: _ORDER[a.kind])[:MAX_SEEDS]:
            chosen = self._closure(state, enabled_set, enabled, seed)
            if len(chosen) < len(best):
                best = chosen
                if len(best) == 1:
                    break
        return best

    # -- actions that are a stubborn set on their own ------------------------------------------
    def alone(self, action: Action) -> bool:
        """Whether {action} is a stubborn set in every state where `action` is enabled: no access
        that any other action might make on a path avoiding it is dependent on it. Decided once per
        action, from the program text alone (see the module docstring)."""
        found = self._alone.get(action)
        if found is None:
            found = self._alone[action] = self._decide_alone(action)
        return found

    def _decide_alone(self, action: Action) -> bool:
        model = self.model
        if self._foreign is None:
            self._index_foreign()
        kind = action.kind
        held = ranks = None  # built when first needed: most actions touch atoms no other rank does
        for owner, space, lo, hi, mode in model.footprint(action):
            foreign = self._foreign.get((owner, space))
            if foreign is not None:  # else only the owner's own accesses, as it runs, touch this memory
                local = self._local.get((owner, space), {})
                if held is None:
                    held, ranks = self._holder(action), _ranks_of(model, action)
                for atom in range(lo, hi):
                    for entry in foreign.get(atom, ()):
                        if dependent(space, mode, entry[3]) and not held(entry) and not self._ordered(entry, action):
                            return False
                    if owner not in ranks:  # the owner's own accesses are not held by this action
                        for entry in local.get(atom, ()):
                            if dependent(space, mode, entry[3]) and not held(entry) and \
                                    not self._ordered(entry, action):
                                return False
            if kind != "step" and not (kind == "deliver" and action.index >= 0):
                # the other members of a group (sends, recvs, collective members) stay current and may
                # run on their own
                for rank, index, held_sub in _keys_held(model, action):
                    if held_sub is None or rank != owner:
                        continue
                    for sub, member in model.code[rank][index].members:
                        if sub == held_sub:
                            continue
                        for o, sp, mlo, mhi, mmode in model._member_footprint(rank, index, sub, member):
                            if o == owner and sp == space and mlo < hi and lo < mhi and dependent(space, mode, mmode):
                                return False
        return True

    @property
    def order(self) -> MustOrder:
        """The static order of the schedule (`must.MustOrder`), built on first need: a ring
        all-reduce never asks for it."""
        if self._order is None:
            self._order = MustOrder(self.model, self.deadline)
        return self._order

    def _ordered(self, entry: tuple, action: Action) -> bool:
        """Whether the access `entry` is over before `action` or starts only after it, in every
        execution prefix."""
        return self.order.ordered(entry, action)

    def _index_foreign(self) -> None:
        """Per (owner, space) and atom, the accesses that are not the owner's own as it runs or
        meets its peers: other ranks' accesses and every delivery's. Then, for just those atoms,
        the owner's own accesses (a delivery's target may read or write what it writes)."""
        model = self.model
        foreign: dict[tuple[int, int], dict[int, list]] = {}
        own: list[tuple] = []
        for row in model.code:
            for c in row:
                entries = [(acc, None, ISSUE) for acc in c.footprint]
                if c.delivery is not None:
                    entries += [(acc, None, DELIVERY) for acc in c.delivery.footprint]
                if c.sync is Sync.P2P:
                    for sub, m in c.members:
                        entries += [(acc, sub, JOINT) for acc in model._member_footprint(c.rank, c.index, sub, m)]
                elif c.cid is not None:
                    entries += [(acc, None, JOINT) for acc in model.coll_member_footprint[c.cid]
                                if acc.owner == c.rank]
                for (owner, space, lo, hi, mode), sub, phase in entries:
                    entry = (c.rank, c.index, sub, mode, phase)
                    if owner != c.rank or phase == DELIVERY:
                        table = foreign.setdefault((owner, space), {})
                        for atom in range(lo, hi):
                            table.setdefault(atom, []).append(entry)
                    else:
                        own.append((owner, space, lo, hi, entry))
        for rank, accesses in enumerate(model.end_reads):  # the caller's read at the rank's end
            for owner, space, lo, hi, mode in accesses:
                own.append((owner, space, lo, hi, (rank, model.nops[rank], None, mode, ISSUE)))
        local: dict[tuple[int, int], dict[int, list]] = {}
        for owner, space, lo, hi, entry in own:
            table = foreign.get((owner, space))
            if table is None:
                continue
            for atom in range(lo, hi):
                if atom in table:
                    local.setdefault((owner, space), {}).setdefault(atom, []).append(entry)
        self._foreign, self._local = foreign, local

    def _holder(self, action: Action):
        """A test of whether an access (rank, index, sub, mode, phase) cannot happen on a path that
        avoids `action` in a state where `action` is enabled: it is past (an op its rank has passed,
        other than a delivery, which may still be in flight), or held behind `action` (the op itself,
        its rank's later ops, and deliveries a fence orders after a delivery's)."""
        model = self.model
        if action.kind == "deliver" and action.index >= 0:
            d = model.deliveries[action.key]
            issuer, index = action.issuer, action.index

            def held(entry) -> bool:
                rank, at, _sub, _mode, phase = entry
                if rank != issuer:
                    return False
                if at == index or at < index and phase != DELIVERY:
                    return True
                if at > index and phase == DELIVERY and d.fenced:
                    later = model.deliveries.get((rank, at))
                    return later is not None and later.fenced and later.pe == d.pe and later.epoch > d.epoch
                return False
            return held
        keys = _keys_held(model, action)

        def held(entry) -> bool:
            rank, at, sub, _mode, phase = entry
            for r, index, s in keys:
                if rank != r:
                    continue
                if at > index or at < index and phase != DELIVERY:
                    return True
                if at == index and (s is None or sub == s):
                    return True
            return False
        return held

    # -- closure ------------------------------------------------------------------------------
    def _closure(self, state: State, enabled_set: set, enabled: list[Action], seed: Action) -> list[Action]:
        frozen: set[int] = set()
        actions: set[tuple] = set()
        work: list[tuple] = [("a", seed)]
        self._held = {}
        while work:
            kind, item = work.pop()
            if kind == "r":
                if item in frozen:
                    continue
                frozen.add(item)
                work.extend(("a", a) for a in self._current(state, item))
                continue
            if item in actions:
                continue
            actions.add(item)
            if item.kind == "deliver":
                self._hold(item)
            if item in enabled_set:
                work.extend(self._dependents(state, item, frozen, actions))
            else:
                work.extend(self._enablers(state, item))
        return [a for a in enabled if a in actions]

    def _hold(self, action: Deliver) -> None:
        """A delivery in flight joins T: note the epoch from which its issuer's deliveries to the
        same PE are held back by a fence (`_fenced_out`)."""
        d = self.model.deliveries[action.key]
        if d.fenced:
            key = (d.issuer, d.pe)
            if d.epoch < self._held.get(key, d.epoch + 1):
                self._held[key] = d.epoch

    def _fenced_out(self, issuer: int, index: int) -> bool:
        """Whether the delivery of op (issuer, index), in flight or not yet issued, cannot land on
        any path that avoids T: a fence orders it after a delivery of T that is in flight. That
        delivery leaves the in-flight set only by landing, which a path avoiding T never does, so
        the later one stays blocked (`Model.delivery_blocked`) on all such paths."""
        held = self._held
        if not held:
            return False
        d = self.model.deliveries.get((issuer, index))
        return d is not None and d.fenced and held.get((d.issuer, d.pe), d.epoch) < d.epoch

    def action_of(self, key: tuple) -> Action | None:
        """The action that executes op `key` = (rank, index, sub) when it is current."""
        model = self.model
        rank, index, sub = key
        c = model.code[rank][index]
        if c.sync is Sync.P2P:
            cid = model.matches.cid_of.get(key)
            if cid is not None:  # a collective inside a group: its joint step
                return Coll("coll", cid)
            op = c.op if sub is None else c.op.ops[sub]
            skey = key if op.kind == "send" else model.matches.send_of.get(key)
            return P2P("p2p", *skey) if skey is not None and skey in model.matches.recv_of else None
        if c.cid is not None:
            return Coll("coll", c.cid)
        return Step("step", rank, index)

    def _current(self, state: State, rank: int) -> list[Action]:
        """Every pending action of the rank's current op, enabled or not."""
        model = self.model
        pc = state.pcs[rank]
        if pc >= model.nops[rank]:
            return []
        c = model.code[rank][pc]
        subs = [sub for sub, _ in c.members if not (state.group_done[rank] >> sub) & 1] if c.kind == "group" else [None]
        found = (self.action_at(state, (rank, pc, sub)) for sub in subs)
        return [a for a in found if a is not None]

    def action_at(self, state: State, key: tuple) -> Action | None:
        """The action that moves op `key` on in `state`: its landing once that is in flight (a recv,
        a collective member), else `action_of`."""
        return self.model.landing(state, key) or self.action_of(key)

    def _enablers(self, state: State, action: Action) -> list[tuple]:
        model = self.model
        kind = action.kind
        out: list[tuple] = []
        if kind == "p2p":
            skey = action.key
            if skey in model.gate:  # a connection with slots: the recv `slots` messages back must complete
                room = model.gate[skey]
                if not model.posted(state, skey):
                    out.append(("r", skey[0]))
                if room is not None and not model.received(state.pcs, state.group_done, room):
                    out.append(("r", room[0]))
                return out
            for key in (skey, model.matches.recv_of[skey]):
                if not model.posted(state, key):
                    out.append(("r", key[0]))
        elif kind == "coll":
            cid = action.cid
            pcs = state.pcs
            for r, i, _sub in model.coll_members[cid]:
                if pcs[r] != i:
                    out.append(("r", r))
            if model.coll_kind[cid] == "barrier_all":
                out.extend(("a", Deliver("deliver", i, j)) for i, j, _ in state.in_flight)
            elif model.coll_quiets[cid] is not None:  # a team barrier: its members' one-sided deliveries
                quiets = model.coll_quiets[cid]
                out.extend(("a", Deliver("deliver", i, j)) for i, j, _ in state.in_flight
                           if i in quiets and model.deliveries[(i, j)].completes is None)
        elif kind == "deliver":
            issuer, index = action.issuer, action.index
            gated = model.gated.get((issuer, index))
            if gated is not None and not model.posted(state, gated):  # a message waits for its recv
                out.append(("r", gated[0]))
                return out
            d = model.deliveries[(issuer, index)]
            for i, j, _ in state.in_flight:
                if i == issuer and j != index and model.orders_before(model.deliveries[(i, j)], d):
                    out.append(("a", Deliver("deliver", i, j)))
        else:
            rank = action.rank
            c = model.code[rank][action.index]
            if c.sync is Sync.QUIET:
                out.extend(("a", Deliver("deliver", i, j)) for i, j, _ in state.in_flight if i == rank)
            elif c.sync is Sync.WAIT:
                for word in c.awaits.words:  # a thread waits on its rank's words
                    self._word_enablers(state, model.home[rank], word, out)
        return out

    def _word_enablers(self, state: State, rank: int, word: int, out: list) -> None:
        """What may still change signal word `word` of `rank`: in-flight deliveries, and the next
        update op of each rank that has one (or the rank, when that op is not current)."""
        for i, j, _ in state.in_flight:
            footprint = self.model.deliveries[(i, j)].footprint
            if any(o == rank and s == SIG and lo == word for o, s, lo, _h, _m in footprint):
                out.append(("a", Deliver("deliver", i, j)))
        pcs = state.pcs
        for actor, entries in self.by_actor[rank][SIG].items():
            pc = pcs[actor]
            start = bisect.bisect_left(self._keys[(rank, SIG, actor)], pc)
            for index, sub, lo, _hi, mode, _others in entries[start:]:
                if lo == word and mode in SIG_UPDATES:
                    current = self.action_of((actor, index, sub)) if index == pc else None
                    out.append(("a", current) if current else ("r", actor))
                    if index > pc:
                        break

    def _horizon(self, state: State, actor: int, frozen: set[int], actions: set[tuple]) -> int:
        """The last op index the actor may still execute on a path that avoids T (cheap bound:
        its current op if one of its actions is in T, else its first op that needs a frozen rank)."""
        model = self.model
        pc = state.pcs[actor]
        for action in self._current(state, actor):
            if action in actions or self._needs(action, frozen, actor):
                return pc
        joints = model.joints[actor]
        start = bisect.bisect_right(self.joint_index[actor], pc)
        for index, partners in joints[start:]:
            if partners & frozen:
                return index
        return model.nops[actor]

    def _limits(self, state: State, frozen: set[int], actions: set[tuple]) -> list[int]:
        """For schedules with waits: per rank, the first op it cannot complete on a path that
        avoids T, as a least fixpoint. A rank passes an op once the ranks it needs can reach their
        side of it, a wait once its condition holds or an update of the word may still happen
        (an in-flight delivery outside T, or an update op before its issuer's limit)."""
        model = self.model
        pcs = state.pcs
        limit = list(pcs)
        # in-flight deliveries outside T, by the signal word they update; and which ranks have an
        # in-flight delivery inside T (their quiet cannot complete)
        updates: set[tuple[int, int]] = set()
        held: set[int] = set()
        held_one_sided: set[int] = set()  # ... of a one-sided op, not a landing (a team barrier's quiet)
        for i, j, _ in state.in_flight:
            if ("deliver", i, j) in actions:  # a plain tuple equals the `Deliver`: no action built to look it up
                held.add(i)
                if model.deliveries[(i, j)].completes is None:
                    held_one_sided.add(i)
                continue
            if self._fenced_out(i, j):
                continue
            for owner, space, lo, _hi, _mode in model.deliveries[(i, j)].footprint:
                if space == SIG:
                    updates.add((owner, lo))
        context = (updates, held, held_one_sided)
        changed = True
        while changed:
            changed = False
            for rank in range(model.world):
                if rank in frozen:
                    continue
                while limit[rank] < model.nops[rank] and self._completes(state, rank, limit[rank], limit,
                                                                         frozen, actions, context):
                    limit[rank] += 1
                    changed = True
        return limit

    def _completes(self, state: State, rank: int, index: int, limit: list[int], frozen: set[int],
                   actions: set[tuple], context: tuple[set, set]) -> bool:
        updates, held, _held_one_sided = context
        model = self.model
        pcs = state.pcs
        c = model.code[rank][index]
        if index == pcs[rank]:
            for action in self._current(state, rank):
                if action in actions:
                    return False
        if c.sync is Sync.P2P:
            subs = [sub for sub, _ in c.members] if c.kind == "group" else [None]
            for sub in subs:
                key = (rank, index, sub)
                if index == pcs[rank] and ((sub is not None and (state.group_done[rank] >> sub) & 1)
                                           or model.landing(state, key)):
                    continue  # complete, or only its landing is left: it needs no other rank
                if key in model.gate:
                    continue  # a send on a connection with slots may complete alone (an over-approximation)
                cid = model.matches.cid_of.get(key)
                if cid is not None:  # a collective member: every member's rank can reach its op
                    if any(r in frozen or i > limit[r] for r, i, _s in model.coll_members[cid]):
                        return False
                    continue
                other = model.matches.recv_of.get(key) or model.matches.send_of.get(key)
                if other is None or other[0] in frozen or other[1] > limit[other[0]]:
                    return False
            return True
        if c.cid is not None:
            if index == pcs[rank] and model.landing(state, (rank, index, None)):
                return True  # only its landing is left (not in T: checked above)
            for r, i, _sub in model.coll_members[c.cid]:
                if r in frozen or i > limit[r]:
                    return False
            if c.sync is not Sync.BARRIER_ALL:
                return True
            quiets = model.coll_quiets[c.cid]  # a team barrier waits for its members' one-sided deliveries only
            # a quiet waits for one-sided deliveries only: a landing is keyed by its recv (machine.in_flight_from)
            return not (context[2] if quiets is None else context[2] & quiets)
        if c.sync is Sync.QUIET:
            return rank not in context[2]
        if c.sync is Sync.WAIT:
            # conservative for several words: a word that may still change lets the wait complete
            return model.waiting_holds(state, c) or any(
                self._may_update(state, model.home[rank], word, limit, frozen, actions, updates)
                for word in c.awaits.words)
        return True

    def _may_update(self, state: State, rank: int, word: int, limit: list[int], frozen: set[int],
                    actions: set[tuple], updates: set) -> bool:
        """Whether signal word `word` of `rank` may still be updated on a path that avoids T."""
        if (rank, word) in updates:
            return True
        pcs = state.pcs
        for actor, entries in self.by_actor[rank][SIG].items():
            if actor in frozen:
                continue
            start = bisect.bisect_left(self._keys[(rank, SIG, actor)], pcs[actor])
            for e_index, sub, lo, _hi, mode, _others in entries[start:]:
                if lo == word and mode in SIG_UPDATES and e_index <= limit[actor]:
                    if e_index == pcs[actor] and self.action_of((actor, e_index, sub)) in actions:
                        continue
                    if (rank, SIG, actor, e_index, lo, _hi, mode) in self.at_delivery and \
                            self._fenced_out(actor, e_index):
                        continue
                    return True
        return False

    def _needs(self, action: Action, frozen: set[int], actor: int) -> bool:
        kind = action.kind
        if kind == "p2p":
            if action.key in self.model.gate:  # a send on a connection with slots needs no one else
                return action.rank in frozen
            return action.rank in frozen or self.model.matches.recv_of[action.key][0] in frozen
        if kind == "coll":
            return any(key[0] in frozen for key in self.model.coll_members[action.cid])
        return False

    def _dependents(self, state: State, action: Action, frozen: set[int], actions: set[tuple]) -> list[tuple]:
        model = self.model
        pcs, done = state.pcs, state.group_done
        out: list[tuple] = []
        limits = None
        for owner, space, lo, hi, mode in model.footprint(action):
            for actor, entries in self.by_actor[owner][space].items():
                if actor in frozen:
                    continue
                pc = pcs[actor]
                start = bisect.bisect_left(self._keys[(owner, space, actor)], pc)
                limit = None
                for index, sub, elo, ehi, emode, others in entries[start:]:
                    if elo >= hi or lo >= ehi or not dependent(space, mode, emode):
                        continue
                    # a posted access happens once the actor reaches its op, whoever else the op needs
                    posted = (owner, space, actor, index, sub, elo, ehi, emode) in self.posted
                    if others & frozen and not (posted and index > pc):
                        continue  # at pc: the access is posted beside this action, the state shows it
                    if (owner, space, actor, index, elo, ehi, emode) in self.at_delivery and \
                            self._fenced_out(actor, index):
                        continue  # its delivery cannot land on a path that avoids T
                    if limit is None:
                        if self.has_waits:
                            if limits is None:
                                limits = self._limits(state, frozen, actions)
                            reach = limits[actor]
                            # at its limit a rank can still run single members of a group
                            row = model.code[actor]
                            limit = reach if row and row[min(reach, len(row) - 1)].kind == "group" else reach - 1
                        else:
                            limit = reach = self._horizon(state, actor, frozen, actions)
                    if index == model.nops[actor]:
                        # the caller's read of the actor's outputs at its end (`Model.end_reads`): it
                        # happens on a path avoiding T if the actor can finish there. Already
                        # finished: the read is posted beside this action, and the state itself
                        # shows the conflict (`check.properties`). Not if the static order puts
                        # the action before the actor's end: then the end needs the action
                        if pc < index <= reach and not self._ordered((actor, index, None, emode, ISSUE), action):
                            out.append(("r", actor))
                        break
                    if index > limit:
                        if posted and index <= reach:  # the actor arrives at the op on a path avoiding T
                            out.append(("r", actor))
                            break
                        if index <= reach:
                            continue
                        break
                    if index == pc:
                        if sub is not None and (done[actor] >> sub) & 1:
                            continue
                        current = self.action_at(state, (actor, index, sub))
                        if current is None or current in actions:
                            continue
                        out.append(("a", current))
                    else:
                        out.append(("r", actor))
                        break
            for action_d, dlo, dhi, dmode in self._in_flight_on(state).get((owner, space), ()):
                if action_d not in actions and dlo < hi and lo < dhi and dependent(space, mode, dmode) \
                        and not self._fenced_out(action_d.issuer, action_d.index):
                    out.append(("a", action_d))
        return out

    def _in_flight_on(self, state: State) -> dict:
        """In-flight deliveries by the (rank, space) they touch; built once per state."""
        if self._flight_state is not state:
            table: dict[tuple[int, int], list] = {}
            for i, j, _ in state.in_flight:
                action = Deliver("deliver", i, j)
                for owner, space, lo, hi, mode in self.model.deliveries[(i, j)].footprint:
                    table.setdefault((owner, space), []).append((action, lo, hi, mode))
            self._flight_state, self._flight_table = state, table
        return self._flight_table


def _keys_held(model: Model, action: Action) -> list[tuple]:
    """The ops (rank, index, sub) whose ranks `action` holds at that op: a step's op, a joint
    step's participants, a landing's recv or member (sub None: the whole op)."""
    kind = action.kind
    if kind == "step":
        return [(action.rank, action.index, None)]
    if kind == "p2p":
        skey = action.key
        if skey in model.gate:  # a connection with slots: the send alone (the recv takes it later)
            return [skey]
        return [skey, model.matches.recv_of[skey]]
    if kind == "coll":
        return list(model.coll_members[action.cid])
    return [model.deliveries[action.key].completes]


def _ranks_of(model: Model, action: Action) -> set[int]:
    """The ranks an action holds at their current op (none for a one-sided delivery)."""
    if action.kind == "deliver" and action.index >= 0:
        return set()
    return {rank for rank, _index, _sub in _keys_held(model, action)}
