"""Waits on data words: `r.wait_until(flag[i], cmp, value)` on an element of a symmetric buffer.

OpenSHMEM's point-to-point synchronisation waits on an element of an integer symmetric array (the
"ivar"), "changed by a remote write or atomic swap issued by a different processor" (Open MPI's
shmem_wait(3)). NVSHMEM's signal words are such elements too: `nvshmem_uint64_wait_until` polls a
uint64 of the symmetric heap. So a buffer whose elements a wait reads is, exactly, an array of signal
words, provided nothing else treats it as data:

- it is symmetric, uint64 (the machine's signal words are uint64, compared unsigned; an int32 or int64
  word wraps or compares otherwise, which no engine models yet), role "scratch", of a concrete size
  of at most `MAX_SIGNAL_WORDS` elements;
- every op that touches it is a wait on its words or an atomic (`atomic_*`, `fetch_*`, `swap`,
  `compare_swap`, `atomic_fetch`) whose target is one of its words. A plain write (put, get into it,
  copy, fill, compute, a collective, a fetch's `into`) is refused: the wait reads the word while the
  write may land, which DESIGN.md's race rule calls a race (a plain write races with anything), and its
  value would be the symbolic data the checker does not compare with numbers. A plain read (copy out
  of it, put from it) is refused too: it would read a signal word as data;
- the postcondition does not name it (nothing is read back from it).

Then `as_signal_words` declares it as a signal array of the same name and size (initially 0 on every
engine, like memory from `nvshmem_calloc`), and each atomic on one of its elements targets that signal
word. Every engine runs the result as it runs signal words (the checker and its reduction, the z3 wait
check, the simulator, mpi-cpu, the generated NCCL and NVSHMEM code): nothing downstream needs to know.
"""

from __future__ import annotations

from .. import ir
from ..errors import ScheduleError
from ..semantics.rules import describe, rule

_HINT_ATOMIC = ("update a waited word only with atomics (atomic_add, atomic_set, fetch_add, compare_swap, ...), "
                "and keep the data it guards in another buffer")


def as_signal_words(sched: ir.Schedule, waited: dict[str, ir.SourceLoc], max_words: int) -> ir.Schedule:
    """The schedule with each buffer in `waited` (name -> the first wait on it) as a signal array,
    or `ScheduleError` at the user's line of the first op that uses it otherwise (module docstring)."""
    if not waited:
        return sched
    first = sched.programs[0]
    decls = {b.name: b for b in first.buffers}
    for name, wait_loc in waited.items():
        _check_decl(decls[name], wait_loc, max_words)
    for exp in sched.expect:
        if exp.region.buffer in waited:
            loc = sched.loc
            raise ScheduleError(f"the postcondition names {exp.region} on rank {exp.rank}, but {exp.region.buffer} "
                                f"holds words a wait reads (at {waited[exp.region.buffer]}), not data",
                                file=loc.file, line=loc.line, rank=exp.rank,
                                hint="expect values of the buffers the words guard, not of the words")
    programs = tuple(_program(p, waited) for p in sched.programs)
    return sched.model_copy(update={"programs": programs})


def _check_decl(decl: ir.BufferDecl, wait_loc: ir.SourceLoc, max_words: int) -> None:
    problem = None
    if not decl.symmetric:
        problem, hint = "is a per-rank buffer", "declare it with r.symmetric(...): remote atomics update it"
    elif decl.dtype != "uint64":
        problem = f"is {decl.dtype}"
        hint = ("declare it dtype='uint64': waits compare uint64 words (nvshmem_uint64_wait_until); "
                "other widths wrap and compare otherwise, which the checker does not model yet")
    elif decl.role != "scratch":
        problem = f"has role {decl.role!r}"
        hint = "declare it role='scratch': its words start at 0 (as from nvshmem_calloc) and are not read back"
    elif decl.count_sym is not None:
        problem, hint = "has a symbolic size", "give it a fixed count (one word per peer or per step)"
    elif decl.count > max_words:
        problem = f"has {decl.count} elements"
        hint = f"use at most {max_words} words: the checker keeps each in its state"
    if problem is not None:
        raise ScheduleError(f"a wait reads {decl.name}, which {problem}", file=wait_loc.file, line=wait_loc.line,
                            op="wait_until", hint=hint)


def _program(p: ir.Program, waited: dict[str, ir.SourceLoc]) -> ir.Program:
    decls = [b for b in p.buffers if b.name in waited]
    signals = p.signals + tuple(ir.SignalDecl(name=b.name, count=b.count, loc=b.loc) for b in decls)
    return p.model_copy(update={
        "buffers": tuple(b for b in p.buffers if b.name not in waited), "signals": signals,
        "ops": tuple(_op(op, p.rank, waited) for op in p.ops),
        "threads": tuple(t.model_copy(update={"ops": tuple(_op(op, p.rank, waited) for op in t.ops)})
                         for t in p.threads)})


def _op(op, rank: int, waited: dict[str, ir.SourceLoc]):
    atomic = isinstance(op, (ir.Atomic, ir.FetchAtomic))
    for access in rule(op).accesses(op, rank):
        where = access.where
        if not isinstance(where, ir.Region) or where.buffer not in waited:
            continue
        if atomic and access.field == "target":
            continue
        loc = op.loc
        raise ScheduleError(f"{describe(op)} {access.mode.verb} {where}, but {where.buffer} holds words a wait "
                            f"reads (at {waited[where.buffer]}): only atomics may touch them",
                            file=loc.file if loc else None, line=loc.line if loc else None, rank=rank, op=op.kind,
                            hint=_HINT_ATOMIC)
    if atomic and isinstance(op.target, ir.Region) and op.target.buffer in waited:
        return op.model_copy(update={"target": ir.SignalRef(signal=op.target.buffer, index=op.target.start)})
    return op
