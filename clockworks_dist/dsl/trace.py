"""SPMD tracing: the user's function runs once per rank with a `Rank` handle; every call on the
handle appends one op, stamped with the user's file:line, to that rank's program.

Errors found while tracing (a peer out of range, a region out of bounds, sizes or dtypes that do not
match, an op on a buffer of the wrong kind) raise `ScheduleError` naming the user's line, rank and op.
Arguments are checked, not coerced: counts, indices and ranks are ints or `cw.size` expressions (a
float or a bool is an error, never truncated), names follow `ir.name_problem`, and a handle records
nothing once its schedule function has returned.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import math
import numbers
import operator
import os
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

from .. import ir
from ..errors import ScheduleError
from .datawords import as_signal_words
from .expect import check_specs, resolve_all
from . import params as _params
from .sizes import _BINDINGS, Size, SymInt, as_affine, as_int
from .source import _PACKAGE_DIR, check_name, user_loc  # noqa: F401  (importable from here too)
from ..semantics.budget import cycle_collector_paused
from ..semantics.rules import rule


class _Interner:
    """One IR object per distinct value while a schedule is traced: the regions, their affine
    bounds and the ops. A ring all-reduce of 1024 ranks has 3 million ops, most of them the same
    few regions at the same few lines on every rank, and a reduction of chunk c is the same op on
    every rank that does it. The IR is frozen, so sharing is invisible to its readers (equal
    values compare and serialise alike). Objects are keyed by value, with the parts already
    interned (or held here through the op that holds them) keyed by identity: the tables keep
    every object alive for the whole trace, so an identity is never reused while they exist."""

    def __init__(self) -> None:
        self.affines: dict[tuple, ir.Affine] = {}
        self.regions: dict[tuple, ir.Region] = {}
        self.ops: dict[tuple, ir.OpBase] = {}

    def affine(self, value) -> ir.Affine | None:
        """`as_affine(value)`, built once per distinct form."""
        if not isinstance(value, SymInt):
            return None
        if value._terms is None:
            key = (value.value, (), False)
        else:
            terms = tuple(sorted((name, coeff) for name, coeff in value._terms.items() if coeff))
            if not terms:
                return None
            key = (value._const, terms, True)
        found = self.affines.get(key)
        if found is None:
            found = self.affines[key] = as_affine(value)
        return found

    def region(self, name: str, start, stop) -> ir.Region:
        start_sym, stop_sym = self.affine(start), self.affine(stop)
        key = (name, as_int(start), as_int(stop), id(start_sym), id(stop_sym))
        found = self.regions.get(key)
        if found is None:
            found = self.regions[key] = ir.Region(buffer=name, start=key[1], stop=key[2], start_sym=start_sym,
                                                  stop_sym=stop_sym)
        return found

    def op(self, op: ir.OpBase) -> ir.OpBase:
        """The op already traced with the same value, else `op` (kept for the next one)."""
        key = (type(op), tuple(_identity(v) for v in op.__dict__.values()))
        return self.ops.setdefault(key, op)


def _identity(value):
    """A field's value as an interning key: IR objects by identity, tuples element by element."""
    kind = type(value)
    if kind is int or kind is str or value is None:
        return value
    if isinstance(value, ir.Frozen):
        return id(value)
    if kind is tuple:
        return tuple(_identity(v) for v in value)
    if kind is float:
        return (float, repr(value))  # -0.0 equals 0.0 but is another value
    return (kind, value)  # True equals 1 but is another value


# ------------------------------------------------------------------------------------ handles
# The checker keeps every signal word in its state, so a large signal array makes every state large
# (10**8 words took 42 s and 3.9 GB to check); real schedules use one word per peer or per step.
MAX_SIGNAL_WORDS = 2**16
# Buffers are split into atoms, so the checker copes with any count, but a count past 2**40 elements
# (terabytes) fits no GPU and is almost always a bytes/elements or exponent mistake.
MAX_BUFFER_ELEMENTS = 2**40


def _integer(value, what: str, rank: "Rank", op: str | None):
    """`value` if it is an int or a `cw.size` expression: floats and bools are refused, never truncated."""
    if isinstance(value, SymInt) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if not isinstance(value, (bool, float, str)):
        try:  # numpy integers and other exact integer types
            return operator.index(value)
        except TypeError:
            pass
    hint = None
    if isinstance(value, float):
        hint = "use an int: // divides without a remainder"
    elif isinstance(value, bool):
        hint = "True and False are not integers here"
    raise rank._error(f"{what} must be an integer, got {type(value).__name__} {value!r}", op, hint=hint)


def _check_index(value, limit: int, what: str, rank: "Rank", op: str | None = None) -> int:
    index = as_int(_integer(value, what, rank, op))
    if not 0 <= index < limit:
        raise rank._error(f"{what} {index} is out of range 0..{limit - 1}", op)
    return index


@dataclass(frozen=True)
class RegionRef:
    """Elements [start, stop) of one of this rank's buffers."""

    buf: "Buffer"
    start: int | SymInt
    stop: int | SymInt

    @property
    def count(self) -> int:
        return as_int(self.stop) - as_int(self.start)

    def chunk(self, index: int, parts: int) -> "RegionRef":
        """The index-th of `parts` equal chunks of this region."""
        rank, op = self.buf.rank, f"{self.buf.name}.chunk"
        parts = _integer(parts, "the number of chunks", rank, op)
        if as_int(parts) < 1:
            raise rank._error(f"cannot split {self} into {as_int(parts)} chunks", op,
                              hint="pass a positive number of chunks, e.g. x.chunk(i, r.world)")
        size = (self.stop - self.start) // parts
        if as_int(size) * as_int(parts) != self.count:
            raise rank._error(f"cannot split {self} ({self.count} elements) into {as_int(parts)} equal chunks", op,
                              hint="make the count a multiple of the number of chunks")
        index = _check_index(index, as_int(parts), "chunk index", rank, op)
        return self.buf._region(self.start + index * size, self.start + (index + 1) * size, op)

    def to_ir(self) -> ir.Region:
        return self.buf.rank._intern.region(self.buf.name, self.start, self.stop)

    def __str__(self) -> str:
        return f"{self.buf.name}[{as_int(self.start)}:{as_int(self.stop)}]"


@dataclass(frozen=True)
class Buffer:
    """A buffer of one rank (or of the symmetric heap, same on every rank)."""

    rank: "Rank"
    name: str
    count: int | SymInt
    dtype: str
    role: str
    symmetric: bool

    def _region(self, start, stop, op: str) -> RegionRef:
        start = _integer(start, "region start", self.rank, op)
        stop = _integer(stop, "region stop", self.rank, op)
        lo, hi, count = as_int(start), as_int(stop), as_int(self.count)
        if lo < 0 or hi < 0:
            raise self.rank._error(
                f"region {self.name}[{lo}:{hi}] has a negative bound: regions count from 0, not from the end", op,
                hint=f"{self.name} has {count} elements; write count - k for an offset from the end")
        if not lo <= hi <= count:
            raise self.rank._error(f"region {self.name}[{lo}:{hi}] is out of bounds: {self.name} has {count} elements",
                                   op, hint=f"keep 0 <= start <= stop <= {count}")
        return RegionRef(self, start, stop)

    def region(self, start, stop) -> RegionRef:
        """Elements [start, stop)."""
        return self._region(start, stop, f"{self.name}.region")

    def all(self) -> RegionRef:
        return RegionRef(self, 0, self.count)

    def chunk(self, index: int, parts: int) -> RegionRef:
        """The index-th of `parts` equal chunks of the whole buffer."""
        return self.all().chunk(index, parts)

    def element(self, index) -> RegionRef:
        """The one-element region [index, index + 1)."""
        op = f"{self.name}.element"
        index = _integer(index, "element index", self.rank, op)
        return self._region(index, index + 1, op)

    def __getitem__(self, item) -> RegionRef:
        op = f"{self.name}[...]"
        if isinstance(item, slice):
            if item.step is not None and (isinstance(item.step, bool) or item.step != 1):
                raise self.rank._error(f"strided regions are not supported: step {item.step!r}", op,
                                       hint="use a step of 1, or one op per element")
            start = 0 if item.start is None else item.start
            stop = self.count if item.stop is None else item.stop
            return self._region(start, stop, op)
        index = _integer(item, "element index", self.rank, op)
        return self._region(index, index + 1, op)

    def __iter__(self):
        raise self.rank._error(f"buffer {self.name} is not iterable", f"iter({self.name})",
                               hint="name regions with x[i], x[a:b] or x.chunk(i, n); pass several buffers as a list")

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Signal:
    """A symmetric array of uint64 signal words; `sig[i]` names one word."""

    rank: "Rank"
    name: str
    count: int

    def __getitem__(self, index) -> ir.SignalRef:
        index = _check_index(index, self.count, f"signal index of {self.name}", self.rank, f"{self.name}[...]")
        return ir.SignalRef(signal=self.name, index=index)

    def __iter__(self):
        raise self.rank._error(f"signal {self.name} is not iterable", f"iter({self.name})",
                               hint=f"name one word with {self.name}[i]")

    def ref(self) -> ir.SignalRef:
        return self[0]


@dataclass(frozen=True)
class Comm:
    """A communicator: its member world ranks, in order."""

    name: str
    ranks: tuple[int, ...]
    me: int

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def index(self) -> int:
        """This rank's position in the communicator."""
        return self.ranks.index(self.me)


@dataclass(frozen=True)
class Team(Comm):
    """An NVSHMEM team (`Rank.team_split_strided`): its member world ranks, in team order."""


# --------------------------------------------------------------------------------- the handle
# The team collectives are the collectives of `ir` on a team (`ir.Communicator.team`).
_TEAM_KINDS = {"team_reduce": "all_reduce", "team_fcollect": "all_gather", "team_alltoall": "all_to_all",
               "team_broadcast": "broadcast"}
_REDUCE_OPS = ("sum", "prod", "max", "min")
_ROLES = ("input", "output", "inout", "scratch")
_COMPARES = ("eq", "ne", "gt", "ge", "lt", "le")
_ATOMIC_OPS = ("add", "set", "inc", "and", "or", "xor")


@dataclass
class _RankState:
    buffers: dict[str, ir.BufferDecl] = field(default_factory=dict)
    signals: dict[str, ir.SignalDecl] = field(default_factory=dict)
    comms: dict[str, tuple[tuple[int, ...], ir.SourceLoc]] = field(default_factory=dict)
    teams: dict[str, ir.TeamOf] = field(default_factory=dict)  # the comms that are NVSHMEM teams
    splits: dict[str, ir.SourceLoc] = field(default_factory=dict)  # every team this rank split, member or not
    ops: list = field(default_factory=list)
    group: list | None = None
    group_loc: ir.SourceLoc | None = None
    closed: bool = False  # the schedule function has returned for this rank
    # the rank's threads (`Rank.thread`): name -> (kind, ops, where first opened), and the one open now
    threads: dict[str, tuple[str, list, ir.SourceLoc]] = field(default_factory=dict)
    thread: str | None = None
    # events (`Rank.event`): name -> [where declared, records made so far in host order]
    events: dict[str, list] = field(default_factory=dict)
    kernel: "_Kernel | None" = None  # the kernel open now (`Rank.kernel`)
    kernels: dict[str, int] = field(default_factory=dict)  # kernel name -> launches so far
    # buffers whose elements a wait reads (`datawords`): name -> the first such wait
    waited: dict[str, ir.SourceLoc] = field(default_factory=dict)

    @property
    def target(self) -> list:
        """Where the next op goes: the open thread's ops, else the rank's."""
        return self.threads[self.thread][1] if self.thread is not None else self.ops


@dataclass
class _Kernel:
    """A kernel being traced: its name, its stream, and its blocks so far (thread names)."""

    name: str
    stream: str
    loc: ir.SourceLoc
    blocks: list = field(default_factory=list)
    barriers: list = field(default_factory=list)  # (thread ops list, index) of grid-wide barriers to fill in


@dataclass(frozen=True)
class Event:
    """A CUDA event of one rank (`Rank.event`): record it on one thread, wait for it on another."""

    name: str


def _one_of(value, choices: tuple, what: str, op: str | None, rank: "Rank") -> str:
    if not isinstance(value, str) or value not in choices:
        raise rank._error(f"unknown {what} {value!r}", op, hint=f"one of {', '.join(choices)}")
    return value


class _ReadOnlyClass(type):
    """`cw.Rank.all_reduce = ...` would change what every schedule traces: refused."""

    def __setattr__(cls, name: str, value) -> None:
        loc = user_loc()
        raise ScheduleError(f"cannot set Rank.{name}: the rank handle's class is read-only", file=loc.file,
                            line=loc.line, hint="define your own helper function instead of patching clockworks")

    def __delattr__(cls, name: str) -> None:
        loc = user_loc()
        raise ScheduleError(f"cannot delete Rank.{name}: the rank handle's class is read-only", file=loc.file,
                            line=loc.line, hint="define your own helper function instead of patching clockworks")


class Rank(metaclass=_ReadOnlyClass):
    """The handle a schedule function receives: one rank of the world.

    Attributes: `rank`, `world`, `ranks_per_node`, `node`, `local_rank`, `nodes`.
    """

    def __init__(self, rank: int, world: int, ranks_per_node: int, intern: _Interner | None = None):
        self.rank = rank
        self._intern = intern if intern is not None else _Interner()
        self.world = world
        self.ranks_per_node = ranks_per_node
        self.node = rank // ranks_per_node
        self.local_rank = rank % ranks_per_node
        self.nodes = world // ranks_per_node
        self._st = _RankState()

    def __repr__(self) -> str:
        return f"<Rank {self.rank} of {self.world}>"

    def __setattr__(self, name: str, value) -> None:
        # The handle is read-only once built: `r.world = 3`, `r.rank = 5` or `r.put = ...` would
        # trace a different schedule than the one checked, or a wrong verdict.
        if "_st" in self.__dict__:
            raise self._error(f"the rank handle is read-only: cannot set r.{name}",
                              hint="keep your own values in local variables")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise self._error(f"the rank handle is read-only: cannot delete r.{name}",
                          hint="keep your own values in local variables")

    def __getattr__(self, name: str):
        # Only called for names the handle lacks: an unknown op, with a suggestion.
        if name.startswith("_"):
            raise AttributeError(name)
        known = [n for n in dir(type(self)) if not n.startswith("_")]
        close = difflib.get_close_matches(name, known, n=1)
        raise self._error(f"unknown op or attribute r.{name}",
                          hint=f"did you mean r.{close[0]}?" if close else "see `clockworks show` for the op list")

    # -- errors -------------------------------------------------------------------------------
    def _error(self, message: str, op: str | None = None, hint: str | None = None,
               loc: ir.SourceLoc | None = None) -> ScheduleError:
        loc = loc or user_loc()
        return ScheduleError(message, file=loc.file, line=loc.line, rank=self.rank, op=op, hint=hint)

    def _open(self, op: str) -> None:
        """Refuse to record into a rank whose trace has ended: its program is already built."""
        if self._st.closed:
            raise self._error(f"the handle of rank {self.rank} is used after its schedule function returned",
                              op, hint="call ops on `r` only inside the schedule function, while it runs")

    def _peer(self, peer, op: str, what: str = "peer") -> int:
        if isinstance(peer, bool) or not isinstance(peer, (int, SymInt)):
            try:
                peer = _integer(peer, what, self, op)
            except ScheduleError:
                raise self._error(f"{what} must be an integer rank, got {type(peer).__name__} {peer!r}", op,
                                  hint="ranks are ints in 0..world-1") from None
        value = as_int(peer)
        if not 0 <= value < self.world:
            raise self._error(f"{what} {value} is out of range: the world has ranks 0..{self.world - 1}",
                              op, hint="did you mean (rank + 1) % world?")
        return value

    def _local(self, region, op: str, what: str) -> RegionRef:
        if isinstance(region, Buffer):
            region = region.all()
        if not isinstance(region, RegionRef):
            raise self._error(f"{what} must be a buffer or a region of one, got {type(region).__name__}", op)
        if region.buf.rank is not self:
            raise self._error(f"{what} {region} belongs to rank {region.buf.rank.rank}'s trace", op,
                              hint="use the buffers this rank declared")
        return region

    def _regions(self, items, op: str, what: str) -> tuple[ir.Region, ...]:
        """One buffer or region, or an iterable of them."""
        if isinstance(items, (Buffer, RegionRef)):
            items = (items,)
        elif items is None or isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
            raise self._error(f"{what} must be a list of buffers or regions, got {type(items).__name__} {items!r}",
                              op)
        return tuple(self._local(x, op, what[:-1] if what.endswith("s") else what).to_ir() for x in items)

    def _symmetric(self, region, op: str, what: str) -> RegionRef:
        region = self._local(region, op, what)
        if not region.buf.symmetric:
            raise self._error(f"{what} {region} is in a per-rank buffer; remote access needs the "
                              "symmetric heap", op,
                              hint=f"declare it with r.symmetric({region.buf.name!r}, ...)")
        return region

    def _no_shifted_overlap(self, dst: RegionRef, src: RegionRef, op: str) -> None:
        """A local kernel runs element by element in parallel: a source that overlaps its
        destination at another offset is read while other threads write it (memcpy's rule). The
        same region in place is fine."""
        if dst.buf.name != src.buf.name or as_int(dst.start) == as_int(src.start):
            return
        if as_int(dst.start) < as_int(src.stop) and as_int(src.start) < as_int(dst.stop):
            raise self._error(f"dst {dst} and src {src} overlap at different offsets, so the kernel's threads "
                              "would read elements other threads are writing", op,
                              hint="copy through a scratch buffer, or use the same region for an in-place op")

    def _same_shape(self, a: RegionRef, b: RegionRef, op: str, members: int = 1) -> None:
        """`a` (the source) and `b` (the destination) of `op` have the shapes its data flow needs
        (`rules.Rule.scale`: all_gather's destination is `members` times its source)."""
        src_units, dst_units = rule(op).scale(members)
        if a.count * dst_units != b.count * src_units:
            raise self._error(f"size mismatch: {a} has {a.count} elements, {b} has {b.count}", op)
        if a.buf.dtype != b.buf.dtype:
            raise self._error(f"dtype mismatch: {a} is {a.buf.dtype}, {b} is {b.buf.dtype}", op)

    def _signal(self, sig, op: str) -> ir.SignalRef:
        if isinstance(sig, Signal):
            if sig.count != 1:
                raise self._error(f"signal {sig.name} has {sig.count} words: name one, e.g. {sig.name}[i]", op)
            sig = sig.ref()
        if not isinstance(sig, ir.SignalRef):
            raise self._error(f"expected a signal word, got {type(sig).__name__}", op,
                              hint="declare one with r.signal(name, count) and index it")
        decl = self._st.signals.get(sig.signal)
        if decl is None:
            raise self._error(f"unknown signal {sig.signal!r}", op, hint="declare it with r.signal(name, count)")
        if not 0 <= sig.index < decl.count:
            raise self._error(f"signal index of {sig.signal} {sig.index} is out of range 0..{decl.count - 1}", op)
        return sig

    def _wait_word(self, word, op: str) -> ir.SignalRef:
        """A word a wait reads: a signal word, or one element of a symmetric buffer (`datawords`: the
        buffer becomes a signal array when the trace ends, or the trace is refused there)."""
        if not isinstance(word, RegionRef):
            return self._signal(word, op)
        region = self._symmetric(word, op, "waited word")
        if region.count != 1:
            raise self._error(f"a wait reads one word, but {region} has {region.count} elements", op,
                              hint=f"name one element, e.g. {region.buf.name}[i]")
        self._st.waited.setdefault(region.buf.name, user_loc())
        return ir.SignalRef(signal=region.buf.name, index=as_int(region.start))

    def _word(self, target, op: str):
        """An atomic target: a signal word or one element of an integer symmetric buffer."""
        if isinstance(target, (Signal, ir.SignalRef)):
            return self._signal(target, op)
        region = self._symmetric(target, op, "atomic target")
        if region.count != 1:
            raise self._error(f"atomic target {region} must be one element", op,
                              hint="use buf.element(i)")
        if region.buf.dtype not in ir.INTEGER_DTYPES:
            raise self._error(f"atomic target {region} is {region.buf.dtype}; atomics need an integer dtype", op)
        return region.to_ir()

    def _comm(self, comm, op: str) -> str:
        if comm is None or (isinstance(comm, str) and comm == "world"):
            return "world"
        if isinstance(comm, Team):
            raise self._error(f"{comm.name} is an NVSHMEM team, not an NCCL communicator", op,
                              hint="use the team ops (r.team_reduce, r.team_fcollect, r.team_alltoall, "
                                   "r.team_broadcast, r.team_sync, r.team_barrier) on a team")
        if not isinstance(comm, Comm):
            raise self._error(f"comm must be a communicator from r.comm(...), got {type(comm).__name__} {comm!r}",
                              op, hint="pass the object r.comm(name, ranks) returned, or leave comm out for the world")
        mine = self._st.comms.get(comm.name)
        if mine is None or mine[0] != comm.ranks:
            raise self._error(f"communicator {comm.name} is not declared on rank {self.rank}", op,
                              hint="use the communicator this rank's r.comm(...) returned")
        return comm.name

    def _members(self, comm: str) -> Sequence[int]:
        if comm == "world":
            return range(self.world)  # `in` and len() in constant time: a send is traced per step
        return self._st.comms[comm][0]

    def _flag(self, value, what: str, op: str) -> bool:
        if not isinstance(value, bool):
            raise self._error(f"{what} must be True or False, got {type(value).__name__} {value!r}", op)
        return value

    def _append(self, op) -> None:
        self._open(op.kind)
        if self._st.kernel is not None and self._st.thread is None:
            raise self._error(f"{op.kind} is inside kernel {self._st.kernel.name} but outside its blocks", op.kind,
                              loc=op.loc, hint="put it inside `with r.block(name):`")
        op = self._intern.op(op)
        if self._st.group is not None:
            if op.kind not in ("send", "recv") and op.kind not in ir.GROUP_COLLECTIVE_KINDS:
                kinds = ", ".join(sorted(ir.GROUP_COLLECTIVE_KINDS))
                raise self._error(f"only send, recv and the NCCL collectives ({kinds}) may be grouped, not {op.kind}",
                                  op.kind,
                                  loc=op.loc, hint="move it after the `with r.group():` block")
            if op.kind in ir.GROUP_COLLECTIVE_KINDS and op.comm in self._st.teams:
                raise self._error(f"{op.kind} on NVSHMEM team {op.comm} is inside a group: a group posts NCCL "
                                  "operations, and team collectives are NVSHMEM's", op.kind, loc=op.loc,
                                  hint="move it after the `with r.group():` block")
            self._st.group.append(op)
        else:
            self._st.target.append(op)

    # -- declarations -------------------------------------------------------------------------
    def _fresh(self, name, what: str, op: str, loc: ir.SourceLoc) -> str:
        self._open(op)
        check_name(name, what, loc, self.rank, op)
        first = self._st.buffers.get(name) or self._st.signals.get(name)
        if first is not None:
            raise self._error(f"{name!r} is declared twice: first at {first.loc}", op,
                              hint="use another name, or keep the handle the first declaration returned")
        return name

    def _declare(self, name, count, dtype, role, symmetric) -> Buffer:
        loc = user_loc()
        op = "symmetric" if symmetric else "buffer"
        self._fresh(name, "buffer", op, loc)
        count = _integer(count, f"the count of buffer {name}", self, op)
        if not 1 <= as_int(count) <= MAX_BUFFER_ELEMENTS:
            raise self._error(f"buffer {name} needs 1..2**40 elements, got {as_int(count)}", op,
                              hint="the count is in elements, not bytes; no GPU holds more than 2**40 elements")
        dtype = _one_of(dtype, tuple(ir.DTYPE_BYTES), "dtype", op, self)
        role = _one_of(role, _ROLES, "role", op, self)
        self._st.buffers[name] = ir.BufferDecl(
            name=name, count=as_int(count), dtype=dtype, role=role, symmetric=symmetric,
            count_sym=as_affine(count), loc=loc)
        return Buffer(self, name, count, dtype, role, symmetric)

    def buffer(self, name: str, count, dtype: str = "float32", role: str = "inout") -> Buffer:
        """Declare a buffer of this rank (device memory, not addressable by other ranks)."""
        return self._declare(name, count, dtype, role, False)

    def symmetric(self, name: str, count, dtype: str = "float32", role: str = "inout") -> Buffer:
        """Declare a symmetric-heap buffer: same name and size on every rank, remotely accessible."""
        return self._declare(name, count, dtype, role, True)

    def signal(self, name: str, count: int = 1) -> Signal:
        """Declare a symmetric array of `count` uint64 signal words, initially 0 (at most
        MAX_SIGNAL_WORDS: the checker keeps every word in its state)."""
        loc = user_loc()
        self._fresh(name, "signal", "signal", loc)
        count = as_int(_integer(count, f"the count of signal {name}", self, "signal"))
        if not 1 <= count <= MAX_SIGNAL_WORDS:
            raise self._error(f"signal {name} needs 1..{MAX_SIGNAL_WORDS} words, got {count}", "signal",
                              hint="the checker keeps every signal word in its state; use one word per peer "
                                   "or per step, and reuse words across iterations")
        self._st.signals[name] = ir.SignalDecl(name=name, count=count, loc=loc)
        return Signal(self, name, count)

    def comm(self, name: str, ranks: Iterable[int]) -> Comm:
        """A communicator of the world ranks `ranks` (this rank among them); every member must
        declare it with the same ranks, as ncclCommSplit would give them. Declaring a name again
        with the same ranks returns the same communicator."""
        loc = user_loc()
        self._open("comm")
        check_name(name, "communicator", loc, self.rank, "comm")
        if isinstance(ranks, (str, bytes)) or not isinstance(ranks, Iterable):
            raise self._error(f"communicator {name} needs a list of world ranks, got {type(ranks).__name__} "
                              f"{ranks!r}", "comm", hint="e.g. r.comm('pair', [0, 1])")
        members = tuple(self._peer(r, "comm", "member") for r in ranks)
        if self.rank not in members:
            raise self._error(f"communicator {name} does not contain this rank", "comm",
                              hint="pass the group this rank belongs to")
        if len(set(members)) != len(members):
            raise self._error(f"communicator {name} lists a rank twice: {list(members)}", "comm")
        first = self._st.comms.get(name)
        if first is not None and first[0] != members:
            raise self._error(f"communicator {name} is declared again with ranks {list(members)}, but at {first[1]} "
                              f"it has ranks {list(first[0])}", "comm",
                              hint="a communicator's members are fixed: give the new one another name")
        if first is None:
            self._st.comms[name] = (members, loc)
        return Comm(name, members, self.rank)

    def node_comm(self, name: str = "intra") -> Comm:
        """The ranks of this node."""
        base = self.node * self.ranks_per_node
        return self.comm(name, range(base, base + self.ranks_per_node))

    def rail_comm(self, name: str = "inter") -> Comm:
        """The ranks with this local rank, one per node."""
        return self.comm(name, range(self.local_rank, self.world, self.ranks_per_node))

    # -- two-sided ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def group(self) -> Iterator[None]:
        """ncclGroupStart/End: the sends, receives and NCCL collectives inside are posted together and
        complete in any order; the group completes when all have (NCCL's group semantics). A grouped
        collective still matches, per communicator, the k-th collective of every member, counted in
        the order each rank posts them (inside its groups and outside), so two collectives of one
        communicator posted in different orders by two ranks are a collective mismatch; collectives of
        different communicators in one group do not wait for each other, so ranks may post them in any
        order. Grouped collectives that touch the same elements race, as two ranks would."""
        self._open("group")
        if self._st.group is not None:
            raise self._error("groups do not nest", "group", hint="remove the inner `with r.group():`")
        self._st.group, self._st.group_loc = [], user_loc()
        try:
            yield
        finally:
            ops, loc = self._st.group, self._st.group_loc
            self._st.group = None
        if ops:
            self._st.target.append(self._intern.op(ir.Group(ops=tuple(ops), loc=loc)))

    @contextlib.contextmanager
    def thread(self, name: str, kind: str = "block") -> Iterator[None]:
        """The ops inside run on thread `name` of this rank: a thread block of its kernel (`kind="block"`)
        or a stream of its host (`"stream"`). A rank's threads start together and run concurrently, each
        its own ops in order; they share the rank's memory and signal words, so two threads that touch
        the same elements without an order between them race, as two ranks would. Order them with the
        synchronisation real code uses: a signal word one thread updates (`signal_op` to its own rank)
        and another waits on (`wait_until`). The rank ends when every thread has ended; a thread's end
        completes none of its puts. Opening a thread again appends to it. A rank with threads runs only
        its threads: every op goes inside one."""
        loc = user_loc()
        self._open("thread")
        if self._st.thread is not None:
            raise self._error(f"threads do not nest: thread {self._st.thread!r} is open", "thread", loc=loc,
                              hint="close it before opening another")
        if self._st.group is not None:
            raise self._error("a thread cannot open inside a group", "thread", loc=loc,
                              hint="open the group inside the thread")
        check_name(name, "thread", loc, self.rank, "thread")
        kind = _one_of(kind, ("block", "stream"), "thread kind", "thread", self)
        found = self._st.threads.get(name)
        if found is not None and found[0] != kind:
            raise self._error(f"thread {name!r} was opened as a {found[0]} at {found[2]}", "thread", loc=loc)
        if found is None:
            if len(self._st.threads) >= ir.MAX_THREADS:
                raise self._error(f"a rank has at most {ir.MAX_THREADS} threads", "thread", loc=loc)
            self._st.threads[name] = (kind, [], loc)
        self._st.thread = name
        try:
            yield
        finally:
            self._st.thread = None

    # -- synchronisation inside a rank: events, thread barriers, kernels on a stream --------------
    def event(self, name: str) -> Event:
        """Declare CUDA event `name` of this rank (cudaEventCreate) and return it, for `record_event`
        and `wait_event`."""
        loc = user_loc()
        self._open("event")
        check_name(name, "event", loc, self.rank, "event")
        if name in self._st.events:
            raise self._error(f"event {name!r} is already declared at {self._st.events[name][0]}", "event", loc=loc)
        self._st.events[name] = [loc, 0]
        return Event(name)

    def _event(self, event, op: str) -> str:
        name = event.name if isinstance(event, Event) else event
        if not isinstance(name, str) or name not in self._st.events:
            raise self._error(f"{event!r} is not an event of rank {self.rank}", op,
                              hint="declare it first: ev = r.event(\"name\")")
        if self._st.thread is None:
            raise self._error(f"{op} is outside every thread: events order a rank's threads", op,
                              hint="call it inside `with r.thread(name, kind=\"stream\"):`")
        return name

    def record_event(self, event) -> None:
        """cudaEventRecord on the thread this call is in: the event captures the thread's work so far
        (its earlier ops). It completes none of the thread's puts (a delivery in flight stays in
        flight). An event may be recorded again; each wait uses the most recent record made before
        it, in the order the schedule's calls are made (host order), as CUDA does."""
        loc = user_loc()
        name = self._event(event, "record_event")
        self._st.events[name][1] += 1
        self._append(ir.RecordEvent(event=name, record=self._st.events[name][1], loc=loc))

    def wait_event(self, event) -> None:
        """cudaStreamWaitEvent: this thread's later ops start after the work the event captured in its
        most recent record made before this call (host order): what the recording thread did before
        the record happens before what this thread does after the wait. A wait with no record before
        it is reported as a deadlock naming the event (CUDA would skip it and leave the threads
        unordered)."""
        loc = user_loc()
        name = self._event(event, "wait_event")
        self._append(ir.WaitEvent(event=name, record=self._st.events[name][1], loc=loc))

    def thread_barrier(self, name: str, threads=None) -> None:
        """A barrier among threads of this rank (a block barrier, or grid.sync() in a kernel): every
        thread in `threads` (names; inside a kernel, its block names, default all of the kernel's
        blocks) reaches its k-th barrier `name` before any goes past it. Each listed thread calls it.
        Local stores before it are visible after it; it completes no puts."""
        loc = user_loc()
        self._open("thread_barrier")
        check_name(name, "thread barrier", loc, self.rank, "thread_barrier")
        if self._st.thread is None:
            raise self._error("thread_barrier is outside every thread", "thread_barrier", loc=loc,
                              hint="call it inside each thread that meets (`with r.thread(name):`)")
        kernel = self._st.kernel
        if threads is None:
            if kernel is None:
                raise self._error("thread_barrier needs the threads that meet", "thread_barrier", loc=loc,
                                  hint="pass threads=[\"a\", \"b\"]")
            placeholder = ir.ThreadBarrier(name=name, threads=(self._st.thread, self._st.thread + "_"), loc=loc)
            self._append(placeholder)
            kernel.barriers.append((self._st.target, len(self._st.target) - 1))
            return
        if isinstance(threads, str) or not isinstance(threads, Iterable):
            raise self._error(f"threads must be a list of thread names, got {threads!r}", "thread_barrier", loc=loc)
        names = [f"{kernel.name}_{t}" if kernel is not None and isinstance(t, str) else t for t in threads]
        for t in names:
            if not isinstance(t, str) or t not in self._st.threads:
                raise self._error(f"{t!r} is not a thread of rank {self.rank} (yet)", "thread_barrier", loc=loc,
                                  hint="open every thread that meets before the barrier is first called")
        if len(set(names)) != len(names) or len(names) < 2:
            raise self._error("a thread barrier lists two or more threads, each once", "thread_barrier", loc=loc)
        if self._st.thread not in names:
            raise self._error(f"thread {self._st.thread} calls barrier {name} but is not among its threads",
                              "thread_barrier", loc=loc, hint="list the calling thread too")
        self._append(ir.ThreadBarrier(name=name, threads=tuple(names), loc=loc))

    @contextlib.contextmanager
    def kernel(self, name: str, stream: str = "stream") -> Iterator[None]:
        """A kernel launched on thread `stream` of this rank (a stream, opened if new): the blocks
        opened inside (`with r.block(name):`) start after the stream's earlier ops, run concurrently,
        and the stream's next ops start once every block has ended. A kernel's end completes none of
        its puts (NVSHMEM: a quiet, or nvshmemx_quiet_on_stream, does). Each block is thread
        `<kernel>_<block>` of the rank; the launch is made of events (`<kernel>_start`, recorded on
        the stream, and `<kernel>_<block>_end`), so it is checked as they are."""
        loc = user_loc()
        self._open("kernel")
        if self._st.thread is not None or self._st.kernel is not None:
            raise self._error("a kernel is launched from the host, outside every thread and kernel", "kernel",
                              loc=loc, hint="close the open thread first")
        check_name(name, "kernel", loc, self.rank, "kernel")
        start = f"{name}_start"
        if start not in self._st.events:
            self._st.events[start] = [loc, 0]
        with self.thread(stream, kind="stream"):
            self.record_event(start)
        self._st.kernels[name] = self._st.kernels.get(name, 0) + 1
        kernel = self._st.kernel = _Kernel(name=name, stream=stream, loc=loc)
        try:
            yield
        finally:
            self._st.kernel = None
        if not kernel.blocks:
            raise self._error(f"kernel {name} has no block", "kernel", loc=loc,
                              hint="open its blocks inside: `with r.block(\"b0\"):`")
        for ops, index in kernel.barriers:
            ops[index] = self._intern.op(ops[index].model_copy(update={"threads": tuple(kernel.blocks)}))
        for block in kernel.blocks:
            end = f"{block}_end"
            with self.thread(block):
                self.record_event(end)
        with self.thread(stream, kind="stream"):
            for block in kernel.blocks:
                self.wait_event(f"{block}_end")

    @contextlib.contextmanager
    def block(self, name: str) -> Iterator[None]:
        """The ops inside run on block `name` of the kernel open now (`Rank.kernel`), as thread
        `<kernel>_<name>` of the rank (kind "block")."""
        loc = user_loc()
        kernel = self._st.kernel
        if kernel is None:
            raise self._error("a block belongs to a kernel", "block", loc=loc,
                              hint="open it inside `with r.kernel(name, stream=...):`")
        check_name(name, "block", loc, self.rank, "block")
        thread = f"{kernel.name}_{name}"
        first = thread not in kernel.blocks
        if first:
            kernel.blocks.append(thread)
            if f"{thread}_end" not in self._st.events:
                self._st.events[f"{thread}_end"] = [loc, 0]
        with self.thread(thread, kind="block"):
            if first:
                self.wait_event(f"{kernel.name}_start")
            yield

    def send(self, peer, src, comm=None, channel: int = 0, slots: int = 0) -> None:
        """ncclSend of local `src` to `peer` (on `comm`, default the world).

        Rendezvous: it completes only together with its matching `recv` on `peer` (the k-th send
        from this rank to `peer` on a communicator matches the k-th recv there, first in first out),
        in one step that reads `src` here and writes the receiver's `dst`; there is no eager
        buffering. Sizes and dtypes must match. Inside `group()` it is posted with the others.

        `channel` picks one of several connections to `peer` (MSCCL's channels), each matched first
        in first out on its own. `slots=k` (k >= 1) makes the connection a FIFO of k messages, as
        NCCL's and MSCCL's connections are: the send reads `src` and completes without its recv while
        fewer than k earlier messages on the connection wait to be received; with k waiting, the FIFO
        is full and the send blocks until the oldest is received. Both ends state the same slots."""
        loc = user_loc()
        peer = self._peer(peer, "send")
        src = self._local(src, "send", "src")
        name = self._comm(comm, "send")
        if peer not in self._members(name):
            raise self._error(f"peer {peer} is not in communicator {name}", "send", loc=loc)
        channel, slots = self._connection(channel, slots, "send")
        self._append(ir.Send(peer=peer, src=src.to_ir(), comm=name, channel=channel, slots=slots, loc=loc))

    def recv(self, peer, dst, reduce: str | None = None, comm=None, channel: int = 0, slots: int = 0) -> None:
        """ncclRecv from `peer` into local `dst`, matched first in first out with `peer`'s sends to
        this rank on `comm` (and `channel`). `reduce="sum"` (or prod, max, min) combines the incoming
        data with what `dst` holds instead of overwriting it. Completes together with its send; on a
        connection with `slots` (see `send`), it takes the oldest message once that has been sent."""
        loc = user_loc()
        peer = self._peer(peer, "recv")
        dst = self._local(dst, "recv", "dst")
        if reduce is not None:
            _one_of(reduce, _REDUCE_OPS, "reduction", "recv", self)
        name = self._comm(comm, "recv")
        if peer not in self._members(name):
            raise self._error(f"peer {peer} is not in communicator {name}", "recv", loc=loc)
        channel, slots = self._connection(channel, slots, "recv")
        self._append(ir.Recv(peer=peer, dst=dst.to_ir(), reduce=reduce, comm=name, channel=channel, slots=slots,
                             loc=loc))

    def _connection(self, channel, slots, op: str) -> tuple[int, int]:
        """A send's or recv's channel and slots, checked (integers in range)."""
        channel = _check_index(_integer(channel, "channel", self, op), ir.MAX_CHANNEL + 1, "channel", self, op)
        slots = _check_index(_integer(slots, "slots", self, op), ir.MAX_SLOTS + 1, "slots", self, op)
        return channel, slots

    # -- collectives --------------------------------------------------------------------------
    def _reduce_op(self, op: str, kind: str) -> str:
        return _one_of(op, _REDUCE_OPS, "reduction", kind, self)

    def all_reduce(self, src, dst=None, op: str = "sum", comm=None) -> None:
        """ncclAllReduce: every member's `dst` (default: `src`, in place) gets the element-wise
        `op` of all members' `src`. The k-th collective of each member of `comm` must match in
        kind, count, dtype and op. From this call until it completes here, it may read `src` and write
        `dst` (NCCL's kernel starts at once and pushes to the peers before they call it); no member
        completes before every member has called it, then each completes on its own."""
        loc = user_loc()
        src = self._local(src, "all_reduce", "src")
        dst = src if dst is None else self._local(dst, "all_reduce", "dst")
        self._same_shape(src, dst, "all_reduce")
        self._append(ir.AllReduce(src=src.to_ir(), dst=dst.to_ir(), op=self._reduce_op(op, "all_reduce"),
                                  comm=self._comm(comm, "all_reduce"), loc=loc))

    def all_gather(self, src, dst, comm=None) -> None:
        """ncclAllGather: `dst` (members x the count of `src`) gets every member's `src`, in member
        order. Reads `src` and may write `dst` from this call until it completes here; no member
        completes before every member of `comm` has called it."""
        loc = user_loc()
        name = self._comm(comm, "all_gather")
        src, dst = self._local(src, "all_gather", "src"), self._local(dst, "all_gather", "dst")
        self._same_shape(src, dst, "all_gather", members=len(self._members(name)))
        self._append(ir.AllGather(src=src.to_ir(), dst=dst.to_ir(), comm=name, loc=loc))

    def reduce_scatter(self, src, dst, op: str = "sum", comm=None) -> None:
        """ncclReduceScatter: `src` splits into one chunk per member; member i's `dst` gets the
        element-wise `op` of every member's chunk i. Completes once every member has reached it."""
        loc = user_loc()
        name = self._comm(comm, "reduce_scatter")
        src, dst = self._local(src, "reduce_scatter", "src"), self._local(dst, "reduce_scatter", "dst")
        self._same_shape(src, dst, "reduce_scatter", members=len(self._members(name)))
        self._append(ir.ReduceScatter(src=src.to_ir(), dst=dst.to_ir(), op=self._reduce_op(op, "reduce_scatter"),
                                      comm=name, loc=loc))

    def _root(self, root, name: str, kind: str) -> int:
        root = self._peer(root, kind, "root")
        if root not in self._members(name):
            raise self._error(f"root {root} is not in communicator {name}", kind)
        return root

    def broadcast(self, src, dst=None, root: int = 0, comm=None) -> None:
        """ncclBroadcast: every member's `dst` (default: `src`) gets the `src` of `root` (a world
        rank, a member of `comm`). Completes once every member has reached it."""
        loc = user_loc()
        name = self._comm(comm, "broadcast")
        src = self._local(src, "broadcast", "src")
        dst = src if dst is None else self._local(dst, "broadcast", "dst")
        self._same_shape(src, dst, "broadcast")
        self._append(ir.Broadcast(src=src.to_ir(), dst=dst.to_ir(), root=self._root(root, name, "broadcast"),
                                  comm=name, loc=loc))

    def reduce_to(self, root: int, src, dst=None, op: str = "sum", comm=None) -> None:
        """NCCL reduce: the reduction of every member's src lands in dst on `root` only."""
        loc = user_loc()
        name = self._comm(comm, "reduce_to")
        root = self._root(root, name, "reduce_to")
        src = self._local(src, "reduce_to", "src")
        dst = None if dst is None else self._local(dst, "reduce_to", "dst")
        target = None
        if self.rank == root:
            target = src if dst is None else dst
            self._same_shape(src, target, "reduce_to")
        self._append(ir.ReduceTo(src=src.to_ir(), dst=None if target is None else target.to_ir(), root=root,
                                 op=self._reduce_op(op, "reduce_to"), comm=name, loc=loc))

    def all_to_all(self, src, dst, comm=None) -> None:
        """All-to-all: `src` and `dst` split into one chunk per member; chunk j of this member's
        `src` lands in chunk i (this member's index) of member j's `dst`. Completes once every
        member has reached it."""
        loc = user_loc()
        name = self._comm(comm, "all_to_all")
        src, dst = self._local(src, "all_to_all", "src"), self._local(dst, "all_to_all", "dst")
        self._same_shape(src, dst, "all_to_all")
        if src.count % len(self._members(name)):
            raise self._error(f"{src} has {src.count} elements, not a multiple of the "
                              f"{len(self._members(name))} members", "all_to_all")
        self._append(ir.AllToAll(src=src.to_ir(), dst=dst.to_ir(), comm=name, loc=loc))

    def barrier(self, comm=None) -> None:
        """Every member of `comm` meets (a collective with no data); orders nothing one-sided."""
        self._append(ir.Barrier(comm=self._comm(comm, "barrier"), loc=user_loc()))

    # -- NVSHMEM teams ------------------------------------------------------------------------
    def _team(self, team, op: str, world: bool = False) -> Team | None:
        """A team this rank is a member of (or None for NVSHMEM_TEAM_WORLD, where `world` allows it)."""
        if team is None and world:
            return None
        if not isinstance(team, Team):
            what = "None (NVSHMEM_TEAM_INVALID: this rank is not in the team it split)" if team is None else \
                f"{type(team).__name__} {team!r}"
            raise self._error(f"{op} needs a team from r.team_split_strided(...), got {what}", op,
                              hint="call it only on the members: `if team is not None:`" if team is None else
                              "split one with r.team_split_strided(name, start, stride, size)")
        mine = self._st.comms.get(team.name)
        if mine is None or mine[0] != team.ranks or team.name not in self._st.teams:
            raise self._error(f"team {team.name} is not one rank {self.rank} split", op,
                              hint="use the team this rank's r.team_split_strided(...) returned")
        return team

    def team_split_strided(self, name: str, start: int, stride: int, size: int, parent=None) -> Team | None:
        """nvshmem_team_split_strided: a new team of the `parent` team's members with indices start,
        start + stride, ..., `size` of them (`parent=None`: NVSHMEM_TEAM_WORLD, indices are world ranks).

        A collective over the parent: every parent member calls it, in the same order relative to the
        parent's other collectives and with the same arguments (otherwise a collective mismatch that
        names both lines; a member that never calls it leaves the others blocked). It completes once
        every parent member has arrived (NVSHMEM agrees on the team with a reduction over the parent)
        and completes no delivery. Returns the team on its members and None (NVSHMEM_TEAM_INVALID) on
        the others."""
        loc = user_loc()
        self._open("team_split")
        check_name(name, "team", loc, self.rank, "team_split")
        base = self._team(parent, "team_split", world=True)
        ranks = tuple(range(self.world)) if base is None else base.ranks
        start = as_int(_integer(start, "start", self, "team_split"))
        stride = as_int(_integer(stride, "stride", self, "team_split"))
        size = as_int(_integer(size, "size", self, "team_split"))
        if start < 0 or stride < 1 or size < 1:
            raise self._error(f"team {name}: start={start}, stride={stride}, size={size}; the triplet needs "
                              "start >= 0, stride >= 1, size >= 1", "team_split", loc=loc)
        last = start + stride * (size - 1)
        if last >= len(ranks):
            raise self._error(f"team {name}: its last member has index {last} in a parent of {len(ranks)} members "
                              f"(start={start}, stride={stride}, size={size})", "team_split", loc=loc,
                              hint="start + stride * (size - 1) must be an index of the parent team")
        if name in self._st.splits or name in self._st.comms:
            first = self._st.splits.get(name) or self._st.comms[name][1]
            raise self._error(f"{name!r} names a team or communicator already, first at {first}", "team_split",
                              loc=loc, hint="give each team its own name")
        self._st.splits[name] = loc
        members = tuple(ranks[start + stride * i] for i in range(size))
        parent_name = "world" if base is None else base.name
        self._append(ir.TeamSplit(team=name, comm=parent_name, start=start, stride=stride, size=size, loc=loc))
        if self.rank not in members:
            return None
        self._st.comms[name] = (members, loc)
        self._st.teams[name] = ir.TeamOf(parent=parent_name, start=start, stride=stride, size=size)
        return Team(name, members, self.rank)

    def team_sync(self, team) -> None:
        """nvshmem_team_sync: the members of `team` meet; nothing is completed (a put still in flight
        stays in flight: use `team_barrier` for that). A collective of the team, in program order."""
        team = self._team(team, "team_sync")
        self._append(ir.Barrier(comm=team.name, loc=user_loc()))

    def team_barrier(self, team) -> None:
        """nvshmem_barrier(team): every member completes its own deliveries (a quiet), then the members
        meet; deliveries issued by ranks outside the team stay in flight."""
        team = self._team(team, "team_barrier")
        self._append(ir.TeamBarrier(comm=team.name, loc=user_loc()))

    def _team_regions(self, team, dst, src, kind: str, members: int = 1):
        dst, src = self._symmetric(dst, kind, "dst"), self._symmetric(src, kind, "src")
        self._same_shape(src, dst, _TEAM_KINDS[kind], members=members)
        return dst, src

    def team_reduce(self, team, dst, src, op: str = "sum") -> None:
        """nvshmem_<T>_<op>_reduce(team, dst, src, n): every member's symmetric `dst` gets the element-wise
        `op` of every member's `src` (an all-reduce over the team; `dst` may be `src`). A collective of
        the team: every member calls the team's collectives in the same order, with the same count,
        dtype and op; the sources are read once all have arrived, and each member returns once its own
        `dst` is written (another member may still be writing its own). It completes no put."""
        loc = user_loc()
        team = self._team(team, "team_reduce")
        dst, src = self._team_regions(team, dst, src, "team_reduce")
        self._append(ir.AllReduce(src=src.to_ir(), dst=dst.to_ir(), op=self._reduce_op(op, "team_reduce"),
                                  comm=team.name, loc=loc))

    def team_fcollect(self, team, dst, src) -> None:
        """nvshmem_<T>_fcollect(team, dst, src, n): chunk i of every member's symmetric `dst` (members x n
        elements) gets the `src` of the team's member i. A team collective, as `team_reduce`."""
        loc = user_loc()
        team = self._team(team, "team_fcollect")
        dst, src = self._team_regions(team, dst, src, "team_fcollect", members=team.size)
        self._append(ir.AllGather(src=src.to_ir(), dst=dst.to_ir(), comm=team.name, loc=loc))

    def team_alltoall(self, team, dst, src) -> None:
        """nvshmem_<T>_alltoall(team, dst, src, n): chunk j of this member's `src` lands in chunk i (this
        member's team index) of member j's `dst`; `src` and `dst` hold one chunk per member. A team
        collective, as `team_reduce`."""
        loc = user_loc()
        team = self._team(team, "team_alltoall")
        dst, src = self._team_regions(team, dst, src, "team_alltoall")
        if src.count % team.size:
            raise self._error(f"{src} has {src.count} elements, not a multiple of the {team.size} members of team "
                              f"{team.name}", "team_alltoall", loc=loc)
        self._append(ir.AllToAll(src=src.to_ir(), dst=dst.to_ir(), comm=team.name, loc=loc))

    def team_broadcast(self, team, dst, src, root: int) -> None:
        """nvshmem_<T>_broadcast(team, dst, src, n, root): every member's `dst` gets the `src` of the
        member with team index `root` (as NVSHMEM numbers it: 0..size-1). A team collective, as
        `team_reduce`."""
        loc = user_loc()
        team = self._team(team, "team_broadcast")
        index = _check_index(_integer(root, "root", self, "team_broadcast"), team.size,
                             f"root (a team index of {team.name})", self, "team_broadcast")
        dst, src = self._team_regions(team, dst, src, "team_broadcast")
        self._append(ir.Broadcast(src=src.to_ir(), dst=dst.to_ir(), root=team.ranks[index], comm=team.name,
                                  loc=loc))

    # -- one-sided ----------------------------------------------------------------------------
    def put(self, pe, dst, src, nbi: bool = False) -> None:
        """nvshmem_put: write local `src` into symmetric `dst` on `pe`.

        Blocking (the default): `src` is read now, so it may be reused at once; the write lands on
        `pe` later, as a delivery of its own. `nbi=True`: `src` is read when the delivery lands, so
        writing `src` before a `quiet()` is a race. Deliveries are unordered, to one PE and to
        several, unless a `fence()` separates them (per target PE) or a `quiet()` completes them;
        neither orders the target's own accesses: it observes through `wait_until`, a barrier or a
        collective."""
        loc = user_loc()
        pe = self._peer(pe, "put", "pe")
        dst, src = self._symmetric(dst, "put", "dst"), self._local(src, "put", "src")
        self._same_shape(src, dst, "put")
        self._append(ir.Put(pe=pe, dst=dst.to_ir(), src=src.to_ir(), nbi=self._flag(nbi, "nbi", "put"), loc=loc))

    def get(self, pe, dst, src, nbi: bool = False) -> None:
        """nvshmem_get: read symmetric `src` on `pe` into local `dst`.

        Blocking (the default): `dst` holds the data when the call returns. `nbi=True`
        (nvshmem_get_nbi): the call returns at once and the data lands later, as a delivery of its
        own; `dst` holds it only after this PE's next `quiet()` or `barrier_all()`, so reading or
        writing `dst` before then is a race, and so is `pe` writing `src` before the delivery. A
        `fence()` does not order gets."""
        loc = user_loc()
        kind = "get_nbi" if self._flag(nbi, "nbi", "get") else "get"
        pe = self._peer(pe, kind, "pe")
        dst, src = self._local(dst, kind, "dst"), self._symmetric(src, kind, "src")
        self._same_shape(src, dst, kind)
        make = ir.GetNbi if kind == "get_nbi" else ir.Get
        self._append(make(pe=pe, dst=dst.to_ir(), src=src.to_ir(), loc=loc))

    def get_nbi(self, pe, dst, src) -> None:
        """nvshmem_get_nbi: `get(pe, dst, src, nbi=True)`; `dst` holds the data after the next
        `quiet()`."""
        self.get(pe, dst, src, nbi=True)

    def _sig_op(self, op: str, kind: str) -> str:
        return _one_of(op, ("set", "add"), "signal op", kind, self)

    def put_signal(self, pe, dst, src, sig, value: int = 1, op: str = "set", nbi: bool = False) -> None:
        """nvshmem_putmem_signal: a put of `src` into `dst` on `pe`, then `sig` on `pe` updated
        (`op="set"` to `value`, or `"add"`, modulo 2**64) in the same delivery, after the data.

        A `wait_until` on `sig` therefore implies this call's data has landed, and only this call's:
        an earlier plain put to the same PE may still be in flight unless a `fence()` separates
        them. `sig` must not overlap `dst`. `nbi` as for `put`."""
        loc = user_loc()
        pe = self._peer(pe, "put_signal", "pe")
        dst, src = self._symmetric(dst, "put_signal", "dst"), self._local(src, "put_signal", "src")
        self._same_shape(src, dst, "put_signal")
        self._append(ir.PutSignal(pe=pe, dst=dst.to_ir(), src=src.to_ir(), signal=self._signal(sig, "put_signal"),
                                  value=_u64(self, value, "put_signal"), sig_op=self._sig_op(op, "put_signal"),
                                  nbi=self._flag(nbi, "nbi", "put_signal"), loc=loc))

    def signal_op(self, pe, sig, value: int = 1, op: str = "set") -> None:
        """Update `sig` on `pe` (nvshmemx_signal_op): a delivery like a put."""
        loc = user_loc()
        self._append(ir.SignalUpdate(pe=self._peer(pe, "signal_op", "pe"), signal=self._signal(sig, "signal_op"),
                                     value=_u64(self, value, "signal_op"), sig_op=self._sig_op(op, "signal_op"),
                                     loc=loc))

    def atomic(self, pe, target, op: str, value: int = 1) -> None:
        """Non-fetching atomic (add, set, inc, and, or, xor) on one word on `pe`."""
        self._atomic(pe, target, op, value, "atomic")

    def _atomic(self, pe, target, op: str, value, name: str) -> None:
        loc = user_loc()
        op = _one_of(op, _ATOMIC_OPS, "atomic", name, self)
        self._append(ir.Atomic(pe=self._peer(pe, name, "pe"), target=self._word(target, name), op=op,
                               value=_u64(self, value, name), loc=loc))

    def atomic_add(self, pe, target, value: int = 1) -> None:
        """Atomically add `value` to one word on `pe` (a signal word or one element of a symmetric
        integer buffer): a delivery like a put, modulo 2**64 on uint64 words (2**64 - 1 subtracts
        one). Atomic adds to one word never race with each other."""
        self._atomic(pe, target, "add", value, "atomic_add")

    def atomic_set(self, pe, target, value: int) -> None:
        """Atomically set one word on `pe` to `value` (a delivery, like a put)."""
        self._atomic(pe, target, "set", value, "atomic_set")

    def atomic_inc(self, pe, target) -> None:
        """Atomically add 1 to one word on `pe` (a delivery, like a put)."""
        self._atomic(pe, target, "inc", 1, "atomic_inc")

    def _fetch(self, pe, target, op: str, into, value: int = 0, cond: int = 0, name: str | None = None) -> None:
        loc = user_loc()
        name = name or op
        pe = self._peer(pe, name, "pe")
        word = self._word(target, name)
        into = self._local(into, name, "into")
        if into.count != 1 or into.buf.dtype not in ir.INTEGER_DTYPES:
            raise self._error(f"into {into} must be one element of an integer buffer", name)
        self._append(ir.FetchAtomic(pe=pe, target=word, op=op, value=_u64(self, value, name),
                                    cond=_u64(self, cond, name, "cond"), into=into.to_ir(), loc=loc))

    def fetch_add(self, pe, target, value: int, into) -> None:
        """Atomically add `value` to one word on `pe` and write its old value to local `into`: one
        blocking step (not a delivery), modulo 2**64 on uint64 words."""
        self._fetch(pe, target, "fetch_add", into, value)

    def fetch_inc(self, pe, target, into) -> None:
        """Atomically add 1 to one word on `pe`; its old value goes to local `into` (blocking)."""
        self._fetch(pe, target, "fetch_inc", into, 1)

    def atomic_fetch(self, pe, target, into) -> None:
        """Atomically read one word on `pe` into local `into` (blocking). A read: it changes
        nothing, and it does not race with other reads, a plain load included."""
        self._fetch(pe, target, "fetch", into, name="atomic_fetch")

    def swap(self, pe, target, value: int, into) -> None:
        """Atomically set one word on `pe` to `value`; its old value goes to local `into`
        (blocking)."""
        self._fetch(pe, target, "swap", into, value)

    def compare_swap(self, pe, target, cond: int, value: int, into) -> None:
        """Atomically set one word on `pe` to `value` if it equals `cond`; its old value goes to
        local `into` either way (blocking)."""
        self._fetch(pe, target, "compare_swap", into, value, cond)

    def signal_store(self, sig, value: int) -> None:
        """A plain store of `value` into this rank's own signal word (`*sig = value` in CUDA, e.g. the
        "reset the flag" line after a wait). Not atomic: it races with every access to the word that
        can happen in either order with it, a peer's `signal_op`, `put_signal` or atomic that may still
        be in flight to this rank included (DESIGN.md: a plain write races with anything). Reset a word
        only once no update can be on its way, e.g. before signalling the peer that it may send again."""
        loc = user_loc()
        self._append(ir.SignalStore(pe=self.rank, signal=self._signal(sig, "signal_store"),
                                    value=_u64(self, value, "signal_store"), loc=loc))

    def wait_until(self, sig, cmp: str, value: int) -> None:
        """Block until the local signal word satisfies `sig cmp value` (unsigned, on uint64 words).

        `sig` may also be one element of a symmetric buffer, as OpenSHMEM's `shmem_wait_until(ivar,
        ...)` waits on an element of a data array: `r.wait_until(flag[peer], "ge", 1)`. The buffer is
        then an array of signal words under the buffer's name: it must be symmetric, uint64 and
        role="scratch" (its words start at 0), and only waits and atomics (`atomic_add`,
        `atomic_set`, `fetch_add`, `compare_swap`, ...) may touch it; a put, copy or fill to or from
        it is refused at its line (a plain write races with the wait that reads the word)."""
        loc = user_loc()
        cmp = _one_of(cmp, _COMPARES, "comparison", "wait_until", self)
        self._append(ir.WaitUntil(signal=self._wait_word(sig, "wait_until"), cmp=cmp,
                                  value=_u64(self, value, "wait_until"), loc=loc))

    def wait_until_all(self, sigs, cmp: str, value: int) -> None:
        """nvshmem_wait_until_all: block until every listed local signal word satisfies
        `word cmp value` (at the same moment). `sigs` is a list of words (`[flag[0], flag[2]]`) or a
        whole signal array (`flag`: each of its words). Comparisons are unsigned, on uint64 words."""
        self._wait_many(sigs, cmp, value, "wait_until_all", ir.WaitUntilAll)

    def wait_until_any(self, sigs, cmp: str, value: int) -> None:
        """nvshmem_wait_until_any: block until at least one listed local signal word satisfies
        `word cmp value`; what follows is ordered after the write that satisfied it, not after the
        others. `sigs` as for `wait_until_all`. (Which word satisfied it is not returned: the
        schedule's later ops cannot depend on it.)"""
        self._wait_many(sigs, cmp, value, "wait_until_any", ir.WaitUntilAny)

    def _wait_many(self, sigs, cmp: str, value: int, kind: str, make) -> None:
        loc = user_loc()
        cmp = _one_of(cmp, _COMPARES, "comparison", kind, self)
        if isinstance(sigs, Signal):
            words = [sigs[i] for i in range(sigs.count)]
        elif isinstance(sigs, (list, tuple)):
            words = list(sigs)
        else:
            raise self._error(f"expected a list of signal words or a signal array, got {type(sigs).__name__}", kind,
                              hint="pass [flag[0], flag[1]] or the whole array flag")
        if not words:
            raise self._error("the list of signal words is empty", kind, hint="name at least one word")
        refs = tuple(self._wait_word(word, kind) for word in words)
        if len(set(refs)) != len(refs):
            twice = next(str(ref) for ref in refs if refs.count(ref) > 1)
            raise self._error(f"{twice} is listed twice", kind, hint="list each word once")
        self._append(make(signals=refs, cmp=cmp, value=_u64(self, value, kind), loc=loc))

    def fence(self) -> None:
        """Order this PE's deliveries to each PE: those before the fence arrive first."""
        self._append(ir.Fence(loc=user_loc()))

    def quiet(self) -> None:
        """Wait until every delivery this PE issued has completed."""
        self._append(ir.Quiet(loc=user_loc()))

    def barrier_all(self) -> None:
        """quiet, then every PE meets (nvshmem_barrier_all)."""
        self._append(ir.BarrierAll(loc=user_loc()))

    def sync_all(self) -> None:
        """Every PE meets, without completing deliveries (nvshmem_sync_all)."""
        self._append(ir.SyncAll(loc=user_loc()))

    # -- local --------------------------------------------------------------------------------
    def reduce(self, dst, *srcs, op: str = "sum") -> None:
        """dst = srcs[0] op srcs[1] op ..., element-wise (a local kernel)."""
        loc = user_loc()
        dst = self._local(dst, "reduce", "dst")
        if not srcs:
            raise self._error("reduce needs at least one source", "reduce")
        regions = [self._local(s, "reduce", "src") for s in srcs]
        for region in regions:
            self._same_shape(dst, region, "reduce")
            self._no_shifted_overlap(dst, region, "reduce")
        self._append(ir.LocalReduce(dst=dst.to_ir(), srcs=tuple(x.to_ir() for x in regions),
                                    op=self._reduce_op(op, "reduce"), loc=loc))

    def copy(self, dst, src) -> None:
        """dst = src, element-wise (a local kernel); the regions may not overlap at other offsets."""
        loc = user_loc()
        dst, src = self._local(dst, "copy", "dst"), self._local(src, "copy", "src")
        self._same_shape(src, dst, "copy")
        self._no_shifted_overlap(dst, src, "copy")
        self._append(ir.Copy(dst=dst.to_ir(), src=src.to_ir(), loc=loc))

    def fill(self, dst, value: float) -> None:
        """dst = value in every element (a number, or a `cw.size` expression)."""
        loc = user_loc()
        dst = self._local(dst, "fill", "dst")
        if isinstance(value, SymInt):
            value = as_int(value)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise self._error(f"fill value must be a number, got {type(value).__name__} {value!r}", "fill")
        if isinstance(value, numbers.Integral) and abs(int(value)) > 2**53:
            raise self._error(f"fill value {value} is not exact as a float64", "fill",
                              hint="use a value of magnitude at most 2**53")
        try:
            number = float(value)
        except OverflowError:
            raise self._error(f"fill value {value} is too large for a float64", "fill") from None
        if math.isnan(number):
            raise self._error("fill value nan is not a value the result can be compared with", "fill",
                              hint="fill with a number; inf and -inf are allowed")
        self._append(ir.Fill(dst=dst.to_ir(), value=number, loc=loc))

    def compute(self, name: str, reads=(), writes=(), *, us=None, flops=None, bytes=None) -> None:
        """An opaque kernel `name`: it reads every region of `reads`, then writes every element of
        `writes` with an unknown function of what it read (the checker tracks it as an opaque value
        named after the kernel, so a write it races with is reported).

        What it costs is for the performance model only and never changes what it means: `us=`
        states its time on the GPU in microseconds; `flops=` (its arithmetic) and `bytes=` (its HBM
        traffic) state its work, and it takes the longer of flops over the GPU's peak rate for the
        dtype it writes (the topology's `peak_tflops`) and bytes over the GPU's HBM rate (a
        roofline; `bytes=` defaults to its reads and writes). Give `us=` or the work, not both.
        With neither, `clockworks predict` takes it as bound by its reads and writes over HBM and
        warns once per op site."""
        loc = user_loc()
        check_name(name, "compute kernel", loc, self.rank, "compute")
        reads = self._regions(reads, "compute", "reads")
        writes = self._regions(writes, "compute", "writes")
        cost = self._compute_cost(name, us, flops, bytes)
        self._append(ir.Compute(name=name, reads=reads, writes=writes, loc=loc, **cost))

    def _compute_cost(self, name: str, us, flops, nbytes) -> dict:
        """The checked cost fields of compute `name` (those given)."""
        def real(value, what: str, unit: str, low_ok: bool, high: float):
            if isinstance(value, SymInt):
                value = as_int(value)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise self._error(f"kernel {name}: {what} must be a number of {unit}, got {type(value).__name__} "
                                  f"{value!r}", "compute", hint=f"e.g. {what}=12.5")
            try:
                number = float(value)
            except OverflowError:
                number = math.inf
            if not math.isfinite(number) or number < 0 or (number == 0 and not low_ok) or number > high:
                bound = f"{'at least 0' if low_ok else 'more than 0'} and at most {high:.0e}"
                raise self._error(f"kernel {name}: {what}={value!r} is out of range: {what} is {bound} {unit}",
                                  "compute", hint=f"state the kernel's {unit} as a finite number, e.g. {what}=12.5")
            return number

        cost: dict = {}
        if us is not None:
            cost["us"] = real(us, "us", "microseconds", False, ir.MAX_COMPUTE_US)
        if flops is not None:
            cost["flops"] = real(flops, "flops", "floating-point operations", True, ir.MAX_COMPUTE_FLOPS)
        if nbytes is not None:
            count = as_int(_integer(nbytes, f"kernel {name}: bytes", self, "compute"))
            if not 0 <= count <= ir.MAX_COMPUTE_BYTES:
                raise self._error(f"kernel {name}: bytes={count} is out of range 0..2**50", "compute",
                                  hint="bytes is the kernel's HBM traffic in bytes, e.g. bytes=2 * n * 4")
            cost["bytes"] = count
        if "us" in cost and len(cost) > 1:
            raise self._error(f"kernel {name}: give us= (its time) or flops= and bytes= (its work), not both",
                              "compute", hint="us= overrides a roofline: keep one of them")
        return cost


def _u64(rank: Rank, value, op: str, what: str = "value") -> int:
    value = as_int(_integer(value, what, rank, op))
    if not 0 <= value < 2**64:
        raise rank._error(f"{what} {value} does not fit a uint64 signal word", op, hint="use 0 <= value < 2**64")
    return value


# --------------------------------------------------------------------------------- schedules
class ScheduleDef:
    """A traced-on-demand schedule: `sched.trace(world=8)` gives the frozen `ir.Schedule`."""

    def __init__(self, fn: Callable[[Rank], None], expect, name: str | None, ranks: tuple[int, ...] | None,
                 ranks_per_node: int | None, sizes: tuple[Size, ...], loc: ir.SourceLoc,
                 params: tuple[_params.Parameter, ...] = ()):
        self.fn = fn
        self.params = params
        self.expect = () if expect is None else (tuple(expect) if isinstance(expect, (list, tuple)) else (expect,))
        self.name = name or fn.__name__
        self.ranks = ranks
        self.ranks_per_node = ranks_per_node
        self.sizes = sizes
        self.loc = loc
        self.__doc__ = fn.__doc__

    def __repr__(self) -> str:
        return f"<schedule {self.name} at {self.loc}>"

    def variants(self) -> list[dict[str, int | str]]:
        """Every binding of the declared `cw.param`/`cw.choice` parameters (their cartesian product,
        in declaration order); one empty binding for a schedule without parameters."""
        return _params.variants(self.params)

    def trace(self, world: int, ranks_per_node: int | None = None,
              sizes: dict[str, int] | None = None, params: dict[str, int | str] | None = None) -> ir.Schedule:
        """Run the function once per rank and build the checked, frozen schedule (`params`: the
        variant to trace, as `{name: value}`; default: each parameter's default)."""
        if isinstance(world, bool) or not isinstance(world, int) or world < 1:
            raise ScheduleError(f"the world needs a positive number of ranks, got {world!r}",
                                file=self.loc.file, line=self.loc.line)
        per_node = ranks_per_node or self.ranks_per_node or world
        per_node = min(per_node, world)
        if world % per_node:
            raise ScheduleError(f"{world} ranks do not split into nodes of {per_node}",
                                file=self.loc.file, line=self.loc.line, hint="pick a divisor of the world size")
        bindings = {s.name: s.default for s in self.sizes}
        for name, value in (sizes or {}).items():
            known = {s.name: s for s in self.sizes}
            if name not in known:
                raise ScheduleError(f"unknown size {name!r}; this schedule declares "
                                    f"{', '.join(known) or 'none'}", file=self.loc.file, line=self.loc.line)
            bindings[name] = value
        chosen = _params.resolve(self.params, {**_params._DEFAULT.get(), **(params or {})}, self.loc)
        clash = sorted({s.name for s in self.sizes} & {p.name for p in self.params})
        if clash:
            raise ScheduleError(f"{clash[0]!r} is both a cw.size and a cw.param/cw.choice of {self.name}: a "
                                "parameter and a size need different names", file=self.loc.file,
                                line=self.loc.line, hint=f"rename the parameter or the size {clash[0]}")
        from . import guard

        token = _BINDINGS.set(bindings)
        try:
            paused = cycle_collector_paused(collect_after=True)
            with guard.user_code(), _params.tracing(chosen), paused:  # prints go to stderr
                return _build(self, world, per_node, chosen)
        except (ScheduleError, guard.TimeUp, Exception):
            raise
        except BaseException as exc:  # noqa: BLE001 (sys.exit in a postcondition's function, say)
            if not guard.is_user_error(exc):
                raise
            file, line = guard.user_where(exc.__traceback__, self.fn.__code__.co_filename, _PACKAGE_DIR, self.loc)
            raise ScheduleError(f"the schedule {guard.describe(exc, ' while it was traced')}", file=file, line=line,
                                hint="fix the code that runs while tracing") from exc
        finally:
            _BINDINGS.reset(token)


def _run_user(defn: ScheduleDef, handle: Rank) -> None:
    from . import guard

    try:
        returned = defn.fn(handle)
        if inspect.isawaitable(returned) or inspect.isgenerator(returned) or inspect.isasyncgen(returned):
            # an async def or a generator (behind a wrapper): its body never ran, so it traced nothing
            with contextlib.suppress(Exception):
                returned.close()
            raise ScheduleError(f"the schedule function returned a {type(returned).__name__}, so its body "
                                "never ran and it traced nothing", file=defn.loc.file, line=defn.loc.line,
                                rank=handle.rank, hint="write it as a plain `def f(r):` without yield or async")
    except BaseException as exc:  # noqa: BLE001 (the user's code raised or exited: point at its own line)
        if isinstance(exc, ScheduleError) and not guard.raised_by_user(exc, _PACKAGE_DIR):
            raise  # the DSL's own error, already at the user's line
        file, line = guard.user_where(exc.__traceback__, defn.fn.__code__.co_filename, _PACKAGE_DIR, defn.loc)
        if isinstance(exc, guard.TimeUp):  # our time bound: say where the trace was
            exc.where, exc.rank = exc.where or f"{file}:{line}", handle.rank
            raise
        if not guard.is_user_error(exc):  # a real Ctrl-C
            raise
        hint = "fix the schedule function"
        if isinstance(exc, (SystemExit, guard.OsExitCalled)):
            hint = "a schedule only records ops: return from the function instead of exiting"
        raise ScheduleError(f"the schedule {guard.describe(exc)}", file=file, line=line,
                            rank=handle.rank, hint=hint) from exc


def _build(defn: ScheduleDef, world: int, per_node: int, chosen: dict[str, int | str]) -> ir.Schedule:
    check_name(defn.name, "schedule", defn.loc, None, "schedule")
    for size in defn.sizes:
        size.check_binding()
    handles = []
    intern = _Interner()
    for rank in range(world):
        handle = Rank(rank, world, per_node, intern)
        _run_user(defn, handle)
        handle._st.closed = True
        if handle._st.group is not None:  # entered by hand and never exited: its ops would be lost
            raise handle._error("this group is never closed", "group", loc=handle._st.group_loc,
                                hint="use `with r.group():`")
        if handle._st.threads and handle._st.ops:
            outside = handle._st.ops[0]
            raise handle._error(f"rank {rank} runs threads, but {outside.kind} is outside every thread", outside.kind,
                                loc=outside.loc, hint="put it inside a `with r.thread(name):` block")
        handles.append(handle)
    _check_symmetric(handles)
    _check_sizes_declared(defn, handles)
    comms = _build_comms(handles)
    programs = tuple(
        ir.Program(rank=h.rank, buffers=tuple(h._st.buffers.values()), signals=tuple(h._st.signals.values()),
                   ops=tuple(h._st.ops),
                   threads=tuple(ir.Thread(name=name, kind=kind, ops=tuple(ops), loc=loc)
                                 for name, (kind, ops, loc) in h._st.threads.items()))
        for h in handles)
    symbols = tuple(s.symbol() for s in defn.sizes)
    sched = ir.Schedule(name=defn.name, world=world, ranks_per_node=per_node, loc=defn.loc, symbols=symbols,
                        comms=comms, programs=programs, params=tuple(chosen.items()))
    sched = sched.model_copy(update={"expect": resolve_all(defn.expect, sched)})
    waited: dict[str, ir.SourceLoc] = {}
    for handle in handles:
        for name, loc in handle._st.waited.items():
            waited.setdefault(name, loc)
    return as_signal_words(sched, waited, MAX_SIGNAL_WORDS)


def _check_symmetric(handles: list[Rank]) -> None:
    first = handles[0]._st
    for handle in handles[1:]:
        st = handle._st
        for name, decl in list(first.buffers.items()) + list(st.buffers.items()):
            if not decl.symmetric:
                continue
            mine, theirs = st.buffers.get(name), first.buffers.get(name)
            if mine is None or theirs is None or (mine.count, mine.count_sym, mine.dtype, mine.symmetric) != (
                    theirs.count, theirs.count_sym, theirs.dtype, theirs.symmetric):
                loc = decl.loc
                raise ScheduleError(
                    f"symmetric buffer {name!r} differs between rank 0 and rank {handle.rank} "
                    f"({_describe(theirs)} vs {_describe(mine)})", file=loc.file, line=loc.line,
                    rank=handle.rank, hint="declare symmetric buffers with the same size and dtype on every rank")
        if {k: v.count for k, v in st.signals.items()} != {k: v.count for k, v in first.signals.items()}:
            loc = next(iter(st.signals.values() or first.signals.values())).loc
            raise ScheduleError(f"signals differ between rank 0 and rank {handle.rank}",
                                file=loc.file, line=loc.line, rank=handle.rank,
                                hint="declare the same signals on every rank")


def _check_sizes_declared(defn: ScheduleDef, handles: list[Rank]) -> None:
    """Every size the IR names must be one the schedule declares: otherwise the symbolic checks would
    not know its constraints and `--size` could not bind it (a `cw.size` inside the function, or one
    the decorator could not see)."""
    declared = {s.name for s in defn.sizes}
    for handle in handles:
        uses = [(decl.count_sym, decl.loc) for decl in handle._st.buffers.values()]
        for op in handle._st.ops:
            for member in (op.ops if op.kind == "group" else (op,)):
                for _, region in ir.op_regions(member):
                    uses += [(region.start_sym, member.loc), (region.stop_sym, member.loc)]
        for form, loc in uses:
            for name, _coeff in (form.terms if form is not None else ()):
                if name not in declared:
                    raise ScheduleError(
                        f"size {name} is used, but the schedule does not declare it", file=loc.file, line=loc.line,
                        rank=handle.rank, hint=f"declare {name} = cw.size(...) at module level above the "
                                               f"@cw.schedule function, or pass sizes=[{name}] to it")


def _describe(decl: ir.BufferDecl | None) -> str:
    return "missing" if decl is None else f"{decl.count} x {decl.dtype}{'' if decl.symmetric else ', per-rank'}"


def _build_comms(handles: list[Rank]) -> tuple[ir.Communicator, ...]:
    names: dict[str, None] = {}
    for handle in handles:
        for name in handle._st.comms:
            names.setdefault(name)
    comms = []
    for name in names:
        color: list[int | None] = [None] * len(handles)
        key = [0] * len(handles)
        for handle in handles:
            entry = handle._st.comms.get(name)
            if entry is None:
                continue
            members, loc = entry
            for member in members:
                other = handles[member]._st.comms.get(name)
                if other is None and name in handle._st.teams:
                    raise ScheduleError(
                        f"team {name!r}: rank {member} is one of its members {list(members)} but never calls "
                        f"team_split_strided({name}, ...)", file=loc.file, line=loc.line, rank=member,
                        op="team_split", hint="a split is collective over its parent team: every parent member "
                                              "calls it, with the same arguments")
                if other is None or other[0] != members:
                    raise ScheduleError(
                        f"communicator {name!r}: rank {handle.rank} lists {list(members)}, but rank {member} "
                        f"{'does not declare it' if other is None else 'lists ' + str(list(other[0]))}",
                        file=loc.file, line=loc.line, rank=handle.rank,
                        hint="every member must declare the same ranks, in the same order")
            color[handle.rank] = min(members)
            key[handle.rank] = members.index(handle.rank)
        team = next((h._st.teams[name] for h in handles if name in h._st.teams), None)
        comms.append(ir.Communicator(name=name, color=tuple(color), key=tuple(key), team=team))
    return tuple(comms)


def schedule(fn: Callable | None = None, *, expect=None, name: str | None = None,
             ranks: Iterable[int] | None = None, ranks_per_node: int | None = None,
             sizes: Iterable[Size] = (), params: Iterable = ()):
    """Declare a schedule: `@cw.schedule(expect=cw.allreduce("x"))` over `def f(r): ...`.

    `ranks`: the world sizes it is meant for (the CLI's default); `ranks_per_node`: node size;
    `sizes`: the `cw.size` symbols it uses, for the symbolic checks; `params`: the `cw.param` and
    `cw.choice` parameters of the family (module-level ones are found without it); `name`: defaults to the
    function's name (a lambda's is `anonymous`). The arguments are checked here, and a mistake names
    the decorator's line."""
    loc = user_loc()
    specs = check_specs(expect, loc)
    if name is not None:
        check_name(name, "schedule", loc, None, "schedule")
    ranks = _check_ranks(ranks, loc)
    if ranks_per_node is not None and (isinstance(ranks_per_node, bool) or not isinstance(ranks_per_node, int)
                                       or ranks_per_node < 1):
        raise _decl_error(loc, f"ranks_per_node must be a positive int, got {type(ranks_per_node).__name__} "
                               f"{ranks_per_node!r}", "e.g. ranks_per_node=8")
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Iterable):
        raise _decl_error(loc, f"sizes must be a list of cw.size(...) symbols, got {type(sizes).__name__} {sizes!r}")
    sizes = tuple(sizes)
    for value in sizes:
        if not isinstance(value, Size):
            raise _decl_error(loc, f"sizes must hold cw.size(...) symbols, got {type(value).__name__} {value!r}")
    if isinstance(params, (str, bytes)) or not isinstance(params, Iterable):
        raise _decl_error(loc, f"params must be a list of cw.param(...) or cw.choice(...), got "
                               f"{type(params).__name__} {params!r}")
    params = tuple(params)
    for value in params:
        if not isinstance(value, (_params.Param, _params.Choice)):
            raise _decl_error(loc, f"params must hold cw.param(...) or cw.choice(...), got "
                                   f"{type(value).__name__} {value!r}")

    def wrap(f: Callable) -> ScheduleDef:
        code = getattr(f, "__code__", None)
        if not callable(f) or code is None:
            raise _decl_error(loc, f"@cw.schedule decorates a function of the rank handle, got "
                                   f"{type(f).__name__} {f!r}", "def f(r): ...")
        floc = ir.SourceLoc(file=os.path.basename(code.co_filename), line=code.co_firstlineno)
        if inspect.iscoroutinefunction(f) or inspect.isgeneratorfunction(f) or inspect.isasyncgenfunction(f):
            kind = ("an async generator" if inspect.isasyncgenfunction(f) else
                    "an async def" if inspect.iscoroutinefunction(f) else "a generator (it uses yield)")
            raise _decl_error(floc, f"the schedule function {f.__name__} is {kind}: calling it runs none of its "
                                    "body, so it would trace nothing", "write it as a plain `def f(r):`")
        try:
            inspect.signature(f).bind(None)
        except TypeError:
            raise _decl_error(floc, f"the schedule function {f.__name__} must take one argument, the rank handle",
                              "def f(r): ...") from None
        own = name
        if own is None:
            own = "anonymous" if f.__name__ == "<lambda>" else f.__name__
            check_name(own, "schedule", floc, None, "schedule")
        found: dict[str, Size] = {}
        for value in list(sizes) + [v for v in f.__globals__.values() if isinstance(v, Size)]:
            first = found.setdefault(value.name, value)
            if first is not value and (first.default, first.constraints()) != (value.default, value.constraints()):
                raise _decl_error(value.loc, f"size {value.name} is declared twice, differently: at {first.loc} "
                                             f"as {first.default} ({first.constraints()}), here as {value.default} "
                                             f"({value.constraints()})", "declare each size once")
        declared: dict[str, _params.Parameter] = {}
        for value in list(params) + [v for v in f.__globals__.values()
                                     if isinstance(v, (_params.Param, _params.Choice))]:
            first = declared.setdefault(value.name, value)
            if first is not value and (first.kind, first.values, first.default) != (value.kind, value.values,
                                                                                     value.default):
                raise _decl_error(value.loc, f"parameter {value.name} is declared twice, differently: at "
                                             f"{first.loc} as {list(first.values)}, here as {list(value.values)}",
                                  "declare each parameter once")
        return ScheduleDef(f, specs, own, ranks, ranks_per_node, tuple(found.values()), floc,
                           tuple(declared.values()))

    return wrap(fn) if fn is not None else wrap


def _decl_error(loc: ir.SourceLoc, message: str, hint: str | None = None) -> ScheduleError:
    return ScheduleError(message, file=loc.file, line=loc.line, op="schedule", hint=hint)


def _check_ranks(ranks, loc: ir.SourceLoc) -> tuple[int, ...] | None:
    """`ranks=`: the world sizes the schedule is meant for, positive ints."""
    if ranks is None:
        return None
    if isinstance(ranks, (str, bytes)) or not isinstance(ranks, Iterable):
        raise _decl_error(loc, f"ranks must be a list of world sizes, got {type(ranks).__name__} {ranks!r}",
                          "e.g. ranks=(2, 4, 8)")
    ranks = tuple(ranks)
    if not ranks:
        raise _decl_error(loc, "ranks lists no world size", "leave ranks out to check 2, 4 and 8 ranks")
    for world in ranks:
        if isinstance(world, bool) or not isinstance(world, int) or world < 1:
            raise _decl_error(loc, f"ranks must hold positive ints (world sizes), got {type(world).__name__} "
                                   f"{world!r}", "e.g. ranks=(2, 4, 8)")
    return ranks
