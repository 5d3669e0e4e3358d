"""The schedule IR: frozen data that every other layer speaks.

A `Schedule` is a world (ranks, ranks per node), the communicators, one `Program` per rank (its
buffers, signals and ops) and an optional postcondition. Every model is frozen and forbids extra
fields, ops form a discriminated union on `kind`, and `Schedule.model_validate_json(s.to_json())`
gives back an equal schedule.

Conventions shared by the checker, simulator, executors and code generators:
- ranks are world ranks everywhere (peers, PEs, collective roots), also on split communicators;
- a `Region` is [start, stop) in elements of one buffer of the rank that executes the op, except the
  remote side of one-sided ops (`dst` of put, `src` of get, `target` of atomics), which names the
  symmetric buffer on `pe`;
- signals are symmetric arrays of uint64 words, initially 0;
- every name (schedule, buffer, signal, size, communicator, compute kernel) is an identifier safe in
  generated C, C++ and CUDA: `name_problem` is the rule, checked by the DSL and on loading JSON.

This module imports nothing of ours.
"""

from __future__ import annotations

import functools
import keyword
from typing import Annotated, Literal, Union, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

DType = Literal["float16", "bfloat16", "float32", "float64", "int32", "int64", "uint32", "uint64"]
DTYPE_BYTES: dict[str, int] = {
    "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8,
    "int32": 4, "int64": 8, "uint32": 4, "uint64": 8,
}
INTEGER_DTYPES = frozenset({"int32", "int64", "uint32", "uint64"})
Role = Literal["input", "output", "inout", "scratch", "packets"]  # packets: codegen.packets only
ReduceOp = Literal["sum", "prod", "max", "min"]
SignalOp = Literal["set", "add"]
AtomicOp = Literal["add", "set", "inc", "and", "or", "xor"]
FetchOp = Literal["fetch_add", "fetch_inc", "fetch", "swap", "compare_swap", "fetch_and", "fetch_or", "fetch_xor"]
Compare = Literal["eq", "ne", "gt", "ge", "lt", "le"]


# ------------------------------------------------------------------------------------- names
# Every name in a schedule (schedule, buffer, signal, size, communicator, compute kernel) is pasted
# verbatim into generated C++/CUDA, so the rule below is the one place that decides what is safe;
# the DSL calls `name_problem` at trace time and the models below run it when JSON is loaded.
NAME_MAX = 64
_C_KEYWORDS = """auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef union unsigned
    void volatile while alignas alignof bool constexpr false nullptr static_assert thread_local true typeof
    typeof_unqual"""
_CPP_KEYWORDS = """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
    char32_t class compl concept const consteval constexpr constinit const_cast continue co_await co_return
    co_yield decltype default delete do double dynamic_cast else enum explicit export extern false float for
    friend goto if inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private
    protected public register reinterpret_cast requires return short signed sizeof static static_assert
    static_cast struct switch template this thread_local throw true try typedef typeid typename union unsigned
    using virtual void volatile wchar_t while xor xor_eq final override import module"""
_CUDA_NAMES = """threadIdx blockIdx blockDim gridDim warpSize dim3 half half2 nv_bfloat16 nv_bfloat162
    cudaStream_t cudaError_t"""
_LIBRARY_NAMES = """NULL EOF assert errno stdin stdout stderr offsetof va_list va_start va_end va_arg
    setjmp longjmp size_t ssize_t ptrdiff_t intptr_t uintptr_t int8_t int16_t int32_t int64_t uint8_t uint16_t
    uint32_t uint64_t bool_t std INFINITY NAN TRUE FALSE"""


def _reserved() -> dict[str, str]:
    reasons: dict[str, str] = {}
    # Later lists win: a word that is both a C and a C++ keyword is reported as C++'s.
    for words, reason in ((keyword.kwlist, "a Python keyword"),
                          (_LIBRARY_NAMES.split(), "a name of the C or C++ standard library"),
                          (_CUDA_NAMES.split(), "a CUDA built-in name"), (_C_KEYWORDS.split(), "a C keyword"),
                          (_CPP_KEYWORDS.split(), "a C++ keyword")):
        for word in words:
            reasons[word] = reason
    reasons["main"] = "the entry point of a C or C++ program"
    reasons["world"] = "the name of the communicator of every rank"
    return reasons


RESERVED_NAMES: dict[str, str] = _reserved()


@functools.lru_cache(maxsize=4096)
def _problem(name: str) -> str | None:
    if not name:
        return "the name is empty"
    bad = [c for c in name if not (c.isascii() and (c.isalnum() or c == "_"))]
    if bad:
        return f"{name!r} contains {bad[0]!r}, which is not an ASCII letter, digit or '_'"
    if name[0].isdigit():
        return f"{name!r} starts with a digit"
    if name.startswith("__") or (name.startswith("_") and name[1:2].isupper()) or "__" in name:
        return f"{name!r} is reserved in C and C++ (names with '__', or '_' then an uppercase letter)"
    if name.startswith("_"):
        return f"{name!r} starts with '_', which C reserves at file scope"
    if len(name) > NAME_MAX:
        return f"{name[:16]!r}... has {len(name)} characters, more than {NAME_MAX}"
    if name in RESERVED_NAMES:
        return f"{name!r} is {RESERVED_NAMES[name]}"
    return None


def name_problem(name: object) -> str | None:
    """Why `name` cannot name something in a schedule (it would not be a safe identifier in the
    generated C, C++ and CUDA), or None if it can."""
    if not isinstance(name, str):
        return f"a name must be a string, got {type(name).__name__} {name!r}"
    return _problem(name)


NAME_HINT = (f"use ASCII letters, digits and '_', starting with a letter, at most {NAME_MAX} characters, "
             "no '__', and not a C, C++, CUDA or Python keyword")


def _valid_name(name: str) -> str:
    problem = _problem(name)
    if problem is not None:
        raise ValueError(f"{problem} ({NAME_HINT})")
    return name


def _valid_comm(name: str) -> str:
    return name if name == "world" else _valid_name(name)


Name = Annotated[str, AfterValidator(_valid_name)]
CommName = Annotated[str, AfterValidator(_valid_comm)]  # a communicator, or "world"


_FIELDS_GIVEN: dict[frozenset, set] = {}


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def model_post_init(self, context: object, /) -> None:
        # Every instance keeps the set of the fields it was given; a traced ring of 1024 ranks
        # has millions of ops, so instances given the same fields share one set (pydantic copies
        # it before `model_copy(update=...)` changes it, and a frozen model never changes it).
        given = self.__pydantic_fields_set__
        shared = _FIELDS_GIVEN.setdefault(frozenset(given), given)
        if shared is not given:
            object.__setattr__(self, "__pydantic_fields_set__", shared)


class Affine(Frozen):
    """`const + sum(coeff * symbol)`: a size or offset that is affine in symbolic sizes."""

    const: int = 0
    terms: tuple[tuple[Name, int], ...] = ()
    exact: bool = True  # False: the bound depends on sizes non-affinely (//, %, size * size)

    def evaluate(self, values: dict[str, int]) -> int:
        return self.const + sum(coeff * values[name] for name, coeff in self.terms)

    def __str__(self) -> str:
        if not self.exact:
            return f"{self.const} (not affine in the sizes)"
        parts = [f"{coeff}*{name}" if coeff != 1 else name for name, coeff in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


class SourceLoc(Frozen):
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class Region(Frozen):
    """Elements [start, stop) of `buffer`; `start_sym`/`stop_sym` keep the symbolic form if any."""

    buffer: Name
    start: int
    stop: int
    start_sym: Affine | None = None
    stop_sym: Affine | None = None

    @property
    def count(self) -> int:
        return self.stop - self.start

    def __str__(self) -> str:
        return f"{self.buffer}[{self.start}:{self.stop}]"


class SignalRef(Frozen):
    """Word `index` of the symmetric signal array `signal`."""

    signal: Name
    index: int = 0

    def __str__(self) -> str:
        return f"{self.signal}[{self.index}]"


class Symbol(Frozen):
    """A symbolic element count: traced at `value`, proven for every value meeting the constraints."""

    name: Name
    value: int
    min: int = 1
    max: int | None = None
    multiple_of: int = 1

    @model_validator(mode="after")
    def _admissible(self) -> "Symbol":
        # The symbolic checks assume the traced value meets the constraints: refuse it here too.
        if self.min < 1 or self.multiple_of < 1:
            raise ValueError(f"size {self.name}: min and multiple_of must be at least 1")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"size {self.name}: min={self.min} > max={self.max}")
        above = self.max is not None and self.value > self.max
        if self.value < self.min or above or self.value % self.multiple_of:
            raise ValueError(f"size {self.name}: the value {self.value} violates its constraints")
        return self


class BufferDecl(Frozen):
    name: Name
    count: int
    dtype: DType = "float32"
    role: Role = "inout"
    symmetric: bool = False
    count_sym: Affine | None = None
    loc: SourceLoc


class SignalDecl(Frozen):
    name: Name
    count: int = 1
    loc: SourceLoc


class TeamOf(Frozen):
    """How an NVSHMEM team was made: `nvshmem_team_split_strided(parent, start, stride, size)`, the
    indices in the parent team ("world": NVSHMEM_TEAM_WORLD)."""

    parent: CommName = "world"
    start: int
    stride: int
    size: int


class Communicator(Frozen):
    """A split of the world: `color[r]` is rank r's color (None: not a member), `key[r]` its order.
    `team`: an NVSHMEM team (made by a `TeamSplit` op), not an NCCL communicator."""

    name: Name
    color: tuple[int | None, ...]
    key: tuple[int, ...]
    team: TeamOf | None = None

    def members(self, rank: int) -> tuple[int, ...]:
        """World ranks in `rank`'s group, ordered by (key, world rank)."""
        mine = self.color[rank]
        if mine is None:
            return ()
        group = [r for r, c in enumerate(self.color) if c == mine]
        return tuple(sorted(group, key=lambda r: (self.key[r], r)))


# ----------------------------------------------------------------------------------------- ops
class OpBase(Frozen):
    loc: SourceLoc


# A connection's FIFO holds at most this many messages, and a pair of ranks at most this many
# channels (NCCL's and MSCCL's connections have a few slots and a few dozen channels).
MAX_SLOTS = 1024
MAX_CHANNEL = 1023


class Send(OpBase):
    """`channel` names one of several connections between the same two ranks (MSCCL's channels);
    `slots` > 0 makes the connection a FIFO of that many messages: the send completes without its
    recv while fewer than `slots` of the connection's messages wait to be received (0: rendezvous)."""

    kind: Literal["send"] = "send"
    peer: int
    src: Region
    comm: CommName = "world"
    channel: Annotated[int, Field(ge=0, le=MAX_CHANNEL)] = 0
    slots: Annotated[int, Field(ge=0, le=MAX_SLOTS)] = 0


class Recv(OpBase):
    """`channel` and `slots` as the matching send's (`Send`)."""

    kind: Literal["recv"] = "recv"
    peer: int
    dst: Region
    reduce: ReduceOp | None = None
    comm: CommName = "world"
    channel: Annotated[int, Field(ge=0, le=MAX_CHANNEL)] = 0
    slots: Annotated[int, Field(ge=0, le=MAX_SLOTS)] = 0




class AllReduce(OpBase):
    kind: Literal["all_reduce"] = "all_reduce"
    src: Region
    dst: Region
    op: ReduceOp = "sum"
    comm: CommName = "world"


class AllGather(OpBase):
    """dst = concatenation of every member's src, in communicator order."""

    kind: Literal["all_gather"] = "all_gather"
    src: Region
    dst: Region
    comm: CommName = "world"


class ReduceScatter(OpBase):
    """dst on the i-th member = reduction over members of chunk i of src."""

    kind: Literal["reduce_scatter"] = "reduce_scatter"
    src: Region
    dst: Region
    op: ReduceOp = "sum"
    comm: CommName = "world"


class Broadcast(OpBase):
    kind: Literal["broadcast"] = "broadcast"
    src: Region
    dst: Region
    root: int
    comm: CommName = "world"


class ReduceTo(OpBase):
    """NCCL reduce: dst on `root` = reduction of every member's src; dst is None off the root."""

    kind: Literal["reduce_to"] = "reduce_to"
    src: Region
    dst: Region | None
    root: int
    op: ReduceOp = "sum"
    comm: CommName = "world"


class AllToAll(OpBase):
    """Chunk j of src on member i lands in chunk i of dst on member j."""

    kind: Literal["all_to_all"] = "all_to_all"
    src: Region
    dst: Region
    comm: CommName = "world"


class Barrier(OpBase):
    kind: Literal["barrier"] = "barrier"
    comm: CommName = "world"


class Group(OpBase):
    """ncclGroupStart/End: the member ops are posted together and complete in any order. Members:
    sends, recvs and the NCCL collectives (`GROUP_COLLECTIVE_KINDS`); each collective still matches
    the k-th collective of its communicator on every member, in the order the ranks post them."""

    kind: Literal["group"] = "group"
    ops: tuple[Annotated[Union[Send, Recv, AllReduce, AllGather, ReduceScatter, Broadcast, ReduceTo, AllToAll],
                         Field(discriminator="kind")], ...]


class TeamSplit(OpBase):
    """nvshmem_team_split_strided: a collective over the `parent` team ("world": NVSHMEM_TEAM_WORLD)
    that makes team `team` of the parent's members start, start + stride, ... (`size` of them).
    Every parent member calls it, members of the new team or not."""

    kind: Literal["team_split"] = "team_split"
    team: Name
    comm: CommName = "world"  # the parent team
    start: Annotated[int, Field(ge=0)]
    stride: Annotated[int, Field(ge=1)]
    size: Annotated[int, Field(ge=1)]


class TeamBarrier(OpBase):
    """nvshmem_barrier(team): a quiet on every member of `comm` (a team), then the members meet."""

    kind: Literal["team_barrier"] = "team_barrier"
    comm: Name


class Put(OpBase):
    """Write local `src` into `dst` on `pe`. Blocking: src read at issue. nbi: src read at delivery."""

    kind: Literal["put"] = "put"
    pe: int
    dst: Region
    src: Region
    nbi: bool = False


class Get(OpBase):
    """Blocking get: read `src` on `pe` into local `dst`; done when the call returns."""

    kind: Literal["get"] = "get"
    pe: int
    dst: Region
    src: Region


class GetNbi(OpBase):
    """Non-blocking get: `dst` holds `src` of `pe` only after the rank's next quiet or barrier_all."""

    kind: Literal["get_nbi"] = "get_nbi"
    pe: int
    dst: Region
    src: Region


class PutSignal(OpBase):
    """Put, then update `signal` on `pe` once the data is delivered (one delivery)."""

    kind: Literal["put_signal"] = "put_signal"
    pe: int
    dst: Region
    src: Region
    signal: SignalRef
    value: int
    sig_op: SignalOp = "set"
    nbi: bool = False


class SignalUpdate(OpBase):
    kind: Literal["signal_op"] = "signal_op"
    pe: int
    signal: SignalRef
    value: int
    sig_op: SignalOp = "set"


class Atomic(OpBase):
    """Non-fetching atomic on one word on `pe`: a signal word or one element of a symmetric buffer."""

    kind: Literal["atomic"] = "atomic"
    pe: int
    target: Union[SignalRef, Region]
    op: AtomicOp
    value: int = 1


class FetchAtomic(OpBase):
    """Fetching atomic: one blocking transition; the old value is written to local `into`."""

    kind: Literal["fetch_atomic"] = "fetch_atomic"
    pe: int
    target: Union[SignalRef, Region]
    op: FetchOp
    value: int = 0
    cond: int = 0
    into: Region


class SignalStore(OpBase):
    """A plain (non-atomic) store of `value` into the rank's own signal word (`*sig = value` in CUDA):
    `pe` is the rank itself (the word it writes lives there; the DSL and the JSON loader check it)."""

    kind: Literal["signal_store"] = "signal_store"
    pe: int
    signal: SignalRef
    value: int


class WaitUntil(OpBase):
    kind: Literal["wait_until"] = "wait_until"
    signal: SignalRef
    cmp: Compare
    value: int


class WaitUntilAll(OpBase):
    """Block until every listed signal word of this rank compares true with `value`."""

    kind: Literal["wait_until_all"] = "wait_until_all"
    signals: tuple[SignalRef, ...]
    cmp: Compare
    value: int


class WaitUntilAny(OpBase):
    """Block until at least one listed signal word of this rank compares true with `value`."""

    kind: Literal["wait_until_any"] = "wait_until_any"
    signals: tuple[SignalRef, ...]
    cmp: Compare
    value: int


class Fence(OpBase):
    kind: Literal["fence"] = "fence"


class Quiet(OpBase):
    kind: Literal["quiet"] = "quiet"


class BarrierAll(OpBase):
    kind: Literal["barrier_all"] = "barrier_all"


class SyncAll(OpBase):
    kind: Literal["sync_all"] = "sync_all"


class LocalReduce(OpBase):
    """dst = srcs[0] op srcs[1] op ... (left to right), element-wise, on this rank."""

    kind: Literal["reduce"] = "reduce"
    dst: Region
    srcs: tuple[Region, ...]
    op: ReduceOp = "sum"


class Copy(OpBase):
    kind: Literal["copy"] = "copy"
    dst: Region
    src: Region


class Fill(OpBase):
    kind: Literal["fill"] = "fill"
    dst: Region
    value: float


# Bounds on a compute op's stated cost: far beyond any one kernel, so that no value stalls the
# simulator (the DSL names the op and its line when a value is out of them).
MAX_COMPUTE_US = 1e9  # about 17 minutes
MAX_COMPUTE_FLOPS = 1e21
MAX_COMPUTE_BYTES = 2**50
# At most this many records of one event, or arrivals at one thread barrier, per rank.
MAX_THREAD_SYNC = 1 << 20


class Compute(OpBase):
    """An opaque kernel: reads `reads`, then writes every element of `writes`. `us`, or `flops`
    and `bytes`, state what it costs (the time, or the work and HBM traffic of a roofline); they
    are for the performance model only and never change what the op means."""

    kind: Literal["compute"] = "compute"
    name: Name
    reads: tuple[Region, ...] = ()
    writes: tuple[Region, ...] = ()
    us: Annotated[float, Field(gt=0, le=MAX_COMPUTE_US, allow_inf_nan=False)] | None = None
    flops: Annotated[float, Field(ge=0, le=MAX_COMPUTE_FLOPS, allow_inf_nan=False)] | None = None
    bytes: Annotated[int, Field(ge=0, le=MAX_COMPUTE_BYTES)] | None = None

    @model_validator(mode="after")
    def _one_kind_of_cost(self) -> "Compute":
        if self.us is not None and (self.flops is not None or self.bytes is not None):
            raise ValueError("a compute op states its time (us) or its work (flops, bytes), not both")
        return self

    @property
    def states_cost(self) -> bool:
        """Whether the op says what it costs (us, flops or bytes)."""
        return self.us is not None or self.flops is not None or self.bytes is not None


# --------------------------------------------------------------- synchronisation inside a rank
class RecordEvent(OpBase):
    """cudaEventRecord on the thread (a stream) it is in: the event captures that thread's work so
    far. `record` is this record's number among the rank's records of `event`, counted in host order
    (the order the schedule's calls were made), from 1; the DSL numbers them."""

    kind: Literal["record_event"] = "record_event"
    event: Name
    record: Annotated[int, Field(ge=1, le=MAX_THREAD_SYNC)]


class WaitEvent(OpBase):
    """cudaStreamWaitEvent: the thread's later ops start after the work captured by record number
    `record` of `event` (the most recent record made before this wait in host order, as CUDA uses
    it). `record=0`: none was made before it; CUDA would skip the wait, the checker reports it."""

    kind: Literal["wait_event"] = "wait_event"
    event: Name
    record: Annotated[int, Field(ge=0, le=MAX_THREAD_SYNC)]


class ThreadBarrier(OpBase):
    """A barrier among threads of one rank (the blocks of a kernel at grid.sync(), or a named subset):
    every thread in `threads` reaches its k-th `name` barrier before any goes on past it. It moves no
    data and completes no delivery."""

    kind: Literal["thread_barrier"] = "thread_barrier"
    name: Name
    threads: Annotated[tuple[Name, ...], Field(min_length=2)]


Op = Annotated[
    Union[
        Send, Recv, Group, AllReduce, AllGather, ReduceScatter, Broadcast, ReduceTo, AllToAll,
        Barrier, TeamSplit, TeamBarrier, Put, Get, GetNbi, PutSignal, SignalUpdate, Atomic, FetchAtomic, SignalStore,
        WaitUntil, WaitUntilAll, WaitUntilAny, Fence, Quiet, BarrierAll, SyncAll, LocalReduce, Copy, Fill, Compute,
        RecordEvent, WaitEvent, ThreadBarrier,
    ],
    Field(discriminator="kind"),
]
# The op classes, in the order of the `Op` union (which is the one list to extend).
OP_CLASSES: tuple[type[OpBase], ...] = get_args(get_args(Op)[0])
KINDS: tuple[str, ...] = tuple(cls.model_fields["kind"].default for cls in OP_CLASSES)

# The op groups below restate what the rules (`semantics.rules`) say, for code that reads the IR
# without the rules; `tests/test_add_an_op.py` fails when one of them disagrees with its rule.
# Collectives of a communicator (`Sync.COLLECTIVE`).
COLLECTIVE_KINDS = frozenset(
    {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce_to", "all_to_all", "barrier", "team_split"}
)
# Collectives a group may hold (`Group`): NCCL's, posted inside ncclGroupStart/End.
GROUP_COLLECTIVE_KINDS = frozenset(
    {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce_to", "all_to_all"})
# NVSHMEM team ops: matched per team, NVSHMEM_TEAM_WORLD ("world") apart from NCCL's world communicator.
TEAM_KINDS = frozenset({"team_split", "team_barrier"})
# The NVSHMEM-style ops (the CuPy backend runs none of them).
ONE_SIDED_KINDS = frozenset(
    {"put", "get", "get_nbi", "put_signal", "signal_op", "atomic", "fetch_atomic", "wait_until", "wait_until_all",
     "wait_until_any", "fence", "quiet", "barrier_all", "sync_all", "team_split", "team_barrier",
     "signal_store"}
)
# One-sided ops whose effect lands later, as a delivery of its own (DESIGN.md): completed by quiet
# and barrier_all. Blocking gets and fetching atomics are one blocking transition instead
# (`Sync.DELIVERY`).
DELIVERY_KINDS = frozenset({"put", "put_signal", "signal_op", "atomic", "get_nbi"})
# ... of which those a fence orders (per target PE): NVSHMEM's fence orders puts, atomics and
# signals, not gets (`Rule.fenced`).
FENCED_KINDS = DELIVERY_KINDS - {"get_nbi"}
# Ops of one rank that block until a comparison on signal words holds (`Sync.WAIT`).
WAIT_KINDS = frozenset({"wait_until", "wait_until_all", "wait_until_any"})
# Synchronisation among the threads of one rank (events, thread barriers): only inside threads, run
# as signal words of the rank (`semantics.threads.expand`).
THREAD_SYNC_KINDS = frozenset({"record_event", "wait_event", "thread_barrier"})


class Thread(Frozen):
    """One of a rank's concurrent programs: a thread block of its kernel (`kind="block"`) or a stream
    of its host (`"stream"`). The threads of a rank start together, run their ops in order each, share
    the rank's memory and signal words, and the rank ends when all of them have ended."""

    name: Name
    kind: Literal["block", "stream"] = "block"
    ops: tuple[Op, ...] = ()
    loc: SourceLoc


# At most this many threads per rank (MSCCL's algorithms run up to a few hundred thread blocks).
MAX_THREADS = 1024


class Program(Frozen):
    """A rank's program: its `ops`, run in order; or, when `threads` is given, those threads run
    concurrently (`ops` is then empty)."""

    rank: int
    buffers: tuple[BufferDecl, ...] = ()
    signals: tuple[SignalDecl, ...] = ()
    ops: tuple[Op, ...] = ()
    threads: Annotated[tuple[Thread, ...], Field(max_length=MAX_THREADS)] = ()

    @model_validator(mode="after")
    def _ops_or_threads(self) -> "Program":
        if self.threads and self.ops:
            raise ValueError(f"rank {self.rank} has both ops and threads: a rank with threads runs only its threads")
        names = [t.name for t in self.threads]
        if len(set(names)) != len(names):
            raise ValueError(f"rank {self.rank} names a thread twice: {sorted(n for n in names if names.count(n) > 1)}")
        outside = next((op for op in self.ops if op.kind in THREAD_SYNC_KINDS), None)
        if outside is not None:
            raise ValueError(f"rank {self.rank}: {outside.kind} at {outside.loc} is outside every thread: events and "
                             "thread barriers order a rank's threads, so they go inside one")
        return self

    def all_ops(self):
        """Every op of the rank: its ops, or its threads' ops, thread after thread."""
        if not self.threads:
            return self.ops
        return tuple(op for thread in self.threads for op in thread.ops)

    def buffer(self, name: str) -> BufferDecl:
        for decl in self.buffers:
            if decl.name == name:
                return decl
        raise KeyError(name)


# ------------------------------------------------------------------------------- postconditions
class Contribution(Frozen):
    """Elements of `region` on `rank`, at schedule start, aligned element by element."""

    rank: int
    region: Region


class Expectation(Frozen):
    """At the end, `region` on `rank` holds, element-wise, `op` over the contributions.

    One contribution means a copy; the order of contributions does not matter (multisets)."""

    rank: int
    region: Region
    contributions: tuple[Contribution, ...]
    op: ReduceOp = "sum"
    label: str = ""


class Schedule(Frozen):
    name: Name
    world: int
    ranks_per_node: int
    loc: SourceLoc
    symbols: tuple[Symbol, ...] = ()
    comms: tuple[Communicator, ...] = ()
    programs: tuple[Program, ...]
    expect: tuple[Expectation, ...] = ()
    # The family variant this schedule is (`cw.param`/`cw.choice` bindings, in declaration order).
    params: tuple[tuple[Name, int | Name], ...] = ()

    def to_json(self, indent: int | None = None) -> str:
        return self.model_dump_json(indent=indent)

    @classmethod
    def from_json(cls, text: str) -> "Schedule":
        return cls.model_validate_json(text)

    def comm(self, name: str) -> Communicator:
        for comm in self.comms:
            if comm.name == name:
                return comm
        raise KeyError(name)

    def members(self, comm: str, rank: int) -> tuple[int, ...]:
        """World ranks of `rank`'s group in communicator `comm` (world: every rank)."""
        if comm == "world":
            return tuple(range(self.world))
        return self.comm(comm).members(rank)


def op_regions(op: OpBase) -> list[tuple[str, Region]]:
    """(field name, region) for every region an op names, for listings and bounds checks."""
    fields = _REGION_FIELDS.get(type(op))
    if fields is None:  # per op class, the fields it has: asking a model for one it lacks is slow
        declared = type(op).model_fields
        fields = _REGION_FIELDS[type(op)] = (tuple(n for n in ("src", "dst", "into", "target") if n in declared),
                                             tuple(n for n in ("srcs", "reads", "writes") if n in declared))
    found = []
    for name in fields[0]:
        value = getattr(op, name)
        if isinstance(value, Region):
            found.append((name, value))
    for name in fields[1]:
        for value in getattr(op, name):
            found.append((name, value))
    return found


_REGION_FIELDS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}
