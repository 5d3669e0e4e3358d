"""clockworks-dist: verify, predict and generate multi-GPU communication schedules.

    import clockworks_dist as cw

    @cw.schedule(expect=cw.allreduce("x"))
    def my_allreduce(r): ...

    result = cw.check(my_allreduce.trace(world=8))
    report = cw.predict(my_allreduce, "h200x2-nv18", ranks=2, sizes="1KiB..1MiB")
"""

from . import ir
from .dsl import (
    Rank, ScheduleDef, allgather, allreduce, alltoall, broadcast, choice, custom, equals, load_file, param,
    reduce, reduce_scatter, schedule, size,
)
from .errors import CheckIncomplete, ClockworksError, MissingDependency, ScheduleError, TopologyError

__version__ = "0.1.0"
from .check import check, expected_values, happens_before  # noqa: E402  (the function, not the package)
from .prediction import predict  # noqa: E402


__all__ = [
    "CheckIncomplete", "ClockworksError", "MissingDependency", "Rank", "ScheduleDef", "ScheduleError",
    "TopologyError", "allgather", "allreduce", "alltoall", "broadcast", "check", "choice", "custom", "equals",
    "expected_values", "happens_before", "ir",
    "load_file", "param", "predict", "reduce", "reduce_scatter", "schedule", "size",
]
