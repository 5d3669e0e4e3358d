"""Calls without end: a proof that a library's calls are safe however many run, from a few of them.

A library that never resets its signal words runs call after call on the same words and buffers;
checking K calls says nothing of call K + 1. What this module proves instead, for the periodic model
of the calls (`lowering.repeat.periodic_caller`: call k + P is call k with every signal value one
epoch on, P = 1, or 2 with two copies by call parity), is that the reachable states of the endless
run are, up to a shift, the reachable states of its first K calls:

- **Shift.** A state whose every rank is in call b or later, with nothing issued before call b still
  in flight (b a multiple of P), is shifted by b calls: each rank's position and each delivery's op
  move back b calls, the caller's inputs of call j become those of call j - b, and each signal word
  moves back b / P epochs. Because the calls are periodic, a shifted state does next exactly what
  the state did (same ops, signal values compared against targets moved by the same epochs).
- **Canonical form.** What can no longer matter is forgotten: a signal word that is only ever set
  holds, once shifted, a value at most the epoch's base, which no wait still to come can tell apart
  from 0 (every wait on it is `ge c`, `gt c` or `eq c` for c + epoch * M, c >= 1, or `ge 0`; the
  repeat lowering refuses any other); a value built from data of calls before b (or from a buffer's
  contents before the first call) is "stale" whatever it is: no step reads a value to decide
  anything (no wait on data words), and any output holding one is a wrong result. Two states with
  one canonical form therefore have the same futures, up to the shift, and the same verdicts.
- **The argument.** Let C be the canonical forms of the states of the K-call run that need no shift
  (b = 0). If (1) the checker verifies the K-call run (races, deadlocks, results, as any schedule),
  (2) in every state of C no rank has finished its K calls (the run is not yet cut short there:
  every step the endless run could take from it is a step of the K-call run), (3) every state of
  the K-call run that can be shifted (b >= P) shifts into C, and (4) every call's outputs, when the
  caller reads them, are the call's expected values with the same bits in every state, then every
  state of the endless run shifts into C (induction over its steps: a step from a state of C is a
  step of the K-call run, by (2), to a state that is in C or shifts into it, by (3)), so none of
  its states has a race, a deadlock or a wrong output that the K-call run's check would not have
  reported.

The exploration for (2)-(4) visits every state of the K-call run (no partial-order reduction: (3)
speaks of every state, not of the representatives a reduction keeps), so it is bounded by
`max_states`; a run that stops there is "incomplete", never verified. K starts at P + 2 and grows
while (2) or (3) fails for want of calls (up to `max_calls`).
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from ..semantics.budget import Deadline
from ..semantics.values import COMMUTATIVE
from . import check, compile_schedule
from .properties import expected_table

STALE = ("stale",)


@dataclass(frozen=True)
class Unbounded:
    """The verdict: `verified` (every number of calls), or `reason` says what failed or stopped it;
    `calls` the K explored, `states` the states of its run visited."""

    verified: bool
    calls: int
    states: int
    seconds: float
    reason: str | None = None


class _Proof:
    def __init__(self, periodic, deadline: Deadline, max_states: int):
        self.p = periodic
        self.deadline = deadline
        self.max_states = max_states
        self.model = model = compile_schedule(periodic.sched)
        self.terms = model.values.terms
        self.calls, self.period = periodic.calls, periodic.period
        self.blocks = [periodic.blocks[r] for r in range(model.world)]
        self.callbuf = {name: (base, j) for base, names in periodic.inputs.items() for j, name in enumerate(names)}
        layout = model.layout
        # the atoms of the caller's per-call input buffers: never written (the caller only copies from
        # them), so they are left out of the canonical form
        self.kept = []
        for r in range(model.world):
            keep = [a for a, (buf, _s, _e) in enumerate(layout.atom_names[r]) if buf not in self.callbuf]
            self.kept.append(keep)
        self.words = []  # per rank: per signal word, (kind, step) or None
        for r in range(model.world):
            row = [None] * model.sig_count
            for decl in model.sched.programs[r].signals:
                for i in range(decl.count):
                    row[model.sig_offset[decl.name] + i] = periodic.steps.get((r, decl.name, i))
            self.words.append(row)
        self.mm = model.members_max
        self.memo: dict[tuple[int, int], tuple] = {}
        # expected values of a call, named by its own inputs as if it were call 0
        first = {names[-1]: names[0] for names in periodic.inputs.values()}
        self.expected = {place: _renamed(norm, first) for place, (norm, _n, _e) in expected_table(model).items()}
        self.bits: dict[tuple[int, int], tuple] = {}

    # -- positions
    def call_of(self, rank: int, index: int) -> int:
        return bisect.bisect_right(self.blocks[rank], index) - 1

    def base(self, state) -> int:
        low = min(self.call_of(r, pc) for r, pc in enumerate(state.pcs))
        for issuer, index, _payload in state.in_flight:
            low = min(low, self.call_of(issuer, self._op_of(index)))
        return low - low % self.period

    def _op_of(self, index: int) -> int:
        return index if index >= 0 else (-1 - index) // self.mm

    def _shift_key(self, issuer: int, index: int, by: int) -> int:
        if index >= 0:
            return index - by
        op, sub = divmod(-1 - index, self.mm)
        return -1 - ((op - by) * self.mm + sub)

    # -- values
    def value(self, vid: int, b: int) -> tuple:
        key = (vid, b)
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self._value(vid, b)
        return found

    def _value(self, vid: int, b: int) -> tuple:
        t = self.terms[vid]
        kind = t[0]
        if kind == "in":
            hit = self.callbuf.get(t[2])
            if hit is None or hit[1] < b:  # a buffer's contents before the first call, or an earlier call's
                return STALE
            base, j = hit
            return ("in", t[1], self.p.inputs[base][j - b], t[3], t[4])
        if kind == "const":
            return t
        if kind == "op":
            kids = tuple(self.value(c, b) for c in t[2])
            if STALE in kids:
                return STALE
            return ("op", t[1], tuple(sorted(kids, key=repr)) if t[1] in COMMUTATIVE else kids)
        if kind == "opaque":
            _, name, rank, index, k, children = t
            if self.call_of(rank, index) < b:
                return STALE
            kids = tuple(self.value(c, b) for c in children)
            return STALE if STALE in kids else ("opaque", name, rank, index - self.blocks[rank][b], k, kids)
        if kind == "atomic":
            _, op, operand, children = t
            kids = tuple(self.value(c, b) for c in children)
            return STALE if STALE in kids else ("atomic", op, operand, kids)
        return t

    def canonical(self, state, b: int):
        """The state shifted back `b` calls, in canonical form (None: a word that cannot be shifted)."""
        e = b // self.period
        pcs = tuple(pc - self.blocks[r][b] for r, pc in enumerate(state.pcs))
        mem = tuple(tuple(self.value(row[a], b) for a in self.kept[r]) for r, row in enumerate(state.memory))
        sigs = []
        for r, row in enumerate(state.signals):
            out = []
            for w, v in enumerate(row):
                info = self.words[r][w]
                if info is not None and e:
                    kind, step = info
                    if kind == "set":
                        v = v - e * step if v > e * step else 0
                    else:
                        v -= e * step
                        if v < 0:
                            return None
                out.append(v)
            sigs.append(tuple(out))
        flight = tuple(sorted(
            (i, self._shift_key(i, j, self.blocks[i][b]),
             None if payload is None else tuple(self.value(v, b) for v in payload))
            for i, j, payload in state.in_flight))
        return (pcs, state.group_done, mem, tuple(sigs), flight)

    # -- the outputs of a call, when the caller reads them
    def outputs(self, state) -> str | None:
        for r, pc in enumerate(state.pcs):
            reads = self.p.reads[r]
            j = self.call_of(r, pc)
            if j >= self.calls or reads[j] != pc:
                continue
            for (rank, atom), want in self.expected.items():
                if rank != r:
                    continue
                got = self.value(state.memory[r][atom], j)
                if got is STALE or _normal(got) != want:
                    name = self.model.layout.atom_names[r][atom]
                    return (f"call {j}: rank {r}'s output {name[0]}[{name[1]}:{name[2]}] is not that call's result "
                            "when the caller reads it")
                seen = self.bits.setdefault((r, atom), got)
                if seen != got:
                    name = self.model.layout.atom_names[r][atom]
                    return (f"rank {r}'s output {name[0]}[{name[1]}:{name[2]}] is summed in different orders in "
                            "different calls or interleavings: not bitwise reproducible")
        return None

    # -- the search
    def run(self) -> tuple[str | None, int]:
        model = self.model
        init = model.initial()
        seen = {init}
        queue = deque([init])
        base_forms: set = set()
        shifted: list = []
        nops = model.nops
        while queue:
            state = queue.popleft()
            if len(seen) & 1023 == 0 and self.deadline.expired():
                return "incomplete: the time ran out while exploring every state of the calls", len(seen)
            b = self.base(state)
            form = self.canonical(state, b)
            if form is None:
                return "a signal word that is added to holds less than its epoch's base", len(seen)
            if b == 0:
                if any(pc >= n for pc, n in zip(state.pcs, nops)):
                    return f"more calls needed: a rank finished {self.calls} calls while call 0 ran", len(seen)
                base_forms.add(form)
            else:
                shifted.append(form)
            problem = self.outputs(state)
            if problem:
                return problem, len(seen)
            for action in model.enabled(state):
                nxt = model.apply(state, action)
                if nxt not in seen:
                    seen.add(nxt)
                    if len(seen) > self.max_states:
                        return (f"incomplete: more than {self.max_states} states in {self.calls} calls "
                                "(every state is visited, no reduction)"), len(seen)
                    queue.append(nxt)
        for form in shifted:
            if form not in base_forms:
                return (f"more calls needed, or the calls drift: a state of a later call is none of the first "
                        f"{self.period} call(s)' states, shifted"), len(seen)
        return None, len(seen)


def _renamed(norm: tuple, names: dict[str, str]) -> tuple:
    if norm[0] == "in":
        return ("in", norm[1], names.get(norm[2], norm[2]), norm[3], norm[4])
    if norm[0] == "op":
        return ("op", norm[1], tuple(sorted((_renamed(c, names) for c in norm[2]), key=repr)))
    if norm[0] in ("opaque", "atomic"):
        return norm[:-1] + (tuple(_renamed(c, names) if isinstance(c, tuple) else c for c in norm[-1]),)
    return norm


def _normal(term: tuple) -> tuple:
    """`Values.normal` on a canonical term: same-op commutative chains flattened, operands sorted."""
    if term[0] == "op" and term[1] in COMMUTATIVE:
        op, items, stack = term[1], [], list(term[2])
        while stack:
            child = stack.pop()
            if child[0] == "op" and child[1] == op:
                stack.extend(child[2])
            else:
                items.append(_normal(child))
        return ("op", op, tuple(sorted(items, key=repr)))
    if term[0] in ("opaque", "atomic"):
        return term[:-1] + (tuple(_normal(c) if isinstance(c, tuple) else c for c in term[-1]),)
    return term


def check_unbounded(make: Callable[[int], object], period: int, *, timeout: float | None = 120.0,
                    max_states: int = 2_000_000, max_calls: int | None = None) -> Unbounded:
    """Whether the calls that `make(K)` models (`lowering.repeat.periodic_caller` of K calls) are safe
    for any number of calls (see the module's docstring). K from `period + 2` up to `max_calls`
    (default `period + 6`) while more calls are what is missing."""
    start = time.perf_counter()
    deadline = Deadline(timeout)
    last = max_calls or period + 6
    calls, states, reason = period + 2, 0, None
    while calls <= last:
        periodic = make(calls)
        result = check(periodic.sched, timeout=deadline.remaining(), max_states=max_states)
        if not (result.verdict == "verified" and result.complete):
            first = result.errors[0] if result.errors else None
            if first is None:
                return Unbounded(False, calls, result.states, time.perf_counter() - start,
                                 f"incomplete: the check of {calls} calls did not finish (stopped by "
                                 f"{result.stopped_by})")
            return Unbounded(False, calls, result.states, time.perf_counter() - start,
                             f"{calls} calls with the caller's accesses between them: {result.verdict}: "
                             f"{first.kind}: {first.message}")
        reason, states = _Proof(periodic, deadline, max_states).run()
        if reason is None:
            return Unbounded(True, calls, states, time.perf_counter() - start)
        if not reason.startswith("more calls needed"):
            break
        calls += period
    return Unbounded(False, calls if reason is None or not reason.startswith("more") else calls - period, states,
                     time.perf_counter() - start, reason)
