"""Where the user is: the source location of a DSL call (the innermost frame outside this package)
and the rule for the names a schedule declares. Every module of the DSL reads these; this module
imports none of them (the DSL's module imports form a DAG: source <- sizes <- params, expect <- trace).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys

from .. import ir
from ..errors import ScheduleError

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_loc() -> ir.SourceLoc:
    """The innermost stack frame outside this package: where the user called us."""
    frame = sys._getframe(1)
    while frame is not None and _ours(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return _source_loc("<unknown>", 0)
    return _source_loc(_basename(frame.f_code.co_filename), frame.f_lineno)


@functools.lru_cache(maxsize=1024)
def _ours(filename: str) -> bool:
    """A frame of this package (or of contextlib, under `with r.group()`): not the user's."""
    return os.path.abspath(filename).startswith(_PACKAGE_DIR) or filename == contextlib.__file__


@functools.lru_cache(maxsize=1024)
def _basename(filename: str) -> str:
    return os.path.basename(filename)


@functools.lru_cache(maxsize=1 << 14)
def _source_loc(file: str, line: int) -> ir.SourceLoc:
    """One `SourceLoc` per user line: every op traced at a line shares it."""
    return ir.SourceLoc(file=file, line=line)


def check_name(name: object, what: str, loc: ir.SourceLoc, rank: int | None, op: str | None = None) -> str:
    """Names become C++ identifiers in generated code: the rule is `ir.name_problem`, the same one
    the IR enforces when a schedule is loaded from JSON."""
    problem = ir.name_problem(name)
    if problem is not None:
        raise ScheduleError(f"{what} name {name!r} is not a valid identifier: {problem}",
                            file=loc.file, line=loc.line, rank=rank, op=op, hint=ir.NAME_HINT)
    return name
