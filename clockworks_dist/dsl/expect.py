"""Postconditions: what the outputs hold at the end, as element-wise combinations of inputs.

Each spec resolves, once the schedule is traced, to `ir.Expectation`s: "region R on rank r equals,
element by element, op over these contributions (rank, region at schedule start)". The checker
compares multisets of contributions, so a doubled or missing rank is caught.

A spec checks its arguments where it is written (`expect=cw.broadcast("x", root=5)`), and every
expectation it resolves to is checked against the traced schedule (ranks in the world, buffers
declared, regions in bounds, equal counts and dtypes), so a mistake is a `ScheduleError` naming that
line, never a crash in the checker.
"""

from __future__ import annotations

import functools

import os
from abc import ABC, abstractmethod
from typing import Callable, Iterable

from .. import ir
from ..errors import ScheduleError
from .source import _PACKAGE_DIR, check_name, user_loc

_REDUCE_OPS = ("sum", "prod", "max", "min")


def _user_loc() -> ir.SourceLoc:
    return user_loc()


def _fail(loc: ir.SourceLoc, message: str, hint: str | None = None, rank: int | None = None,
          op: str | None = None) -> ScheduleError:
    return ScheduleError(message, file=loc.file, line=loc.line, rank=rank, op=op, hint=hint)


def _name(value, what: str, loc: ir.SourceLoc, op: str) -> str:
    return check_name(value, what, loc, None, op)


def _reduce_op(value, loc: ir.SourceLoc, op: str) -> str:
    if not isinstance(value, str) or value not in _REDUCE_OPS:
        raise _fail(loc, f"unknown reduction op {value!r}", f"one of {', '.join(_REDUCE_OPS)}", op=op)
    return value


def _integer(value, what: str, loc: ir.SourceLoc, op: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(loc, f"{what} must be an integer, got {type(value).__name__} {value!r}", op=op)
    if value < low:
        raise _fail(loc, f"{what} must be at least {low}, got {value}", op=op)
    return value


def _whole(sched: ir.Schedule, rank: int, name: str, spec: "Spec") -> ir.Region:
    try:
        decl = sched.programs[rank].buffer(name)
    except KeyError:
        raise _fail(spec.loc, f"postcondition {spec.label} names buffer {name!r}, which rank {rank} does not declare",
                    "use a buffer name the schedule declares", rank=rank) from None
    return _region(name, 0, decl.count)


@functools.lru_cache(maxsize=1 << 14)
def _region(buffer: str, start: int, stop: int) -> ir.Region:
    """One region object per value: a world's expectations name the same few regions n*n times."""
    return ir.Region(buffer=buffer, start=start, stop=stop)


@functools.lru_cache(maxsize=1 << 14)
def _contribution(rank: int, region: ir.Region) -> ir.Contribution:
    return ir.Contribution(rank=rank, region=region)


def _chunk(region: ir.Region, index: int, parts: int, spec: "Spec") -> ir.Region:
    if region.count % parts:
        raise _fail(spec.loc, f"postcondition {spec.label}: {region.buffer} has {region.count} elements, "
                              f"not a multiple of {parts}", "make the buffer's count a multiple of the world size")
    size = region.count // parts
    return _region(region.buffer, region.start + index * size, region.start + (index + 1) * size)


class Spec(ABC):
    """A postcondition; `resolve(schedule)` gives its expectations. `loc` is where it was written."""

    label = "custom"
    loc: ir.SourceLoc

    def __init__(self) -> None:
        self.loc = _user_loc()

    @abstractmethod
    def resolve(self, sched: ir.Schedule) -> list[ir.Expectation]:
        """The expectations of this postcondition on a traced schedule."""


class allreduce(Spec):
    """Every rank's `dst` (default: `buf`, in place) = op over ranks of `buf`."""

    def __init__(self, buf: str, dst: str | None = None, op: str = "sum"):
        super().__init__()
        self.buf = _name(buf, "buffer", self.loc, "allreduce")
        self.dst = buf if dst is None else _name(dst, "buffer", self.loc, "allreduce")
        self.op = _reduce_op(op, self.loc, "allreduce")
        self.label = f"allreduce({buf!r})"

    def resolve(self, sched):
        out = []
        # the same contributions for every rank: one tuple (a 1024-rank world would hold a million)
        contributions = tuple(_contribution(q, _whole(sched, q, self.buf, self)) for q in range(sched.world))
        for rank in range(sched.world):
            out.append(ir.Expectation(rank=rank, region=_whole(sched, rank, self.dst, self),
                                      contributions=contributions, op=self.op, label=self.label))
        return out


class allgather(Spec):
    """In place (`allgather("x")`): chunk q of x on every rank = chunk q of x on rank q.
    Out of place (`allgather("src", "dst")`): chunk q of dst = src of rank q."""

    def __init__(self, src: str, dst: str | None = None):
        super().__init__()
        self.src = _name(src, "buffer", self.loc, "allgather")
        self.dst = None if dst is None else _name(dst, "buffer", self.loc, "allgather")
        self.label = f"allgather({src!r}{', ' + repr(dst) if dst else ''})"

    def resolve(self, sched):
        out = []
        n = sched.world
        for rank in range(n):
            target = _whole(sched, rank, self.dst or self.src, self)
            for q in range(n):
                source = _whole(sched, q, self.src, self)
                if self.dst is None:
                    source = _chunk(source, q, n, self)
                out.append(ir.Expectation(rank=rank, region=_chunk(target, q, n, self),
                                          contributions=(_contribution(q, source),),
                                          label=self.label))
        return out


class reduce_scatter(Spec):
    """In place: chunk r of `src` on rank r = op over ranks of chunk r. Out of place: `dst` on
    rank r = op over ranks of chunk r of `src`."""

    def __init__(self, src: str, dst: str | None = None, op: str = "sum"):
        super().__init__()
        self.src = _name(src, "buffer", self.loc, "reduce_scatter")
        self.dst = None if dst is None else _name(dst, "buffer", self.loc, "reduce_scatter")
        self.op = _reduce_op(op, self.loc, "reduce_scatter")
        self.label = f"reduce_scatter({src!r}{', ' + repr(dst) if dst else ''})"

    def resolve(self, sched):
        out = []
        n = sched.world
        for rank in range(n):
            contributions = tuple(
                _contribution(q, _chunk(_whole(sched, q, self.src, self), rank, n, self))
                for q in range(n))
            if self.dst is None:
                target = _chunk(_whole(sched, rank, self.src, self), rank, n, self)
            else:
                target = _whole(sched, rank, self.dst, self)
            out.append(ir.Expectation(rank=rank, region=target, contributions=contributions, op=self.op,
                                      label=self.label))
        return out


class alltoall(Spec):
    """Chunk q of `dst` on rank r = chunk r of `src` on rank q."""

    def __init__(self, src: str, dst: str):
        super().__init__()
        self.src = _name(src, "buffer", self.loc, "alltoall")
        self.dst = _name(dst, "buffer", self.loc, "alltoall")
        self.label = f"alltoall({src!r}, {dst!r})"

    def resolve(self, sched):
        out = []
        n = sched.world
        for rank in range(n):
            target = _whole(sched, rank, self.dst, self)
            for q in range(n):
                source = _chunk(_whole(sched, q, self.src, self), rank, n, self)
                out.append(ir.Expectation(rank=rank, region=_chunk(target, q, n, self),
                                          contributions=(_contribution(q, source),),
                                          label=self.label))
        return out


def _root(spec: Spec, sched: ir.Schedule) -> int:
    if spec.root >= sched.world:
        raise _fail(spec.loc, f"postcondition {spec.label}: root {spec.root} is out of range: the world has ranks "
                              f"0..{sched.world - 1}", "pick a root every world size has, e.g. root=0")
    return spec.root


class broadcast(Spec):
    """Every rank's `dst` (default `buf`) = `buf` of `root`."""

    def __init__(self, buf: str, root: int = 0, dst: str | None = None):
        super().__init__()
        self.buf = _name(buf, "buffer", self.loc, "broadcast")
        self.root = _integer(root, "root", self.loc, "broadcast")
        self.dst = buf if dst is None else _name(dst, "buffer", self.loc, "broadcast")
        self.label = f"broadcast({buf!r}, root={root})"

    def resolve(self, sched):
        root = _root(self, sched)
        source = _whole(sched, root, self.buf, self)
        return [ir.Expectation(rank=rank, region=_whole(sched, rank, self.dst, self),
                               contributions=(_contribution(root, source),), label=self.label)
                for rank in range(sched.world)]


class reduce(Spec):
    """`dst` (default `buf`) on `root` = op over ranks of `buf`."""

    def __init__(self, buf: str, root: int = 0, dst: str | None = None, op: str = "sum"):
        super().__init__()
        self.buf = _name(buf, "buffer", self.loc, "reduce")
        self.root = _integer(root, "root", self.loc, "reduce")
        self.dst = buf if dst is None else _name(dst, "buffer", self.loc, "reduce")
        self.op = _reduce_op(op, self.loc, "reduce")
        self.label = f"reduce({buf!r}, root={root})"

    def resolve(self, sched):
        root = _root(self, sched)
        contributions = tuple(_contribution(q, _whole(sched, q, self.buf, self))
                              for q in range(sched.world))
        return [ir.Expectation(rank=root, region=_whole(sched, root, self.dst, self),
                               contributions=contributions, op=self.op, label=self.label)]


class custom(Spec):
    """`fn(world) -> iterable of cw.equals(...)`: any element-wise postcondition. Mistakes in what
    it returns, and exceptions it raises, are reported at the function's line."""

    def __init__(self, fn: Callable[[int], Iterable[ir.Expectation]], label: str = "custom"):
        super().__init__()
        if not callable(fn):
            raise _fail(self.loc, f"cw.custom needs a function of the world size, got {type(fn).__name__} {fn!r}",
                        "pass a function: cw.custom(lambda world: [cw.equals(...), ...])", op="custom")
        if not isinstance(label, str):
            raise _fail(self.loc, f"the label must be a string, got {type(label).__name__} {label!r}", op="custom")
        code = getattr(fn, "__code__", None)
        if code is not None:  # report at the function, which is where the mistakes are
            self.loc = ir.SourceLoc(file=os.path.basename(code.co_filename), line=code.co_firstlineno)
        self.fn, self.label = fn, label

    def resolve(self, sched):
        try:
            found = self.fn(sched.world)
            if isinstance(found, ir.Expectation):
                found = [found]
            if isinstance(found, (str, bytes)) or not isinstance(found, Iterable):
                raise _fail(self.loc, f"the custom expectation returned {type(found).__name__} {found!r}, "
                                      "not a list", "return a list of cw.equals(...)", op="custom")
            found = list(found)
        except Exception as exc:  # the user's function raised: point at its innermost line
            from .guard import raised_by_user

            if isinstance(exc, ScheduleError) and not raised_by_user(exc, _PACKAGE_DIR):
                raise  # ours, about what the function returned: it names the place already
            file, line = self.loc.file, self.loc.line
            tb = exc.__traceback__
            while tb is not None:
                path = os.path.abspath(tb.tb_frame.f_code.co_filename)
                if not path.startswith(_PACKAGE_DIR):
                    file, line = os.path.basename(path), tb.tb_lineno
                tb = tb.tb_next
            raise ScheduleError(f"the custom expectation raised {type(exc).__name__}: {exc}", file=file, line=line,
                                op="custom", hint="fix the function passed to cw.custom") from exc
        for index, item in enumerate(found):
            if not isinstance(item, ir.Expectation):
                raise _fail(self.loc, f"the custom expectation's item {index} is {type(item).__name__} {item!r}, "
                                      "not an expectation", "build each item with cw.equals(...)", op="custom")
        return found


def equals(rank: int, buffer: str, start: int, stop: int, *contributions: tuple[int, str, int],
           op: str = "sum") -> ir.Expectation:
    """Elements [start, stop) of `buffer` on `rank` = op over `(rank, buffer, start)` contributions."""
    loc = _user_loc()
    rank = _integer(rank, "rank", loc, "equals")
    buffer = _name(buffer, "buffer", loc, "equals")
    start = _integer(start, "start", loc, "equals")
    stop = _integer(stop, "stop", loc, "equals", low=start + 1)
    op = _reduce_op(op, loc, "equals")
    if not contributions:
        raise _fail(loc, "an expectation needs at least one contribution", "add (rank, buffer, start) tuples",
                    op="equals")
    count = stop - start
    parts = []
    for item in contributions:
        if not isinstance(item, tuple) or len(item) != 3:
            raise _fail(loc, f"a contribution must be a (rank, buffer, start) tuple, got {item!r}", op="equals")
        q, name, offset = item
        parts.append(ir.Contribution(
            rank=_integer(q, "a contribution's rank", loc, "equals"),
            region=ir.Region(buffer=_name(name, "buffer", loc, "equals"),
                             start=_integer(offset, "a contribution's start", loc, "equals"),
                             stop=offset + count)))
    return ir.Expectation(rank=rank, region=ir.Region(buffer=buffer, start=start, stop=stop), op=op,
                          label="custom", contributions=tuple(parts))


# ------------------------------------------------------------------------------------ checking
def check_specs(expect, loc: ir.SourceLoc) -> tuple[Spec, ...]:
    """`expect=` of `@cw.schedule`: None, one postcondition, or a list of them."""
    specs = () if expect is None else (tuple(expect) if isinstance(expect, (list, tuple)) else (expect,))
    for index, spec in enumerate(specs):
        if not isinstance(spec, Spec):
            where = f"expect[{index}]" if isinstance(expect, (list, tuple)) else "expect"
            raise _fail(loc, f"{where} must be a postcondition such as cw.allreduce('x'), got "
                             f"{type(spec).__name__} {spec!r}",
                        "use cw.allreduce, cw.allgather, cw.reduce_scatter, cw.alltoall, cw.broadcast, cw.reduce "
                        "or cw.custom", op="schedule")
    return specs


def resolve_all(specs: Iterable[Spec], sched: ir.Schedule) -> tuple[ir.Expectation, ...]:
    """Resolve every postcondition on the traced schedule and check what it says against it."""
    out: list[ir.Expectation] = []
    for spec in specs:
        loc = getattr(spec, "loc", None) or sched.loc
        label = getattr(spec, "label", type(spec).__name__)
        try:
            found = list(spec.resolve(sched))
        except ScheduleError:
            raise
        except Exception as exc:  # a user's own Spec subclass
            raise _fail(loc, f"postcondition {label} raised {type(exc).__name__}: {exc}",
                        "fix the postcondition") from exc
        for exp in found:
            if not isinstance(exp, ir.Expectation):
                raise _fail(loc, f"postcondition {label} resolved to {type(exp).__name__} {exp!r}, not an expectation")
            _check_expectation(exp, sched, loc, label)
        out.extend(found)
    return tuple(out)


def _check_expectation(exp: ir.Expectation, sched: ir.Schedule, loc: ir.SourceLoc, label: str) -> None:
    def fail(message: str, hint: str | None = None, rank: int | None = None) -> ScheduleError:
        return _fail(loc, f"postcondition {label}: {message}", hint, rank=rank)

    def region_of(rank: int, region: ir.Region, what: str) -> ir.BufferDecl:
        if not 0 <= rank < sched.world:
            raise fail(f"{what} names rank {rank}, but the world has ranks 0..{sched.world - 1}",
                       "compute ranks from the world size the function receives")
        try:
            decl = sched.programs[rank].buffer(region.buffer)
        except KeyError:
            raise fail(f"{what} names buffer {region.buffer!r}, which rank {rank} does not declare",
                       "use a buffer name the schedule declares", rank=rank) from None
        if not 0 <= region.start < region.stop <= decl.count:
            raise fail(f"{what} {region} on rank {rank} is out of bounds: {region.buffer} has {decl.count} elements",
                       f"keep 0 <= start < stop <= {decl.count}", rank=rank)
        return decl

    target = region_of(exp.rank, exp.region, "the expected region")
    if not exp.contributions:
        raise fail(f"{exp.region} on rank {exp.rank} has no contributions", rank=exp.rank)
    for contrib in exp.contributions:
        decl = region_of(contrib.rank, contrib.region, "a contribution")
        if contrib.region.count != exp.region.count:
            raise fail(f"{exp.region} on rank {exp.rank} has {exp.region.count} elements, but the contribution "
                       f"{contrib.region} of rank {contrib.rank} has {contrib.region.count}",
                       "make the regions the same size", rank=exp.rank)
        if decl.dtype != target.dtype:
            raise fail(f"{exp.region} on rank {exp.rank} is {target.dtype}, but the contribution {contrib.region} "
                       f"of rank {contrib.rank} is {decl.dtype}", "compare buffers of one dtype", rank=exp.rank)
