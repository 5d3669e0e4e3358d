"""The `unfinished_deliveries` warning: deliveries that some execution leaves in flight at the end."""

from __future__ import annotations

from ... import ir
from ...semantics.budget import UNBOUNDED, Deadline
from ...semantics.match import op_ref
from ...semantics.order import delivery_event, op_event
from ..result import Violation
from .waits import static_order


def unfinished_deliveries(schedule: ir.Schedule, deadline: Deadline = UNBOUNDED, order=None,
                          reported: frozenset = frozenset()) -> list[Violation]:
    """Deliveries that some execution leaves in flight when every rank has finished its program:
    those not ordered before the end of any rank (no quiet or barrier_all after them on the issuer,
    and no rank whose progress depends on them). Decided on a static order, so the answer does
    not depend on which interleavings a search visits; the order can miss a chain an execution
    would give, which makes this a warning, never an error. `order` has `happens_before(a, b)` on
    `semantics.order` events (the checker passes the reduction's `check.must.MustOrder`, whose
    vector clocks scale where this module's z3-ordered `static_order` does not); without it, the
    static order is built here. Ops in `reported`, as (rank, index), are left out: the search
    already reported them as `unfinished_output` errors (a delivery into an output that its
    target's end does not wait for)."""
    if not any(op.kind in ir.DELIVERY_KINDS for p in schedule.programs for op in p.ops):
        return []
    if order is None:
        order = static_order(schedule, deadline)
    ends = [op_event(p.rank, len(p.ops)) for p in schedule.programs if p.ops]
    refs = []
    for program in schedule.programs:
        for index, op in enumerate(program.ops):
            delivery = delivery_event(program.rank, index)
            if (program.rank, index) in reported:
                continue
            if op.kind in ir.DELIVERY_KINDS and not any(order.happens_before(delivery, end) for end in ends):
                refs.append(op_ref(schedule, (program.rank, index, None)))
    if not refs:
        return []
    return [Violation(
        kind="unfinished_deliveries", ranks=tuple(sorted({r.rank for r in refs})), ops=tuple(refs),
        message="these deliveries can still be in flight when every rank has finished: "
                + "; ".join(f"{r.loc} rank {r.rank}: {r.text}" for r in refs)
                + " (add quiet() or barrier_all() after them, or have the target wait for their signal)")]
