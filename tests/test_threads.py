"""Concurrency inside a rank (`r.thread`, `ir.Thread`, `semantics/threads.py`): what the DSL accepts
and refuses, how the checker names threads, what a thread's quiet and end complete, and which
engines run threads (the checker and mpi-cpu) or refuse them with the reason."""

from __future__ import annotations

import inspect
import os

import pytest

import clockworks_dist as cw
from clockworks_dist import ir
from clockworks_dist.check import check
from clockworks_dist.codegen import program as codegen
from clockworks_dist.errors import ScheduleError
from clockworks_dist.dsl import validate_json
from clockworks_dist.report.text import render_listing

HERE = os.path.basename(__file__)


def line_of(fn, marker: str = "# HERE") -> int:
    lines, first = inspect.getsourcelines(fn)
    return next(first + i for i, text in enumerate(lines) if marker in text)


def trace(body, world: int = 2, expect=None) -> ir.Schedule:
    return cw.schedule(body, name="t", expect=expect).trace(world)


def two_writers(ordered: bool):
    """Two threads of each rank write one element; `ordered`: the second waits for the first's flag."""
    def body(r):
        x = r.buffer("x", count=1, role="output")
        flag = r.signal("flag")
        with r.thread("a"):
            r.fill(x, 1.0)
            r.signal_op(r.rank, flag, 1)
        with r.thread("b", kind="stream"):
            if ordered:
                r.wait_until(flag, "ge", 1)
            r.fill(x, 2.0)  # HERE
    return body


def test_two_threads_writing_one_element_race_and_the_report_names_both():
    body = two_writers(ordered=False)
    result = check(trace(body))
    races = [v for v in result.violations if v.kind == "data_race"]
    assert races and result.verdict == "violated"
    ops = races[0].ops
    assert {(o.rank, o.thread) for o in ops} in ({(0, "a"), (0, "b")}, {(1, "a"), (1, "b")})
    assert any(o.loc.line == line_of(body) for o in ops)
    assert "block a" in races[0].message and "stream b" in races[0].message


def test_a_flag_orders_them():
    result = check(trace(two_writers(ordered=True), expect=None))
    assert result.verdict == "verified", [v.message for v in result.violations]


def test_a_threads_quiet_completes_its_own_puts_only():
    # thread a puts and never quiets; thread b quiets and then signals the peer that x has landed:
    # b's quiet does not complete a's put, so the peer's read races with it
    def body(r, who_quiets):
        nxt = (r.rank + 1) % r.world
        x = r.symmetric("x", count=1, role="input")
        inbox = r.symmetric("inbox", count=1, role="scratch")
        out = r.buffer("out", count=1, role="output")
        done, here = r.signal("done"), r.signal("here")
        with r.thread("a"):
            r.put(nxt, inbox, x)
            if who_quiets == "a":
                r.quiet()
            r.signal_op(r.rank, done, 1)
        with r.thread("b"):
            r.wait_until(done, "ge", 1)
            if who_quiets == "b":
                r.quiet()
            r.signal_op(nxt, here, 1)
            r.wait_until(here, "ge", 1)
            r.copy(out, inbox)
    post = cw.custom(lambda world: [cw.equals((q + 1) % world, "out", 0, 1, (q, "x", 0)) for q in range(world)])
    assert check(cw.schedule(lambda r: body(r, "a"), name="t", expect=post).trace(2)).verdict == "verified"
    wrong = check(cw.schedule(lambda r: body(r, "b"), name="t", expect=post).trace(2))
    assert "data_race" in wrong.kinds()


def _nested(r):
    with r.thread("a"):
        with r.thread("b"):  # HERE
            pass


def _bad_name(r):
    with r.thread("bad name"):  # HERE
        pass


def _bad_kind(r):
    with r.thread("a", kind="warp"):  # HERE
        pass


@pytest.mark.parametrize("body, fragment", [
    (_nested, "threads do not nest"),
    (_bad_name, "thread name 'bad name' is not a valid identifier"),
    (_bad_kind, "unknown thread kind 'warp'"),
])
def test_bad_threads_name_the_users_line(body, fragment):
    with pytest.raises(ScheduleError) as info:
        trace(body)
    assert (info.value.file, info.value.line, info.value.op) == (HERE, line_of(body), "thread"), str(info.value)
    assert fragment in str(info.value)


def test_an_op_outside_the_threads_of_a_rank_that_has_them_is_refused():
    def body(r):
        x = r.buffer("x", count=1)
        with r.thread("a"):
            r.fill(x, 1.0)
        r.fill(x, 2.0)  # HERE
    with pytest.raises(ScheduleError) as info:
        trace(body)
    assert (info.value.line, info.value.op) == (line_of(body), "fill")
    assert "outside every thread" in str(info.value)


def test_a_collective_inside_a_thread_is_refused_with_the_reason():
    def body(r):
        x = r.buffer("x", count=1)
        with r.thread("a"):
            r.all_reduce(x)  # HERE
    result = check(trace(body))
    assert result.verdict == "violated"
    assert "not supported yet" in result.errors[0].message
    assert result.errors[0].ops[0].loc.line == line_of(body)


def test_threads_round_trip_through_json_and_are_listed(tmp_path):
    sched = trace(two_writers(ordered=True))
    again = ir.Schedule.from_json(sched.to_json())
    assert again == sched
    path = tmp_path / "s.json"
    path.write_text(sched.to_json())
    assert validate_json.load(str(path)) == sched
    listing = render_listing(sched)
    assert "rank 0: 2 threads, concurrent" in listing and "stream b" in listing


def test_engines_that_do_not_run_threads_say_so():
    sched = trace(two_writers(ordered=True))
    problems = codegen.unsupported(sched, "nvshmem")
    assert problems and "does not emit threads yet" in problems[0]
    from clockworks_dist.perf.network import from_topology
    from clockworks_dist.perf.simulate import Simulator
    from clockworks_dist.topology import load_topology
    from clockworks_dist.lowering import Build, LoweringError, lower

    topo = load_topology("h200x2-nv18")
    timeline = Simulator(sched, from_topology(topo, 2), topo.constants).run()  # the simulator times threads
    assert {r.thread for r in timeline.records if r.rank == 0} >= {"a", "b"}
    with pytest.raises(LoweringError, match="does not lower threads yet"):
        lower(sched, Build("nccl"))


def test_the_ir_refuses_ops_beside_threads_and_a_thread_named_twice():
    loc = ir.SourceLoc(file="f.py", line=1)
    fill = ir.Fill(dst=ir.Region(buffer="x", start=0, stop=1), value=1.0, loc=loc)
    with pytest.raises(ValueError, match="both ops and threads"):
        ir.Program(rank=0, ops=(fill,), threads=(ir.Thread(name="a", ops=(fill,), loc=loc),))
    with pytest.raises(ValueError, match="names a thread twice"):
        ir.Program(rank=0, threads=(ir.Thread(name="a", loc=loc), ir.Thread(name="a", loc=loc)))


def test_a_deadlock_names_each_blocked_thread_and_not_the_ranks_end():
    def body(r):
        flag = r.signal("flag")
        with r.thread("a"):
            r.wait_until(flag, "ge", 1)
        with r.thread("b"):
            r.wait_until(flag, "ge", 2)
    result = check(trace(body))
    [deadlock] = [v for v in result.violations if v.kind == "deadlock"]
    assert "rank 0 block a blocks in wait_until(flag[0] ge 1)" in deadlock.message
    assert "rank 1 block b blocks in wait_until(flag[0] ge 2)" in deadlock.message
    assert "cw_thread_end" not in deadlock.message and "finished" not in deadlock.message
    assert {(o.rank, o.thread) for o in deadlock.ops} >= {(0, "a"), (0, "b")}
