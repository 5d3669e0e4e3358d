"""The shape of every backend table: executors, code generators and cost models.

A backend implements the rules of `rules` for one target (numpy and MPI, CuPy and NCCL, generated
NCCL or NVSHMEM CUDA, the simulator's costs). It does so as one table keyed by op class, plus an
explicit `unsupported` map that says, for each op class it cannot run, why. Nothing else: no
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
            return found
        reason = self.unsupported.get(type(op), "not implemented")
        raise Unsupported(f"{op.loc}: the {self.name} backend cannot run {op.kind}: {reason}")


BACKENDS: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    """Add a backend to the registry the coverage test walks; returns it."""
    BACKENDS[backend.name] = backend
    return backend
