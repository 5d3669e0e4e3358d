"""A schedule loaded from JSON (`clockworks show FILE --json`, `ir.Schedule.to_json`), checked as
the tracer would have built it: a JSON file is written by hand or by another tool, and pydantic
only checks the types.

`load(path)` reads, parses and checks; `check(sched, file)` checks a parsed one. Every problem is a
`ScheduleError` (exit 2) naming the file, the rank and the op (its index in the rank's program and
its kind): programs numbered 0..world-1, one per rank; every peer, PE and root in 0..world-1; buffer
counts and signal counts non-negative; every region inside a buffer the rank it lives on declares;
every signal word declared; communicators of the world's size; the postcondition's ranks and
regions likewise.
"""

from __future__ import annotations

from .. import ir
from ..errors import ScheduleError

# The largest world a JSON schedule may declare (as `clockworks check --ranks`).
MAX_WORLD = 65_536
# Regions whose buffer lives on the op's target PE (the other regions are the rank's own).
_REMOTE = {"put": ("dst",), "put_signal": ("dst",), "get": ("src",), "get_nbi": ("src",), "atomic": ("target",),
           "fetch_atomic": ("target",)}
# Signal fields that name the target PE's signal words (the others are the rank's own).
_REMOTE_SIGNALS = {"put_signal", "signal_op", "atomic", "fetch_atomic", "signal_store"}  # a store's pe: its rank


def load(path: str) -> ir.Schedule:
    """The schedule in the JSON file `path`, checked; `ScheduleError` naming the file otherwise."""
    from pydantic import ValidationError

    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise ScheduleError(f"cannot be read: {exc.strerror or exc}", file=path, hint="check the path") from None
    except UnicodeDecodeError:
        raise ScheduleError("is not UTF-8 text", file=path, hint="write it with clockworks show FILE --json") from None
    try:
        sched = ir.Schedule.from_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        raise ScheduleError(f"is not a schedule: {first['msg']}" + (f" (at {where})" if where else ""), file=path,
                            hint="write it with clockworks show FILE --json") from None
    except (ValueError, RecursionError) as exc:
        raise ScheduleError(f"is not a schedule: {exc}", file=path,
                            hint="write it with clockworks show FILE --json") from None
    check(sched, path)
    return sched


def check(sched: ir.Schedule, file: str) -> None:
    """`ScheduleError` naming `file`, the rank and the op at the first inconsistency of `sched`."""
    hint = "write it with clockworks show FILE --json"

    def fail(message: str, rank: int | None = None, op: str | None = None) -> None:
        raise ScheduleError(message, file=file, rank=rank, op=op, hint=hint)

    world = sched.world
    if not 1 <= world <= MAX_WORLD:
        fail(f"world is {world}: a schedule has 1 to {MAX_WORLD:,} ranks")
    if len(sched.programs) != world:
        fail(f"world is {world}, but it holds {len(sched.programs)} program(s): one program per rank")
    for index, program in enumerate(sched.programs):
        if program.rank != index:
            fail(f"program {index} is numbered rank {program.rank}: the programs are ranks 0..{world - 1} in order")
    if not 1 <= sched.ranks_per_node <= world or world % sched.ranks_per_node:
        fail(f"ranks_per_node is {sched.ranks_per_node}: a divisor of the world ({world})")
    comms = {"world"}
    for comm in sched.comms:
        if len(comm.color) != world or len(comm.key) != world:
            fail(f"communicator {comm.name} has {len(comm.color)} colors and {len(comm.key)} keys for {world} ranks")
        comms.add(comm.name)
    buffers = [{}] * world
    signals = [{}] * world
    for program in sched.programs:
        rank = program.rank
        own: dict[str, int] = {}
        for decl in program.buffers:
            if decl.name in own:
                fail(f"buffer {decl.name} is declared twice", rank)
            if decl.count < 0:
                fail(f"buffer {decl.name} has count {decl.count}: a count is 0 or more", rank)
            own[decl.name] = decl.count
        words: dict[str, int] = {}
        for decl in program.signals:
            if decl.name in words:
                fail(f"signal {decl.name} is declared twice", rank)
            if decl.count < 0:
                fail(f"signal {decl.name} has count {decl.count}: a count is 0 or more", rank)
            words[decl.name] = decl.count
        buffers[rank], signals[rank] = own, words
    for program in sched.programs:
        for prefix, ops in [("", program.ops)] + [(f"thread {t.name} ", t.ops) for t in program.threads]:
            for index, op in enumerate(ops):
                for each in (op.ops if op.kind == "group" else (op,)):
                    _check_op(each, program.rank, f"{prefix}op {index} ({each.kind})", world, comms, buffers, signals,
                              fail)
    for expectation in sched.expect:
        what = f"postcondition {expectation.label or ''}".rstrip()
        _check_rank(expectation.rank, world, what, None, fail)
        _check_region(expectation.region, buffers[expectation.rank], expectation.rank, what, "region", fail)
        for contribution in expectation.contributions:
            _check_rank(contribution.rank, world, what, None, fail)
            _check_region(contribution.region, buffers[contribution.rank], contribution.rank, what,
                          "contribution", fail)


def _check_rank(value: int, world: int, what: str, rank: int | None, fail, field: str = "rank") -> None:
    if not 0 <= value < world:
        fail(f"{field} {value} is out of range: the ranks are 0..{world - 1}", rank, what)


def _check_region(region: ir.Region, declared: dict[str, int], rank: int, what: str, field: str, fail,
                  owner: int | None = None) -> None:
    where = rank if owner is None else owner
    if region.buffer not in declared:
        fail(f"{field} names buffer {region.buffer}, which rank {where} does not declare", rank, what)
    count = declared[region.buffer]
    if not 0 <= region.start <= region.stop <= count:
        fail(f"{field} {region.buffer}[{region.start}:{region.stop}] is not inside the buffer's {count} element(s) "
             f"on rank {where}", rank, what)


def _check_signal(ref: ir.SignalRef, declared: dict[str, int], rank: int, what: str, owner: int, fail) -> None:
    if ref.signal not in declared:
        fail(f"signal {ref.signal} is not declared on rank {owner}", rank, what)
    if not 0 <= ref.index < declared[ref.signal]:
        fail(f"signal {ref.signal}[{ref.index}] is out of range: rank {owner} declares {declared[ref.signal]} "
             "word(s)", rank, what)


def _check_op(op, rank: int, what: str, world: int, comms: set[str], buffers, signals, fail) -> None:
    for field in ("peer", "pe", "root"):
        value = getattr(op, field, None)
        if value is not None:
            _check_rank(value, world, what, rank, fail, field)
    if op.kind == "signal_store" and op.pe != rank:
        fail(f"signal_store names pe {op.pe}: a plain store writes the rank's own signal word (pe {rank}); "
             "a remote update is signal_op", rank, what)
    comm = getattr(op, "comm", None)
    if comm is not None and comm not in comms:
        fail(f"communicator {comm} is not declared", rank, what)
    pe = getattr(op, "pe", None)
    remote = _REMOTE.get(op.kind, ())
    for field, region in ir.op_regions(op):
        owner = pe if field in remote and pe is not None else rank
        _check_region(region, buffers[owner], rank, what, field, fail, owner)
    for field in ("signal", "target"):
        ref = getattr(op, field, None)
        if isinstance(ref, ir.SignalRef):
            owner = pe if op.kind in _REMOTE_SIGNALS and pe is not None else rank
            _check_signal(ref, signals[owner], rank, what, owner, fail)
    for ref in getattr(op, "signals", None) or ():
        _check_signal(ref, signals[rank], rank, what, rank, fail)
