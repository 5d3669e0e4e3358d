"""K back-to-back calls of a schedule, with epoch-based signal words instead of a reset between calls.

A library call of a communication schedule runs again and again on the same buffers and signal
words; nothing zeroes the words in between. `repeat(sched, calls, between)` builds the schedule of
`calls` calls in a row, which the model checker then verifies like any other (the proof that the
calls are safe back to back is the checker's verdict on this schedule, for exactly this many calls):

- every rank's ops, `calls` times, with `between` after each call but the last: "barrier" (a
  barrier_all: every delivery of the call lands, then every rank meets), "sync" (a sync_all: the
  ranks meet, deliveries may still be in flight) or "none";
- signal words carry an epoch instead of being reset. A word that is only ever set (put_signal /
  signal_op "set") takes, in call k, `value + k * M` with M = 1 + the largest value set on it, and
  a wait on it for `ge c` (c >= 1), `gt c` or `eq c` (c >= 1) waits for `c + k * M`: a value left by
  an earlier call is below k * M and satisfies none of them, as the zero the word starts with
  satisfies none in call 0. A word that is only ever added to (add, inc) starts call k at k * T,
  T = what one call adds to it over all ranks, so any wait compares against `c + k * T`. A wait for
  `ge 0` stays as it is (always true). Anything else on a signal word (other atomics, fetches,
  `lt`/`le`/`ne` on a set word, one wait over words of different epochs) is refused with the reason;
- "alternate": nothing between the calls, but every scratch buffer and every signal array has two
  copies, and call k uses copy k % 2 (a `_alt` copy in odd calls): a fast rank's next call writes the
  other copy, which its peers last read two calls ago. The epochs then count the calls of each copy
  (call k is call k // 2 of its copy);
- the postconditions stay those of one call: after the last call the outputs must hold what one
  call computes from the inputs. A schedule whose call changes what the next call reads (an
  in-place all-reduce of its input) is then reported by the checker, not hidden.

The transformed ops keep the user's file:line, so a counterexample names the user's lines.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from .. import ir
from ..errors import ClockworksError

BETWEEN = ("barrier", "sync", "alternate", "none")  # the costliest first
ADDS = {"add": None, "inc": 1}  # atomic ops that add to a word: the operand (None: the op's value)


class RepeatError(ClockworksError):
    """The schedule cannot be repeated with epoch signal words (exit 2): the reason names the op."""


def _word(pe: int, ref: ir.SignalRef) -> tuple[int, str, int]:
    return pe, ref.signal, ref.index


def _updates(sched: ir.Schedule):
    """Per signal word (pe, name, index): the set values, the total added per call, and the ops
    that do anything else to it."""
    sets, adds, other = defaultdict(list), defaultdict(int), defaultdict(list)
    for program in sched.programs:
        for op in program.ops:
            if isinstance(op, (ir.PutSignal, ir.SignalUpdate)):
                word = _word(op.pe, op.signal)
                if op.sig_op == "set":
                    sets[word].append(op.value)
                else:
                    adds[word] += op.value
            elif isinstance(op, ir.Atomic) and isinstance(op.target, ir.SignalRef):
                word = _word(op.pe, op.target)
                if op.op in ADDS:
                    adds[word] += ADDS[op.op] if ADDS[op.op] is not None else op.value
                elif op.op == "set":
                    sets[word].append(op.value)
                else:
                    other[word].append(op)
            elif isinstance(op, ir.FetchAtomic) and isinstance(op.target, ir.SignalRef):
                other[_word(op.pe, op.target)].append(op)
            elif isinstance(op, ir.SignalStore):  # a reset: no epoch shifts it (`epochs` refuses the word)
                other[_word(op.pe, op.signal)].append(op)
    return sets, adds, other


def epochs(sched: ir.Schedule) -> dict[tuple[int, str, int], tuple[str, int]]:
    """Per updated signal word: ("set", M) or ("add", T), the step its epoch advances by per call.
    `RepeatError` for a word that is both set and added to, or that any other atomic touches."""
    sets, adds, other = _updates(sched)
    steps = {}
    for word in set(sets) | set(adds) | set(other):
        pe, name, index = word
        where = f"signal word {name}[{index}] of rank {pe}"
        if other.get(word):
            op = other[word][0]
            raise RepeatError(f"{op.loc}: {where} is updated by {op.kind} {getattr(op, 'op', '')}: only set and add "
                              "updates can carry an epoch across repeated calls (use put_signal / signal_op)")
        if word in sets and word in adds:
            raise RepeatError(f"{where} is both set and added to: its value after a call does not tell the calls "
                              "apart (use one kind of update per word)")
        if word in sets:
            if min(sets[word]) < 0:
                raise RepeatError(f"{where} is set to a negative value: epochs need values >= 0")
            steps[word] = ("set", max(sets[word]) + 1)
        else:
            steps[word] = ("add", adds[word])
    return steps


def _shift_wait(op, rank: int, call: int, steps: dict) -> ir.OpBase:
    refs = [op.signal] if isinstance(op, ir.WaitUntil) else list(op.signals)
    shifts = set()
    for ref in refs:
        kind, step = steps.get(_word(rank, ref), ("none", 0))
        if kind == "set":
            if op.cmp == "ge" and op.value == 0:
                shifts.add(0)  # always true, in every call
                continue
            if not ((op.cmp in ("ge", "eq") and op.value >= 1) or (op.cmp == "gt" and op.value >= 0)):
                raise RepeatError(f"{op.loc}: the wait on {ref} ({op.cmp} {op.value}) would be satisfied by a value an "
                                  "earlier call left in the word: with epochs, a set word can only be waited on with "
                                  "ge c (c >= 1), gt c or eq c (c >= 1)")
        shifts.add(call * step)
    if len(shifts) > 1:
        raise RepeatError(f"{op.loc}: one wait over signal words whose epochs advance differently; wait on each "
                          "word alone")
    shift = shifts.pop() if shifts else 0
    return op.model_copy(update={"value": op.value + shift}) if shift else op


def _shift(op, rank: int, call: int, steps: dict) -> ir.OpBase:
    if call == 0:
        return op
    if isinstance(op, (ir.PutSignal, ir.SignalUpdate)) and op.sig_op == "set":
        return op.model_copy(update={"value": op.value + call * steps[_word(op.pe, op.signal)][1]})
    if isinstance(op, ir.Atomic) and isinstance(op.target, ir.SignalRef) and op.op == "set":
        return op.model_copy(update={"value": op.value + call * steps[_word(op.pe, op.target)][1]})
    if isinstance(op, (ir.WaitUntil, ir.WaitUntilAll, ir.WaitUntilAny)):
        return _shift_wait(op, rank, call, steps)
    if isinstance(op, ir.Group):
        return op.model_copy(update={"ops": tuple(_shift(o, rank, call, steps) for o in op.ops)})
    return op


def _alt_names(sched: ir.Schedule) -> dict[str, str]:
    """Every scratch buffer and signal array, and the name of its second copy (not otherwise taken)."""
    taken = {d.name for p in sched.programs for d in (*p.buffers, *p.signals)}
    names = {d.name for p in sched.programs for d in p.buffers if d.role == "scratch"}
    names |= {d.name for p in sched.programs for d in p.signals}
    out = {}
    for name in sorted(names):
        alt = f"{name}_alt"
        while alt in taken:
            alt += "_"
        taken.add(alt)
        out[name] = alt
    return out


def _renamed(value, names: dict[str, str]):
    """`value` (an op, or one of its fields) with every region and signal of `names` on its copy."""
    if isinstance(value, ir.Region) and value.buffer in names:
        return value.model_copy(update={"buffer": names[value.buffer]})
    if isinstance(value, ir.SignalRef) and value.signal in names:
        return value.model_copy(update={"signal": names[value.signal]})
    if isinstance(value, tuple):
        return tuple(_renamed(v, names) for v in value)
    if isinstance(value, ir.OpBase):
        update = {}
        for field in type(value).model_fields:
            old = getattr(value, field)
            new = _renamed(old, names)
            if new is not old and new != old:
                update[field] = new
        return value.model_copy(update=update) if update else value
    return value


def _with_copies(program: ir.Program, names: dict[str, str]) -> ir.Program:
    buffers = list(program.buffers) + [d.model_copy(update={"name": names[d.name]}) for d in program.buffers
                                       if d.name in names]
    signals = list(program.signals) + [d.model_copy(update={"name": names[d.name]}) for d in program.signals
                                       if d.name in names]
    return program.model_copy(update={"buffers": tuple(buffers), "signals": tuple(signals)})


def call_starts(sched: ir.Schedule, calls: int, between: str = "barrier") -> dict[int, list[int]]:
    """Where each call after the first begins in `repeat(sched, calls, between)`, per rank: the index
    of its first op, the separator before it (barrier, sync) counted as the call's own first op."""
    sep = 1 if between in ("barrier", "sync") else 0
    return {p.rank: [k * len(p.ops) + (k - 1) * sep for k in range(1, calls)] for p in sched.programs}


def starts_of_repeated(repeated: ir.Schedule, calls: int, between: str = "barrier") -> dict[int, list[int]]:
    """`call_starts` read off the schedule that `repeat(sched, calls, between)` returned (each rank's
    ops are `calls` copies of its call and `calls - 1` separators)."""
    sep = 1 if between in ("barrier", "sync") else 0
    starts = {}
    for p in repeated.programs:
        per_call, extra = divmod(len(p.ops) - (calls - 1) * sep, calls)
        if extra or per_call < 0:
            raise ValueError(f"rank {p.rank} has {len(p.ops)} ops: not {calls} calls with {between!r} between them")
        starts[p.rank] = [k * per_call + (k - 1) * sep for k in range(1, calls)]
    return starts


def repeat(sched: ir.Schedule, calls: int, between: str = "barrier") -> ir.Schedule:
    """The schedule of `calls` back-to-back calls of `sched` (see the module docstring)."""
    if calls < 1:
        raise RepeatError(f"--calls {calls}: at least one call")
    if between not in BETWEEN:
        raise RepeatError(f"--between {between}: one of {', '.join(BETWEEN)}")
    if calls == 1:
        return sched
    steps = epochs(sched)
    for program in sched.programs:  # every wait must shift consistently (raises with the op otherwise)
        for op in program.ops:
            if isinstance(op, (ir.WaitUntil, ir.WaitUntilAll, ir.WaitUntilAny)):
                _shift_wait(op, program.rank, 1, steps)
    alternate = between == "alternate"
    names = _alt_names(sched) if alternate else {}
    programs = []
    for program in sched.programs:
        ops: list = []
        for call in range(calls):
            if call and between in ("barrier", "sync"):
                loc = sched.loc
                ops.append(ir.BarrierAll(loc=loc) if between == "barrier" else ir.SyncAll(loc=loc))
            epoch = call // 2 if alternate else call  # the calls before this one on the same copy
            shifted = [_shift(op, program.rank, epoch, steps) for op in program.ops]
            ops += [_renamed(op, names) for op in shifted] if alternate and call % 2 else shifted
        programs.append(_with_copies(program.model_copy(update={"ops": tuple(ops)}), names))
    return sched.model_copy(update={"programs": tuple(programs), "name": sched.name})


# ------------------------------------------------------------------------- a library's calls
# A library (`codegen.library`) runs the calls of `repeat(sched, K, between)` one at a time, and its
# caller may stop after any of them, read the outputs, and write new inputs before the next. What
# the checker verifies for it is therefore not only the K-call schedule but every prefix of it, each
# with the caller's accesses between the calls (`library_schedules`).
CALLER = "caller"  # the name of the caller's opaque reads (compute ops) in the modelled schedule


def prefix(sched: ir.Schedule, starts: dict[int, list[int]], calls: int) -> ir.Schedule:
    """The first `calls` calls of `sched`, a schedule of more calls whose call k > 0 begins at op
    `starts[rank][k - 1]` of each rank (`call_starts`, or `packets.Lowered.remap` of it): each rank's
    ops before the first op of call `calls` (a separator between calls counts as the next call's)."""
    if calls < 1:
        raise RepeatError(f"a prefix of {calls} calls: at least one call")
    programs = []
    for program in sched.programs:
        ms = starts.get(program.rank, [])
        if calls - 1 > len(ms):
            raise RepeatError(f"a prefix of {calls} calls of a schedule of {len(ms) + 1}")
        stop = ms[calls - 1] if calls - 1 < len(ms) else len(program.ops)
        programs.append(program.model_copy(update={"ops": program.ops[:stop]}))
    return sched.model_copy(update={"programs": tuple(programs)})


def caller_regions(sched: ir.Schedule) -> tuple[dict[int, list[ir.Region]], dict[int, list[ir.Region]]]:
    """Per rank, what the caller writes between calls (the regions its postconditions read at the
    start: the inputs) and reads after a call (the regions the postconditions name: the outputs)."""
    inputs: dict[int, list[ir.Region]] = defaultdict(list)
    outputs: dict[int, list[ir.Region]] = defaultdict(list)
    for expect in sched.expect:
        region = _sized(sched, expect.rank, expect.region)
        if region not in outputs[expect.rank]:
            outputs[expect.rank].append(region)
        for contribution in expect.contributions:
            region = _sized(sched, contribution.rank, contribution.region)
            if region not in inputs[contribution.rank]:
                inputs[contribution.rank].append(region)
    return dict(inputs), dict(outputs)


def _sized(sched: ir.Schedule, rank: int, region: ir.Region) -> ir.Region:
    """A postcondition's region as the ops name it: a whole buffer of a symbolic size with that size,
    part of one with the bounds of an op's region of the same elements (a postcondition holds the
    traced numbers only, which the symbolic size check would refuse)."""
    decl = sched.programs[rank].buffer(region.buffer)
    if region.start_sym is None and decl.count_sym is not None and (region.start, region.stop) == (0, decl.count):
        return region.model_copy(update={"start_sym": ir.Affine(const=0), "stop_sym": decl.count_sym})
    if region.start_sym is None and decl.count_sym is not None:  # part of a buffer: as an op names it
        for program in sched.programs:
            for op in program.ops:
                for _role, named in ir.op_regions(op):
                    if (named.buffer, named.start, named.stop) == (region.buffer, region.start, region.stop) \
                            and (named.start_sym is not None or named.stop_sym is not None):
                        return named
    return region


def with_caller(sched: ir.Schedule, starts: dict[int, list[int]], calls: int) -> ir.Schedule:
    """`sched` (`calls` calls, call k > 0 beginning at `starts[rank][k - 1]`) with its caller's
    accesses, as ops of each rank between the calls:

    - before call 0, a copy of every input region into a buffer of the caller's own (`<name>_saved`):
      the inputs the postconditions speak of;
    - after every call, a read of every output region (an opaque compute op that writes nothing): a
      delivery still landing there, or a later op writing there, races with it, so the checker
      reports a caller that could read a result not yet (or no longer) there;
    - before calls 1 .. calls - 2, every input region filled with a value of its own per call (the
      caller's new inputs); before the last call, the saved inputs copied back, so the postconditions
      (of one call, on the inputs at the start) speak of what the last call computes. A call that read
      an earlier call's inputs, or a caller's write that raced with a delivery or a peer's read of the
      inputs, is then a wrong result or a race.

    The caller's ops carry the schedule's own file:line; they run where the library's caller runs
    them, between two calls' kernels on the stream."""
    inputs, outputs = caller_regions(sched)
    loc = sched.loc
    taken = {d.name for p in sched.programs for d in (*p.buffers, *p.signals)}
    saved_names: dict[str, str] = {}
    for regions in inputs.values():
        for region in regions:
            if region.buffer not in saved_names:
                name = f"{region.buffer}_saved"
                while name in taken:
                    name += "_"
                taken.add(name)
                saved_names[region.buffer] = name
    programs = []
    for program in sched.programs:
        rank = program.rank
        mine_in, mine_out = inputs.get(rank, []), outputs.get(rank, [])
        ms = starts.get(rank, [])
        if len(ms) != calls - 1:
            raise RepeatError(f"rank {rank}: {len(ms) + 1} call starts for {calls} calls")
        bounds = [0, *ms, len(program.ops)]
        ops: list = [ir.Copy(loc=loc, dst=r.model_copy(update={"buffer": saved_names[r.buffer]}), src=r)
                     for r in mine_in]
        for call in range(calls):
            if call:
                if call < calls - 1:  # the caller's new inputs, a value of their own per call
                    ops += [ir.Fill(loc=loc, dst=r, value=float(1000 + call)) for r in mine_in]
                else:  # before the last call: the inputs the postconditions speak of
                    ops += [ir.Copy(loc=loc, dst=r, src=r.model_copy(update={"buffer": saved_names[r.buffer]}))
                            for r in mine_in]
            ops += list(program.ops[bounds[call]:bounds[call + 1]])
            if mine_out:
                ops.append(ir.Compute(loc=loc, name=CALLER, reads=tuple(mine_out)))
        buffers = list(program.buffers)
        for buffer, name in saved_names.items():
            if any(r.buffer == buffer for r in mine_in):
                decl = program.buffer(buffer)
                buffers.append(decl.model_copy(update={"name": name, "role": "scratch", "symmetric": False}))
        programs.append(program.model_copy(update={"ops": tuple(ops), "buffers": tuple(buffers)}))
    return sched.model_copy(update={"programs": tuple(programs)})


def library_schedules(sched: ir.Schedule, starts: dict[int, list[int]], calls: int) -> list[ir.Schedule]:
    """What the checker verifies for a library that runs the `calls` calls of `sched` one at a time
    and restores the start state after the last (or earlier): every prefix of 1 .. `calls` calls, each
    with its caller's accesses (`with_caller`). The caller may stop after any call (a prefix must end
    and hold its results) and go on with new inputs (the next prefix)."""
    return [with_caller(prefix(sched, starts, j), {r: ms[:j - 1] for r, ms in starts.items()}, j)
            for j in range(1, calls + 1)]


# --------------------------------------------------------------------- any number of calls
# `library_schedules` checks K calls; a library that never resets runs any number. The proof for any
# number (`check.unbounded`) explores a few calls of a *periodic* model of the library's use and shows
# that what a state can do next depends only on where each rank is within its call, on the values
# relative to the calls in progress, and on the signal words relative to their epochs: every state of
# call n + P (P = the period: 2 with two copies by call parity, else 1) is then one of call n's, shifted.
# For that the caller's inputs must be told apart per call (a buffer of inputs per call, copied in
# before the call) and every call's outputs checked when the caller reads them, not only the last one's.
@dataclass(frozen=True)
class Periodic:
    """The periodic model of a library's calls (`periodic_caller`): `sched` runs `calls` calls, each
    rank's call j its ops [blocks[rank][j], blocks[rank][j + 1]): the caller's copy of call j's inputs,
    the call, the caller's read of its outputs (op `reads[rank][j]`, None where the rank has no output).
    `inputs[buffer][j]` is the caller's buffer that holds call j's inputs for `buffer`; `period` calls
    shift the signal words by one epoch (`steps`: per word (pe, name, index), ("set", M) or ("add", T)
    per epoch, the second copies of "alternate" included)."""

    sched: ir.Schedule
    calls: int
    period: int
    blocks: dict[int, list[int]]
    reads: dict[int, list[int | None]]
    inputs: dict[str, list[str]]
    steps: dict[tuple[int, str, int], tuple[str, int]]


def periodic_caller(sched: ir.Schedule, starts: dict[int, list[int]], calls: int, source: ir.Schedule,
                    between: str) -> Periodic:
    """The periodic model of `calls` library calls of `source` (one call, as the user wrote it): `sched`
    is `calls` calls of it as lowered (`repeat`, then packets), call k > 0 of each rank beginning at op
    `starts[rank][k - 1]`. With "barrier" or "sync" between calls, the first call begins with it too
    (the library's first call does). Raises `RepeatError` when the lowered calls are not periodic: call k + P the
    same ops as call k with every signal value one epoch on (the shift the proof relies on)."""
    period = 2 if between == "alternate" else 1
    steps = dict(epochs(source))
    if between == "alternate":
        names = _alt_names(source)
        steps.update({(pe, names[name], index): step for (pe, name, index), step in list(steps.items())
                      if name in names})
    inputs, outputs = caller_regions(sched)
    taken = {d.name for p in sched.programs for d in (*p.buffers, *p.signals)}
    per_call: dict[str, list[str]] = {}
    for regions in inputs.values():
        for region in regions:
            if region.buffer in per_call:
                continue
            names = []
            for j in range(calls):
                name = f"{region.buffer}_call{j}"
                while name in taken:
                    name += "_"
                taken.add(name)
                names.append(name)
            per_call[region.buffer] = names
    programs, blocks, reads = [], {}, {}
    loc = sched.loc
    for program in sched.programs:
        rank = program.rank
        ms = starts.get(rank, [])
        if len(ms) != calls - 1:
            raise RepeatError(f"rank {rank}: {len(ms) + 1} call starts for {calls} calls")
        bounds = [0, *ms, len(program.ops)]
        ops_of = [program.ops[bounds[j]:bounds[j + 1]] for j in range(calls)]
        if between in ("barrier", "sync") and calls > 1:
            # every call begins with the separator, the first too: the library's calls are one kernel
            # each, the same for every call (its epoch a parameter), so its first call meets the peers too
            sep = ops_of[1][0] if ops_of[1] else None
            if not isinstance(sep, (ir.BarrierAll, ir.SyncAll)):
                raise RepeatError(f"rank {rank}: call 1 does not begin with its {between}")
            ops_of[0] = (sep, *ops_of[0])
        for j in range(period, calls):  # the shift the proof relies on, checked op by op
            if len(ops_of[j]) != len(ops_of[j - period]):
                raise RepeatError(f"rank {rank}: call {j} has {len(ops_of[j])} ops, call {j - period} "
                                  f"{len(ops_of[j - period])}: the calls are not periodic")
            for before, op in zip(ops_of[j - period], ops_of[j]):
                if _shift(before, rank, 1, steps) != op:
                    raise RepeatError(f"{op.loc}: rank {rank}'s op in call {j} is not its op of call {j - period} "
                                      "one epoch on: the calls are not periodic")
        mine_in, mine_out = inputs.get(rank, []), outputs.get(rank, [])
        ops: list = []
        starts_r, reads_r = [], []
        for j in range(calls):
            starts_r.append(len(ops))
            ops += [ir.Copy(loc=loc, dst=r, src=r.model_copy(update={"buffer": per_call[r.buffer][j]}))
                    for r in mine_in]
            ops += list(ops_of[j])
            reads_r.append(len(ops) if mine_out else None)
            if mine_out:
                ops.append(ir.Compute(loc=loc, name=CALLER, reads=tuple(mine_out)))
        starts_r.append(len(ops))
        buffers = list(program.buffers)
        for buffer, names in per_call.items():
            if any(r.buffer == buffer for r in mine_in):
                decl = program.buffer(buffer)
                buffers += [decl.model_copy(update={"name": name, "role": "scratch", "symmetric": False})
                            for name in names]
        programs.append(program.model_copy(update={"ops": tuple(ops), "buffers": tuple(buffers)}))
        blocks[rank], reads[rank] = starts_r, reads_r
    last = {buffer: names[-1] for buffer, names in per_call.items()}
    expect = tuple(exp.model_copy(update={"contributions": tuple(
        c.model_copy(update={"region": c.region.model_copy(update={"buffer": last[c.region.buffer]})})
        if c.region.buffer in last else c for c in exp.contributions)}) for exp in sched.expect)
    modelled = sched.model_copy(update={"programs": tuple(programs), "expect": expect})
    return Periodic(modelled, calls, period, blocks, reads, per_call, steps)
