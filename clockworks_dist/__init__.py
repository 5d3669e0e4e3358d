"""clockworks-dist: verify, predict and generate multi-GPU communication schedules.

    import clockworks_dist as cw

    @cw.schedule(expect=cw.allreduce("x"))
    def my_allreduce(r): ...

    result = cw.check(my_allreduce.trace(world=8))
    report = cw.predict(my_allreduce, "h200x2-nv18", ranks=2, sizes="1KiB..1MiB")
"""

import os as _os
import signal as _signal
import sys as _sys


def _stopped_while_starting(signum, frame) -> None:
    """Ctrl-C while the `clockworks` command loads the package: nothing has started, so it ends
    quietly with the shell's code instead of Python's traceback of an import."""
    _os.write(2, b"clockworks: interrupted while starting\n")
    _os._exit(128 + signum)


# The command (the console script, or `python -m clockworks_dist...`, whose module is being located
# while the package loads) takes Ctrl-C quietly until `cli.main` hands it back to Python's handler.
if (_sys.argv and (_sys.argv[0] == "-m" or _os.path.basename(_sys.argv[0]) == "clockworks")
        and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler):
    _signal.signal(_signal.SIGINT, _stopped_while_starting)

from . import ir  # noqa: E402
from .dsl import (  # noqa: E402
    Rank, ScheduleDef, allgather, allreduce, alltoall, broadcast, choice, custom, equals, load_file, param,
    reduce, reduce_scatter, schedule, size,
)
from .errors import CheckIncomplete, ClockworksError, MissingDependency, ScheduleError, TopologyError  # noqa: E402

__version__ = "0.1.0"
from .check import check, expected_values, happens_before  # noqa: E402  (the function, not the package)


def __getattr__(name: str):
    """`cw.predict`, imported when first used: the performance model (with networkx) costs about half
    a second to import, which `clockworks check` and `show` do not need."""
    if name == "predict":
        from .prediction import predict

        return predict
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CheckIncomplete", "ClockworksError", "MissingDependency", "Rank", "ScheduleDef", "ScheduleError",
    "TopologyError", "allgather", "allreduce", "alltoall", "broadcast", "check", "choice", "custom", "equals",
    "expected_values", "happens_before", "ir",
    "load_file", "param", "predict", "reduce", "reduce_scatter", "schedule", "size",
]


class _Api(__import__("types").ModuleType):
    """The `cw` module, whose public names cannot be rebound or deleted: a schedule file that
    monkeypatches `cw.allreduce` or `cw.schedule` would check something other than what it says."""

    def __setattr__(self, name: str, value) -> None:
        if name in __all__ and not isinstance(value, __import__("types").ModuleType):
            _refuse_patch(name, "set")
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if name in __all__:
            _refuse_patch(name, "delete")
        super().__delattr__(name)


def _refuse_patch(name: str, what: str):
    from .dsl.trace import user_loc

    loc = user_loc()
    raise ScheduleError(f"cannot {what} cw.{name}: the clockworks API is read-only", file=loc.file, line=loc.line,
                        hint="define your own helper under another name instead of patching clockworks")


__import__("sys").modules[__name__].__class__ = _Api
