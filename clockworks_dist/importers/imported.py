"""What `clockworks predict` needs of an imported algorithm (an MSCCL XML file, `msccl.ImportedDef`, or an
MSCCL++ execution plan, `mscclpp.ImportedPlan`): both satisfy `Imported`, and `perf.predict` and
`prediction` take either through it, one path for both.

An imported file fixes its buffers in chunks, not in elements: the message size sets how many elements a
chunk holds (nccl-tests' convention for which buffer the size counts, as for any schedule), so a size must
be a whole number of `chunk_unit`-element steps of every chunk of that buffer (`perf.predict.imported_chunk`).
"""

from __future__ import annotations

from typing import Protocol

from .. import ir


class Imported(Protocol):
    """An imported algorithm or plan, as the predictor takes it."""

    name: str
    loc: ir.SourceLoc
    ranks: tuple[int, ...]

    @property
    def chunk_unit(self) -> int:
        """The fewest elements a chunk holds: a chunk is a whole number of them (1 for an MSCCL file; for a
        plan, what every thread block group cuts evenly)."""
        ...

    @property
    def protocol(self) -> str:
        """The file's protocol (Simple, LL, LL128): what its transfers move with."""
        ...

    @property
    def packet_signal(self) -> str | None:
        """The signal whose put_signals are flag-in-data packets (LL), priced as the packet path; None: none."""
        ...

    @property
    def pricing(self) -> str:
        """How its parts are priced, for the report's "priced as" line."""
        ...

    def trace_chunk(self, world: int, chunk: int, ranks_per_node: int | None = None) -> ir.Schedule:
        """The file's schedule with `chunk` elements per chunk (a multiple of `chunk_unit`)."""
        ...


_MEMBERS = ("chunk_unit", "protocol", "packet_signal", "pricing", "trace_chunk")


def is_imported(defn: object) -> bool:
    """Whether `defn` is an `Imported` (its class has every member: the check reads no property, so a
    plan's refusal is raised where it is traced, at its line)."""
    return all(hasattr(type(defn), name) for name in _MEMBERS)
