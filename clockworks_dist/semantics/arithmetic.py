"""The arithmetic of signal words and atomics, decided once for every engine (DESIGN.md).

Signal words are uint64, and so are the words atomics act on here: every add is modulo 2**64, as on
the GPU, so an add of 2**64 - 1 is a decrement and a sum can wrap around to a small value. No engine
may assume a word never wraps unless it proves it for the schedule at hand (the checker's
reduction does, per word: `semantics.machine.Model._may_wrap`). A `wait_until` compares the word with its
value as unsigned integers. The checker, the z3 wait check and the simulator all read this module.

This module imports only `ir` and `backends` (a leaf): it is the start of the one semantics layer
(`semantics/`) that the engines share.
"""

from __future__ import annotations

from .. import ir
from .backends import BACKENDS

MASK64 = (1 << 64) - 1

COMPARE = {
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
}


def compare(cmp: str, value: int, operand: int) -> bool:
    """Whether a signal word holding `value` satisfies `wait_until(sig, cmp, operand)`."""
    return COMPARE[cmp](value, operand)


def signal_effect(op) -> tuple[ir.SignalRef, str, int] | None:
    """What a one-sided op does to a signal word at `op.pe`: (word, effect, value), as its rule
    says (`rules.Rule.signal_effect`, read through the registry of backends: `rules` imports this
    module). Kept for callers outside `semantics`; new code asks `rules.rule(op).signal_effect(op)`."""
    return BACKENDS["semantics"].table[type(op)].signal_effect(op)


def word_effect(name: str, value: int) -> tuple[str, int]:
    """(effect, value) of the atomic or fetching atomic `name` (its `fetch_` prefix dropped) on a
    word. Effects: `add`; `set` (compare_swap may also leave the word as it was); `read`, no change
    (fetch); `clear`, bits only cleared (and); `any`, any value (or, xor)."""
    if name == "add":
        return "add", value
    if name == "inc":
        return "add", 1
    if name in ("set", "swap", "compare_swap"):
        return "set", value
    if name == "fetch":
        return "read", 0
    if name == "and":
        return "clear", value
    return "any", value


def atomic_result(op: str, old: int, value: int) -> int:
    """The new value of a uint64 word after a non-fetching atomic."""
    if op == "add":
        return (old + value) & MASK64
    if op == "inc":
        return (old + 1) & MASK64
    if op == "set":
        return value
    if op == "and":
        return old & value
    if op == "or":
        return old | value
    return old ^ value


def fetch_result(op: str, old: int, value: int, cond: int) -> int:
    """The new value of a uint64 word after a fetching atomic (which returns `old`); fetch_add,
    fetch_inc, fetch_and ... update it as their non-fetching atomic does."""
    if op == "fetch":
        return old
    if op == "swap":
        return value
    if op == "compare_swap":
        return value if old == cond else old
    return atomic_result(op.removeprefix("fetch_"), old, value)
