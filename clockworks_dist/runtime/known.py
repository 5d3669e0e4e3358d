"""Known disagreements between the checker's semantics and MPI, until the semantics is fixed.

The checker verifies some schedules whose group members overlap, one of them writing; MPI (and
NCCL) may read a send's buffer while a recv of the same group writes it
(protocols/runtime/group_send_reads_own_recv.py). The agreement test and benchmark set these apart.
"""

from __future__ import annotations

from .. import ir


def group_member_overlap(sched: ir.Schedule) -> bool:
    """Whether some group's members overlap, one of them writing."""
    for program in sched.programs:
        for op in program.ops:
            if op.kind != "group":
                continue
            places = [(m.src, False) if m.kind == "send" else (m.dst, True) for m in op.ops]
            for i, (a, writes_a) in enumerate(places):
                for b, writes_b in places[i + 1:]:
                    if (writes_a or writes_b) and a.buffer == b.buffer and a.start < b.stop and b.start < a.stop:
                        return True
    return False
