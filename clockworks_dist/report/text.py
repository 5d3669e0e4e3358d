"""Plain-text rendering of schedules and check results.

Everything here returns deterministic text (no colours, no timings unless asked for, no terminal
width): the CLI adds colour when it writes to a terminal, and golden-file tests compare the strings.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Sequence

from .. import ir
from ..check.result import CheckResult, OpRef, Step, Violation
from ..semantics.rules import describe

# Above this many ranks, a counterexample timeline shows only the ranks the violation involves.
MAX_TIMELINE_RANKS = 4
# At most this many rows of a timeline; the earliest steps are elided first (the violation is at the end).
MAX_TIMELINE_ROWS = 40
# Messages are wrapped at this width (deterministically, whatever the terminal).
MESSAGE_WIDTH = 100
# Widest op text in a timeline cell before it is shortened (the full text is in the op list above).
MAX_CELL = 50


# ------------------------------------------------------------------------------------- helpers
def _plural(count: int, word: str, plural: str | None = None) -> str:
    return f"{count:,} {word if count == 1 else (plural or word + 's')}"


def _ranks(ranks: Iterable[int]) -> str:
    """`0, 1, 2, 5, 6` as `0..2, 5, 6`: runs of three or more are shortened."""
    values = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{values[i]}..{values[j]}")
        else:
            parts.extend(str(v) for v in values[i:j + 1])
        i = j + 1
    return ", ".join(parts)


def _who(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_ranks(ranks)}"


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    """Columns separated by ` | `, padded to the widest cell; no trailing spaces."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return (indent + " | ".join(c.ljust(w) for c, w in zip(cells, widths))).rstrip()

    out = [line(header), (indent + "-+-".join("-" * w for w in widths)).rstrip()]
    out.extend(line(row) for row in rows)
    return out


def _opref_index(ref: OpRef) -> str:
    return f"#{ref.index}" if ref.sub is None else f"#{ref.index}.{ref.sub}"


def render_opref(ref: OpRef) -> str:
    """`ring.py:17  rank 0 #3.1  send(peer=1, x[0:4])`: where, who, which op, what."""
    where = f"{ref.loc}  " if ref.loc else ""
    return f"{where}{ref.who} {_opref_index(ref)}  {ref.text or ref.kind}"


# ------------------------------------------------------------------------------------- listing
def _affine_note(value: ir.Affine | None) -> str:
    return f" (= {value})" if value is not None and value.terms else ""


def _buffer_line(decl: ir.BufferDecl) -> str:
    heap = "symmetric" if decl.symmetric else "per-rank"
    return (f"{decl.name}: {decl.count}{_affine_note(decl.count_sym)} x {decl.dtype}, {decl.role}, {heap}"
            f"  ({decl.loc})")


def _declarations(sched: ir.Schedule) -> list[str]:
    """Buffers and signals, once if every rank declares the same, else per rank."""
    out: list[str] = []
    for what, get, fmt in (
        ("buffers", lambda p: p.buffers, _buffer_line),
        ("signals", lambda p: p.signals, lambda d: f"{d.name}: {d.count} x uint64  ({d.loc})"),
    ):
        per_rank = [tuple(fmt(d) for d in get(p)) for p in sched.programs]
        if all(lines == per_rank[0] for lines in per_rank):
            if not per_rank[0]:
                out.append(f"{what}: none")
                continue
            out.append(f"{what} (every rank):")
            out.extend(f"  {line}" for line in per_rank[0])
        else:
            out.append(f"{what}:")
            for rank, lines in enumerate(per_rank):
                out.append(f"  rank {rank}: " + ("none" if not lines else lines[0]))
                out.extend(f"          {line}" for line in lines[1:])
    return out


def _communicators(sched: ir.Schedule) -> list[str]:
    out = [f"communicators: world (ranks {_ranks(range(sched.world))})"]
    for comm in sched.comms:
        groups: list[tuple[int, ...]] = []
        for rank in range(sched.world):
            members = comm.members(rank)
            if members and members not in groups:
                groups.append(members)
        text = "  ".join("[" + ", ".join(map(str, g)) + "]" for g in groups)
        out.append(f"  {comm.name}: {text}")
    return out


def _contributions(e: ir.Expectation) -> str:
    """`x[0:16] on ranks 0..3` summed, or the terms one by one when their regions differ."""
    regions = {c.region.model_copy(update={"start_sym": None, "stop_sym": None}) for c in e.contributions}
    if len(e.contributions) > 1 and len(regions) == 1:
        region = e.contributions[0].region
        return f"{e.op}({region} on ranks {_ranks(c.rank for c in e.contributions)})"
    terms = [f"{c.region} on rank {c.rank}" for c in e.contributions]
    if len(terms) == 1:
        return terms[0]
    symbol = {"sum": " + ", "prod": " * "}.get(e.op)
    return symbol.join(terms) if symbol else f"{e.op}({', '.join(terms)})"


def _postcondition(sched: ir.Schedule) -> list[str]:
    """Expectations grouped by label; ranks whose expectation reads the same are merged."""
    if not sched.expect:
        return ["postcondition: none (only deadlocks, races and mismatches are checked)"]
    out = ["postcondition:"]
    labels: dict[str, dict[str, list[int]]] = {}
    for e in sched.expect:
        text = f"{e.region} = {_contributions(e)}"
        labels.setdefault(e.label or "custom", {}).setdefault(text, []).append(e.rank)
    for label, items in labels.items():
        out.append(f"  {label}:")
        for text, ranks in items.items():
            out.append(f"    {_who(ranks)}: {text}")
    return out


def _sizes(sched: ir.Schedule) -> list[str]:
    if not sched.symbols:
        return []
    out = ["sizes:"]
    for s in sched.symbols:
        bounds = [f"min {s.min}"]
        if s.max is not None:
            bounds.append(f"max {s.max}")
        if s.multiple_of != 1:
            bounds.append(f"multiple of {s.multiple_of}")
        out.append(f"  {s.name} = {s.value}  ({', '.join(bounds)}; set with --size {s.name}=VALUE)")
    return out


def _params(sched: ir.Schedule) -> list[str]:
    """The variant of a schedule family this is (`cw.param`, `cw.choice`)."""
    if not sched.params:
        return []
    return ["variant:"] + [f"  {name} = {value}  (set with --param {name}=VALUE)" for name, value in sched.params]


def _program(program: ir.Program, loc_width: int) -> list[str]:
    if program.threads:
        out = [f"rank {program.rank}: {_plural(len(program.threads), 'thread')}, concurrent"]
        for thread in program.threads:
            lines = _ops(thread.ops, loc_width)
            out.append(f"  {thread.kind} {thread.name} ({thread.loc}): {_plural(len(thread.ops), 'op')}")
            out += ["  " + line for line in lines]
        return out
    return [f"rank {program.rank}: {_plural(len(program.ops), 'op')}", *_ops(program.ops, loc_width)]


def _ops(ops, loc_width: int) -> list[str]:
    out = []
    index_width = len(f"{max(len(ops) - 1, 0)}.0") + 1
    for index, op in enumerate(ops):
        if op.kind == "group":
            out.append(f"  {str(index):<{index_width}} {str(op.loc):<{loc_width}}  group:")
            for sub, member in enumerate(op.ops):
                out.append(f"  {f'{index}.{sub}':<{index_width}} {str(member.loc):<{loc_width}}"
                           f"    {describe(member)}")
        else:
            out.append(f"  {str(index):<{index_width}} {str(op.loc):<{loc_width}}  {describe(op)}")
    return out


def _all_locs(sched: ir.Schedule) -> Iterable[ir.SourceLoc]:
    for program in sched.programs:
        for op in program.all_ops():
            yield op.loc
            for member in getattr(op, "ops", ()):
                yield member.loc


def render_listing(sched: ir.Schedule) -> str:
    """Every rank's program (index, file:line, op; group members indented), the declarations,
    communicators and postcondition, as plain text."""
    nodes = sched.world // sched.ranks_per_node
    node_text = (f"{_plural(nodes, 'node')} of {sched.ranks_per_node}" if nodes > 1
                 else "1 node")
    lines = [f"schedule {sched.name}  ({sched.loc}): {_plural(sched.world, 'rank')}, {node_text}"]
    lines += _sizes(sched)
    lines += _params(sched)
    lines += _declarations(sched)
    lines += _communicators(sched)
    lines += _postcondition(sched)
    loc_width = max((len(str(loc)) for loc in _all_locs(sched)), default=0)
    for program in sched.programs:
        lines.append("")
        lines += _program(program, loc_width)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- results
def _cell(refs: Sequence[OpRef], prefix: str = "") -> str:
    parts = []
    for ref in refs:
        line = f" :{ref.loc.line}" if ref.loc else ""
        thread = f"{ref.thread}: " if ref.thread is not None else ""  # a thread's op, in its rank's column
        parts.append(_shorten(prefix + thread + (ref.text or ref.kind), MAX_CELL - len(line)) + line)
    return "; ".join(parts)


_RANK_WORDS = re.compile(r"ranks?\s+\d+(\s*,\s*\d+)*")


def _is_delivery(step: Step) -> bool:
    """A one-sided delivery landing at its target: drawn in the target's column, marked as such."""
    return bool(step.action) and step.action[0] == "deliver" and not _is_landing(step)


def _is_landing(step: Step) -> bool:
    """A recv or collective member writing its output and completing (a negative delivery index)."""
    return bool(step.action) and step.action[0] == "deliver" and step.action[2] < 0


def _columns(step: Step) -> list[tuple[int, OpRef]]:
    """(column rank, op) for each op of a step: a delivery's op sits in its target's column."""
    if _is_delivery(step) and step.at is not None:
        return [(step.at, ref) for ref in step.ops]
    return [(ref.rank, ref) for ref in step.ops]


def _label_adds_nothing(step: Step) -> bool:
    """True when a step's label only names ranks and the ops the row already shows."""
    if not step.label or _is_delivery(step) or _is_landing(step):
        return True
    rest = step.label
    for ref in step.ops:
        rest = rest.replace(ref.text, "")
    rest = _RANK_WORDS.sub("", rest)
    return not rest.strip(" \t,:;/->")


def _involved(v: Violation) -> list[int]:
    return sorted(set(v.ranks) | {ref.rank for ref in v.ops})


def _timeline_ranks(v: Violation, world: int | None) -> tuple[list[int], bool]:
    """The ranks to draw a column for, and whether some ranks are hidden."""
    in_trace = {rank for step in v.trace for rank, _ in _columns(step)} | set(_involved(v))
    every = list(range(world)) if world else sorted(in_trace)
    if len(every) <= MAX_TIMELINE_RANKS:
        return every, False
    shown = _involved(v) or sorted(in_trace)[:MAX_TIMELINE_RANKS]
    return shown, True


def _blocked_row(v: Violation, ranks: Sequence[int]) -> list[str]:
    """The final state of a deadlock: each rank's blocked op, or that it finished.

    Blocked ops come from `v.ops` (with their lines), else from `details["blocked"]` (rank -> op
    texts); when `details["blocked"]` is given, a rank it does not name has finished."""
    blocked_texts = {int(rank): texts for rank, texts in v.details.get("blocked", {}).items()}
    finished = set(v.details.get("finished", ()))
    row = []
    for rank in ranks:
        refs = [ref for ref in v.ops if ref.rank == rank]
        if refs:
            row.append(_cell(refs, "blocked: "))
        elif rank in blocked_texts:
            texts = blocked_texts[rank]
            row.append("blocked: " + "; ".join([texts] if isinstance(texts, str) else texts))
        elif rank in finished or (blocked_texts and rank not in blocked_texts):
            row.append("finished")
        else:
            row.append("")
    return row


def render_timeline(v: Violation, world: int | None = None) -> str:
    """The counterexample as a table: one row per step, one column per rank (for more than
    MAX_TIMELINE_RANKS ranks, only the ranks involved); a deadlock ends with each rank's blocked op."""
    ranks, hidden = _timeline_ranks(v, world)
    shown = set(ranks)
    show_labels = not all(_label_adds_nothing(step) for step in v.trace)
    header = ["step", *(f"rank {rank}" for rank in ranks)] + (["action"] if show_labels else [])

    rows: list[list[str]] = []
    skipped = 0

    def flush_skipped() -> None:
        nonlocal skipped
        if skipped:
            rows.append(["...", f"({_plural(skipped, 'step')} on other ranks)"] + [""] * (len(header) - 2))
            skipped = 0

    for number, step in enumerate(v.trace, start=1):
        mine = [(rank, ref) for rank, ref in _columns(step) if rank in shown]
        if hidden and not mine:
            skipped += 1
            continue
        flush_skipped()
        row = [str(number)]
        for rank in ranks:
            refs = [ref for at, ref in mine if at == rank]
            prefix = f"from rank {refs[0].rank}: " if refs and _is_delivery(step) and step.at is not None \
                else ("delivered: " if _is_delivery(step) else ("completes: " if _is_landing(step) else ""))
            row.append(_cell(refs, prefix))
        if show_labels:
            row.append("" if _label_adds_nothing(step) else _shorten(step.label, MAX_CELL))
        rows.append(row)
    flush_skipped()

    elided = len(rows) - MAX_TIMELINE_ROWS
    if elided > 0:
        rows = rows[elided:]
        note = ["...", f"({_plural(elided, 'earlier row')} not shown; --json has the full trace)"]
        rows.insert(0, note + [""] * (len(header) - 2))
    if v.kind == "deadlock":
        rows.append(["end", *_blocked_row(v, ranks)] + ([""] if show_labels else []))

    out = []
    if hidden:
        out.append(f"  (showing {_who(ranks)}, involved in the violation; steps on other ranks are folded)")
    out += _table(header, rows)
    return "\n".join(out)


def _detail(key: str, value) -> str:
    """A detail line; a wait-for `cycle` of ranks reads as `rank 0 -> rank 1 -> rank 0`."""
    if key == "cycle" and isinstance(value, (list, tuple)) and value and all(isinstance(r, int) for r in value):
        closed = list(value) if value[0] == value[-1] and len(value) > 1 else [*value, value[0]]
        return "wait-for cycle: " + " -> ".join(f"rank {r}" for r in closed)
    if key == "cycle" and isinstance(value, (list, tuple)) and value:  # named actors: ranks and their threads
        return "wait-for cycle: " + " -> ".join(str(r) for r in [*value, value[0]])
    return f"{key}: {_detail_value(value)}"


def _detail_value(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_detail_value(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_detail_value(v) for v in value)
    return str(value)


def render_violation(v: Violation, world: int | None = None) -> str:
    """A violation: kind, message, its ops with file:line, details, and the counterexample timeline."""
    who = f" ({_who(v.ranks)})" if v.ranks else ""
    lines = [f"{v.severity}: {v.kind}{who}"]
    for paragraph in v.message.splitlines():
        lines += textwrap.wrap(paragraph, MESSAGE_WIDTH, initial_indent="  ", subsequent_indent="  ",
                               break_long_words=False, break_on_hyphens=False) or [""]
    if v.ops:
        lines.append("  ops:")
        lines += [f"    {render_opref(ref)}" for ref in v.ops]
    for key in sorted(v.details):
        if key in ("finished", "blocked") or (key == "rank" and tuple(v.ranks) == (v.details[key],)):
            continue  # shown in the timeline's last row, or in the header
        lines.append(f"  {_detail(key, v.details[key])}")
    if v.trace:
        lines.append(f"  counterexample ({_plural(len(v.trace), 'step')}):")
        lines.append(render_timeline(v, world))
    elif v.kind == "deadlock" and v.ops:
        lines.append("  counterexample: stuck from the start")
        lines.append(render_timeline(v, world))
    return "\n".join(lines)


def _search_note(result: CheckResult) -> str:
    reduction = "partial-order reduction" if result.reduction else "no reduction"
    return (f"{_plural(result.states, 'state')}, {_plural(result.transitions, 'transition')}"
            f" ({result.strategy}, {reduction})")


def _stopped(result: CheckResult) -> str:
    if result.stopped_by == "max_states":
        return f"stopped at {result.states:,} states"
    if result.stopped_by == "timeout":
        if result.stopped_in and result.stopped_in != "the state search":
            searched = f"after {result.states:,} states" if result.states else "before the search"
            return f"stopped by the timeout in {result.stopped_in}, {searched}"
        return f"stopped by the timeout after {result.states:,} states"
    return f"stopped after {result.states:,} states"


def render_verdict(result: CheckResult) -> str:
    """One line: the schedule, the world size and what the search established."""
    head = f"{result.schedule.name}, {_plural(result.schedule.world, 'rank')}: "
    errors, warnings = result.errors, result.warnings
    counts = ", ".join(x for x in (_plural(len(errors), "error") if errors else "",
                                   _plural(len(warnings), "warning") if warnings else "") if x)
    if result.verdict == "violated":
        text = f"violated ({counts})"
        if not result.complete:
            text += f"; the search {_stopped(result)}, so there may be more"
        return head + text
    if result.verdict == "verified" and result.complete:
        return head + "verified" + (f", with {counts}" if warnings else "")
    # Incomplete: never "verified".
    found = "no error found" if warnings else "no violation found"
    return head + f"{found}, but the search is incomplete ({_stopped(result)})"


def render_result(result: CheckResult, *, timing: bool = False) -> str:
    """The verdict, search statistics, then errors and warnings (errors first)."""
    lines = [render_verdict(result)]
    stats = "  " + _search_note(result)
    if result.states == 0 and result.violations:
        stats = "  found by the static checks, before the state-space search"
    elif timing:
        rate = f", {result.states / result.seconds:,.0f} states/s" if result.seconds > 0 else ""
        stats += f" in {result.seconds:.2f} s{rate}"
    lines.append(stats)
    for v in [*result.errors, *result.warnings]:
        lines.append("")
        lines.append(render_violation(v, result.schedule.world))
    return "\n".join(lines)


def overall_verdict(results: Sequence[CheckResult]) -> str:
    """violated if any is, else incomplete if any is, else verified."""
    verdicts = {r.verdict for r in results}
    if "violated" in verdicts:
        return "violated"
    if "incomplete" in verdicts or not all(r.complete for r in results):
        return "incomplete"
    return "verified"


def render_summary(results: Sequence[CheckResult]) -> str:
    """One line per result, for a run that checked several (schedule, world size) pairs."""
    lines = [f"summary: {overall_verdict(results)}"]
    lines += [f"  {render_verdict(r)}" for r in results]
    return "\n".join(lines)


__all__ = [
    "overall_verdict", "render_listing", "render_opref", "render_result", "render_summary",
    "render_timeline", "render_verdict", "render_violation",
]
