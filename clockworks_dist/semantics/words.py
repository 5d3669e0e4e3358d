"""What a run can do to each signal word, read off the whole schedule: two analyses that let the
reduction and the NVSHMEM block plan treat a `ge`/`gt` wait as staying true.

Words are uint64 and arithmetic is modulo 2**64 (DESIGN.md), so an add of 2**64 - 1 is a decrement.
Every op of a traced program runs at most once, so a word's value never exceeds the largest value
any op can set it to (0 at the start) plus the sum of every add that can reach it:
- `may_wrap`: the words whose bound does not fit in 64 bits, or that an `or`/`xor` reaches (any bit
  set): elsewhere no add wraps, and a `ge`/`gt` wait that holds stays true under adds (the
  partial-order reduction's commutation, `machine.Model`);
- `only_grows`: the words every update of which is an add, the adds together below 2**64: a
  `ge`/`gt` comparison that holds stays true whatever else happens (the block plan lets a rank's
  next signal go on without every block having polled such a word, `lowering.nvshmem_plan`).
A word is (owner rank, signal name, index). Each op's effect on a word is its rule's
(`Rule.signal_effect`): add, set, read, clear (`and` only clears bits), any.
"""

from __future__ import annotations

from .. import ir
from .arithmetic import MASK64
from .rules import signal_effect

Word = tuple[int, str, int]


def _effects(sched: ir.Schedule):
    for program in sched.programs:
        for op in program.ops:
            effect = signal_effect(op)
            if effect is not None:
                ref, how, value = effect
                yield (op.pe, ref.signal, ref.index), how, value


def may_wrap(sched: ir.Schedule) -> frozenset[Word]:
    """The words that adds might wrap around 2**64 in some execution (the module docstring)."""
    sets: dict[Word, int] = {}
    adds: dict[Word, int] = {}
    unbounded: set[Word] = set()
    for word, how, value in _effects(sched):
        if how == "add":
            adds[word] = adds.get(word, 0) + value
        elif how == "set":
            sets[word] = max(sets.get(word, 0), value)
        elif how == "any":
            unbounded.add(word)
    over = {word for word in set(sets) | set(adds) if sets.get(word, 0) + adds.get(word, 0) > MASK64}
    return frozenset(unbounded | over)


def only_grows(sched: ir.Schedule) -> set[Word]:
    """The words that only ever grow in a run: every update is an add and all of them together stay
    below 2**64 (the word starts at 0)."""
    adds: dict[Word, int] = {}
    other: set[Word] = set()
    for word, how, value in _effects(sched):
        if how == "read":
            continue
        if how == "add":
            adds[word] = adds.get(word, 0) + value
        else:
            other.add(word)
    return {word for word, total in adds.items() if word not in other and total < 1 << 64}
