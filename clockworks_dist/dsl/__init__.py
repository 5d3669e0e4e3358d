"""The schedule DSL: `@schedule` functions traced once per rank into the IR."""

from .expect import allgather, allreduce, alltoall, broadcast, custom, equals, reduce, reduce_scatter
from .load import load_file
from .params import Choice, Param, choice, param
from .sizes import Size, SymInt, size
from .trace import Buffer, Comm, Rank, RegionRef, ScheduleDef, Signal, schedule

__all__ = [
    "Buffer", "Choice", "Comm", "Rank", "RegionRef", "ScheduleDef", "Signal", "Size", "SymInt", "allgather",
    "allreduce", "alltoall", "broadcast", "choice", "custom", "equals", "load_file", "Param", "param", "reduce",
    "reduce_scatter", "schedule", "size",
]
