"""Load a user's schedule file and find the schedules it defines."""

from __future__ import annotations

import importlib.util
import os
import sys

from .. import ir
from ..errors import ScheduleError
from . import guard
from .trace import ScheduleDef, _PACKAGE_DIR


def load_file(path: str) -> list[ScheduleDef]:
    """Import `path` as a module and return its `@schedule` definitions, in file order.

    Anything the file does wrong while it is imported, exiting included (`sys.exit`, a raised
    `KeyboardInterrupt`), is a `ScheduleError` naming the file and line; `guard.TimeUp` (the time
    bound) and a real Ctrl-C pass through. What the file prints goes to stderr (`guard.user_code`)."""
    name = os.path.basename(path)
    if not path:
        raise ScheduleError("the file name is empty", hint="name a .py file that defines @cw.schedule functions")
    if os.path.isdir(path):
        raise ScheduleError("is a directory, not a schedule file", file=path, hint="name a .py file")
    if not os.path.exists(path):
        raise ScheduleError("no such file", file=path, hint="check the path")
    if not os.path.isfile(path):
        raise ScheduleError("is not a regular file (a device, a pipe or a socket)", file=path,
                            hint="name a .py file")
    if not os.access(path, os.R_OK):
        raise ScheduleError("cannot be read (permission denied)", file=path, hint="check the file's permissions")
    if path.endswith(".xml"):  # an MSCCL algorithm (`importers.msccl`)
        from ..importers.msccl import ImportedDef

        return [ImportedDef(path)]
    if path.endswith(".json"):  # a schedule as `clockworks show --json` or `clockworks import` writes it,
        from ..importers import mscclpp_json  # or an MSCCL++ execution plan (`importers.mscclpp`)

        text = mscclpp_json.read_text(path)
        if mscclpp_json.looks_like_plan(text):
            from ..importers.mscclpp import ImportedPlan

            return [ImportedPlan(path, text=text)]
        from .validate_json import load

        return [FixedDef(load(path), path)]
    module_name = "_cw_user_" + os.path.splitext(name)[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ScheduleError("not a Python file", file=path, hint="schedules are .py files")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        with guard.user_code():
            spec.loader.exec_module(module)
    except ScheduleError as exc:
        sys.modules.pop(module_name, None)
        if not guard.raised_by_user(exc, _PACKAGE_DIR):
            raise
        raise ScheduleError(f"the file {guard.describe(exc, ' while loading')}", file=name,
                            line=guard.user_line(exc.__traceback__, path), hint="fix the error in the file") from exc
    except SyntaxError as exc:
        sys.modules.pop(module_name, None)
        raise ScheduleError(f"syntax error: {exc.msg}", file=name, line=exc.lineno,
                            hint="fix the Python syntax") from exc
    except BaseException as exc:  # noqa: BLE001 (the file raised, or exited, while it was imported)
        sys.modules.pop(module_name, None)
        line = guard.user_line(exc.__traceback__, path)
        if isinstance(exc, guard.TimeUp):  # our time bound: say where the import was
            exc.where = exc.where or (f"{name}:{line}" if line else name)
            raise
        if not guard.is_user_error(exc):  # a real Ctrl-C
            raise
        if isinstance(exc, OSError) and line is None:  # reading the file failed, not its code
            raise ScheduleError(f"cannot be read: {exc.strerror or exc}", file=name, hint="check the file") from exc
        hint = "fix the error in the file"
        if isinstance(exc, (SystemExit, guard.OsExitCalled)):
            hint = "a schedule file only defines schedules: remove the exit"
        raise ScheduleError(f"the file {guard.describe(exc, ' while loading')}", file=name, line=line,
                            hint=hint) from exc
    found = [v for v in vars(module).values() if isinstance(v, ScheduleDef)]
    if not found:
        raise ScheduleError("defines no schedule", file=name, hint="decorate a function with @cw.schedule")
    return sorted(found, key=lambda d: d.loc.line)


class FixedDef:
    """A schedule already built (read from JSON), in the shape the commands load schedules in: its
    world and sizes are fixed."""

    def __init__(self, sched: ir.Schedule, path: str):
        self.sched = sched
        self.name = sched.name
        self.loc = ir.SourceLoc(file=os.path.basename(path), line=1)
        self.ranks = (sched.world,)
        self.ranks_per_node = sched.ranks_per_node
        self.sizes: tuple = ()
        self.params: tuple = ()
        self.expect: tuple = ()

    def variants(self) -> list[dict]:
        return [{}]

    def trace(self, world: int, ranks_per_node: int | None = None, sizes=None, params=None) -> ir.Schedule:
        if world != self.sched.world:
            raise ScheduleError(f"the schedule has {self.sched.world} ranks, not {world}", file=self.loc.file,
                                hint=f"use --ranks {self.sched.world} (or leave it out)")
        if sizes or params:
            raise ScheduleError("a schedule read from JSON has its sizes and parameters bound already",
                                file=self.loc.file, hint="leave out --size and --param")
        return self.sched


__all__ = ["FixedDef", "load_file", "_PACKAGE_DIR"]
