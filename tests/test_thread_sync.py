"""Synchronisation inside a rank: events (`r.event`, `record_event`, `wait_event`), thread barriers
(`r.thread_barrier`) and kernels on a stream (`r.kernel`, `r.block`), lowered to signal words of the
rank by `semantics/threads.py`: what each orders and what it does not, how reports name them, and
the refusals at the user's line."""

from __future__ import annotations

import inspect
import os

import pytest
from pydantic import ValidationError

import clockworks_dist as cw
from clockworks_dist import ir
from clockworks_dist.check import check
from clockworks_dist.errors import ScheduleError

HERE = os.path.basename(__file__)


def line_of(fn, marker: str = "# HERE") -> int:
    lines, first = inspect.getsourcelines(fn)
    return next(first + i for i, text in enumerate(lines) if marker in text)


def trace(body, world: int = 1) -> ir.Schedule:
    return cw.schedule(body, name="t").trace(world)


# ------------------------------------------------------------------------------------ events
def staged_read(wait_after_second_record: bool):
    """s0 records ev, writes a buffer, records ev again; s1 waits for ev and reads the buffer. Host
    order decides which record the wait uses: the second (after the write), or the first."""
    def body(r):
        x = r.buffer("x", count=2, role="input")
        staged = r.buffer("staged", count=2, role="scratch")
        out = r.buffer("out", count=2, role="output")
        ev = r.event("ev")
        with r.thread("s0", kind="stream"):
            r.record_event(ev)
        if not wait_after_second_record:
            with r.thread("s1", kind="stream"):
                r.wait_event(ev)  # uses record 1, made before the write
        with r.thread("s0", kind="stream"):
            r.copy(staged, x)  # HERE
            r.record_event(ev)
        if wait_after_second_record:
            with r.thread("s1", kind="stream"):
                r.wait_event(ev)
        with r.thread("s1", kind="stream"):
            r.copy(out, staged)
    return body


def test_a_wait_uses_the_most_recent_record_before_it_in_host_order():
    ordered = check(trace(staged_read(True)))
    assert ordered.verdict == "verified", [v.message for v in ordered.violations]
    early = check(trace(staged_read(False)))
    races = [v for v in early.violations if v.kind == "data_race"]
    assert races, sorted(early.kinds())
    assert any(o.loc.line == line_of(staged_read(False)) and o.thread == "s0" for o in races[0].ops)
    waits = [op for op in trace(staged_read(False)).programs[0].threads[1].ops if op.kind == "wait_event"]
    assert [w.record for w in waits] == [1]


def test_a_wait_with_no_record_before_it_is_a_deadlock_naming_the_event():
    def body(r):
        ev = r.event("ready")
        with r.thread("s1", kind="stream"):
            r.wait_event(ev)  # HERE: traced before any record
        with r.thread("s0", kind="stream"):
            r.record_event(ev)
    result = check(trace(body))
    deadlocks = [v for v in result.violations if v.kind == "deadlock"]
    assert result.verdict == "violated" and deadlocks, sorted(result.kinds())
    assert "stream s1" in deadlocks[0].message
    assert "wait_event(ready, never recorded before this wait)" in deadlocks[0].message
    assert any(o.loc.line == line_of(body) and o.kind == "wait_event" for o in deadlocks[0].ops)


def test_a_record_completes_none_of_the_threads_puts():
    """s0 puts into the next rank and records; s1 waits for the record and signals the next rank,
    which reads: the put may still be in flight (a race), unless s0 quiets before it records."""
    def body(quiet: bool):
        def schedule(r):
            nxt = (r.rank + 1) % r.world
            x = r.symmetric("x", count=1, role="input")
            landed = r.symmetric("landed", count=1, role="scratch")
            out = r.buffer("out", count=1, role="output")
            here, ev = r.signal("here"), r.event("ev")
            with r.thread("s0", kind="stream"):
                r.put(nxt, landed, x)
                if quiet:
                    r.quiet()
                r.record_event(ev)
            with r.thread("s1", kind="stream"):
                r.wait_event(ev)
                r.signal_op(nxt, here, 1)
                r.wait_until(here, "ge", 1)
                r.copy(out, landed)
        return schedule
    assert "data_race" in check(trace(body(False), world=2)).kinds()
    assert check(trace(body(True), world=2)).verdict == "verified"


# ---------------------------------------------------------------------------- thread barriers
def test_a_barrier_that_one_thread_never_reaches_deadlocks_naming_it():
    def body(r):
        with r.thread("a"):
            pass
        with r.thread("b"):
            pass
        with r.thread("a"):
            r.thread_barrier("meet", ["a", "b"])  # HERE
    result = check(trace(body))
    deadlocks = [v for v in result.violations if v.kind == "deadlock"]
    assert deadlocks, sorted(result.kinds())
    assert "block a" in deadlocks[0].message and "thread_barrier(meet, threads=[a, b])" in deadlocks[0].message
    assert any(o.loc.line == line_of(body) for o in deadlocks[0].ops)


def test_a_barrier_orders_local_stores_and_can_be_met_again():
    """Two rounds through one barrier: each thread writes its element, meets, reads the other's,
    meets again, and only then overwrites its own."""
    def body(r):
        shared = r.buffer("shared", count=2, role="scratch")
        out = r.buffer("out", count=2, role="output")
        for t in ("a", "b"):
            with r.thread(t):
                pass
        for i, t in enumerate(("a", "b")):
            with r.thread(t):
                r.fill(shared.element(i), float(i + 1))
                r.thread_barrier("meet", ["a", "b"])
                r.copy(out.element(i), shared.element(1 - i))
                r.thread_barrier("meet", ["a", "b"])
                r.fill(shared.element(i), 0.0)
    result = check(trace(body))
    assert result.verdict == "verified", [v.message for v in result.violations]


# ------------------------------------------------------------------------------------ kernels
def test_a_kernel_runs_after_the_streams_earlier_work_and_before_its_later_work():
    def body(r):
        x = r.buffer("x", count=2, role="input")
        out = r.buffer("out", count=2, role="output")
        with r.thread("s0", kind="stream"):
            r.copy(out, x)
        with r.kernel("k", stream="s0"):
            for b in range(2):
                with r.block(f"b{b}"):
                    r.fill(out.element(b), 7.0)  # after the stream's copy
        with r.thread("s0", kind="stream"):
            r.copy(x, out)  # after both blocks
    sched = trace(body)
    assert [t.name for t in sched.programs[0].threads] == ["s0", "k_b0", "k_b1"]
    result = check(sched)
    assert result.verdict == "verified", [v.message for v in result.violations]


def test_two_blocks_of_a_kernel_race_and_the_report_names_the_blocks():
    def body(r):
        out = r.buffer("out", count=1, role="output")
        with r.kernel("k", stream="s0"):
            with r.block("b0"):
                r.fill(out, 1.0)
            with r.block("b1"):
                r.fill(out, 2.0)
    races = [v for v in check(trace(body)).violations if v.kind == "data_race"]
    assert races and "block k_b0" in races[0].message and "block k_b1" in races[0].message


# ------------------------------------------------------------------------ refusals and round trip
def _record_outside(r):
    ev = r.event("ev")
    r.record_event(ev)  # HERE


def _unlisted_caller(r):
    for t in ("a", "b", "c"):
        with r.thread(t):
            pass
    with r.thread("c"):
        r.thread_barrier("meet", ["a", "b"])  # HERE


def _op_outside_block(r):
    x = r.buffer("x", count=1)
    with r.kernel("k", stream="s0"):
        r.fill(x, 1.0)  # HERE


def _block_outside_kernel(r):
    with r.block("b0"):  # HERE
        pass


def _undeclared_event(r):
    with r.thread("s0", kind="stream"):
        r.wait_event("nope")  # HERE


@pytest.mark.parametrize("body, op, fragment", [
    (_record_outside, "record_event", "outside every thread"),
    (_unlisted_caller, "thread_barrier", "not among its threads"),
    (_op_outside_block, "fill", "outside its blocks"),
    (_block_outside_kernel, "block", "a block belongs to a kernel"),
    (_undeclared_event, "wait_event", "is not an event of rank 0"),
])
def test_bad_synchronisation_names_the_users_line(body, op, fragment):
    with pytest.raises(ScheduleError) as info:
        trace(body)
    assert (info.value.file, info.value.line, info.value.op) == (HERE, line_of(body), op), str(info.value)
    assert fragment in str(info.value)


def test_the_ir_refuses_events_outside_threads_and_round_trips_kernels():
    loc = ir.SourceLoc(file="s.py", line=3)
    with pytest.raises(ValidationError, match="outside every thread"):
        ir.Program(rank=0, ops=(ir.RecordEvent(event="ev", record=1, loc=loc),))
    sched = trace(_kernel_with_barrier)
    assert ir.Schedule.from_json(sched.to_json()) == sched


def _kernel_with_barrier(r):
    with r.kernel("k", stream="s0"):
        for b in ("b0", "b1"):
            with r.block(b):
                r.thread_barrier("grid")  # every block of the kernel


def test_a_barrier_whose_threads_differ_between_calls_is_reported_at_its_line():
    """A JSON schedule (no DSL to number and check it): the expansion refuses it, naming the op."""
    sched = trace(_kernel_with_barrier)
    program = sched.programs[0]
    threads = list(program.threads)
    ops = list(threads[2].ops)
    at = next(i for i, op in enumerate(ops) if op.kind == "thread_barrier")
    ops[at] = ops[at].model_copy(update={"threads": ("k_b1", "s0")})
    threads[2] = threads[2].model_copy(update={"ops": tuple(ops)})
    bad = sched.model_copy(update={"programs": (program.model_copy(update={"threads": tuple(threads)}),)})
    result = check(bad)
    assert result.verdict == "violated"
    assert any("another call [k_b0, k_b1]" in v.message and v.ops and v.ops[0].thread == "k_b1"
               for v in result.violations), [v.message for v in result.violations]
