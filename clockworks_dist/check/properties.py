"""The properties checked at every visited state: data races (co-enabled conflicting actions),
deadlocks and final values (terminal states). Each is preserved by the reduction (see `por`)."""

from __future__ import annotations

from collections import Counter
from typing import Callable

from .. import ir
from .actions import (
    blocked_ops, describe_action, future_signal_writers, key_on, make_step, region_text, replay, signal_text,
)
from ..semantics.budget import UNBOUNDED, Deadline
from ..semantics.match import op_ref
from ..semantics.machine import MEM, Model, State, conflicting
from ..semantics.rules import Sync
from .result import OpRef, Violation

MAX_PER_KIND = 3


def expected_atoms(model: Model, deadline: Deadline = UNBOUNDED) -> dict[tuple[int, int], tuple[tuple, ir.Expectation]]:
    """(rank, atom) -> (normal form of the expected value, its expectation)."""
    return {place: (norm, exp) for place, (norm, _number, exp) in expected_table(model, deadline).items()}


def expected_table(model: Model, deadline: Deadline = UNBOUNDED) -> dict[tuple[int, int], tuple]:
    """(rank, atom) -> (normal form of the expected value, its `Values.normal_number`, its
    expectation). An all-reduce expects on every rank what it expects on each other one: each
    distinct (contributions, offset, length) is evaluated once and shared."""
    values, layout = model.values, model.layout
    out: dict[tuple[int, int], tuple] = {}
    sources: dict[tuple, int] = {}  # the contributions of an expectation, numbered
    known: dict[tuple, tuple[tuple, int]] = {}
    for exp in model.sched.expect:
        deadline.check("evaluating the postcondition")
        contribs = tuple((c.rank, c.region.buffer, c.region.start) for c in exp.contributions)
        source = sources.setdefault(contribs, len(sources))
        lo, hi = layout.span(exp.rank, exp.region)
        for atom in range(lo, hi):
            _buf, start, stop = layout.atom_names[exp.rank][atom]
            key = (source, exp.op, start - exp.region.start, stop - start)
            found = known.get(key)
            if found is None:
                norm = _expected_normal(model, contribs, exp.op, start - exp.region.start, stop - start)
                found = known[key] = (norm, values.normal_number(norm))
            out[(exp.rank, atom)] = (found[0], found[1], exp)
    return out


def _expected_normal(model: Model, contribs: tuple, op: str, shift: int, length: int) -> tuple:
    """The normal form of op over the contributions' atoms at `shift`, `length` elements each."""
    values, layout = model.values, model.layout
    terms = []
    for rank, buffer, start in contribs:
        atom = layout.atom(rank, buffer, start + shift)
        name = layout.atom_names[rank][atom]
        assert name[1] == start + shift and name[2] == start + shift + length, \
            "atoms are aligned across transfers and postconditions"
        terms.append(values.normal(values.initial(rank, *name)))
    if len(terms) == 1:
        return terms[0]
    return ("op", op, tuple(sorted(terms, key=repr)))


class Observer:
    """Collects violations while the search visits states."""

    def __init__(self, model: Model, path_to: Callable[[State], list[tuple]], deadline: Deadline = UNBOUNDED):
        self.model = model
        self.path_to = path_to
        self.found: dict[tuple, Violation] = {}
        self.per_kind: Counter = Counter()
        self.expected = expected_table(model, deadline)
        self.outputs = self._output_atoms()
        self.finals: dict[tuple[int, int], dict[int, int]] = {}  # output atom -> normal number -> a value
        self.terminals = 0

    def _output_atoms(self) -> list[tuple[int, int]]:
        atoms = set(self.expected)
        for prog in self.model.sched.programs:
            for decl in prog.buffers:
                if decl.role in ("output", "inout"):
                    lo, hi = self.model.layout.span(prog.rank, ir.Region(buffer=decl.name, start=0, stop=decl.count))
                    atoms.update((prog.rank, a) for a in range(lo, hi))
        return sorted(atoms)

    def violations(self) -> list[Violation]:
        return list(self.found.values())

    def _add(self, key: tuple, kind: str, make: Callable[[], Violation]) -> None:
        if key in self.found or self.per_kind[kind] >= MAX_PER_KIND:
            return
        self.per_kind[kind] += 1
        self.found[key] = make()

    def _trace(self, state: State):
        return tuple(make_step(self.model, a) for a in self.path_to(state))

    # -- per state ----------------------------------------------------------------------------
    def visit(self, state: State, enabled: list[tuple]) -> None:
        """Check a state whose enabled actions are `enabled`, from scratch."""
        if enabled:
            self._races(state, enabled)
        else:
            self.terminal(state)

    def terminal(self, state: State) -> None:
        """A state where nothing is enabled: the end of an execution, or a deadlock."""
        self.terminals += 1
        if self.model.done(state):
            self._final(state)
        else:
            self._deadlock(state)

    def _races(self, state: State, enabled: list[tuple]) -> None:
        by_owner: dict[int, list[tuple]] = {}
        sig_races = self.model.sig_races
        for action in enabled:
            for owner, space, lo, hi, mode in self.model.footprint(action):
                if space == MEM:
                    by_owner.setdefault(owner, []).append((lo, hi, mode, action))
                elif sig_races:  # a signal word of `owner`, as owner -1 - owner (`race_pair`)
                    by_owner.setdefault(-1 - owner, []).append((lo, hi, mode, action))
        posted = self.model.posted_accesses(state)
        if not posted and len(enabled) < 2:
            return
        for post, accesses in posted:  # accesses that last until the op completes
            for owner, space, lo, hi, mode in accesses:
                if space == MEM and owner in by_owner:
                    by_owner[owner].append((lo, hi, mode, post))
                elif space != MEM and sig_races and -1 - owner in by_owner:
                    by_owner[-1 - owner].append((lo, hi, mode, post))
        for owner, accesses in by_owner.items():
            if len(accesses) < 2:
                continue
            # sweep by start: only intervals still open can overlap the next one
            accesses.sort(key=lambda a: a[0])
            open_: list[tuple] = []
            for second in accesses:
                open_ = [a for a in open_ if a[1] > second[0]]
                for first in open_:
                    self.race_pair(state, owner, first, second)
                open_.append(second)

    def race_pair(self, state, owner: int, first: tuple, second: tuple) -> None:
        """Two overlapping accesses (lo, hi, mode, action) to `owner`'s memory, both possible in
        `state` (an enabled action, or a posted op's pending access): a data race if they conflict
        (an enabled action against a posted op that is not its own)."""
        lo1, hi1, m1, a1 = first
        lo2, hi2, m2, a2 = second
        if a1 == a2 or not conflicting(m1, m2):
            return
        model = self.model
        if owner < 0:  # a signal word of rank -1 - owner (a plain store races on it)
            self._sig_race(state, -1 - owner, first, second)
            return
        for end, other in ((first, second), (second, first)):
            if end[3][0] == "post" and model.is_end(end[3][1], end[3][2]):
                if other[3][0] != "post":
                    self._unfinished(state, owner, end, other)
                return
        if a1[0] == "post" and (a2[0] == "post" or self.model.own_action(a1, a2)) or \
                a2[0] == "post" and self.model.own_action(a2, a1):
            return  # only an enabled action races with a posted op, and not its own step
        k1, k2 = key_on(self.model, a1, owner), key_on(self.model, a2, owner)
        key = ("data_race", frozenset((k1, k2)))
        self._add(key, "data_race", lambda: self._race_violation(
            state, owner, (lo1, hi1, m1, a1, k1), (lo2, hi2, m2, a2, k2)))

    def _unfinished(self, state, owner: int, end: tuple, other: tuple) -> None:
        """`owner` has finished its program, so the caller reads its outputs (`Model.end_reads`),
        while `other`, enabled, can still write one of them: the output is not final."""
        lo, hi, _mode, action = other
        key = key_on(self.model, action, owner)
        self._add(("unfinished_output", key, owner), "unfinished_output",
                  lambda: self._unfinished_violation(state, owner, max(lo, end[0]), min(hi, end[1]), action, key))

    def _unfinished_violation(self, state, owner: int, lo: int, hi: int, action: tuple, key) -> Violation:
        model = self.model
        ref = op_ref(model.sched, key)
        region = region_text(model, owner, lo, hi)
        last = model.nops[owner]
        ended = (f"after {op_ref(model.sched, (owner, last - 1, None)).loc}" if last
                 else "with an empty program")
        message = (f"output not final: rank {owner} has finished its program ({ended}), so the caller reads its "
                   f"{region}, but {describe_action(model, action)} ({ref.loc}) can still write it. Order it "
                   f"before rank {owner}'s end: have rank {owner} wait for a signal that lands with it "
                   "(put_signal and wait_until), or have both ranks call barrier_all() after it (it completes "
                   "every delivery first)")
        return Violation(kind="unfinished_output", message=message, ranks=tuple(sorted({owner, ref.rank})),
                         ops=(ref,), trace=self._trace(state), details={"rank": owner, "region": region})

    def _sig_race(self, state, owner: int, first: tuple, second: tuple) -> None:
        a1, a2 = first[3], second[3]
        if a1[0] == "post" and (a2[0] == "post" or self.model.own_action(a1, a2)) or \
                a2[0] == "post" and self.model.own_action(a2, a1):
            return
        k1, k2 = key_on(self.model, a1, owner), key_on(self.model, a2, owner)
        self._add(("data_race", frozenset((k1, k2))), "data_race", lambda: self._sig_race_violation(
            state, owner, first[0], (first[2], a1, k1), (second[2], a2, k2)))

    def _sig_race_violation(self, state, owner: int, word: int, first: tuple, second: tuple) -> Violation:
        model, sched = self.model, self.model.sched
        text = signal_text(model, word)
        parts, refs = [], []
        for mode, action, key in (first, second):
            ref = op_ref(sched, key)
            refs.append(ref)
            who = describe_action(model, action) if action[0] == "deliver" else f"{ref.loc} rank {ref.rank}: {ref.text}"
            parts.append(f"{who} {mode.verb} {text}")
        message = (f"data race on rank {owner}'s signal word {text}: " + "; ".join(parts)
                   + ". Both are enabled in the same state, so they can happen in either order; a plain store to a "
                     "signal word is not atomic (reset the word only once no update can be in flight to it: after a "
                     "signal back that the updater waits on, or a barrier; or update it with signal_op)")
        return Violation(kind="data_race", message=message, ranks=tuple(sorted({owner, refs[0].rank, refs[1].rank})),
                         ops=tuple(refs), trace=self._trace(state), details={"rank": owner, "region": text})

    def _race_violation(self, state, owner, first, second) -> Violation:
        model, sched = self.model, self.model.sched
        parts, refs = [], []
        for lo, hi, mode, action, key in (first, second):
            ref = op_ref(sched, key)
            refs.append(ref)
            verb = mode.verb
            if action[0] == "deliver":
                who = describe_action(model, action)
            elif action[0] == "post":
                who = (f"{ref.loc} rank {ref.rank}: {ref.text}, posted and not complete "
                       "(it may still access its buffers),")
            else:
                who = f"{ref.loc} rank {ref.rank}: {ref.text}"
            parts.append(f"{who} {verb} {region_text(model, owner, lo, hi)}")
        lo = max(first[0], second[0])
        hi = min(first[1], second[1])
        message = (f"data race on rank {owner}'s {region_text(model, owner, lo, hi)}: " + "; ".join(parts)
                   + ". Both are enabled in the same state, so they can happen in either order "
                     "(order them with a fence/quiet/barrier, a signal the reader waits on, or separate buffers)")
        return Violation(kind="data_race", message=message, ranks=tuple(sorted({owner, refs[0].rank, refs[1].rank})),
                         ops=tuple(refs), trace=self._trace(state),
                         details={"rank": owner, "region": region_text(model, owner, lo, hi)})

    def _deadlock(self, state: State) -> None:
        model = self.model
        blocked = {r: blocked_ops(model, state, r) for r in range(model.world) if state.pcs[r] < model.nops[r]}
        # a rank with threads waits at its end for them: shown only when none of its threads is blocked
        ends = {home for actor, home in enumerate(model.home) if actor != home}
        for r in ends & set(blocked):
            if any(model.home[a] == r and a != r for a in blocked):
                del blocked[r]
        key = ("deadlock", frozenset((r, o.index, o.sub) for r, ops in blocked.items() for o in ops))
        self._add(key, "deadlock", lambda: self._deadlock_violation(state, blocked))

    def _waits_for(self, state: State, rank: int) -> tuple[list[int], str]:
        model = self.model
        pc = state.pcs[rank]
        c = model.code[rank][pc]
        if c.sync is Sync.P2P:
            peers, full = [], []
            for sub, m in (c.members if c.kind == "group" else [(None, c.op)]):
                if sub is not None and (state.group_done[rank] >> sub) & 1:
                    continue
                key = (rank, pc, sub)
                if key in model.matches.cid_of:  # a collective in the group: its members to arrive
                    peers += [k[0] for k in model.coll_members[model.matches.cid_of[key]]
                              if k[0] != rank and not model.arrived(state.pcs, state.group_done, k)]
                    continue
                if key in model.gate:  # a connection with slots: its FIFO is full
                    peers.append(model.gate[key][0])
                    full.append(f"its connection to rank {m.peer} is full: {m.slots} message(s) not yet received")
                    continue
                other = model.matches.recv_of.get(key) or model.matches.send_of.get(key)
                if other is not None and not model.posted(state, other):
                    peers.append(other[0])
            if full and len(full) == len(peers):
                return sorted(set(peers)), "; ".join(full)
            return sorted(set(peers)), f"its matching {'recv' if c.kind == 'send' else 'op'}"
        if c.cid is not None:
            missing = [r for r, i, _sub in model.coll_members[c.cid] if state.pcs[r] != i]
            return missing, "the other members to arrive"
        if c.sync is Sync.WAIT:
            words = c.awaits[0]
            home = model.home[rank]  # a thread waits on its rank's words
            writers = sorted({w for word in words for w in future_signal_writers(model, state, home, word)})
            shown = ", ".join(f"{signal_text(model, word)} is {state.signals[home][word]}" for word in words)
            return writers, shown + ("" if writers else ", and no rank can still change " +
                                     ("it" if len(words) == 1 else "them"))
        return [], "nothing"

    def _deadlock_violation(self, state: State, blocked: dict[int, list[OpRef]]) -> Violation:
        edges = {r: self._waits_for(state, r) for r in blocked}
        cycle = _find_cycle({r: set(e[0]) & set(blocked) for r, e in edges.items()})
        lines = []
        for r, ops in blocked.items():
            peers, why = edges[r]
            on = f" waiting for rank(s) {', '.join(map(str, peers))}" if peers else ""
            lines.append(f"rank {r} blocks in {' and '.join(f'{o.text} at {o.loc}' for o in ops)}{on} ({why})")
        done = [r for r in range(self.model.world) if r not in blocked and state.pcs[r] >= self.model.nops[r]]
        head = "deadlock: " + ("wait-for cycle " + " -> ".join(map(str, cycle + cycle[:1])) if cycle
                               else "no rank can move")
        message = head + "; " + "; ".join(lines) + (f"; rank(s) {', '.join(map(str, done))} finished" if done else "")
        ranks = tuple(cycle) if cycle else tuple(blocked)
        ops = tuple(o for r in (cycle or list(blocked)) for o in blocked[r])
        details = {"blocked": {r: [o.text for o in ops] for r, ops in blocked.items()}}
        if cycle:  # a deadlock on a wait nobody can satisfy has no cycle to show
            details["cycle"] = cycle
        return Violation(kind="deadlock", message=message, ranks=ranks, ops=ops, trace=self._trace(state),
                         details=details)

    # -- final values -------------------------------------------------------------------------
    def _final(self, state: State) -> None:
        model, values = self.model, self.model.values
        mem = state.memory
        for (rank, atom), (norm, number, exp) in self.expected.items():
            actual = mem[rank][atom]
            if values.normal_id(actual) != number:
                key = ("wrong_result", rank, exp.region.buffer)
                self._add(key, "wrong_result", lambda: self._wrong(state, rank, atom, norm, exp))
        # every distinct final value of every output, over all terminal states: a pair with
        # different terms is nondeterminism; the same terms associated differently is not bitwise
        # reproducible (comparing with every earlier value, not just the first, keeps the answer
        # independent of the search order)
        for (rank, atom) in self.outputs:
            actual = mem[rank][atom]
            seen = self.finals.setdefault((rank, atom), {})
            number = values.normal_id(actual)
            if seen and number not in seen:
                first = next(iter(seen.values()))
                key = ("nondeterministic_result", rank, model.layout.atom_names[rank][atom][0])
                self._add(key, "nondeterministic_result", lambda: self._nondeterministic(state, rank, atom, first))
            elif number in seen and seen[number] != actual:
                key = ("not_bitwise_reproducible", rank, model.layout.atom_names[rank][atom][0])
                self._add(key, "not_bitwise_reproducible",
                          lambda: self._run_to_run(state, rank, atom, seen[number]))
            seen.setdefault(number, actual)
        self._cross_rank_bitwise(state)

    def _writer(self, state: State, rank: int, atom: int) -> OpRef | None:
        _, writer = replay(self.model, self.path_to(state))
        key = writer.get((rank, atom))
        return op_ref(self.model.sched, key) if key else None

    def _atom(self, rank: int, atom: int) -> str:
        buf, start, stop = self.model.layout.atom_names[rank][atom]
        return f"{buf}[{start}:{stop}] on rank {rank}"

    def _wrong(self, state, rank, atom, norm, exp) -> Violation:
        values = self.model.values
        actual = state.memory[rank][atom]
        got = values.normal(actual)
        diff = _multiset_diff(got, norm, values)
        writer = self._writer(state, rank, atom)
        ops = (writer,) if writer else ()
        where = f" (last written by {writer.loc} rank {writer.rank}: {writer.text})" if writer else ""
        message = (f"wrong result: {self._atom(rank, atom)} = {values.render_normal(got)}, expected "
                   f"{values.render_normal(norm)}{diff}{where} [{exp.label}]")
        return Violation(kind="wrong_result", message=message, ranks=(rank,), ops=ops, trace=self._trace(state),
                         details={"rank": rank, "atom": self._atom(rank, atom), "actual": values.render_normal(got),
                                  "expected": values.render_normal(norm)})

    def _nondeterministic(self, state, rank, atom, first) -> Violation:
        values = self.model.values
        actual = state.memory[rank][atom]
        writer = self._writer(state, rank, atom)
        return Violation(
            kind="nondeterministic_result", ranks=(rank,), ops=(writer,) if writer else (), trace=self._trace(state),
            message=f"nondeterministic result: {self._atom(rank, atom)} ends as "
                    f"{values.render_normal(values.normal(first))} in one execution and as "
                    f"{values.render_normal(values.normal(actual))} in this one",
            details={"first": values.render(first), "other": values.render(actual)})

    def _run_to_run(self, state, rank, atom, first) -> Violation:
        values = self.model.values
        actual = state.memory[rank][atom]
        writer = self._writer(state, rank, atom)
        return Violation(
            kind="not_bitwise_reproducible", ranks=(rank,), ops=(writer,) if writer else (), trace=self._trace(state),
            message=f"not bitwise reproducible: {self._atom(rank, atom)} holds the right terms but associated as "
                    f"{values.render(first)} in one execution and {values.render(actual)} in another")

    def _cross_rank_bitwise(self, state: State) -> None:
        """Ranks that should hold the same reduction but associate it differently."""
        values = self.model.values
        groups: dict[int, list[tuple[int, int]]] = {}
        for (rank, atom), (norm, number, _exp) in self.expected.items():
            if norm[0] == "op":
                groups.setdefault(number, []).append((rank, atom))
        for number, places in groups.items():
            trees = {}
            for rank, atom in places:
                actual = state.memory[rank][atom]
                if values.normal_id(actual) == number:
                    trees.setdefault(actual, (rank, atom))
            if len(trees) > 1:
                (t1, (r1, a1)), (t2, (r2, a2)) = list(trees.items())[:2]
                buf = self.model.layout.atom_names[r1][a1][0]
                key = ("not_bitwise_reproducible", "ranks", buf)

                def make(t1=t1, t2=t2, r1=r1, a1=a1, r2=r2, a2=a2):
                    w1, w2 = self._writer(state, r1, a1), self._writer(state, r2, a2)
                    return Violation(
                        kind="not_bitwise_reproducible", ranks=(r1, r2), ops=tuple(w for w in (w1, w2) if w),
                        trace=self._trace(state),
                        message=f"not bitwise reproducible across ranks: {self._atom(r1, a1)} = {values.render(t1)} "
                                f"but {self._atom(r2, a2)} = {values.render(t2)}: same terms, different association "
                                "order, so floating-point results can differ between ranks")
                self._add(key, "not_bitwise_reproducible", make)


def _multiset_diff(got: tuple, want: tuple, values) -> str:
    def items(norm):
        return Counter(norm[2]) if norm[0] == "op" else Counter([norm])
    have, need = items(got), items(want)
    extra, missing = have - need, need - have
    parts = []
    for term, count in extra.items():
        parts.append(f"{values.render_normal(term)} counted {have[term]} times" if term in need
                     else f"{values.render_normal(term)} should not be there")
    for term in missing:
        parts.append(f"{values.render_normal(term)} missing")
    return f" ({'; '.join(parts)})" if parts else ""


def _find_cycle(graph: dict[int, set[int]]) -> list[int]:
    """A cycle in the wait-for graph, as a list of ranks, or []."""
    color: dict[int, int] = {}
    stack: list[int] = []

    def visit(node: int) -> list[int]:
        color[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if color.get(nxt) == 1:
                return stack[stack.index(nxt):]
            if nxt not in color:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        color[node] = 2
        return []

    for node in sorted(graph):
        if node not in color:
            found = visit(node)
            if found:
                return list(found)
    return []
