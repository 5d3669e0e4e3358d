"""Postconditions: what the outputs hold at the end, as element-wise combinations of inputs.

Each spec resolves, once the schedule is traced, to `ir.Expectation`s: "region R on rank r equals,
element by element, op over these contributions (rank, region at schedule start)". The checker
compares multisets of contributions, so a doubled or missing rank is caught.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Iterable

from .. import ir
from ..errors import ScheduleError


def _whole(sched: ir.Schedule, rank: int, name: str, spec: str) -> ir.Region:
    try:
        decl = sched.programs[rank].buffer(name)
    except KeyError:
        raise ScheduleError(f"postcondition {spec} names buffer {name!r}, which rank {rank} does not declare",
                            file=sched.loc.file, line=sched.loc.line, rank=rank,
                            hint="use a buffer name the schedule declares") from None
    return ir.Region(buffer=name, start=0, stop=decl.count)


def _chunk(region: ir.Region, index: int, parts: int, spec: str, sched: ir.Schedule) -> ir.Region:
    if region.count % parts:
        raise ScheduleError(f"postcondition {spec}: {region.buffer} has {region.count} elements, "
                            f"not a multiple of {parts}", file=sched.loc.file, line=sched.loc.line)
    size = region.count // parts
    return ir.Region(buffer=region.buffer, start=region.start + index * size,
                     stop=region.start + (index + 1) * size)


class Spec(ABC):
    """A postcondition; `resolve(schedule)` gives its expectations."""

    label = "custom"

    @abstractmethod
    def resolve(self, sched: ir.Schedule) -> list[ir.Expectation]:
        """The expectations of this postcondition on a traced schedule."""


class allreduce(Spec):
    """Every rank's `dst` (default: `buf`, in place) = op over ranks of `buf`."""

    def __init__(self, buf: str, dst: str | None = None, op: str = "sum"):
        self.buf, self.dst, self.op = buf, dst or buf, op
        self.label = f"allreduce({buf!r})"

    def resolve(self, sched):
        out = []
        for rank in range(sched.world):
            contributions = tuple(ir.Contribution(rank=q, region=_whole(sched, q, self.buf, self.label))
                                  for q in range(sched.world))
            out.append(ir.Expectation(rank=rank, region=_whole(sched, rank, self.dst, self.label),
                                      contributions=contributions, op=self.op, label=self.label))
        return out


class allgather(Spec):
    """In place (`allgather("x")`): chunk q of x on every rank = chunk q of x on rank q.
    Out of place (`allgather("src", "dst")`): chunk q of dst = src of rank q."""

    def __init__(self, src: str, dst: str | None = None):
        self.src, self.dst = src, dst
        self.label = f"allgather({src!r}{', ' + repr(dst) if dst else ''})"

    def resolve(self, sched):
        out = []
        n = sched.world
        for rank in range(n):
            target = _whole(sched, rank, self.dst or self.src, self.label)
            for q in range(n):
                source = _whole(sched, q, self.src, self.label)
                if self.dst is None:
                    source = _chunk(source, q, n, self.label, sched)
                out.append(ir.Expectation(rank=rank, region=_chunk(target, q, n, self.label, sched),
                                          contributions=(ir.Contribution(rank=q, region=source),),
                                          label=self.label))
        return out


class reduce_scatter(Spec):
    """In place: chunk r of `src` on rank r = op over ranks of chunk r. Out of place: `dst` on
    rank r = op over ranks of chunk r of `src`."""

    def __init__(self, src: str, dst: str | None = None, op: str = "sum"):
        self.src, self.dst, self.op = src, dst, op
        self.label = f"reduce_scatter({src!r}{', ' + repr(dst) if dst else ''})"

    def resolve(self, sched):
        out = []
        n = sched.world
        for rank in range(n):
            contributions = tuple(
                ir.Contribution(rank=q, region=_chunk(_whole(sched, q, self.src, self.label), rank, n, self.label, sched))
                for q in range(n))
            if self.dst is None:
                target = _chunk(_whole(sched, rank, self.src, self.label), rank, n, self.label, sched)
            else:
                target = _whole(sched, rank, self.dst, self.label)
            out.append(ir.Expectation(rank=rank, region=target, contributions=contributions, op=self.op,
                                      label=self.label))
        return out


class alltoall(Spec):
    """Chunk q of `dst` on rank r = chunk r of `src` on rank q."""

    def __init__(self, src: str, dst: str):
        self.src, self.dst = src, dst
        self.label = f"alltoall({src!r}, {dst!r})"

    def resolve(self, sched):
        out = []
        n = sched.world
        for rank in range(n):
            target = _whole(sched, rank, self.dst, self.label)
            for q in range(n):
                source = _chunk(_whole(sched, q, self.src, self.label), rank, n, self.label, sched)
                out.append(ir.Expectation(rank=rank, region=_chunk(target, q, n, self.label, sched),
                                          contributions=(ir.Contribution(rank=q, region=source),),
                                          label=self.label))
        return out


class broadcast(Spec):
    """Every rank's `dst` (default `buf`) = `buf` of `root`."""

    def __init__(self, buf: str, root: int = 0, dst: str | None = None):
        self.buf, self.root, self.dst = buf, root, dst or buf
        self.label = f"broadcast({buf!r}, root={root})"

    def resolve(self, sched):
        source = _whole(sched, self.root, self.buf, self.label)
        return [ir.Expectation(rank=rank, region=_whole(sched, rank, self.dst, self.label),
                               contributions=(ir.Contribution(rank=self.root, region=source),), label=self.label)
                for rank in range(sched.world)]


class reduce(Spec):
    """`dst` (default `buf`) on `root` = op over ranks of `buf`."""

    def __init__(self, buf: str, root: int = 0, dst: str | None = None, op: str = "sum"):
        self.buf, self.root, self.dst, self.op = buf, root, dst or buf, op
        self.label = f"reduce({buf!r}, root={root})"

    def resolve(self, sched):
        contributions = tuple(ir.Contribution(rank=q, region=_whole(sched, q, self.buf, self.label))
                              for q in range(sched.world))
        return [ir.Expectation(rank=self.root, region=_whole(sched, self.root, self.dst, self.label),
                               contributions=contributions, op=self.op, label=self.label)]


class custom(Spec):
    """`fn(world) -> iterable of cw.equals(...)`: any element-wise postcondition."""

    def __init__(self, fn: Callable[[int], Iterable[ir.Expectation]], label: str = "custom"):
        self.fn, self.label = fn, label

    def resolve(self, sched):
        return list(self.fn(sched.world))


def equals(rank: int, buffer: str, start: int, stop: int, *contributions: tuple[int, str, int],
           op: str = "sum") -> ir.Expectation:
    """Elements [start, stop) of `buffer` on `rank` = op over `(rank, buffer, start)` contributions."""
    count = stop - start
    return ir.Expectation(
        rank=rank, region=ir.Region(buffer=buffer, start=start, stop=stop), op=op, label="custom",
        contributions=tuple(ir.Contribution(rank=q, region=ir.Region(buffer=b, start=s, stop=s + count))
                            for q, b, s in contributions))
