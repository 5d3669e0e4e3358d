"""Schedule parameters: one schedule file describes a family of schedules.

`BLOCKS = cw.param("BLOCKS", [8, 16, 32, 64])` at module level gives an integer that behaves as the
value of the trace in progress (else its default, the first value); `ALGO = cw.choice("ALGO",
["oneshot", "twoshot"])` gives a string option compared with `==` in the schedule's Python. Unlike
`cw.size`, a parameter is not symbolic: each binding is its own schedule (a variant), traced and
checked on its own. `ScheduleDef.variants()` lists the bindings; `trace(..., params={...})` or
`--param NAME=VALUE` picks one.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import itertools
from typing import Iterator

from .. import ir
from ..errors import ScheduleError
from .sizes import SymInt
from .source import check_name, user_loc

# The binding of the trace in progress (None: no trace is running, a parameter reads as its default).
_PARAMS: contextvars.ContextVar[dict[str, int | str] | None] = contextvars.ContextVar("cw_params", default=None)
# A binding that traces started without an explicit `params=` use (`bind`): how `clockworks tune`
# reaches traces made by other commands' helpers (predict, validate).
_DEFAULT: contextvars.ContextVar[dict[str, int | str]] = contextvars.ContextVar("cw_param_default", default={})

Value = int | str


# The most values one cw.param or cw.choice lists (a family's size is their product: `tune` bounds it).
MAX_VALUES = 1024

def _fail(loc: ir.SourceLoc, message: str, hint: str | None, op: str) -> None:
    raise ScheduleError(message, file=loc.file, line=loc.line, op=op, hint=hint)


def _current(name: str, default: Value, loc: ir.SourceLoc) -> Value:
    bound = _PARAMS.get()
    if bound is None:
        return default
    if name not in bound:  # declared where the decorator could not see it (inside the function)
        where = user_loc()
        _fail(where, f"parameter {name} is used, but the schedule does not declare it (it is declared at {loc})",
              f"declare {name} at module level above the @cw.schedule function, or pass params=[{name}] to it",
              "param")
    return bound[name]


class Param(SymInt):
    """An integer parameter of a schedule family: behaves as the bound value (a plain integer, not
    a symbol) in Python control flow and arithmetic."""

    __slots__ = ("name", "values", "default", "loc")
    kind = "param"

    def __init__(self, name: str, values, default: int | None = None):
        self.loc = user_loc()
        check_name(name, "parameter", self.loc, None, "param")
        self.name = name
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            _fail(self.loc, f"{name}'s values must be a list of integers, got {type(values).__name__} {values!r}",
                  f'e.g. cw.param("{name}", [8, 16, 32])', "param")
        values = tuple(itertools.islice(values, MAX_VALUES + 1))  # never a huge range in memory
        if len(values) > MAX_VALUES:
            _fail(self.loc, f"{name} lists more than {MAX_VALUES:,} values", "list the values worth trying", "param")
        if not values:
            _fail(self.loc, f"{name} lists no values", f'e.g. cw.param("{name}", [8, 16, 32])', "param")
        for value in values:
            if isinstance(value, bool) or not isinstance(value, int):
                _fail(self.loc, f"{name}'s values must be integers, got {type(value).__name__} {value!r}",
                      "use cw.choice for string options", "param")
        if len(set(values)) != len(values):
            _fail(self.loc, f"{name} lists a value twice: {list(values)}", "list each value once", "param")
        self.values = values
        if default is None:
            default = values[0]
        if default not in values or isinstance(default, bool):
            _fail(self.loc, f"{name}'s default {default!r} is not one of its values {list(values)}",
                  f"use one of {list(values)}", "param")
        self.default = default
        super().__init__(default, {}, default)

    @property
    def value(self) -> int:
        return _current(self.name, self.default, self.loc)

    # SymInt reads _value and _const directly: route both through the binding (no symbol terms).
    @property
    def _value(self) -> int:  # type: ignore[override]
        return self.value

    @_value.setter
    def _value(self, _v: int) -> None:
        pass

    @property
    def _const(self) -> int:  # type: ignore[override]
        return self.value

    @_const.setter
    def _const(self, _v: int) -> None:
        pass

    def parse(self, value) -> int:
        """`value` (an int, or its text from `--param`) as one of the declared values, else a ScheduleError."""
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, bool) or value not in self.values:
            _fail(self.loc, f"parameter {self.name} = {value!r} is not one of its values {list(self.values)}",
                  f"bind one of them, e.g. --param {self.name}={self.values[0]}", "param")
        return value

    def __repr__(self) -> str:
        return f"{self.name}={self.value}"


class Choice:
    """A string option of a schedule family, compared with `==` (`if ALGO == "oneshot": ...`).

    Comparing with a string that is not among the options is an error at the user's line: a typo
    would otherwise silently pick the other branch."""

    __slots__ = ("name", "values", "default", "loc")
    kind = "choice"

    def __init__(self, name: str, options, default: str | None = None):
        self.loc = user_loc()
        check_name(name, "choice", self.loc, None, "choice")
        self.name = name
        if isinstance(options, (str, bytes)) or not hasattr(options, "__iter__"):
            _fail(self.loc, f"{name}'s options must be a list of strings, got {type(options).__name__} {options!r}",
                  f'e.g. cw.choice("{name}", ["oneshot", "twoshot"])', "choice")
        options = tuple(itertools.islice(options, MAX_VALUES + 1))
        if len(options) > MAX_VALUES:
            _fail(self.loc, f"{name} lists more than {MAX_VALUES:,} options", "list the options worth trying",
                  "choice")
        if not options:
            _fail(self.loc, f"{name} lists no options", f'e.g. cw.choice("{name}", ["oneshot", "twoshot"])',
                  "choice")
        for option in options:
            problem = ir.name_problem(option)
            if problem is not None:  # options may reach generated code (file and kernel names)
                _fail(self.loc, f"{name}'s option {option!r} is not a valid identifier: {problem}", ir.NAME_HINT,
                      "choice")
        if len(set(options)) != len(options):
            _fail(self.loc, f"{name} lists an option twice: {list(options)}", "list each option once", "choice")
        self.values = options
        if default is None:
            default = options[0]
        if default not in options:
            _fail(self.loc, f"{name}'s default {default!r} is not one of its options {list(options)}",
                  f"use one of {list(options)}", "choice")
        self.default = default

    @property
    def value(self) -> str:
        return _current(self.name, self.default, self.loc)

    def parse(self, value) -> str:
        """`value` as one of the declared options, else a ScheduleError naming them."""
        if value not in self.values:
            close = difflib.get_close_matches(str(value), self.values, n=1)
            _fail(self.loc, f"choice {self.name} = {value!r} is not one of its options {list(self.values)}"
                  + (f" (did you mean {close[0]!r}?)" if close else ""),
                  f"bind one of them, e.g. --param {self.name}={self.values[0]}", "choice")
        return value

    def _other(self, other) -> str:
        if isinstance(other, Choice):
            return other.value
        if other not in self.values:
            close = difflib.get_close_matches(str(other), self.values, n=1)
            _fail(user_loc(), f"{self.name} is compared with {other!r}, which is not one of its options "
                              f"{list(self.values)}" + (f" (did you mean {close[0]!r}?)" if close else ""),
                  f"declared at {self.loc}: compare with one of its options", "choice")
        return other

    def __eq__(self, other) -> bool:
        if not isinstance(other, (str, Choice)):
            return NotImplemented
        return self.value == self._other(other)

    def __ne__(self, other) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self) -> int:
        return hash(self.value)

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"{self.name}={self.value!r}"

    def __bool__(self) -> bool:
        return True


Parameter = Param | Choice


def param(name: str, values, default: int | None = None) -> Param:
    """Declare an integer parameter of a schedule family (module level: `BLOCKS = cw.param("BLOCKS", [8, 16])`)."""
    return Param(name, values, default)


def choice(name: str, options, default: str | None = None) -> Choice:
    """Declare a string option of a schedule family (module level: `ALGO = cw.choice("ALGO", ["a", "b"])`)."""
    return Choice(name, options, default)


def resolve(declared: tuple[Parameter, ...], given: dict | None, loc: ir.SourceLoc) -> dict[str, Value]:
    """The full binding: every declared parameter's default, overridden by `given` (each checked)."""
    known = {p.name: p for p in declared}
    binding: dict[str, Value] = {p.name: p.default for p in declared}
    for name, value in (given or {}).items():
        if name not in known:
            close = difflib.get_close_matches(str(name), list(known), n=1)
            raise ScheduleError(f"unknown parameter {name!r}; this schedule declares "
                                f"{', '.join(_describe(p) for p in declared) or 'none'}"
                                + (f" (did you mean {close[0]}?)" if close else ""),
                                file=loc.file, line=loc.line, op="param",
                                hint="bind a declared parameter, e.g. --param " + (
                                    f"{declared[0].name}={declared[0].values[0]}" if declared else "NAME=VALUE"))
        binding[name] = known[name].parse(value)
    return binding


def _describe(p: Parameter) -> str:
    return f"{p.name} in {list(p.values)}"


def variants(declared: tuple[Parameter, ...]) -> list[dict[str, Value]]:
    """Every binding of the declared parameters (their cartesian product, in declaration order)."""
    names = [p.name for p in declared]
    return [dict(zip(names, combo)) for combo in itertools.product(*(p.values for p in declared))]


def label(binding: dict[str, Value]) -> str:
    """`ALGO=oneshot,BLOCKS=16` (`default` for a family without parameters)."""
    return ",".join(f"{k}={v}" for k, v in binding.items()) or "default"


@contextlib.contextmanager
def bind(binding: dict[str, Value] | None) -> Iterator[None]:
    """Traces started inside that pass no `params=` use `binding` (for helpers that trace on their own)."""
    token = _DEFAULT.set(dict(binding or {}))
    try:
        yield
    finally:
        _DEFAULT.reset(token)


@contextlib.contextmanager
def tracing(binding: dict[str, Value]) -> Iterator[None]:
    """The binding of the trace in progress."""
    token = _PARAMS.set(binding)
    try:
        yield
    finally:
        _PARAMS.reset(token)
