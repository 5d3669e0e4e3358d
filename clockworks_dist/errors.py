"""The error hierarchy. Every message says what, where (file:line, rank, op) and how to fix it."""

from __future__ import annotations


# The exit codes of every `clockworks` command (`clockworks --help`).
EXIT_VERIFIED, EXIT_VIOLATED, EXIT_BAD_INPUT, EXIT_INCOMPLETE, EXIT_INTERNAL = 0, 1, 2, 3, 4


class ClockworksError(Exception):
    """Base of every error this package raises on purpose."""


class ScheduleError(ClockworksError, ValueError):
    """A schedule is malformed: caught while loading or tracing the user's file."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 rank: int | None = None, op: str | None = None, hint: str | None = None):
        self.file, self.line, self.rank, self.op, self.hint = file, line, rank, op, hint
        self.message = message
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        who = f"rank {rank}: " if rank is not None else ""
        what = f"{op}: " if op else ""
        text = f"{where}{who}{what}{message}"
        if hint:
            text += f" ({hint})"
        super().__init__(text)


class TopologyError(ClockworksError, ValueError):
    """A topology file is malformed or cannot serve the schedule."""


class CheckIncomplete(ClockworksError):
    """A search stopped at a bound before exploring every state."""


class MissingDependency(ClockworksError, ImportError):
    """An optional dependency is not installed; the message names the pip command."""


class ClockworksWarning(UserWarning):
    """Base of every warning this package issues."""


class CostWarning(ClockworksWarning):
    """The performance model had to assume what an op costs (a compute op that states no cost)."""


class UsageError(ClockworksError):
    """A command line that names something the file does not have."""


class ValidateError(ClockworksError):
    """Bad input to validate, or a step (build, run, the baseline) that cannot be done here."""


class PredictError(ClockworksError):
    """The schedule cannot be simulated (it does not match statically, or it deadlocks)."""
