"""Affine forms over the size symbols: of numbers, of regions, of the regions each op accesses.

A form is `(const, ((symbol, coeff), ...))` with sorted, non-zero terms; hashable, so obligations
over the same forms are proven once. `show_form` writes one as the user would (`4*CHUNK - 2`).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from typing import Iterable, Iterator

from ... import ir
from ...semantics.match import Key, members_of
from ...semantics.rules import ATOMIC_MODES, WRITE_MODES, When, rule

Form = tuple[int, tuple[tuple[str, int], ...]]


def form(affine: ir.Affine | None, concrete: int) -> Form:
    """The form of a traced number: its affine form if it has one, else the constant."""
    if affine is None:
        return (concrete, ())
    return _form(affine.const, affine.terms)


@functools.lru_cache(maxsize=1 << 16)
def _form(const: int, terms: tuple) -> Form:
    """Forms repeat across ranks (chunk k of a buffer on every rank): each is built once."""
    merged: dict[str, int] = defaultdict(int)
    for name, coeff in terms:
        merged[name] += coeff
    return (const, tuple(sorted((n, c) for n, c in merged.items() if c)))


@functools.lru_cache(maxsize=1 << 16)
def combine(a: Form, b: Form, sign: int = 1, scale: int = 1) -> Form:
    """a + sign * scale * b."""
    merged: dict[str, int] = defaultdict(int)
    for name, coeff in a[1]:
        merged[name] += coeff
    for name, coeff in b[1]:
        merged[name] += sign * scale * coeff
    return (a[0] + sign * scale * b[0], tuple(sorted((n, c) for n, c in merged.items() if c)))


def scaled(a: Form, k: int) -> Form:
    """k * a."""
    return (a[0] * k, tuple((n, c * k) for n, c in a[1] if c * k))


def is_symbolic(*forms: Form) -> bool:
    """True if some form depends on a symbol."""
    return any(f[1] for f in forms)


def value_at(f: Form, valuation: dict[str, int]) -> int:
    """The form's value under a valuation of its symbols."""
    return f[0] + sum(coeff * valuation[name] for name, coeff in f[1])


def names(*forms: Form) -> set[str]:
    """The symbols the forms use."""
    return {name for f in forms for name, _ in f[1]}


def show_form(f: Form) -> str:
    """`4*CHUNK - 2`: a form as the user would write it."""
    parts: list[tuple[str, str]] = []
    for name, coeff in f[1]:
        parts.append(("-" if coeff < 0 else "+", name if abs(coeff) == 1 else f"{abs(coeff)}*{name}"))
    if f[0] or not parts:
        parts.append(("-" if f[0] < 0 else "+", str(abs(f[0]))))
    text = ("-" if parts[0][0] == "-" else "") + parts[0][1]
    for sign, term in parts[1:]:
        text += f" {sign} {term}"
    return text


def show_valuation(valuation: dict[str, int], shown: Iterable[str]) -> str:
    """`CHUNK = 5, EVEN = 6`: the named symbols' values."""
    return ", ".join(f"{name} = {valuation[name]}" for name in sorted(set(shown)))


# ------------------------------------------------------------------------------------ regions
def region_start(region: ir.Region) -> Form:
    """The form of a region's first element."""
    return form(region.start_sym, region.start)


def region_stop(region: ir.Region) -> Form:
    """The form of the element after a region's last."""
    return form(region.stop_sym, region.stop)


def region_count(region: ir.Region) -> Form:
    """The form of a region's element count."""
    return combine(region_stop(region), region_start(region), -1)


def buffer_count(decl: ir.BufferDecl) -> Form:
    """The form of a buffer's element count."""
    return form(decl.count_sym, decl.count)


def show_region(region: ir.Region) -> str:
    """`x[CHUNK:2*CHUNK]`."""
    return f"{region.buffer}[{show_form(region_start(region))}:{show_form(region_stop(region))}]"


def show_op_region(op: ir.OpBase, field: str, region: ir.Region) -> str:
    """`send x[CHUNK:2*CHUNK]`, `copy dst y[0:CHUNK]`: the field is named when the op has several."""
    if len(ir.op_regions(op)) == 1:
        return f"{op.kind} {show_region(region)}"
    return f"{op.kind} {field} {show_region(region)}"


# -------------------------------------------------------------------------------- op accesses
def walk(schedule: ir.Schedule) -> Iterator[tuple[Key, ir.OpBase]]:
    """Every op as (key, op), group members one by one with their member index as `sub`."""
    for program in schedule.programs:
        for index, op in enumerate(program.ops):
            for sub, member in members_of(op):
                yield (program.rank, index, sub), member


class Access:
    """One region an op touches: on whose memory, read or write, and when. Read-only: a plain
    class with slots, since the size check makes one per region of every op (3 million ops in a
    1024-rank ring) and a frozen dataclass costs several times more to build."""

    __slots__ = ("key", "op", "field", "region", "memory", "write", "atomic", "deferred", "forms", "symbolic")

    def __init__(self, key: Key, op: ir.OpBase, field: str, region: ir.Region, memory: int, write: bool,
                 atomic: bool, deferred: bool, forms: tuple[Form, Form], symbolic: bool):
        self.key = key
        self.op = op
        self.field = field
        self.region = region
        self.memory = memory  # the rank whose memory holds the region
        self.write = write
        self.atomic = atomic
        self.deferred = deferred  # happens at delivery, after the op is issued (puts, non-fetching atomics)
        self.forms = forms  # start, stop
        self.symbolic = symbolic

    def __repr__(self) -> str:
        return f"Access({self.key}, {self.describe()}, write={self.write})"

    def describe(self) -> str:
        """`send x[CHUNK:2*CHUNK]`, `put dst x[0:CHUNK] on rank 2`."""
        text = show_op_region(self.op, self.field, self.region)
        if self.memory != self.key[0]:
            text += f" on rank {self.memory}"
        return text


def accesses(key: Key, op: ir.OpBase, memo: dict | None = None) -> list[Access]:
    """The regions op `key` touches, with their forms; whose memory, whether it writes or is
    atomic, and whether it happens at delivery come from the op's rule (`semantics.rules`).
    With `memo` (a dict the caller keeps for one pass over a schedule), each region's forms are
    computed once: the tracer shares one region object among every op that names it."""
    rank = key[0]
    if memo is None:
        memo = {}
    flags: dict[tuple[str, int], list] = {}  # by the region object: hashing a region's fields is slow
    for a in rule(op).accesses(op, rank):
        if isinstance(a.where, ir.Region):
            mode = a.mode
            new = [a.owner, mode in WRITE_MODES, mode in ATOMIC_MODES, a.when is When.DELIVERY]
            old = flags.setdefault((a.field, id(a.where)), new)
            if old is not new:  # an atomic fetch writes nothing back
                old[1], old[2], old[3] = old[1] or new[1], old[2] or new[2], old[3] or new[3]
    found = []
    for name, region in ir.op_regions(op):
        these = flags.get((name, id(region)))
        if these is None:  # a rule that named a copy of the region
            these = [None, False, False, False]
            for a in rule(op).accesses(op, rank):
                if a.field == name and a.where == region:
                    these[0] = a.owner if these[0] is None else these[0]
                    these[1] = these[1] or a.mode in WRITE_MODES
                    these[2] = these[2] or a.mode in ATOMIC_MODES
                    these[3] = these[3] or a.when is When.DELIVERY
        forms = memo.get(id(region))
        if forms is None:
            start, stop = region_start(region), region_stop(region)
            forms = memo[id(region)] = ((start, stop), is_symbolic(start, stop), region)  # holds the region
        found.append(Access(key, op, name, region, these[0], these[1], these[2], these[3], forms[0], forms[1]))
    return found
