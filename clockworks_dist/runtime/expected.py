"""The checker's expected values, as numbers.

`build_reference(schedule)` asks the checker's machine (`semantics.machine.Model`) what memory holds
at the end:
- one execution: the actions of `check.run_to_end` applied from `model.initial()`. For a schedule
  the checker verifies, every execution gives its outputs the same values, so this one execution is
  the truth for them;
- every execution, when the (reduced) search of the state space completes within its bound: the
  values each atom and signal word holds in any terminal state where every rank finished. Scratch
  buffers, fetched tickets and signal words may end differently from one execution to the next even
  in a verified schedule (the checker proves determinism for outputs only); a run must then hold
  one of those values. The reduction keeps every terminal state (`check/por.py`), so the set is
  exact.
- the postcondition (`expect=`), atom by atom, in normal form.

The `Reference` is symbolic (value terms, atoms, ids), small and picklable: the launcher builds it
once and every rank evaluates its own part with `expect_rank`, element by element, with the input
formula and arithmetic of `numeric`:
`in(rank, buffer, start, stop)` -> the input formula at elements start..stop-1; `const(v)` -> v;
`op(name, (a, b))` -> a name b, rounded to the dtype; `opaque(kernel, rank, index, k, reads)` ->
`numeric.opaque_output` of what the kernel read, slice k; `atomic(op, operand, (old,))` ->
`numeric.atomic_update`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import ir
from ..semantics.values import render_term
from ..semantics import numeric

# The reduced search that finds every final value stops here; beyond it only the outputs (which a
# verified schedule determines) are compared.
DEFAULT_MAX_STATES = 200_000
RENDER_CHARS = 240


@dataclass
class Reference:
    """The final memory of a schedule according to the checker, symbolic (see the module docstring).
    Value ids index `terms`; atoms are (buffer, start, stop) per rank."""

    world: int
    dtypes: list[dict[str, str]]
    roles: list[dict[str, str]]
    atoms: list[tuple[tuple[str, int, int], ...]]
    terms: list[tuple]
    final: list[tuple[int, ...]] | None  # per rank and atom, one execution (None: no execution ends)
    signals: list[tuple[int, ...]] | None  # per rank and signal word, that execution
    signal_names: list[tuple[str, int]]  # signal word -> (signal, index)
    possible: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)  # (rank, atom) -> ids
    possible_signals: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)
    post: dict[tuple[int, int], tuple] = field(default_factory=dict)  # (rank, atom) -> normal form
    opaque: dict[tuple[int, int], tuple[list, list]] = field(default_factory=dict)
    complete: bool = False  # `possible` covers every execution: every element and word is compared
    note: str = ""


# ------------------------------------------------------------------------------ the checker's side
def build_reference(sched: ir.Schedule, max_states: int | None = DEFAULT_MAX_STATES,
                    timeout: float | None = None) -> Reference:
    """The checker's final values of `sched` (a `ScheduleError` if it does not match statically)."""
    from ..check import compile_schedule
    from ..check.dfs import depth_first
    from ..check.properties import expected_atoms
    from ..semantics.budget import Deadline

    model = compile_schedule(sched)
    outcome = depth_first(model, reduction=True, max_states=max_states, deadline=Deadline(timeout))
    ends = [s for s in outcome.terminals if model.done(s)]
    reference, note = _one_execution(sched, model, ends)
    ref = Reference(world=sched.world, dtypes=[{b.name: b.dtype for b in p.buffers} for p in sched.programs],
                    roles=[{b.name: b.role for b in p.buffers} for p in sched.programs],
                    atoms=[tuple(names) for names in model.layout.atom_names], terms=[], final=None, signals=None,
                    signal_names=[(d.name, i) for d in sched.programs[0].signals for i in range(d.count)],
                    complete=outcome.complete and reference is not None, note=note)
    if not outcome.complete:
        ref.note = (f"the search for every final value stopped at {outcome.states:,} states; only outputs are "
                    "compared, with one execution")
    roots: list[int] = []
    if reference is not None:
        ref.final = [tuple(row) for row in reference.memory]
        ref.signals = [tuple(row) for row in reference.signals]
        roots += [v for row in reference.memory for v in row]
        if outcome.complete:
            _possible(ref, ends, roots)
    ref.post = {key: norm for key, (norm, _exp) in expected_atoms(model).items()}
    ref.opaque = _opaque_atoms(model)
    _compact(ref, model.values.terms, roots)
    return ref


def _one_execution(sched: ir.Schedule, model, ends: list):
    """The final state of `check.run_to_end`'s execution, replayed on `model` (its actions name
    program text, so they replay on any compilation); if that execution deadlocks, the first
    complete execution the search found; None if none completes."""
    from ..check import run_to_end
    from ..errors import ScheduleError

    try:
        _other, actions = run_to_end(sched)
    except ScheduleError as exc:
        if ends:
            return ends[0], f"one execution deadlocks ({exc}); compared with another that finishes"
        return None, f"no execution finishes: {exc}"
    state = model.initial()
    for action in actions:
        state = model.apply(state, action)
    return state, ""


def _possible(ref: Reference, ends: list, roots: list[int]) -> None:
    """Every value each atom and signal word holds at the end of some execution, where they differ."""
    for rank in range(ref.world):
        for atom in range(len(ref.atoms[rank])):
            ids = sorted({s.memory[rank][atom] for s in ends})
            if len(ids) > 1:
                ref.possible[(rank, atom)] = tuple(ids)
                roots += ids
        for word in range(len(ref.signal_names)):
            words = sorted({s.signals[rank][word] for s in ends})
            if len(words) > 1:
                ref.possible_signals[(rank, word)] = tuple(words)


def _opaque_atoms(model) -> dict[tuple[int, int], tuple[list, list]]:
    """For each compute op (rank, index): the atoms it reads and writes, in the machine's order."""
    found = {}
    for row in model.code:
        for code in row:
            for move in code.moves:
                if move.opaque is not None:
                    reads = [(r, a) for r, lo, hi in move.srcs for a in range(lo, hi)]
                    writes = [(r, a) for r, lo, hi in move.dsts for a in range(lo, hi)]
                    found[(code.rank, code.index)] = (reads, writes)
    return found


def _children(term: tuple) -> tuple[int, ...]:
    kind = term[0]
    if kind == "op":
        return term[2]
    if kind == "opaque":
        return term[5]
    if kind == "atomic":
        return term[3]
    return ()


def _compact(ref: Reference, terms: list[tuple], roots: list[int]) -> None:
    """Keep only the terms the final values use (the search interned many more), renumbered."""
    order: dict[int, int] = {}
    stack = list(dict.fromkeys(roots))
    while stack:
        vid = stack.pop()
        if vid in order:
            continue
        pending = [c for c in _children(terms[vid]) if c not in order]
        if pending:
            stack.append(vid)
            stack.extend(pending)
            continue
        order[vid] = len(ref.terms)
        ref.terms.append(_renumbered(terms[vid], order))
    if ref.final is not None:
        ref.final = [tuple(order[v] for v in row) for row in ref.final]
    ref.possible = {key: tuple(order[v] for v in ids) for key, ids in ref.possible.items()}


def _renumbered(term: tuple, order: dict[int, int]) -> tuple:
    kind = term[0]
    if kind == "op":
        return ("op", term[1], tuple(order[c] for c in term[2]))
    if kind == "opaque":
        return term[:5] + (tuple(order[c] for c in term[5]),)
    if kind == "atomic":
        return term[:3] + (tuple(order[c] for c in term[3]),)
    return term


# ------------------------------------------------------------------------------------ numbers
class Evaluator:
    """Evaluates value terms of a `Reference` to numpy arrays, each once."""

    def __init__(self, ref: Reference):
        self.ref = ref
        self.cache: dict[tuple, np.ndarray] = {}
        self.outputs: dict[tuple, np.ndarray] = {}

    def atom_dtype(self, rank: int, atom: int) -> tuple[int, str]:
        """(elements, IR dtype) of an atom."""
        buffer, start, stop = self.ref.atoms[rank][atom]
        return stop - start, self.ref.dtypes[rank][buffer]

    def at(self, vid: int, rank: int, atom: int) -> np.ndarray:
        """The value `vid` as it sits in `atom` of `rank` (cast to its buffer's dtype, as a store
        into that buffer casts it)."""
        count, dtype = self.atom_dtype(rank, atom)
        return self.value(vid, count, dtype).astype(numeric.storage(dtype), copy=False)

    def value(self, vid: int, count: int, dtype: str) -> np.ndarray:
        """Term `vid` as `count` elements of `dtype`."""
        key = (vid, count, dtype)
        found = self.cache.get(key)
        if found is None:
            found = self.cache[key] = self._evaluate(self.ref.terms[vid], count, dtype)
        return found

    def _evaluate(self, term: tuple, count: int, dtype: str) -> np.ndarray:
        kind = term[0]
        if kind == "in":
            _, rank, buffer, start, stop = term
            return numeric.input_values(rank, buffer, self.ref.dtypes[rank][buffer], start, stop)
        if kind == "const":
            return numeric.constant(term[1], count, dtype)
        if kind == "op":
            left, right = term[2]
            return numeric.combine(term[1], self.value(left, count, dtype), self.value(right, count, dtype), dtype)
        if kind == "atomic":
            # in the dtype of the word it updated: that of the value it updated (a fetched atomic
            # sits in `into`, which may be wider)
            _, how, operand, (old,) = term
            before = self.value(old, count, dtype)
            return numeric.atomic_update(how, before, operand, numeric.ir_dtype(before.dtype, dtype))
        if kind == "opaque":
            return self._opaque(term, dtype)
        raise ValueError(f"unknown value term {term!r}")

    def _opaque(self, term: tuple, dtype: str) -> np.ndarray:
        _, kernel, rank, index, k, reads = term
        read_atoms, write_atoms = self.ref.opaque[(rank, index)]
        key = (rank, index, reads)
        out = self.outputs.get(key)
        if out is None:
            arrays = [self.at(vid, *place) for vid, place in zip(reads, read_atoms)]
            total = sum(self.atom_dtype(*place)[0] for place in write_atoms)
            out = self.outputs[key] = numeric.opaque_output(kernel, rank, index, arrays, total)
        offset = sum(self.atom_dtype(*place)[0] for place in write_atoms[:k])
        return numeric.to_dtype(out[offset:offset + self.atom_dtype(*write_atoms[k])[0]], dtype)

    def normal(self, norm: tuple, count: int, dtype: str) -> np.ndarray:
        """A normal form (a postcondition: `in` terms under one n-ary reduction) as numbers."""
        kind = norm[0]
        if kind == "in":
            _, rank, buffer, start, stop = norm
            return numeric.input_values(rank, buffer, self.ref.dtypes[rank][buffer], start, stop)
        if kind == "const":
            return numeric.constant(norm[1], count, dtype)
        if kind == "op":
            parts = [self.normal(item, count, dtype) for item in norm[2]]
            acc = parts[0]
            for part in parts[1:]:
                acc = numeric.combine(norm[1], acc, part, dtype)
            return acc
        raise ValueError(f"a postcondition term cannot be {kind}: {norm!r}")


@dataclass
class BufferExpect:
    """What one buffer of one rank must hold at the end."""

    expected: np.ndarray  # the reference execution's values
    checked: np.ndarray  # bool per element: compared with the checker's values
    others: list[tuple[int, int, list[np.ndarray]]]  # (start, stop, every possible value) where executions differ
    post: np.ndarray | None = None  # the postcondition's values
    post_mask: np.ndarray | None = None  # bool per element: named by the postcondition
    # bool per element: an output (an output or inout buffer, or named by the postcondition), which
    # the caller reads when the rank's program ends; the rest is compared once the run has settled
    at_end: np.ndarray | None = None


@dataclass
class RankExpect:
    """What one rank's memory and signal words must hold at the end of a run."""

    rank: int
    buffers: dict[str, BufferExpect]
    signals: np.ndarray  # uint64, the reference execution's words
    signals_checked: np.ndarray
    signal_others: dict[int, set[int]]


def expect_rank(ref: Reference, rank: int) -> RankExpect:
    """Evaluate `rank`'s part of the reference to numbers."""
    ev = Evaluator(ref)
    buffers = {name: _buffer_expect(ref, rank, name, dtype) for name, dtype in ref.dtypes[rank].items()}
    outputs = _output_atoms(ref, rank)
    for atom, (buffer, start, stop) in enumerate(ref.atoms[rank]):
        into = buffers[buffer]
        count, dtype = stop - start, ref.dtypes[rank][buffer]
        if ref.final is not None:
            into.expected[start:stop] = ev.at(ref.final[rank][atom], rank, atom)
            # a packet area (lowering.packets) holds payload and flags, not the model's values: what it
            # carried is checked where it is unpacked
            into.checked[start:stop] = (ref.complete or atom in outputs) and ref.roles[rank][buffer] != "packets"
        if atom in outputs:
            if into.at_end is None:
                into.at_end = np.zeros(len(into.expected), dtype=bool)
            into.at_end[start:stop] = True
        ids = ref.possible.get((rank, atom))
        if ids:
            into.others.append((start, stop, [ev.at(vid, rank, atom) for vid in ids]))
        norm = ref.post.get((rank, atom))
        if norm is not None:
            if into.post is None:
                into.post, into.post_mask = np.zeros_like(into.expected), np.zeros(len(into.expected), dtype=bool)
            into.post[start:stop] = ev.normal(norm, count, dtype)
            into.post_mask[start:stop] = True
    words = len(ref.signal_names)
    signals = np.array(ref.signals[rank] if ref.signals is not None else [0] * words, dtype=np.uint64)
    checked = np.full(words, ref.complete and ref.signals is not None)
    others = {word: set(values) for (r, word), values in ref.possible_signals.items() if r == rank}
    return RankExpect(rank=rank, buffers=buffers, signals=signals, signals_checked=checked, signal_others=others)


def _buffer_expect(ref: Reference, rank: int, name: str, dtype: str) -> BufferExpect:
    count = max((stop for buffer, _start, stop in ref.atoms[rank] if buffer == name), default=0)
    return BufferExpect(expected=np.zeros(count, dtype=numeric.storage(dtype)), checked=np.zeros(count, dtype=bool),
                        others=[])


def _output_atoms(ref: Reference, rank: int) -> set[int]:
    """The atoms whose final value the checker proves deterministic in a verified schedule: output
    and inout buffers, and every atom the postcondition names."""
    found = {atom for (r, atom) in ref.post if r == rank}
    for atom, (buffer, _start, _stop) in enumerate(ref.atoms[rank]):
        if ref.roles[rank][buffer] in ("output", "inout"):
            found.add(atom)
    return found


# ------------------------------------------------------------------------------------ symbols
def atom_of(ref: Reference, rank: int, buffer: str, element: int) -> int | None:
    """The atom of `rank` that holds `element` of `buffer`."""
    for atom, (name, start, stop) in enumerate(ref.atoms[rank]):
        if name == buffer and start <= element < stop:
            return atom
    return None


def render(ref: Reference, vid: int) -> str:
    """Term `vid` as the checker prints it (shortened)."""
    return _short(_render(ref, vid))


def _render(ref: Reference, vid: int) -> str:
    return render_term(ref.terms[vid], lambda child: _render(ref, child))


def render_normal(norm: tuple) -> str:
    """A normal form as the checker prints it (shortened)."""
    return _short(render_term(norm, _render_normal, normal=True))


def _render_normal(norm: tuple) -> str:
    return render_term(norm, _render_normal, normal=True)


def _short(text: str) -> str:
    return text if len(text) <= RENDER_CHARS else text[:RENDER_CHARS] + "..."


def symbolic(ref: Reference, rank: int, buffer: str, element: int, against: str) -> str:
    """The expected value of one element, symbolically: the term of its atom, and which element of
    that atom it is when the atom holds more than one."""
    atom = atom_of(ref, rank, buffer, element)
    if atom is None:
        return "?"
    _name, start, stop = ref.atoms[rank][atom]
    if against == "postcondition":
        text = render_normal(ref.post[(rank, atom)])
    elif ref.final is None:
        return "?"
    else:
        text = render(ref, ref.final[rank][atom])
    return text if stop - start == 1 else f"{text} at [{element - start}]"
