"""The wait check: a wait that no subset and order of the signal updates able to reach it can
satisfy never returns (`unsatisfiable_wait`): a wait_until, a wait_until_all one of whose words
cannot hold, a wait_until_any none of whose words can. The same question, asked with z3, orders the static
happens-before order's waits by value (`static_order`)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Callable

from ... import ir
from ...semantics.arithmetic import MASK64
from ...semantics.budget import UNBOUNDED, Deadline
from ...semantics.match import Key, Matches, op_ref
from ...semantics.order import StaticOrder
from ...semantics.rules import Awaits, describe, rule
from ..result import Violation
from .forms import walk
from .solver import timeout_ms, z3_module

_CMP_TEXT = {"eq": "==", "ne": "!=", "gt": ">", "ge": ">=", "lt": "<", "le": "<="}


@dataclass(frozen=True)
class _Update:
    """One op that changes a signal word: its effect is add, set, none (fetch) or any."""

    key: Key
    op: ir.OpBase
    effect: str
    value: int


def _effect(op: ir.OpBase) -> tuple[str, int]:
    """(add | set | none | any, value): the rule's `signal_effect`, with `and` taken as any value
    (it can reach values below the word's), which keeps the wait check sound."""
    _, how, value = rule(op).signal_effect(op)
    if how == "read":
        return "none", 0
    if how in ("clear", "any"):
        return "any", 0
    return how, value


def _target_word(op: ir.OpBase) -> tuple[int, str, int] | None:
    """The signal word a one-sided op acts on, (pe, signal, index), a fetch that only reads it included."""
    effect = rule(op).signal_effect(op)
    return None if effect is None else (op.pe, effect[0].signal, effect[0].index)


class _Waits:
    """Every wait_until with the signal updates that can reach it, and z3 to decide which values
    those updates can produce (cached by question: many waits ask the same one)."""

    def __init__(self, z3, schedule: ir.Schedule, ordered: Callable[[Key, Key], bool] | None,
                 deadline: Deadline = UNBOUNDED):
        self.z3 = z3
        self.deadline = deadline
        self.solver = z3.Solver()
        self.decided: dict[tuple, bool | None] = {}
        updates: dict[tuple[int, str, int], list[_Update]] = defaultdict(list)
        waits: list[tuple[Key, ir.OpBase, Awaits]] = []
        for key, op in walk(schedule):
            word = _target_word(op)
            if word is not None:
                updates[word].append(_Update(key, op, *_effect(op)))
            elif op.kind in ir.WAIT_KINDS:
                waits.append((key, op, rule(op).awaits(op, key[0])))
        after = ordered if ordered is not None else _default_ordered(schedule)
        # one entry per awaited word: (wait key, wait, how it combines its words, the word, every
        # update of the word on the wait's rank, those that can reach it)
        self.waits = []
        for key, wait, awaits in waits:
            for ref in awaits.words:
                found = updates.get((key[0], ref.signal, ref.index), [])
                self.waits.append((key, wait, awaits, ref, found, [u for u in found if not after(key, u.key)]))

    def satisfiable(self, wait: ir.WaitUntil, reachable: list[_Update]) -> bool | None:
        """Can some subset and order of `reachable` make the wait's condition true? (None: z3
        could not decide.)"""
        if any(u.effect == "any" for u in reachable):
            return True
        question = (wait.cmp, wait.value) + _summary(reachable)
        if question not in self.decided:
            self.deadline.check("the z3 wait checks")
            self.solver.set(timeout=timeout_ms(self.deadline))
            self.decided[question] = _satisfiable(self.z3, self.solver, *question)
            self.deadline.check("the z3 wait checks")  # an undecided answer at the deadline
        return self.decided[question]


def _summary(updates: list[_Update]) -> tuple[tuple, tuple]:
    """(adds as sorted (amount, how many), distinct set values)."""
    adds = Counter(u.value for u in updates if u.effect == "add" and u.value)
    sets = sorted({u.value for u in updates if u.effect == "set"})
    return tuple(sorted(adds.items())), tuple(sets)


def static_order(schedule: ir.Schedule, deadline: Deadline = UNBOUNDED, matches: Matches | None = None
                 ) -> StaticOrder:
    """The static happens-before order of `semantics.order`, with its waits ordered by value: the
    default concurrency relation when the caller has no execution's."""
    order = StaticOrder(schedule, deadline, matches)
    waits = _Waits(z3_module(), schedule, None, deadline)
    # A wait on all its words returns only once each holds, so each word orders it by value; a
    # wait on any word is ordered by none of them in particular (only by the write that won).
    entries = [entry for entry in waits.waits if entry[2].all]
    order.order_waits([(entry[0], entry[5]) for entry in entries],
                      lambda number, updates: waits.satisfiable(entries[number][1], updates))
    return order


def check_waits(schedule: ir.Schedule, ordered: Callable[[Key, Key], bool] | None = None,
                deadline: Deadline = UNBOUNDED) -> list[Violation]:
    """Report every wait_until that no subset and order of the signal updates able to reach it can
    satisfy (`unsatisfiable_wait`).

    The updates of the waited word on the waiting rank are put_signal, signal_op and atomics on it
    (add/inc/fetch_add/fetch_inc add; set/swap/compare_swap set; and/or/xor make any value
    reachable, so such a wait is never reported). An update reaches the wait unless `ordered(w, c)`
    says it happens after the wait; default: it is later on the wait's rank, or its rank issues it
    after a barrier_all, sync_all or world barrier that the wait's rank reaches only after the wait.
    Signals start at 0, a set overwrites, adds accumulate after the last set, modulo 2**64 (words are
    uint64, DESIGN.md: an add of 2**64 - 1 is a decrement)."""
    waits = _Waits(z3_module(), schedule, ordered, deadline)
    by_wait: dict[Key, list] = defaultdict(list)
    for entry in waits.waits:
        by_wait[entry[0]].append(entry)
    violations = []
    for key, entries in by_wait.items():
        never = [entry for entry in entries if waits.satisfiable(entry[1], entry[5]) is False]
        # a wait on all its words never returns if one of them cannot hold; on any, if none can
        if never and (entries[0][2].all or len(never) == len(entries)):
            _, wait, awaits, ref, found, reachable = never[0]
            adds, sets = _summary(reachable)
            violations.append(_wait_violation(schedule, key, wait, ref, reachable, len(found) - len(reachable),
                                              Counter(dict(adds)), list(sets), others=len(entries) - 1))
    return violations


def _default_ordered(schedule: ir.Schedule) -> Callable[[Key, Key], bool]:
    syncs: dict[int, list[int]] = {}
    for program in schedule.programs:
        prefix = [0]
        for op in program.ops:
            prefix.append(prefix[-1] + (op.kind in ("barrier_all", "sync_all") or
                                        (op.kind == "barrier" and op.comm == "world")))
        syncs[program.rank] = prefix

    def ordered(wait: Key, update: Key) -> bool:
        if wait[0] == update[0]:
            return update[1] > wait[1]
        # The wait completes before its rank's next barrier; the update is issued after it.
        return syncs[update[0]][update[1]] > syncs[wait[0]][wait[1]]

    return ordered


def _satisfiable(z3, solver, cmp: str, value: int, adds: tuple, sets: tuple) -> bool | None:
    """Is `final cmp value` possible, final = (last chosen set, or 0) + the adds chosen after it?"""
    solver.push()
    try:
        total = []
        for i, (amount, available) in enumerate(adds):
            chosen = z3.Int(f"adds_{i}")
            solver.add(chosen >= 0, chosen <= available)
            total.append(amount * chosen)
        added = z3.Sum(total) if total else z3.IntVal(0)
        finals = [z3.IntVal(base) + added for base in (0, *sets)]
        if max((0, *sets)) + sum(amount * available for amount, available in adds) > MASK64:
            # uint64 words: the sum wraps modulo 2**64 (an add of 2**64 - 1 is a decrement)
            finals = [final % (MASK64 + 1) for final in finals]
        test = {"eq": lambda x: x == value, "ne": lambda x: x != value, "gt": lambda x: x > value,
                "ge": lambda x: x >= value, "lt": lambda x: x < value, "le": lambda x: x <= value}[cmp]
        solver.add(z3.Or([test(final) for final in finals]))
        verdict = solver.check()
    finally:
        solver.pop()
    if verdict == z3.unknown:
        return None
    return verdict == z3.sat


# --------------------------------------------------------------------------------- reporting
def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _reachable_values(adds: Counter, sets: list[int], limit: int = 12) -> list[int] | None:
    sums = {0}
    for amount, available in adds.items():
        sums = {s + amount * k for s in sums for k in range(available + 1)}
        if len(sums) > 4096:
            return None
    values = sorted({(base + s) & MASK64 for base in (0, *sets) for s in sums})
    return values if len(values) <= limit else None


def _wait_violation(schedule: ir.Schedule, key: Key, wait, ref: ir.SignalRef, reachable: list[_Update],
                    later: int, adds: Counter, sets: list[int], others: int = 0) -> Violation:
    word = str(ref)
    head = f"{wait.loc}: rank {key[0]} waits for {word} {_CMP_TEXT[wait.cmp]} {wait.value}"
    if others:  # wait_until_all: this word never holds; wait_until_any: neither do the others
        head += (f" (one of the words of its {wait.kind})" if wait.kind == "wait_until_all"
                 else f" ({wait.kind}: " + ("its other word cannot" if others == 1
                                            else f"none of its {others} other words can") + " hold either)")
    pieces = [_plural(n, "add") + f" of {amount}" for amount, n in sorted(adds.items())]
    if sets:
        pieces.append(_plural(len(sets), "set") + " to " + ", ".join(map(str, sets)))
    if not pieces:
        message = f"{head}, but nothing that can reach it updates {word} on rank {key[0]}"
    else:
        summary = " and ".join(pieces)
        most = max((0, *sets)) + sum(amount * n for amount, n in adds.items())
        if wait.cmp in ("ge", "gt") and most <= MASK64:
            message = f"{head}, but at most {summary} can reach it, so it never exceeds {most}"
        else:
            values = _reachable_values(adds, sets)
            can_be = f" (it can only be {', '.join(map(str, values))})" if values is not None else ""
            message = f"{head}, but no combination of the {summary} that can reach it makes that true{can_be}"
    shown = [f"rank {u.key[0]} {describe(u.op)} at {u.op.loc}" for u in reachable[:4]]
    if len(reachable) > 4:
        shown.append(f"and {len(reachable) - 4} more")
    if shown:
        message += ": " + "; ".join(shown)
    if later:
        message += f" ({_plural(later, 'more update')} {'come' if later != 1 else 'comes'} only after the wait)"
    refs = (op_ref(schedule, key),) + tuple(op_ref(schedule, u.key) for u in reachable)
    return Violation(
        kind="unsatisfiable_wait", message=message, ranks=tuple(sorted({r.rank for r in refs})), ops=refs,
        details={"signal": word, "cmp": wait.cmp, "value": wait.value,
                 "adds": {str(a): n for a, n in sorted(adds.items())}, "sets": list(sets),
                 "reachable": len(reachable), "after_wait": later})
