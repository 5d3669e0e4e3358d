"""Symbolic checks with z3: sizes that hold for every admissible value, and waits that can be met.

The concrete model checker explores one traced instance of a schedule (`CHUNK = 4`). The two checks
here generalise what can be said without exploring states:

- `check_sizes` proves, for every valuation of the `cw.size` symbols allowed by their min, max and
  multiple_of, that every region is inside its buffer, that transfers move equal counts (a send and
  its matched recv, put/get src and dst, copy, reduce, collectives), and that accesses which may run
  concurrently never overlap. A failed proof comes back as a `symbolic_size` violation whose message
  shows a counterexample valuation, the one closest to the traced values.
- `check_waits` decides, for every `wait_until`, whether some subset and order of the signal
  updates that can reach it makes the condition true; if none does, the wait can never return and
  the report is `unsatisfiable_wait`.

Every obligation is a linear integer formula over the symbols, so z3 decides it exactly. The proofs
are about the schedule as traced: Python control flow (loop counts, `if CHUNK > 4`) ran at the traced
values, and a bound computed non-affinely (`CHUNK // 3`, `CHUNK % 2`) reaches the IR without its
symbolic form and is taken as the constant it had in the trace.

z3 is imported here and nowhere else in the package, on first use.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from .. import ir
from ..errors import MissingDependency
from ..semantics.arithmetic import MASK64, signal_effect
from ..semantics.budget import UNBOUNDED, Deadline
from .result import OpRef, Violation

OpKey = tuple[int, int, int | None]  # (rank, index in the program, member of a group or None)
# An affine form: (const, ((symbol, coeff), ...)) with sorted, non-zero terms; hashable, so
# obligations over the same forms are proven once.
Form = tuple[int, tuple[tuple[str, int], ...]]

SOLVER_TIMEOUT_MS = 10_000
_CMP_TEXT = {"eq": "==", "ne": "!=", "gt": ">", "ge": ">=", "lt": "<", "le": "<="}


def _timeout_ms(deadline: Deadline) -> int:
    """A solver's timeout: the usual cap, or less when the check's deadline is nearer."""
    remaining = deadline.remaining()
    if remaining is None:
        return SOLVER_TIMEOUT_MS
    return max(1, min(SOLVER_TIMEOUT_MS, int(remaining * 1000)))


def _z3():
    try:
        import z3
    except ImportError as exc:  # pragma: no cover - z3-solver is a declared dependency
        raise MissingDependency(
            "the symbolic checks need the z3 solver, which is not installed "
            "(fix: pip install z3-solver, or reinstall with pip install clockworks-dist)") from exc
    return z3


# ------------------------------------------------------------------------------------ forms
def _form(affine: ir.Affine | None, concrete: int) -> Form:
    if affine is None:
        return (concrete, ())
    merged: dict[str, int] = defaultdict(int)
    for name, coeff in affine.terms:
        merged[name] += coeff
    return (affine.const, tuple(sorted((n, c) for n, c in merged.items() if c)))


def _combine(a: Form, b: Form, sign: int = 1, scale: int = 1) -> Form:
    """a + sign * scale * b."""
    merged: dict[str, int] = defaultdict(int)
    for name, coeff in a[1]:
        merged[name] += coeff
    for name, coeff in b[1]:
        merged[name] += sign * scale * coeff
    return (a[0] + sign * scale * b[0], tuple(sorted((n, c) for n, c in merged.items() if c)))


def _scaled(a: Form, k: int) -> Form:
    return (a[0] * k, tuple((n, c * k) for n, c in a[1] if c * k))


def _symbolic(*forms: Form) -> bool:
    return any(form[1] for form in forms)


def _value(form: Form, valuation: dict[str, int]) -> int:
    return form[0] + sum(coeff * valuation[name] for name, coeff in form[1])


def show_form(form: Form) -> str:
    """`4*CHUNK - 2`: a form as the user would write it."""
    parts: list[tuple[str, str]] = []
    for name, coeff in form[1]:
        parts.append(("-" if coeff < 0 else "+", name if abs(coeff) == 1 else f"{abs(coeff)}*{name}"))
    if form[0] or not parts:
        parts.append(("-" if form[0] < 0 else "+", str(abs(form[0]))))
    text = ("-" if parts[0][0] == "-" else "") + parts[0][1]
    for sign, term in parts[1:]:
        text += f" {sign} {term}"
    return text


def _start(region: ir.Region) -> Form:
    return _form(region.start_sym, region.start)


def _stop(region: ir.Region) -> Form:
    return _form(region.stop_sym, region.stop)


def _count(region: ir.Region) -> Form:
    return _combine(_stop(region), _start(region), -1)


def _decl_count(decl: ir.BufferDecl) -> Form:
    return _form(decl.count_sym, decl.count)


def _show_region(region: ir.Region) -> str:
    return f"{region.buffer}[{show_form(_start(region))}:{show_form(_stop(region))}]"


def _show_valuation(valuation: dict[str, int], names: Iterable[str]) -> str:
    return ", ".join(f"{name} = {valuation[name]}" for name in sorted(set(names)))


def _names(*forms: Form) -> set[str]:
    return {name for form in forms for name, _ in form[1]}


# ------------------------------------------------------------------------------ the schedule
def _split_affine(schedule: ir.Schedule, ops: list) -> tuple[list, list[Violation]]:
    """Ops whose bounds (or whose buffers' counts) are not affine in the sizes cannot be proven
    for every size: leave them to the concrete check and say so, once per source line."""
    inexact_buffers = {(p.rank, d.name) for p in schedule.programs for d in p.buffers
                       if d.count_sym is not None and not d.count_sym.exact}
    kept, skipped = [], {}
    for key, op in ops:
        regions = [region for _, region in ir.op_regions(op)]
        bad = any(form is not None and not form.exact for r in regions for form in (r.start_sym, r.stop_sym))
        bad = bad or any((key[0], r.buffer) in inexact_buffers for r in regions)
        if bad:
            skipped.setdefault((op.loc.file, op.loc.line), []).append((key, op))
        else:
            kept.append((key, op))
    notes = []
    for (_file, _line), group in skipped.items():
        key, op = group[0]
        notes.append(Violation(
            kind="symbolic_unproven", ranks=tuple(sorted({k[0] for k, _ in group})),
            ops=tuple(_ref(k, o) for k, o in group),
            message=f"{op.loc}: rank {key[0]}: {ir.describe(op)} has a bound that is not affine in the sizes "
                    "(it uses //, % or a product of sizes), so it is checked at the traced size only "
                    "(write it as a multiple of a size to have it proven for every size)"))
    return kept, notes


def _walk(schedule: ir.Schedule) -> Iterator[tuple[OpKey, ir.OpBase]]:
    """Every op as (key, op), group members one by one with their member index as `sub`."""
    for program in schedule.programs:
        for index, op in enumerate(program.ops):
            if isinstance(op, ir.Group):
                for sub, member in enumerate(op.ops):
                    yield (program.rank, index, sub), member
            else:
                yield (program.rank, index, None), op


def _ref(key: OpKey, op: ir.OpBase) -> OpRef:
    return OpRef(rank=key[0], index=key[1], sub=key[2], kind=op.kind, loc=op.loc, text=ir.describe(op))


_REMOTE_FIELDS = {"put": "dst", "put_signal": "dst", "get": "src", "atomic": "target", "fetch_atomic": "target"}


@dataclass(frozen=True)
class _Access:
    """One region an op touches: on whose memory, read or write, and when."""

    key: OpKey
    op: ir.OpBase
    field: str
    region: ir.Region
    memory: int  # the rank whose memory holds the region
    write: bool
    atomic: bool
    deferred: bool  # happens at delivery, after the op is issued (puts, non-fetching atomics)
    forms: tuple[Form, Form]  # start, stop
    symbolic: bool


def _accesses(key: OpKey, op: ir.OpBase) -> list[_Access]:
    rank = key[0]
    found = []
    remote = _REMOTE_FIELDS.get(op.kind)
    for name, region in ir.op_regions(op):
        memory = op.pe if name == remote else rank
        # an atomic fetch reads its target and writes nothing back
        write = name in ("dst", "into", "writes") or (name == "target" and op.op != "fetch")
        atomic = name == "target"
        deferred = (op.kind in ("put", "put_signal") and (name == "dst" or op.nbi)) or \
            (op.kind == "atomic" and name == "target")
        forms = (_start(region), _stop(region))
        found.append(_Access(key, op, name, region, memory, write, atomic, deferred, forms, _symbolic(*forms)))
    return found


def _show_op_region(op: ir.OpBase, field: str, region: ir.Region) -> str:
    """`send x[CHUNK:2*CHUNK]`, `copy dst y[0:CHUNK]`: the field is named when the op has several."""
    if len(ir.op_regions(op)) == 1:
        return f"{op.kind} {_show_region(region)}"
    return f"{op.kind} {field} {_show_region(region)}"


def _what(access: _Access) -> str:
    """`send x[CHUNK:2*CHUNK]`, `put dst x[0:CHUNK] on rank 2`."""
    text = _show_op_region(access.op, access.field, access.region)
    if access.memory != access.key[0]:
        text += f" on rank {access.memory}"
    return text


# ------------------------------------------------------------------------------- the solver
class _Solver:
    """z3 variables for the symbols, their constraints, and batched refutation of obligations."""

    def __init__(self, z3, symbols: Iterable[ir.Symbol], deadline: Deadline = UNBOUNDED):
        self.z3 = z3
        self.deadline = deadline
        self.symbols = {s.name: s for s in symbols}
        self.vars: dict[str, object] = {}
        self.constraints: list = []
        self._exprs: dict[Form, object] = {}

    def var(self, name: str):
        if name not in self.vars:
            z3 = self.z3
            symbol = self.symbols.get(name) or ir.Symbol(name=name, value=1)
            # multiple_of as a substitution (CHUNK = 2*t) keeps every formula linear without `mod`.
            if symbol.multiple_of > 1:
                var = symbol.multiple_of * z3.Int(f"{name}__q")
            else:
                var = z3.Int(name)
            self.constraints.append(var >= symbol.min)
            if symbol.max is not None:
                self.constraints.append(var <= symbol.max)
            self.vars[name] = var
        return self.vars[name]

    def expr(self, form: Form):
        if form not in self._exprs:
            z3 = self.z3
            terms = [coeff * self.var(name) for name, coeff in form[1]]
            self._exprs[form] = z3.Sum(terms + [z3.IntVal(form[0])]) if terms else z3.IntVal(form[0])
        return self._exprs[form]

    def _fresh(self):
        self.deadline.check("the z3 size proofs")
        solver = self.z3.Solver()
        solver.set(timeout=_timeout_ms(self.deadline))
        solver.add(*self.constraints)
        return solver

    def refute(self, negations: list) -> tuple[list[int], list[int]]:
        """Indices of the negations that some admissible valuation satisfies, and of those z3 could
        not decide. One query proves a whole batch; each model found retires every negation it
        satisfies, so the query count is about the number of distinct failures plus one."""
        z3 = self.z3
        if not negations:
            return [], []
        solver = self._fresh()
        remaining = list(range(len(negations)))
        failing: list[int] = []
        while remaining:
            self.deadline.check("the z3 size proofs")
            solver.push()
            solver.add(z3.Or([negations[i] for i in remaining]))
            verdict = solver.check()
            model = solver.model() if verdict == z3.sat else None
            solver.pop()
            if verdict == z3.unsat:
                return failing, []
            self.deadline.check("the z3 size proofs")  # z3 gives up (unknown) at the deadline
            if model is None:  # unknown: decide one by one
                return self._one_by_one(solver, negations, remaining, failing)
            hit = [i for i in remaining if z3.is_true(model.eval(negations[i], model_completion=True))]
            if not hit:  # cannot happen for a sound model; do not loop forever
                return self._one_by_one(solver, negations, remaining, failing)
            failing.extend(hit)
            done = set(hit)
            remaining = [i for i in remaining if i not in done]
        return failing, []

    def _one_by_one(self, solver, negations, remaining, failing):
        unknown = []
        for i in remaining:
            self.deadline.check("the z3 size proofs")
            solver.push()
            solver.add(negations[i])
            verdict = solver.check()
            solver.pop()
            if verdict == self.z3.sat:
                failing.append(i)
            elif verdict != self.z3.unsat:
                unknown.append(i)
        return failing, unknown

    def failing_sizes(self, negation, names: set[str], traced: dict[str, int]) -> str:
        """Which sizes fail, as a note for the message: for one symbol, the range of failing values
        and whether every admissible value in it fails; always that the traced sizes are fine."""
        shown = ", ".join(f"{name} = {traced[name]}" for name in sorted(names) if name in traced)
        tail = ""
        if shown and set(names) <= set(traced):
            at_traced = self._fresh()
            at_traced.add(negation, *(self.var(name) == traced[name] for name in names))
            fails = at_traced.check() == self.z3.sat
            tail = f", the traced {shown} included" if fails else \
                f"; the traced {shown} {'is' if len(names) == 1 else 'are'} fine"
        if len(names) != 1 or not set(names) <= set(self.symbols):
            return f" (other sizes may fail too{tail})"
        name = next(iter(names))
        var = self.var(name)
        low, high = self._extreme(negation, var, minimize=True), self._extreme(negation, var, minimize=False)
        if low is None:
            return f" (other sizes may fail too{tail})"
        if high is None:
            span = f"{name} >= {low}"
            every = self._never_holds(self.z3.And(var >= low), negation)
        elif high == low:
            return f" (only {name} = {low} fails{tail})"
        else:
            span = f"{name} from {low} to {high}"
            every = self._never_holds(self.z3.And(var >= low, var <= high), negation)
        if every:
            return f" (it fails for every admissible {span}{tail})"
        if name in traced and self._never_holds(var != traced[name], negation):
            return f" (it fails for every admissible {name} but the traced {traced[name]})"
        return f" (it fails for some admissible {span}, not all{tail})"

    def _optimizer(self, negation):
        """A z3 optimizer over the admissible valuations that satisfy `negation`."""
        self.deadline.check("the z3 size proofs")
        opt = self.z3.Optimize()
        opt.set(timeout=_timeout_ms(self.deadline))
        opt.add(*self.constraints)
        opt.add(negation)
        return opt

    def _extreme(self, negation, var, minimize: bool) -> int | None:
        """The least (or greatest) admissible value of `var` satisfying `negation`; None when
        unbounded or undecided."""
        z3 = self.z3
        opt = self._optimizer(negation)
        handle = opt.minimize(var) if minimize else opt.maximize(var)
        if opt.check() != z3.sat:
            return None
        value = opt.upper(handle) if not minimize else opt.lower(handle)
        return value.as_long() if z3.is_int_value(value) else None

    def _never_holds(self, within, negation) -> bool:
        """True if every admissible valuation `within` satisfies `negation` (z3 proves it)."""
        solver = self._fresh()
        solver.add(within, self.z3.Not(negation))
        return solver.check() == self.z3.unsat

    def valuation(self, negation) -> dict[str, int]:
        """An admissible valuation satisfying `negation`, as close as z3 finds to the traced one."""
        z3 = self.z3
        opt = self._optimizer(negation)
        distance = []
        for name, var in self.vars.items():
            if name in self.symbols:
                traced = self.symbols[name].value
                distance.append(z3.If(var >= traced, var - traced, traced - var))
        if distance:
            opt.minimize(z3.Sum(distance))
        if opt.check() != z3.sat:  # fall back to any model
            solver = self._fresh()
            solver.add(negation)
            if solver.check() != z3.sat:
                return {}
            model = solver.model()
        else:
            model = opt.model()
        return {name: model.eval(var, model_completion=True).as_long() for name, var in self.vars.items()}


# -------------------------------------------------------------------------------- obligations
@dataclass
class _Obligation:
    """A fact to prove for every valuation, over the affine `forms`; `_negation` gives the formula a
    counterexample satisfies. Sites are the ops (or op pairs) that need it."""

    kind: str  # bounds, count, divides, overlap
    forms: tuple
    sites: list = field(default_factory=list)


def check_sizes(schedule: ir.Schedule,
                unordered: Callable[[OpKey, OpKey, bool, bool], bool] | None = None, *,
                beyond_traced: bool = False, deadline: Deadline = UNBOUNDED) -> list[Violation]:
    """Prove, for every admissible valuation of the size symbols, that regions are in bounds,
    transfers move equal counts, and accesses that can be concurrent, one of them a write, never
    overlap. Returns `symbolic_size` violations, one per source line, with counterexamples.

    `unordered(a, b, a_at_delivery, b_at_delivery)` says whether ops `a` and `b` (keys
    `(rank, index, sub)`) can run concurrently, from the happens-before order of an execution; the
    flags say whether each access happens at the op's delivery (a put's destination, an nbi put's
    source, a non-fetching atomic) or when the op executes (a blocking put's source). Without it, a happens-before graph built
    statically from the schedule decides (program order, deliveries completed by quiet, fence and
    barrier_all, matched send/recv, collectives and barriers, and signal updates that a wait_until
    cannot return without; see `_StaticOrder`).
    Pairs whose four bounds are all constant are left to the concrete checker, and with
    `beyond_traced` (set by `check` after a complete explicit search of the traced instance) so are
    pairs that overlap at the traced sizes: that search reports them as data races when they really
    can be concurrent, so a bug gets one report, whatever the search order."""
    z3 = _z3()
    solver = _Solver(z3, schedule.symbols, deadline)
    obligations: dict[tuple, _Obligation] = {}

    def need(kind: str, forms: tuple, site) -> None:
        key = (kind, forms)
        if key not in obligations:
            obligations[key] = _Obligation(kind, forms)
        obligations[key].sites.append(site)

    ops, unproven = _split_affine(schedule, list(_walk(schedule)))
    accesses = [a for key, op in ops for a in _accesses(key, op)]
    _bounds(schedule, accesses, need)
    _counts(schedule, ops, need)
    _overlaps(z3, schedule, accesses, unordered, need, deadline)

    traced = {s.name: s.value for s in schedule.symbols}
    items = [ob for ob in obligations.values()
             if not (beyond_traced and ob.kind == "overlap" and _overlap_at(ob.forms, traced))]
    negations = [_negation(solver, ob) for ob in items]
    failing, unknown = solver.refute(negations)
    # One report per source line (or pair of lines): the first failing site names the problem and
    # its valuation; the other sites only add their ops. Messages and valuations are built lazily.
    reports: dict[tuple, _Report] = {}
    for i in failing + unknown:
        ob, valuation, sizes = items[i], None, ""
        for site in ob.sites:
            line_key, ops = _site(ob, site)
            report = reports.get(line_key)
            if report is None:
                if valuation is None and i not in unknown:
                    valuation = solver.valuation(negations[i]) or None
                    if valuation is not None:
                        sizes = solver.failing_sizes(negations[i], _names(*_shown_forms(ob)), traced)
                report = reports[line_key] = _Report(_message(ob, site, valuation) + sizes, ob, valuation)
            report.add(ops)
    return [report.violation(traced) for report in reports.values()] + unproven


def _overlap_at(forms: tuple, valuation: dict[str, int]) -> bool:
    """Do the two regions of an overlap obligation share an element at `valuation`?"""
    if any(name not in valuation for name in _names(*forms)):
        return False
    a_start, a_stop, b_start, b_stop = (_value(f, valuation) for f in forms)
    return a_start < a_stop and b_start < b_stop and a_start < b_stop and b_start < a_stop


def _negation(solver: _Solver, ob: _Obligation):
    z3, e = solver.z3, solver.expr
    if ob.kind == "bounds":
        start, stop, count = (e(f) for f in ob.forms)
        return z3.Or(start < 0, start > stop, stop > count)
    if ob.kind == "count":
        a, b = ob.forms
        return e(a) != e(b)
    if ob.kind == "divides":
        form, parts = ob.forms
        return e(form) % parts != 0
    a_start, a_stop, b_start, b_stop = (e(f) for f in ob.forms)
    return z3.And(a_start < a_stop, b_start < b_stop, a_start < b_stop, b_start < a_stop)


def _bounds(schedule: ir.Schedule, accesses: list[_Access], need) -> None:
    """0 <= start <= stop <= count of the buffer on the rank that holds it."""
    for access in accesses:
        try:
            decl = schedule.programs[access.memory].buffer(access.region.buffer)
        except (KeyError, IndexError):
            continue  # an unknown buffer is a trace error, reported there
        start, stop = access.forms
        count = _decl_count(decl)
        if _symbolic(start, stop, count):
            need("bounds", (start, stop, count), access)


def _counts(schedule: ir.Schedule, ops: list[tuple[OpKey, ir.OpBase]], need) -> None:
    """Transfers move equal counts: matched send/recv, put/get, copy, reduce, collectives."""
    def equal(a: Form, b: Form, site) -> None:
        if _symbolic(a, b) and a != b:
            need("count", tuple(sorted((a, b))), site)

    sends: dict[tuple, list] = defaultdict(list)
    recvs: dict[tuple, list] = defaultdict(list)
    collectives: dict[tuple[str, int], list] = defaultdict(list)
    for key, op in ops:
        rank = key[0]
        if op.kind == "send":
            sends[(op.comm, rank, op.peer)].append((key, op))
        elif op.kind == "recv":
            recvs[(op.comm, op.peer, rank)].append((key, op))
        elif op.kind in ("put", "put_signal", "get", "copy"):
            equal(_count(op.src), _count(op.dst), ("pair", key, op, "src", op.src, key, op, "dst", op.dst))
        elif op.kind == "reduce":
            for src in op.srcs:
                equal(_count(src), _count(op.dst), ("pair", key, op, "src", src, key, op, "dst", op.dst))
        if op.kind in ir.COLLECTIVE_KINDS and op.kind != "barrier":
            collectives[(op.comm, rank)].append((key, op))
            members = len(schedule.members(op.comm, rank))
            if op.kind in ("all_reduce", "broadcast", "all_to_all") or (op.kind == "reduce_to" and op.dst):
                equal(_count(op.src), _count(op.dst), ("pair", key, op, "src", op.src, key, op, "dst", op.dst))
            elif op.kind == "all_gather":
                equal(_scaled(_count(op.src), members), _count(op.dst),
                      ("scaled", key, op, "src", op.src, members, "dst", op.dst))
            elif op.kind == "reduce_scatter":
                equal(_count(op.src), _scaled(_count(op.dst), members),
                      ("scaled", key, op, "dst", op.dst, members, "src", op.src))
            if op.kind == "all_to_all" and members > 1 and _symbolic(_count(op.src)):
                need("divides", (_count(op.src), members), ("divides", key, op, op.src, members))
    for channel, sent in sends.items():
        for (skey, send), (rkey, recv) in zip(sent, recvs.get(channel, ())):
            equal(_count(send.src), _count(recv.dst),
                  ("pair", skey, send, "src", send.src, rkey, recv, "dst", recv.dst))
    # The k-th collective of every member of a communicator moves the same count.
    for (comm, rank), mine in collectives.items():
        members = schedule.members(comm, rank)
        if not members or rank == members[0]:
            continue
        for (key, op), (lkey, lead) in zip(mine, collectives.get((comm, members[0]), ())):
            if op.kind == lead.kind:
                equal(_count(lead.src), _count(op.src),
                      ("pair", lkey, lead, "src", lead.src, key, op, "src", op.src))




class _StaticOrder:
    """A happens-before order of the schedule derived without exploring it: the default concurrency
    relation when the caller has none. Nodes are each op's execution, each delivery of a put,
    put_signal, signal_op or non-fetching atomic, and one joint node per matched send/recv pair,
    collective, and barrier_all/sync_all episode. Edges:

    - program order, and op -> its delivery; a delivery -> the issuer's next quiet or barrier_all;
      a fence orders the issuer's deliveries to one PE before its later ones to that PE;
    - joint completion: every participant's op -> the joint node -> each participant's next op
      (a group's members are separate joint nodes, so they stay unordered with each other);
    - waits, by value: x happens before a wait_until w if the updates of w's word that can reach w
      and do not come after x cannot satisfy w (`_Waits.satisfiable`): w returns only once some
      update after x has landed. This is iterated to a fixpoint, since each new order can exclude
      more updates from other waits (a dissemination barrier needs a few rounds).

    Every order it claims holds in every execution; events on a cycle (a wait that needs something
    after itself) never happen, and everything is ordered with them. It misses orders that depend
    on more than this (and then reports a pair an execution would order).
    """

    MAX_ROUNDS = 32

    def __init__(self, z3, schedule: ir.Schedule, deadline: Deadline = UNBOUNDED):
        self.deadline = deadline
        self.ids: dict[tuple, int] = {}
        self.succ: list[list[int]] = []
        self.joint: dict[OpKey, int] = {}
        self.ends: dict[tuple, tuple[int, int]] = {}
        for program in schedule.programs:
            self._program(program)
        self._joints(schedule)
        self.all = (1 << len(self.succ)) - 1
        self.extra = [0] * len(self.succ)  # nodes before a wait, found by value
        self.pre = self._ancestors()
        waits = _Waits(z3, schedule, None, deadline)
        for _ in range(self.MAX_ROUNDS):
            if not self._order_waits(waits):
                break
            self.pre = self._ancestors()

    def _id(self, name: tuple) -> int:
        if name not in self.ids:
            self.ids[name] = len(self.succ)
            self.succ.append([])
        return self.ids[name]

    def _edge(self, a: tuple, b: tuple) -> None:
        self.succ[self._id(a)].append(self._id(b))

    def _program(self, program: ir.Program) -> None:
        rank, ops = program.rank, program.ops
        fence_seen: dict[int, tuple] = {}  # pe -> the last fence node for deliveries to it
        pending: dict[int, list[int]] = defaultdict(list)  # pe -> deliveries since the last fence
        unquieted: list[int] = []  # deliveries since the last quiet
        for index, op in enumerate(ops):
            here = ("op", rank, index)
            self._id(here)
            if index:
                self._edge(("op", rank, index - 1), here)
            if op.kind in ("quiet", "barrier_all"):
                for done in unquieted:
                    self._edge(("delivery", rank, done), here)
                unquieted = []
            if op.kind in ("fence", "quiet", "barrier_all"):
                for pe, issued in pending.items():
                    node = ("fence", rank, index, pe)
                    for done in issued:
                        self._edge(("delivery", rank, done), node)
                    if pe in fence_seen:
                        self._edge(fence_seen[pe], node)
                    fence_seen[pe] = node
                pending = defaultdict(list)
            if op.kind in ir.DELIVERY_KINDS:
                delivery = ("delivery", rank, index)
                self._edge(here, delivery)
                if op.pe in fence_seen:
                    self._edge(fence_seen[op.pe], delivery)
                pending[op.pe].append(index)
                unquieted.append(index)
        if ops:  # the rank's end: after its last op (a joint last op links here too)
            self._edge(("op", rank, len(ops) - 1), ("op", rank, len(ops)))

    def _join(self, name: tuple, keys: list[OpKey]) -> None:
        """One joint event: each participant's op -> it -> each participant's next op."""
        for key in keys:
            self.joint[key] = self._id(name)
            self._edge(("op", key[0], key[1]), name)
            self._edge(name, ("op", key[0], key[1] + 1))

    def _joints(self, schedule: ir.Schedule) -> None:
        """The k-th send from a to b on a comm with the k-th recv on b from a; the k-th collective
        of each member of a communicator group; the k-th barrier_all or sync_all of every rank."""
        channels: dict[tuple, list[OpKey]] = defaultdict(list)
        rounds: dict[tuple, list[OpKey]] = defaultdict(list)
        seen: Counter = Counter()
        for key, op in _walk(schedule):
            rank = key[0]
            if op.kind in ("send", "recv"):
                ends = (rank, op.peer) if op.kind == "send" else (op.peer, rank)
                channel = (op.comm, *ends, op.kind)
                channels[channel].append(key)
                continue
            if op.kind in ir.COLLECTIVE_KINDS:
                team = ("collective", op.comm, schedule.members(op.comm, rank))
            elif op.kind in ("barrier_all", "sync_all"):
                team = ("barrier",)
            else:
                continue
            rounds[(team, seen[(team, rank)])].append(key)
            seen[(team, rank)] += 1
        for (comm, sender, receiver, kind), sent in channels.items():
            if kind != "send":
                continue
            for n, pair in enumerate(zip(sent, channels.get((comm, sender, receiver, "recv"), ()))):
                self._join(("p2p", comm, sender, receiver, n), list(pair))
        for name, keys in rounds.items():
            self._join(name, keys)

    def _ancestors(self) -> list[int]:
        """pre[n]: a bitset of the nodes that happen before n. Nodes that never happen (on or after
        a cycle) get every node."""
        size = len(self.succ)
        succ = [set(targets) for targets in self.succ]
        indegree = [0] * size
        for targets in succ:
            for t in targets:
                indegree[t] += 1
        pre = [0] * size
        done = [False] * size
        ready = [n for n in range(size) if indegree[n] == 0]
        while ready:
            n = ready.pop()
            if n & 1023 == 0:
                self.deadline.check("the static happens-before order")
            done[n] = True
            pre[n] |= self.extra[n]
            carried = pre[n] | (1 << n)
            for t in succ[n]:
                pre[t] |= carried
                indegree[t] -= 1
                if indegree[t] == 0:
                    ready.append(t)
        dead = 0
        for n in range(size):
            if not done[n] or pre[n] >> n & 1:
                dead |= 1 << n
        if dead:
            pre = [self.all if (n_pre & dead or dead >> n & 1) else n_pre for n, n_pre in enumerate(pre)]
        return pre

    def _node(self, key: OpKey, delivery: bool = False) -> int:
        name = ("delivery", key[0], key[1])
        if delivery and name in self.ids:
            return self.ids[name]
        return self.ids[("op", key[0], key[1])]

    def _order_waits(self, waits: "_Waits") -> bool:
        """Add to each wait the nodes that must precede it by value; True if any was new."""
        changed = False
        for key, wait, _, reachable in waits.waits:
            self.deadline.check("the static happens-before order")
            w = self._node(key)
            if self.pre[w] == self.all:
                continue  # never returns
            # Updates that land, and not only after the wait is done.
            updates, covers = [], []
            for update in reachable:
                land = self._node(update.key, delivery=True)
                if self.pre[land] == self.all or self.pre[self._node(update.key)] >> w & 1:
                    continue
                updates.append(update)
                covers.append(self.pre[land] | (1 << land))
            if waits.satisfiable(wait, []) is not False:
                continue  # satisfied with no update at all: orders nothing
            # Split the candidates into classes by which updates they precede, then ask, per
            # class, whether the updates they do not precede can satisfy the wait.
            candidates = 0
            for cover in covers:
                candidates |= cover
            candidates &= ~(self.pre[w] | (1 << w))
            classes = {(): candidates} if candidates else {}
            for n, cover in enumerate(covers):
                split = {}
                for signature, members in classes.items():
                    inside, outside = members & cover, members & ~cover
                    if inside:
                        split[signature + (n,)] = inside
                    if outside:
                        split[signature] = outside
                classes = split
            found = 0
            for signature, members in classes.items():
                chosen = set(signature)
                rest = [u for n, u in enumerate(updates) if n not in chosen]
                if waits.satisfiable(wait, rest) is False:
                    found |= members
            if found & ~self.extra[w]:
                self.extra[w] |= found
                changed = True
        return changed

    def _ends(self, access: _Access) -> tuple[int, int]:
        """(start, completion) nodes of an access."""
        cached = self.ends.get((access.key, access.deferred))
        if cached is None:
            cached = self.ends[(access.key, access.deferred)] = self._find_ends(access)
        return cached

    def _find_ends(self, access: _Access) -> tuple[int, int]:
        base = self.joint.get(access.key)
        if base is None:
            base = self.ids[("op", access.key[0], access.key[1])]
        if access.deferred:
            return self.ids[("op", access.key[0], access.key[1])], self.ids[("delivery", access.key[0], access.key[1])]
        return base, base

    def before(self, x: _Access, y: _Access) -> bool:
        _, done = self._ends(x)
        start, _ = self._ends(y)
        return bool(self.pre[start] >> done & 1)

    def unordered(self, a: _Access, b: _Access) -> bool:
        return not self.before(a, b) and not self.before(b, a)


def _signal_word(op: ir.OpBase) -> tuple | None:
    effect = signal_effect(op)
    return None if effect is None else (effect[0].signal, effect[0].index)


def _overlaps(z3, schedule: ir.Schedule, accesses: list[_Access],
              unordered: Callable[[OpKey, OpKey, bool, bool], bool] | None, need,
              deadline: Deadline = UNBOUNDED) -> None:
    """Concurrent accesses to one rank's buffer, one a write, are disjoint for every valuation."""
    default: list[_StaticOrder] = []  # built on first use: most schedules never need it
    decided: dict[tuple, bool] = {}

    def concurrent(a: _Access, b: _Access) -> bool:
        if unordered is None:
            if not default:
                default.append(_StaticOrder(z3, schedule, deadline))
            return default[0].unordered(a, b)
        pair = (a.key, a.deferred, b.key, b.deferred)
        if pair not in decided:
            decided[pair] = bool(unordered(a.key, b.key, a.deferred, b.deferred))
        return decided[pair]

    symbols = {sym.name: sym for sym in schedule.symbols}
    apart: dict[tuple, bool] = {}
    by_buffer: dict[tuple[int, str], list[_Access]] = defaultdict(list)
    for access in accesses:
        by_buffer[(access.memory, access.region.buffer)].append(access)
    for group in by_buffer.values():
        for i, a in enumerate(group):
            deadline.check("the z3 overlap checks")
            for b in group[i + 1:]:
                if not (a.write or b.write) or not (a.symbolic or b.symbolic) or (a.atomic and b.atomic):
                    continue
                # One proof per pair of forms, whichever op comes first.
                forms = a.forms + b.forms if a.forms <= b.forms else b.forms + a.forms
                if forms not in apart:
                    apart[forms] = _surely_apart(forms, symbols)
                if apart[forms] or a.key == b.key or not concurrent(a, b):
                    continue
                need("overlap", forms, (a, b))


def _surely_apart(forms: tuple[Form, Form, Form, Form], symbols: dict[str, ir.Symbol]) -> bool:
    """A cheap sufficient test, before z3: one region ends before the other starts whatever the
    symbols (chunk k against chunk m of one buffer), so the pair needs no ordering at all."""
    a_start, a_stop, b_start, b_stop = forms
    return _surely_nonnegative(_combine(b_start, a_stop, -1), symbols) or \
        _surely_nonnegative(_combine(a_start, b_stop, -1), symbols)


def _surely_nonnegative(form: Form, symbols: dict[str, ir.Symbol]) -> bool:
    lowest = form[0]
    for name, coeff in form[1]:
        symbol = symbols.get(name)
        if symbol is None:
            return False
        if coeff > 0:
            lowest += coeff * symbol.min
        elif symbol.max is None:
            return False
        else:
            lowest += coeff * symbol.max
    return lowest >= 0


# --------------------------------------------------------------------------------- reporting
class _Report:
    """A violation being assembled from the sites that share a source line."""

    def __init__(self, message: str, ob: _Obligation, valuation: dict[str, int] | None):
        self.message, self.ob, self.valuation = message, ob, valuation
        self.refs: list[OpRef] = []
        self.known: set[OpKey] = set()
        self.sites = 0

    def add(self, ops: list[tuple[OpKey, ir.OpBase]]) -> None:
        self.sites += 1
        for key, op in ops:
            if key not in self.known:
                self.known.add(key)
                self.refs.append(_ref(key, op))

    def violation(self, traced: dict[str, int]) -> Violation:
        return Violation(
            kind="symbolic_size", message=self.message, ranks=tuple(sorted({r.rank for r in self.refs})),
            ops=tuple(self.refs),
            details={"check": self.ob.kind, "valuation": self.valuation,
                     "forms": [show_form(f) for f in _shown_forms(self.ob)], "traced": traced,
                     "sites": self.sites})


def _shown_forms(ob: _Obligation) -> tuple:
    return (ob.forms[0],) if ob.kind == "divides" else ob.forms


def _site(ob: _Obligation, site) -> tuple[tuple, list[tuple[OpKey, ir.OpBase]]]:
    """The report a site belongs to (its source line or lines) and its ops."""
    if ob.kind == "bounds":
        return ("bounds", site.op.loc, site.field), [(site.key, site.op)]
    if ob.kind == "overlap":
        a, b = site
        lines = tuple(sorted([(str(a.op.loc), a.field), (str(b.op.loc), b.field)]))
        return ("overlap",) + lines, [(a.key, a.op), (b.key, b.op)]
    if site[0] == "divides":
        return ("divides", site[2].loc), [(site[1], site[2])]
    if site[0] == "pair":
        _, akey, aop, afield, _, bkey, bop, bfield, _ = site
    else:
        _, akey, aop, afield, _, _, bfield, _ = site
        bkey, bop = akey, aop
    return ("count", aop.loc, afield, bop.loc, bfield), [(akey, aop), (bkey, bop)]


def _message(ob: _Obligation, site, valuation: dict[str, int] | None) -> str:
    if ob.kind == "bounds":
        return _bounds_message(site, ob.forms, valuation)
    if ob.kind == "overlap":
        return _overlap_message(site[0], site[1], valuation)
    if site[0] == "divides":
        _, key, op, region, parts = site
        count = ob.forms[0]
        message = (f"{op.loc}: rank {key[0]}: {op.kind} src {_show_region(region)} has "
                   f"{show_form(count)} elements, which must split into {parts} equal chunks")
        return message + _failure_tail(valuation, (count,), lambda v: f"{_value(count, v)} elements")
    return _count_message(site, valuation)


def _failure_tail(valuation: dict[str, int] | None, forms: tuple, concrete: Callable[[dict], str]) -> str:
    if valuation is None:
        return "; z3 could not decide whether this holds for every size (it gave up)"
    return f" when {_show_valuation(valuation, _names(*forms))} ({concrete(valuation)})"


def _bounds_message(access: _Access, forms: tuple, valuation: dict[str, int] | None) -> str:
    start, stop, count = forms
    buf = access.region.buffer
    head = f"{access.op.loc}: rank {access.key[0]}: {_what(access)}"
    if valuation is None:
        return head + " may be out of bounds" + _failure_tail(None, forms, str)
    lo, hi, n = _value(start, valuation), _value(stop, valuation), _value(count, valuation)
    if lo < 0:
        problem = "starts before element 0"
    elif lo > hi:
        problem = "has its start after its stop"
    else:
        problem = "is out of bounds"
    has = f"{buf} has {show_form(count)} elements" if _symbolic(count) else f"{buf} has {n} elements"
    return (f"{head} {problem} when {_show_valuation(valuation, _names(*forms))} "
            f"({buf}[{lo}:{hi}], but {has}{f' = {n}' if _symbolic(count) else ''})")


def _overlap_message(a: _Access, b: _Access, valuation: dict[str, int] | None) -> str:
    head = (f"{a.op.loc}: rank {a.key[0]}: {_what(a)} and {b.op.loc}: rank {b.key[0]}: {_what(b)} "
            f"can run concurrently")
    forms = a.forms + b.forms
    if valuation is None:
        return head + " and may overlap" + _failure_tail(None, forms, str)
    a_lo, a_hi = (_value(f, valuation) for f in a.forms)
    b_lo, b_hi = (_value(f, valuation) for f in b.forms)
    buf = a.region.buffer
    shared = f"{buf}[{max(a_lo, b_lo)}:{min(a_hi, b_hi)}]"
    return (f"{head} and overlap when {_show_valuation(valuation, _names(*forms))}: "
            f"{buf}[{a_lo}:{a_hi}] and {buf}[{b_lo}:{b_hi}] share {shared} "
            f"(order them, or make the regions disjoint for every size)")


def _count_message(site, valuation: dict[str, int] | None) -> str:
    if site[0] == "pair":
        _, akey, aop, afield, aregion, bkey, bop, bfield, bregion = site
        a_count, b_count = _count(aregion), _count(bregion)
    else:  # "scaled": members * count(a) against count(b), both of one op
        _, akey, aop, afield, aregion, members, bfield, bregion = site
        bkey, bop = akey, aop
        a_count, b_count = _scaled(_count(aregion), members), _count(bregion)
    a_text = _show_op_region(aop, afield, aregion)
    if site[0] == "scaled":
        a_text = f"{members} x {a_text}"
    if bkey == akey:
        b_text = f"{bfield} {_show_region(bregion)}"
    else:
        b_text = f"the matching {_show_op_region(bop, bfield, bregion)} ({bop.loc}, rank {bkey[0]})"
    message = (f"{aop.loc}: rank {akey[0]}: {a_text} has {show_form(a_count)} elements but "
               f"{b_text} has {show_form(b_count)}")
    return message + _failure_tail(valuation, (a_count, b_count),
                                   lambda v: f"{_value(a_count, v)} vs {_value(b_count, v)}")


# -------------------------------------------------------------------------------------- waits
@dataclass(frozen=True)
class _Update:
    """One op that changes a signal word: its effect is add, set, none (fetch) or any."""

    key: OpKey
    op: ir.OpBase
    effect: str
    value: int


def _effect(op: ir.OpBase) -> tuple[str, int]:
    """(add | set | none | any, value): `semantics.signal_effect`, with `and` taken as any value
    (it can reach values below the word's), which keeps the wait check sound."""
    _, how, value = signal_effect(op)
    if how == "read":
        return "none", 0
    if how in ("clear", "any"):
        return "any", 0
    return how, value


class _Waits:
    """Every wait_until with the signal updates that can reach it, and z3 to decide which values
    those updates can produce (cached by question: many waits ask the same one)."""

    def __init__(self, z3, schedule: ir.Schedule, ordered: Callable[[OpKey, OpKey], bool] | None,
                 deadline: Deadline = UNBOUNDED):
        self.z3 = z3
        self.deadline = deadline
        self.solver = z3.Solver()
        self.decided: dict[tuple, bool | None] = {}
        updates: dict[tuple[int, str, int], list[_Update]] = defaultdict(list)
        waits: list[tuple[OpKey, ir.WaitUntil]] = []
        for key, op in _walk(schedule):
            word = _signal_word(op)
            if word is not None:
                effect, value = _effect(op)
                updates[(op.pe, *word)].append(_Update(key, op, effect, value))
            elif op.kind == "wait_until":
                waits.append((key, op))
        after = ordered if ordered is not None else _default_ordered(schedule)
        # (wait key, wait, every update of its word on its rank, those that can reach it)
        self.waits = []
        for key, wait in waits:
            found = updates.get((key[0], wait.signal.signal, wait.signal.index), [])
            self.waits.append((key, wait, found, [u for u in found if not after(key, u.key)]))

    def satisfiable(self, wait: ir.WaitUntil, reachable: list[_Update]) -> bool | None:
        """Can some subset and order of `reachable` make the wait's condition true? (None: z3
        could not decide.)"""
        if any(u.effect == "any" for u in reachable):
            return True
        question = (wait.cmp, wait.value) + _summary(reachable)
        if question not in self.decided:
            self.deadline.check("the z3 wait checks")
            self.solver.set(timeout=_timeout_ms(self.deadline))
            self.decided[question] = _satisfiable(self.z3, self.solver, *question)
            self.deadline.check("the z3 wait checks")  # an undecided answer at the deadline
        return self.decided[question]


def _summary(updates: list[_Update]) -> tuple[tuple, tuple]:
    """(adds as sorted (amount, how many), distinct set values)."""
    adds = Counter(u.value for u in updates if u.effect == "add" and u.value)
    sets = sorted({u.value for u in updates if u.effect == "set"})
    return tuple(sorted(adds.items())), tuple(sets)


def check_waits(schedule: ir.Schedule, ordered: Callable[[OpKey, OpKey], bool] | None = None,
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
    waits = _Waits(_z3(), schedule, ordered, deadline)
    violations = []
    for key, wait, found, reachable in waits.waits:
        if waits.satisfiable(wait, reachable) is False:
            adds, sets = _summary(reachable)
            violations.append(_wait_violation(key, wait, reachable, len(found) - len(reachable),
                                              Counter(dict(adds)), list(sets)))
    return violations


def _default_ordered(schedule: ir.Schedule) -> Callable[[OpKey, OpKey], bool]:
    syncs: dict[int, list[int]] = {}
    for program in schedule.programs:
        prefix = [0]
        for op in program.ops:
            prefix.append(prefix[-1] + (op.kind in ("barrier_all", "sync_all") or
                                        (op.kind == "barrier" and op.comm == "world")))
        syncs[program.rank] = prefix

    def ordered(wait: OpKey, update: OpKey) -> bool:
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


def _wait_violation(key: OpKey, wait: ir.WaitUntil, reachable: list[_Update], later: int,
                    adds: Counter, sets: list[int]) -> Violation:
    word = f"{wait.signal.signal}[{wait.signal.index}]"
    head = f"{wait.loc}: rank {key[0]} waits for {word} {_CMP_TEXT[wait.cmp]} {wait.value}"
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
    shown = [f"rank {u.key[0]} {ir.describe(u.op)} at {u.op.loc}" for u in reachable[:4]]
    if len(reachable) > 4:
        shown.append(f"and {len(reachable) - 4} more")
    if shown:
        message += ": " + "; ".join(shown)
    if later:
        message += f" ({_plural(later, 'more update')} {'come' if later != 1 else 'comes'} only after the wait)"
    refs = (_ref(key, wait),) + tuple(_ref(u.key, u.op) for u in reachable)
    return Violation(
        kind="unsatisfiable_wait", message=message, ranks=tuple(sorted({r.rank for r in refs})), ops=refs,
        details={"signal": word, "cmp": wait.cmp, "value": wait.value,
                 "adds": {str(a): n for a, n in sorted(adds.items())}, "sets": list(sets),
                 "reachable": len(reachable), "after_wait": later})


__all__ = ["check_sizes", "check_waits", "show_form"]


def unfinished_deliveries(schedule: ir.Schedule, deadline: Deadline = UNBOUNDED) -> list[Violation]:
    """Deliveries that some execution leaves in flight when every rank has finished its program:
    those not ordered before the end of any rank (no quiet or barrier_all after them on the issuer,
    and no rank whose progress depends on them). Decided on the static order, so the answer does
    not depend on which interleavings a search visits; the order can miss a chain an execution
    would give, which makes this a warning, never an error."""
    if not any(op.kind in ir.DELIVERY_KINDS for p in schedule.programs for op in p.ops):
        return []
    order = _StaticOrder(_z3(), schedule, deadline)
    ends = [order.ids[("op", p.rank, len(p.ops))] for p in schedule.programs if p.ops]
    refs = []
    for program in schedule.programs:
        for index, op in enumerate(program.ops):
            if op.kind not in ir.DELIVERY_KINDS:
                continue
            node = order.ids[("delivery", program.rank, index)]
            if not any(order.pre[end] >> node & 1 for end in ends):
                refs.append(_ref((program.rank, index, None), op))
    if not refs:
        return []
    return [Violation(
        kind="unfinished_deliveries", ranks=tuple(sorted({r.rank for r in refs})), ops=tuple(refs),
        message="these deliveries can still be in flight when every rank has finished: "
                + "; ".join(f"{r.loc} rank {r.rank}: {r.text}" for r in refs)
                + " (add quiet() or barrier_all() after them, or have the target wait for their signal)")]
