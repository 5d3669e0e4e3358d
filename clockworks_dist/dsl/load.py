"""Load a user's schedule file and find the schedules it defines."""

from __future__ import annotations

import importlib.util
import os
import sys

from ..errors import ScheduleError
from .trace import ScheduleDef, _PACKAGE_DIR


def load_file(path: str) -> list[ScheduleDef]:
    """Import `path` as a module and return its `@schedule` definitions, in file order."""
    if not os.path.isfile(path):
        raise ScheduleError("no such file", file=path, hint="check the path")
    module_name = "_cw_user_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ScheduleError("not a Python file", file=path, hint="schedules are .py files")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except ScheduleError:
        raise
    except SyntaxError as exc:
        raise ScheduleError(f"syntax error: {exc.msg}", file=os.path.basename(path), line=exc.lineno,
                            hint="fix the Python syntax") from exc
    except Exception as exc:
        line = None
        tb = exc.__traceback__
        while tb is not None:
            if os.path.abspath(tb.tb_frame.f_code.co_filename) == os.path.abspath(path):
                line = tb.tb_lineno
            tb = tb.tb_next
        raise ScheduleError(f"the file raised {type(exc).__name__} while loading: {exc}",
                            file=os.path.basename(path), line=line, hint="fix the error in the file") from exc
    found = [v for v in vars(module).values() if isinstance(v, ScheduleDef)]
    if not found:
        raise ScheduleError("defines no schedule", file=os.path.basename(path),
                            hint="decorate a function with @cw.schedule")
    return sorted(found, key=lambda d: d.loc.line)


__all__ = ["load_file", "_PACKAGE_DIR"]
