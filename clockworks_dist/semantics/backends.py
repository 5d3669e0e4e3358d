"""The shape of every backend table: executors, code generators and cost models.

A backend implements the rules of `rules` for one target (numpy and MPI, CuPy and NCCL, generated
NCCL or NVSHMEM CUDA, the simulator's costs). It does so as one table keyed by op class, plus an
explicit `unsupported` map that says, for each op class it cannot run, why (and `limits`: for an op
class it runs, a test that names what of one op it cannot, such as a send's channel). Nothing else: no
backend branches on an op's kind or re-derives what an op means; it reads `rules.rule(op)` for the
accesses and data flow and implements them.

`Backend.check_complete()` fails when an op class is in neither map (or in both), and
`tests/test_semantics.py` runs it on every registered backend: adding an op to `ir` fails the tests
until every backend has either an implementation or a stated reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .. import ir


class Unsupported(Exception):
    """An op the backend cannot run; the message says which backend, which op and why."""


@dataclass(frozen=True)
class Backend:
    """One backend: `table[op class]` implements it; `unsupported[op class]` says why not."""

    name: str
    table: Mapping[type, Any]
    unsupported: Mapping[type, str] = field(default_factory=dict)
    # per op class it implements, a test of one op: why this backend cannot run it (None: it can)
    limits: Mapping[type, Any] = field(default_factory=dict)
    threads: bool = False  # whether it runs a rank's threads (`ir.Thread`) concurrently

    def missing(self) -> list[str]:
        """The op kinds this backend neither implements nor declares unsupported."""
        return [cls.model_fields["kind"].default for cls in ir.OP_CLASSES
                if cls not in self.table and cls not in self.unsupported]

    def doubly_declared(self) -> list[str]:
        """The op kinds both implemented and declared unsupported."""
        return [cls.model_fields["kind"].default for cls in ir.OP_CLASSES
                if cls in self.table and cls in self.unsupported]

    def check_complete(self) -> None:
        """Raise `ValueError` naming every op class the tables leave undecided."""
        problems = []
        if self.missing():
            problems.append(f"no implementation and no UNSUPPORTED reason for {', '.join(self.missing())}")
        if self.doubly_declared():
            problems.append(f"both implemented and UNSUPPORTED: {', '.join(self.doubly_declared())}")
        if problems:
            raise ValueError(f"backend {self.name}: " + "; ".join(problems))

    def lookup(self, op) -> Any:
        """The implementation of `op`, or `Unsupported` with the reason (file:line of the op)."""
        found = self.table.get(type(op))
        if found is not None:
            limit = self.limits.get(type(op))
            why = limit(op) if limit is not None else None
            if why:
                raise Unsupported(f"{op.loc}: the {self.name} backend cannot run {op.kind}: {why}")
            return found
        reason = self.unsupported.get(type(op), "not implemented")
        raise Unsupported(f"{op.loc}: the {self.name} backend cannot run {op.kind}: {reason}")


BACKENDS: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    """Add a backend to the registry the coverage test walks; returns it."""
    BACKENDS[backend.name] = backend
    return backend


def no_grouped_collectives(op) -> str | None:
    """A `limits` test for `ir.Group`: why a backend that posts only sends and recvs in a group
    cannot run a group that holds a collective (None: the group holds none)."""
    inside = sorted({m.kind for m in op.ops if m.kind in ir.GROUP_COLLECTIVE_KINDS})
    if not inside:
        return None
    return (f"this group holds {', '.join(inside)}: this backend posts only sends and recvs together (a collective "
            "in a group is not implemented here; `clockworks check` explores it, the mpi-cpu executor runs it and "
            "the NCCL code generator emits it)")


def plain_connection(op) -> str | None:
    """A `limits` test for sends and recvs on backends whose point-to-point is NCCL's: one FIFO per
    (communicator, sender, receiver), rendezvous as the checker sees it; None for such an op."""
    if op.slots:
        return (f"slots={op.slots}: NCCL's send completes once its data is in the receiver's buffers, and "
                "how many messages those hold depends on their size and NCCL's settings, so a schedule that "
                "relies on a connection's slots may hang here (the mpi-cpu executor runs it)")
    if op.channel:
        return (f"channel={op.channel}: NCCL matches a communicator's sends to one peer in one order, so "
                "separate channels need communicators of their own (the mpi-cpu executor runs it)")
    return None
