"""The size check: for every admissible valuation of the `cw.size` symbols, regions are in bounds,
transfers move equal counts, and accesses that can be concurrent never overlap.

Each fact is an obligation over affine forms; z3 refutes them in batches (`solver`), and a failed
proof is a `symbolic_size` violation, one per source line, whose message shows the counterexample
valuation closest to the traced one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from ... import ir
from ...semantics.budget import UNBOUNDED, Deadline
from ...semantics.match import Key, Matches, match, op_ref
from ...semantics.order import StaticOrder
from ...semantics.rules import describe, rule
from ..result import OpRef, Violation
from .forms import (Access, Form, accesses, buffer_count, is_symbolic, names, region_count, scaled,
                    show_form, show_op_region, show_region, show_valuation, value_at, walk)
from .solver import Solver, z3_module
from .waits import static_order

Unordered = Callable[[Key, Key, bool, bool], bool]


class _Side(NamedTuple):
    """One region of a count obligation: a field of an op."""

    key: Key
    op: ir.OpBase
    field: str
    region: ir.Region


class _CountSite(NamedTuple):
    """Two regions that must hold as many elements; with `members`, `a` counts `members` times (an
    all_gather's src against its dst)."""

    a: _Side
    b: _Side
    members: int | None = None


class _DividesSite(NamedTuple):
    """A region that must split into `parts` equal chunks (an all_to_all's src)."""

    key: Key
    op: ir.OpBase
    region: ir.Region
    parts: int


class _OverlapSite(NamedTuple):
    """Two accesses that can be concurrent, one of them a write."""

    a: Access
    b: Access


@dataclass
class _Obligation:
    """A fact to prove for every valuation, over the affine `forms`; `_negation` gives the formula a
    counterexample satisfies. Sites are the ops (or op pairs) that need it."""

    kind: str  # bounds, count, divides, overlap
    forms: tuple
    sites: list = field(default_factory=list)


def check_sizes(schedule: ir.Schedule, unordered: Unordered | None = None, *,
                beyond_traced: bool = False, deadline: Deadline = UNBOUNDED,
                matches: Matches | None = None) -> list[Violation]:
    """Prove, for every admissible valuation of the size symbols, that regions are in bounds,
    transfers move equal counts, and accesses that can be concurrent, one of them a write, never
    overlap. Returns `symbolic_size` violations, one per source line, with counterexamples.

    `unordered(a, b, a_at_delivery, b_at_delivery)` says whether ops `a` and `b` (keys
    `(rank, index, sub)`) can run concurrently, from the happens-before order of an execution; the
    flags say whether each access happens at the op's delivery (a put's destination, an nbi put's
    source, a non-fetching atomic) or when the op executes (a blocking put's source). Without it,
    the static happens-before order of `semantics.order` decides, its waits ordered by value
    (`waits.static_order`).
    Pairs whose four bounds are all constant are left to the concrete checker, and with
    `beyond_traced` (set by `check`, which searches the traced instance) so are pairs that overlap at
    the traced sizes: that search reports them as data races when they really can be concurrent, so a
    bug gets one report, whatever the search order and whatever bound stopped it (a search stopped
    early makes the result incomplete instead: what it did not reach is not verified)."""
    solver = Solver(z3_module(), schedule.symbols, deadline)
    obligations: dict[tuple, _Obligation] = {}

    def need(kind: str, forms: tuple, site) -> None:
        key = (kind, forms)
        if key not in obligations:
            obligations[key] = _Obligation(kind, forms)
        obligations[key].sites.append(site)

    if matches is None:
        matches, _ = match(schedule, deadline)
    ops, unproven = _split_affine(schedule, list(walk(schedule)))
    memo: dict = {}
    found = [a for key, op in ops for a in accesses(key, op, memo)]
    del memo
    _bounds(schedule, found, need)
    _counts(schedule, matches, ops, need)
    traced = {s.name: s.value for s in schedule.symbols}
    _overlaps(schedule, matches, found, unordered, need, deadline,
              left_to_search=(lambda forms: _overlap_at(forms, traced)) if beyond_traced else None)
    items = list(obligations.values())
    negations = [_negation(solver, ob) for ob in items]
    failing, unknown = solver.refute(negations)
    # One report per source line (or pair of lines): the first failing site names the problem and
    # its valuation; the other sites only add their ops. Messages and valuations are built lazily.
    reports: dict[tuple, _Report] = {}
    for i in failing + unknown:
        ob, valuation, sizes = items[i], None, ""
        for site in ob.sites:
            line_key, keys = _site(ob, site)
            report = reports.get(line_key)
            if report is None:
                if valuation is None and i not in unknown:
                    valuation = solver.valuation(negations[i]) or None
                    if valuation is not None:
                        sizes = solver.failing_sizes(negations[i], names(*_shown_forms(ob)), traced)
                report = reports[line_key] = _Report(_message(ob, site, valuation) + sizes, ob, valuation)
            report.add(schedule, keys)
    return [report.violation(traced) for report in reports.values()] + unproven


def _split_affine(schedule: ir.Schedule, ops: list) -> tuple[list, list[Violation]]:
    """Ops whose bounds (or whose buffers' counts) are not affine in the sizes cannot be proven
    for every size: leave them to the concrete check and say so, once per source line."""
    inexact_buffers = {(p.rank, d.name) for p in schedule.programs for d in p.buffers
                       if d.count_sym is not None and not d.count_sym.exact}
    kept, skipped = [], {}
    seen: dict[int, tuple] = {}  # id(op) -> (op, its regions' buffers, or None if a bound is not affine)
    for key, op in ops:
        found = seen.get(id(op))  # the tracer shares an op among the ranks and steps that do the same
        if found is None:
            regions = [region for _, region in ir.op_regions(op)]
            inexact = any(form is not None and not form.exact for r in regions for form in (r.start_sym, r.stop_sym))
            found = seen[id(op)] = (op, None if inexact else tuple({r.buffer for r in regions}))
        buffers = found[1]
        bad = buffers is None or bool(inexact_buffers) and any((key[0], b) in inexact_buffers for b in buffers)
        if bad:
            skipped.setdefault((op.loc.file, op.loc.line), []).append((key, op))
        else:
            kept.append((key, op))
    notes = []
    for (_file, _line), group in skipped.items():
        key, op = group[0]
        notes.append(Violation(
            kind="symbolic_unproven", ranks=tuple(sorted({k[0] for k, _ in group})),
            ops=tuple(op_ref(schedule, k) for k, _ in group),
            message=f"{op.loc}: rank {key[0]}: {describe(op)} has a bound that is not affine in the sizes "
                    "(it uses //, % or a product of sizes), so it is checked at the traced size only "
                    "(write it as a multiple of a size to have it proven for every size)"))
    return kept, notes


def _overlap_at(forms: tuple, valuation: dict[str, int]) -> bool:
    """Do the two regions of an overlap obligation share an element at `valuation`?"""
    if any(name not in valuation for name in names(*forms)):
        return False
    a_start, a_stop, b_start, b_stop = (value_at(f, valuation) for f in forms)
    return a_start < a_stop and b_start < b_stop and a_start < b_stop and b_start < a_stop


def _negation(solver: Solver, ob: _Obligation):
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


# -------------------------------------------------------------------------------- obligations
def _bounds(schedule: ir.Schedule, found: list[Access], need) -> None:
    """0 <= start <= stop <= count of the buffer on the rank that holds it."""
    counts: dict[tuple[int, str], Form | None] = {}  # (rank, buffer) -> its count's form
    for access in found:
        memory, name = access.memory, access.region.buffer
        count = counts.get((memory, name), False)
        if count is False:
            try:
                count = counts[(memory, name)] = buffer_count(schedule.programs[memory].buffer(name))
            except (KeyError, IndexError):
                count = counts[(memory, name)] = None  # an unknown buffer is a trace error, reported there
        if count is None:
            continue
        start, stop = access.forms
        if access.symbolic or count[1]:
            need("bounds", (start, stop, count), access)


def _counts(schedule: ir.Schedule, matches: Matches, ops: list[tuple[Key, ir.OpBase]], need) -> None:
    """Transfers move equal counts: put/get, copy, reduce, collectives, a send and its matched recv,
    and the k-th collective of every member of a communicator."""
    counts: dict[int, tuple] = {}  # id(region) -> (region, its count): the tracer shares regions

    def count(region: ir.Region) -> Form:
        found = counts.get(id(region))
        if found is None:
            found = counts[id(region)] = (region, region_count(region))
        return found[1]

    def equal(a: tuple, b: tuple, members: int | None = None) -> None:
        """a and b: the (key, op, field, region) of a `_Side`, built only for an obligation."""
        a_count, b_count = count(a[3]), count(b[3])
        if members is not None:
            a_count = scaled(a_count, members)
        if a_count != b_count and is_symbolic(a_count, b_count):
            need("count", tuple(sorted((a_count, b_count))), _CountSite(_Side(*a), _Side(*b), members))

    flows: dict[tuple[int, int], tuple] = {}  # (id(op), rank) -> (op, its rule's moves that copy or combine)
    for key, op in ops:
        found = flows.get((id(op), key[0]))
        if found is None:
            moves = [(move.dsts[0][1], tuple(region for _, region in move.srcs))
                     for move in rule(op).flows(op, key[0]) if move.opaque is None and move.value is None]
            found = flows[(id(op), key[0])] = (op, moves)
        for dst_region, srcs in found[1]:  # the data flow of the rule: each source as long as its destination
            dst = (key, op, "dst", dst_region)
            for region in srcs:
                equal((key, op, "src", region), dst)
        if op.kind in ir.COLLECTIVE_KINDS and op.kind != "barrier" and op.dst is not None:
            op_rule = rule(op)
            members = len(schedule.members(op.comm, key[0]))
            src, dst = (key, op, "src", op.src), (key, op, "dst", op.dst)
            src_units, dst_units = op_rule.scale(members)  # all_gather's dst is members times its src ...
            if dst_units > 1:
                equal(src, dst, dst_units)
            elif src_units > 1:  # ... reduce_scatter's src members times its dst
                equal(dst, src, src_units)
            else:
                equal(src, dst)
            if op.kind == "all_to_all" and members > 1 and is_symbolic(region_count(op.src)):
                need("divides", (region_count(op.src), members), _DividesSite(key, op, op.src, members))
    kept = dict(ops)
    for key, op in ops:
        partner = matches.recv_of.get(key)
        if partner in kept:
            equal((key, op, "src", op.src), (partner, kept[partner], "dst", kept[partner].dst))
    for key, op in ops:
        if op.kind not in ir.COLLECTIVE_KINDS or op.kind == "barrier" or key not in matches.cid_of:
            continue
        lead = matches.collectives[matches.cid_of[key]][0]
        if lead[0] != key[0] and lead in kept:
            equal((lead, kept[lead], "src", kept[lead].src), (key, op, "src", op.src))


def _overlaps(schedule: ir.Schedule, matches: Matches, found: list[Access], unordered: Unordered | None, need,
              deadline: Deadline = UNBOUNDED, left_to_search: Callable[[tuple], bool] | None = None) -> None:
    """Concurrent accesses to one rank's buffer, one a write, are disjoint for every valuation.
    Pairs of regions (as forms) are sorted out once per buffer name, for every rank: most are
    surely apart (chunk k against chunk m) or, with `left_to_search`, overlap at the traced sizes
    (the explicit search reports those); only the others need their accesses paired, and only
    those pairs ask whether they can be concurrent."""
    default: list[StaticOrder] = []  # built on first use: most schedules never need it
    decided: dict[tuple, bool] = {}

    def concurrent(a: Access, b: Access) -> bool:
        if unordered is None:
            if not default:
                default.append(static_order(schedule, deadline, matches))
            return default[0].unordered(a.key, b.key, a.deferred, b.deferred)
        pair = (a.key, a.deferred, b.key, b.deferred)
        if pair not in decided:
            decided[pair] = bool(unordered(a.key, b.key, a.deferred, b.deferred))
        return decided[pair]

    symbols = {sym.name: sym for sym in schedule.symbols}
    by_buffer: dict[tuple[int, str], dict[tuple, list[Access]]] = defaultdict(lambda: defaultdict(list))
    shapes: dict[str, set[tuple]] = defaultdict(set)  # buffer name -> every region (as forms) used on it
    position: dict[int, int] = {}  # id(access) -> its place in `found`: a pair is named in that order
    for number, access in enumerate(found):
        by_buffer[(access.memory, access.region.buffer)][access.forms].append(access)
        shapes[access.region.buffer].add(access.forms)
        position[id(access)] = number
    pairs: dict[str, list[tuple[tuple, tuple]]] = {}  # buffer name -> pairs of regions that need a look
    for buffer, regions in shapes.items():
        # every pair of distinct regions of a buffer: a ring of n ranks names n chunks of x, so
        # this is n * n / 2 pairs, each tested without building forms (`_lowest`, no cache to thrash)
        ordered = sorted(regions)
        found_pairs = pairs[buffer] = []
        for i, a_forms in enumerate(ordered):
            deadline.check("the z3 overlap checks")
            a_start, a_stop = a_forms
            for b_forms in ordered[i:]:
                b_start, b_stop = b_forms
                lowest = _lowest(b_start, a_stop, symbols)
                if lowest is not None and lowest >= 0:
                    continue  # surely apart: a ends before b starts, whatever the sizes
                lowest = _lowest(a_start, b_stop, symbols)
                if lowest is not None and lowest >= 0:
                    continue
                forms = a_forms + b_forms
                if left_to_search is not None and left_to_search(forms):
                    continue
                found_pairs.append((a_forms, b_forms))
    for (_memory, buffer), by_forms in by_buffer.items():
        deadline.check("the z3 overlap checks")
        for a_forms, b_forms in pairs[buffer]:
            first, second = by_forms.get(a_forms), by_forms.get(b_forms)
            if not first or not second:
                continue
            forms = a_forms + b_forms
            for i, a in enumerate(first):
                for b in (first[i + 1:] if a_forms == b_forms else second):
                    if not (a.write or b.write) or not (a.symbolic or b.symbolic) or (a.atomic and b.atomic):
                        continue
                    if a.key == b.key or not concurrent(a, b):
                        continue
                    site = _OverlapSite(a, b) if position[id(a)] < position[id(b)] else _OverlapSite(b, a)
                    need("overlap", forms, site)


def _lowest(x: Form, y: Form, symbols: dict[str, ir.Symbol]) -> int | None:
    """The least value of x - y over the admissible sizes, or None if it has none (a size
    without a max, with a negative coefficient). A pair of regions is surely apart when one
    region's start minus the other's stop is at least 0 (chunk k against chunk m of one buffer)."""
    lowest = x[0] - y[0]
    if not x[1] and not y[1]:
        return lowest
    coeffs = dict(x[1])
    for name, coeff in y[1]:
        coeffs[name] = coeffs.get(name, 0) - coeff
    for name, coeff in coeffs.items():
        if not coeff:
            continue
        symbol = symbols.get(name)
        if symbol is None:
            return None
        if coeff > 0:
            lowest += coeff * symbol.min
        elif symbol.max is None:
            return None
        else:
            lowest += coeff * symbol.max
    return lowest


# --------------------------------------------------------------------------------- reporting
class _Report:
    """A violation being assembled from the sites that share a source line."""

    def __init__(self, message: str, ob: _Obligation, valuation: dict[str, int] | None):
        self.message, self.ob, self.valuation = message, ob, valuation
        self.refs: list[OpRef] = []
        self.known: set[Key] = set()
        self.sites = 0

    def add(self, schedule: ir.Schedule, keys: list[Key]) -> None:
        self.sites += 1
        for key in keys:
            if key not in self.known:
                self.known.add(key)
                self.refs.append(op_ref(schedule, key))

    def violation(self, traced: dict[str, int]) -> Violation:
        return Violation(
            kind="symbolic_size", message=self.message, ranks=tuple(sorted({r.rank for r in self.refs})),
            ops=tuple(self.refs),
            details={"check": self.ob.kind, "valuation": self.valuation,
                     "forms": [show_form(f) for f in _shown_forms(self.ob)], "traced": traced,
                     "sites": self.sites})


def _shown_forms(ob: _Obligation) -> tuple:
    return (ob.forms[0],) if ob.kind == "divides" else ob.forms


def _site(ob: _Obligation, site) -> tuple[tuple, list[Key]]:
    """The report a site belongs to (its source line or lines) and its ops."""
    if ob.kind == "bounds":
        return ("bounds", site.op.loc, site.field), [site.key]
    if ob.kind == "overlap":
        lines = tuple(sorted([(str(site.a.op.loc), site.a.field), (str(site.b.op.loc), site.b.field)]))
        return ("overlap",) + lines, [site.a.key, site.b.key]
    if ob.kind == "divides":
        return ("divides", site.op.loc), [site.key]
    a, b = site.a, site.b
    return ("count", a.op.loc, a.field, b.op.loc, b.field), [a.key, b.key]


def _message(ob: _Obligation, site, valuation: dict[str, int] | None) -> str:
    if ob.kind == "bounds":
        return _bounds_message(site, ob.forms, valuation)
    if ob.kind == "overlap":
        return _overlap_message(site.a, site.b, valuation)
    if ob.kind == "divides":
        count = ob.forms[0]
        message = (f"{site.op.loc}: rank {site.key[0]}: {site.op.kind} src {show_region(site.region)} has "
                   f"{show_form(count)} elements, which must split into {site.parts} equal chunks")
        return message + _failure_tail(valuation, (count,), lambda v: f"{value_at(count, v)} elements")
    return _count_message(site, valuation)


def _failure_tail(valuation: dict[str, int] | None, forms: tuple, concrete: Callable[[dict], str]) -> str:
    if valuation is None:
        return "; z3 could not decide whether this holds for every size (it gave up)"
    return f" when {show_valuation(valuation, names(*forms))} ({concrete(valuation)})"


def _bounds_message(access: Access, forms: tuple, valuation: dict[str, int] | None) -> str:
    start, stop, count = forms
    buf = access.region.buffer
    head = f"{access.op.loc}: rank {access.key[0]}: {access.describe()}"
    if valuation is None:
        return head + " may be out of bounds" + _failure_tail(None, forms, str)
    lo, hi, n = value_at(start, valuation), value_at(stop, valuation), value_at(count, valuation)
    if lo < 0:
        problem = "starts before element 0"
    elif lo > hi:
        problem = "has its start after its stop"
    else:
        problem = "is out of bounds"
    has = f"{buf} has {show_form(count)} elements" if is_symbolic(count) else f"{buf} has {n} elements"
    return (f"{head} {problem} when {show_valuation(valuation, names(*forms))} "
            f"({buf}[{lo}:{hi}], but {has}{f' = {n}' if is_symbolic(count) else ''})")


def _overlap_message(a: Access, b: Access, valuation: dict[str, int] | None) -> str:
    head = (f"{a.op.loc}: rank {a.key[0]}: {a.describe()} and {b.op.loc}: rank {b.key[0]}: {b.describe()} "
            f"can run concurrently")
    forms = a.forms + b.forms
    if valuation is None:
        return head + " and may overlap" + _failure_tail(None, forms, str)
    a_lo, a_hi = (value_at(f, valuation) for f in a.forms)
    b_lo, b_hi = (value_at(f, valuation) for f in b.forms)
    buf = a.region.buffer
    shared = f"{buf}[{max(a_lo, b_lo)}:{min(a_hi, b_hi)}]"
    return (f"{head} and overlap when {show_valuation(valuation, names(*forms))}: "
            f"{buf}[{a_lo}:{a_hi}] and {buf}[{b_lo}:{b_hi}] share {shared} "
            f"(order them, or make the regions disjoint for every size)")


def _count_message(site: _CountSite, valuation: dict[str, int] | None) -> str:
    a, b = site.a, site.b
    a_count, b_count = region_count(a.region), region_count(b.region)
    a_text = show_op_region(a.op, a.field, a.region)
    if site.members is not None:
        a_count = scaled(a_count, site.members)
        a_text = f"{site.members} x {a_text}"
    if b.key == a.key:
        b_text = f"{b.field} {show_region(b.region)}"
    else:
        b_text = f"the matching {show_op_region(b.op, b.field, b.region)} ({b.op.loc}, rank {b.key[0]})"
    message = (f"{a.op.loc}: rank {a.key[0]}: {a_text} has {show_form(a_count)} elements but "
               f"{b_text} has {show_form(b_count)}")
    return message + _failure_tail(valuation, (a_count, b_count),
                                   lambda v: f"{value_at(a_count, v)} vs {value_at(b_count, v)}")
