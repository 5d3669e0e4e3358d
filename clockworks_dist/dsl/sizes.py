"""Symbolic sizes: integers that remember their affine form while the schedule is traced.

`CHUNK = cw.size("CHUNK", default=4)` at module level gives a `SymInt` that behaves as the traced
value (4, or what `--size CHUNK=...` binds) in Python control flow, and keeps `CHUNK` symbolic through
`+`, `-` and multiplication by integers, so region bounds such as `i * CHUNK` reach the IR in both
forms and the z3 checks can prove them for every admissible value.
"""

from __future__ import annotations

import contextvars

from ..errors import ScheduleError
from ..ir import Affine, Symbol
from .source import check_name, user_loc

_BINDINGS: contextvars.ContextVar[dict[str, int]] = contextvars.ContextVar("cw_bindings", default={})

Terms = dict[str, int]


class SymInt:
    """An integer value with an optional affine expression over size symbols (None: not affine)."""

    __slots__ = ("_value", "_terms", "_const")

    def __init__(self, value: int, terms: Terms | None, const: int = 0):
        self._value = value
        self._terms = terms
        self._const = const

    @property
    def value(self) -> int:
        return self._value

    def affine(self) -> Affine | None:
        if self._terms is None:
            return None
        terms = tuple(sorted((k, v) for k, v in self._terms.items() if v))
        return Affine(const=self._const, terms=terms)

    # -- arithmetic ---------------------------------------------------------------------------
    @staticmethod
    def _parts(other) -> tuple[int, Terms | None, int] | None:
        if isinstance(other, SymInt):
            return other.value, other._terms, other._const
        if isinstance(other, int) and not isinstance(other, bool):
            return other, {}, other
        return None

    def _combine(self, other, sign: int) -> "SymInt":
        parts = self._parts(other)
        if parts is None:
            return NotImplemented
        value, terms, const = parts
        if self._terms is None or terms is None:
            return SymInt(self._value + sign * value, None)
        merged = dict(self._terms)
        for name, coeff in terms.items():
            merged[name] = merged.get(name, 0) + sign * coeff
        return SymInt(self._value + sign * value, merged, self._const + sign * const)

    def __add__(self, other):
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other):
        return self._combine(other, -1)

    def __rsub__(self, other):
        parts = self._parts(other)
        if parts is None:
            return NotImplemented
        return SymInt(parts[0], parts[1], parts[2])._combine(self, -1)

    def __neg__(self):
        return SymInt(0, {}, 0)._combine(self, -1)

    def __mul__(self, other):
        parts = self._parts(other)
        if parts is None:
            return NotImplemented
        value, terms, const = parts
        product = self._value * value
        if self._terms is not None and terms == {}:
            return SymInt(product, {k: v * value for k, v in self._terms.items()}, self._const * value)
        if terms is not None and self._terms == {}:
            return SymInt(product, {k: v * self._value for k, v in terms.items()}, const * self._value)
        return SymInt(product, None)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        parts = self._parts(other)
        if parts is None:
            return self._value // other if isinstance(other, float) else NotImplemented
        value, terms, _ = parts
        quotient = self._value // value
        if self._terms == {} and terms == {}:
            return SymInt(quotient, {}, quotient)
        exact = (self._terms is not None and terms == {} and value != 0
                 and self._const % value == 0 and all(c % value == 0 for c in self._terms.values()))
        if exact:
            return SymInt(quotient, {k: c // value for k, c in self._terms.items()}, self._const // value)
        return SymInt(quotient, None)

    def __rfloordiv__(self, other):
        if isinstance(other, float):
            return other // self._value
        if self._parts(other) is None:
            return NotImplemented
        return SymInt(other // self._value, None)

    def __mod__(self, other):
        parts = self._parts(other)
        if parts is None:
            return self._value % other if isinstance(other, float) else NotImplemented
        rest = self._value % parts[0]
        if self._terms == {} and parts[1] == {}:
            return SymInt(rest, {}, rest)
        return SymInt(rest, None)

    def __rmod__(self, other):
        if isinstance(other, float):
            return other % self._value
        if self._parts(other) is None:
            return NotImplemented
        return SymInt(other % self._value, None)

    # True division gives a plain float, as for an int: a float bound is then refused where it is used.
    def __truediv__(self, other):
        value = self._number(other)
        return NotImplemented if value is None else self._value / value

    def __rtruediv__(self, other):
        value = self._number(other)
        return NotImplemented if value is None else value / self._value

    # -- behave as an int in Python control flow ----------------------------------------------
    @staticmethod
    def _number(other) -> int | float | None:
        """`other` as a plain number, exactly (never truncated), or None if it is not one."""
        if isinstance(other, SymInt):
            return other.value
        if isinstance(other, (int, float)):
            return other
        return None

    def __index__(self) -> int:
        return self._value

    __int__ = __index__

    def __hash__(self) -> int:
        return hash(self._value)

    def __eq__(self, other) -> bool:
        value = self._number(other)
        return NotImplemented if value is None else self._value == value

    def __lt__(self, other):
        value = self._number(other)
        return NotImplemented if value is None else self._value < value

    def __le__(self, other):
        value = self._number(other)
        return NotImplemented if value is None else self._value <= value

    def __gt__(self, other):
        value = self._number(other)
        return NotImplemented if value is None else self._value > value

    def __ge__(self, other):
        value = self._number(other)
        return NotImplemented if value is None else self._value >= value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        form = self.affine()
        return f"{self._value}" if form is None or not form.terms else f"{form} (= {self._value})"


class Size(SymInt):
    """A declared size symbol; its value is the binding of the trace in progress, else the default.

    The arguments are checked here, in plain Python, so a mistake names the user's line: ints only
    (not bools or floats), min >= 1, multiple_of >= 1, min <= max, and the default admissible."""

    __slots__ = ("name", "default", "min", "max", "multiple_of", "loc")

    def __init__(self, name: str, default: int, *, min: int = 1, max: int | None = None,
                 multiple_of: int = 1):
        self.loc = user_loc()
        check_name(name, "size", self.loc, None, "size")
        self.name, self.default = name, default
        self.min, self.max, self.multiple_of = min, max, multiple_of
        for what, value in (("default", default), ("min", min), ("max", max), ("multiple_of", multiple_of)):
            if (value is not None or what != "max") and (isinstance(value, bool) or not isinstance(value, int)):
                self._fail(f"{name}'s {what} must be an integer, got {type(value).__name__} {value!r}",
                           "sizes are element counts: pass ints")
        if min < 1:
            self._fail(f"{name} has min={min}, but a size is an element count, at least 1", "use min=1 or more")
        if multiple_of < 1:
            self._fail(f"{name} has multiple_of={multiple_of}, but it must be at least 1",
                       "use multiple_of=1 for no constraint")
        lowest = -(-min // multiple_of) * multiple_of
        if max is not None and lowest > max:
            self._fail(f"{name} has no admissible value: min={min}, max={max}"
                       + (f", multiple_of={multiple_of}" if multiple_of > 1 else ""),
                       "widen [min, max] or change multiple_of")
        problem = self.inadmissible(default)
        if problem is not None:
            self._fail(f"{name}'s default {default} {problem}", f"use a default such as {lowest}")
        super().__init__(default, {name: 1}, 0)

    def _fail(self, message: str, hint: str) -> None:
        raise ScheduleError(message, file=self.loc.file, line=self.loc.line, op="size",
                            hint=hint)

    def constraints(self) -> str:
        """min, max and multiple_of as written in the declaration."""
        parts = [f"min={self.min}"]
        if self.max is not None:
            parts.append(f"max={self.max}")
        if self.multiple_of > 1:
            parts.append(f"multiple_of={self.multiple_of}")
        return ", ".join(parts)

    def inadmissible(self, value) -> str | None:
        """Why `value` violates this size's constraints, or None."""
        if isinstance(value, bool) or not isinstance(value, int):
            return f"is not an integer ({type(value).__name__})"
        if value < self.min:
            return f"is below min={self.min}"
        if self.max is not None and value > self.max:
            return f"is above max={self.max}"
        if value % self.multiple_of:
            return f"is not a multiple of {self.multiple_of}"
        return None

    def check_binding(self) -> None:
        """Refuse a bound value (`--size NAME=V`, `trace(sizes=...)`) that the constraints exclude:
        the symbolic checks assume the traced value is admissible."""
        value = _BINDINGS.get().get(self.name, self.default)
        problem = self.inadmissible(value)
        if problem is not None:
            lowest = -(-self.min // self.multiple_of) * self.multiple_of
            self._fail(f"{self.name} = {value!r} {problem} (it is declared with {self.constraints()})",
                       f"bind an admissible value, e.g. --size {self.name}={lowest}")

    @property
    def value(self) -> int:
        return _BINDINGS.get().get(self.name, self.default)

    # SymInt reads _value directly: route it through the binding.
    @property
    def _value(self) -> int:  # type: ignore[override]
        return self.value

    @_value.setter
    def _value(self, _v: int) -> None:
        pass

    def symbol(self) -> Symbol:
        return Symbol(name=self.name, value=self.value, min=self.min, max=self.max,
                      multiple_of=self.multiple_of)


def size(name: str, default: int, *, min: int = 1, max: int | None = None, multiple_of: int = 1) -> Size:
    """Declare a symbolic element count (use at module level: `CHUNK = cw.size("CHUNK", 4)`)."""
    return Size(name, default, min=min, max=max, multiple_of=multiple_of)


def as_int(value) -> int:
    return value.value if isinstance(value, SymInt) else int(value)


def as_affine(value) -> Affine | None:
    """The affine form of a bound if it involves a symbol, else None. A bound that depends on the
    sizes in a way that is not affine is marked `exact=False`: it is checked at the traced value
    only, and the symbolic checks say so."""
    if isinstance(value, SymInt):
        form = value.affine()
        if form is None:
            return Affine(const=value.value, exact=False)
        return form if form.terms else None
    return None
