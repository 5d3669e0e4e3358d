"""Collectives inside `group()` (ncclGroupStart/End): the DSL, the matching in posting order per
communicator, the search (reduced, unreduced and breadth-first agree), the NCCL emitter, and the engines that
refuse them with the reason."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest

import clockworks_dist as cw
from clockworks_dist import ir
from clockworks_dist.check import check, terminal_outcomes
from clockworks_dist.check.por import Reducer
from clockworks_dist.errors import ScheduleError
from clockworks_dist.runtime import cupy_nccl, mpi_cpu  # noqa: F401  (register their backend tables)
from clockworks_dist.semantics.backends import BACKENDS, Unsupported
from clockworks_dist.semantics.machine import P2P, Coll, Model
from clockworks_dist.semantics.match import match
from clockworks_dist.semantics.threads import expand

HERE = os.path.basename(__file__)


def line_of(fn, marker: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return next(first + i for i, text in enumerate(lines) if marker in text)


def two_comms(grouped: bool, swapped: bool = True, same_buffer: bool = False):
    """Two all-reduces on communicators a and b; the odd ranks post b's first when `swapped`."""
    def body(r):
        x = r.buffer("x", count=2, role="inout")
        y = x if same_buffer else r.buffer("y", count=2, role="inout")
        a, b = r.comm("a", range(r.world)), r.comm("b", range(r.world))
        calls = [lambda: r.all_reduce(x, comm=a), lambda: r.all_reduce(y, comm=b)]
        if swapped and r.rank % 2:
            calls.reverse()
        if grouped:
            with r.group():
                for call in calls:
                    call()
        else:
            for call in calls:
                call()
    expect = None if same_buffer else (cw.allreduce("x"), cw.allreduce("y"))
    return cw.schedule(body, name="two_comms", expect=expect).trace(2)


@pytest.mark.parametrize("strategy, reduction", [("dfs", True), ("dfs", False), ("bfs", False)])
def test_grouped_collectives_of_two_comms_verify_in_any_posting_order(strategy, reduction):
    result = check(two_comms(grouped=True), strategy=strategy, reduction=reduction)
    assert result.verdict == "verified", result.violations
    assert result.reduction is reduction  # grouped collectives are reduced (check/por.py's note argues them)


def mixed():
    """A group with a send, a recv and an all-reduce on a split communicator, beside an ungrouped all-gather."""
    def body(r):
        x = r.buffer("x", count=2, role="inout")
        got = r.buffer("got", count=2, role="output")
        part = r.buffer("part", count=1, role="input")
        whole = r.buffer("whole", count=r.world, role="output")
        peer = r.rank ^ 1
        pair = r.comm("pair", (r.rank & ~1, r.rank | 1))
        with r.group():
            r.send(peer, x)
            r.all_gather(part, whole)
            r.recv(peer, got)
        r.all_reduce(x, comm=pair)
    return cw.schedule(body, name="mixed").trace(4)


@pytest.mark.parametrize("make", [lambda: two_comms(grouped=True), lambda: two_comms(grouped=False), mixed],
                         ids=["grouped", "ungrouped", "mixed"])
def test_search_strategies_agree_on_grouped_collectives(make):
    sched = make()
    outcomes = {(s, red): terminal_outcomes(sched, strategy=s, reduction=red)
                for s, red in [("dfs", True), ("dfs", False), ("bfs", False)]}
    assert len(set(outcomes.values())) == 1, outcomes


def test_the_same_calls_outside_a_group_deadlock():
    result = check(two_comms(grouped=False))
    assert result.kinds() == {"deadlock"}
    assert check(two_comms(grouped=False, swapped=False)).verdict == "verified"


def test_grouped_collectives_on_the_same_buffer_race():
    result = check(two_comms(grouped=True, swapped=False, same_buffer=True))
    assert "data_race" in result.kinds()


def test_same_comm_swapped_inside_a_group_is_a_mismatch_naming_both_lines():
    def body(r):
        x = r.buffer("x", count=2, role="inout")
        part = r.buffer("part", count=2, role="input")
        whole = r.buffer("whole", count=2 * r.world, role="output")
        with r.group():
            if r.rank == 1:
                r.all_gather(part, whole)  # SWAPPED
                r.all_reduce(x)
            else:
                r.all_reduce(x)  # FIRST
                r.all_gather(part, whole)
    result = check(cw.schedule(body, name="t").trace(2))
    assert result.kinds() == {"collective_mismatch"}
    v = result.errors[0]
    assert "in the order each rank posts them" in v.message
    lines = {(o.rank, o.loc.line) for o in v.ops}
    assert {(0, line_of(body, "# FIRST")), (1, line_of(body, "# SWAPPED"))} <= lines, lines


def test_a_grouped_collective_matches_an_ungrouped_one_in_posting_order():
    def body(r):
        x = r.buffer("x", count=2, role="inout")
        y = r.buffer("y", count=2, role="inout")
        a, b = r.comm("a", range(r.world)), r.comm("b", range(r.world))
        if r.rank == 0:
            with r.group():
                r.all_reduce(x, comm=a)
                r.all_reduce(y, comm=b)
        else:
            r.all_reduce(y, comm=b)  # rank 0's group has posted b's: it meets it, then a's
            r.all_reduce(x, comm=a)
    result = check(cw.schedule(body, name="t", expect=(cw.allreduce("x"), cw.allreduce("y"))).trace(2))
    assert result.verdict == "verified", result.violations


def test_only_nccl_ops_may_be_grouped():
    def body(r):
        x = r.buffer("x", count=2)
        with r.group():
            r.copy(x.region(0, 1), x.region(1, 2))  # HERE
    with pytest.raises(ScheduleError) as info:
        cw.schedule(body, name="t").trace(2)
    err = info.value
    assert (err.file, err.line, err.op) == (HERE, line_of(body, "# HERE"), "copy"), str(err)
    assert "only send, recv and the NCCL collectives" in str(err)


def test_nccl_codegen_emits_grouped_collectives_inside_the_group():
    from clockworks_dist.codegen import program as codegen
    from clockworks_dist.lowering import Build, lower
    text = codegen.generate(lower(two_comms(grouped=True), Build("nccl")))
    start = text.index("ncclGroupStart")
    inside = text[start:text.index("ncclGroupEnd", start)]
    assert inside.count("ncclAllReduce") == 2, inside


def test_cupy_refuses_a_group_with_a_collective_with_the_reason_and_mpi_cpu_runs_it():
    group = two_comms(grouped=True).programs[0].ops[0]
    assert isinstance(group, ir.Group)
    with pytest.raises(Unsupported, match="this group holds all_reduce"):
        BACKENDS["cupy"].lookup(group)
    assert BACKENDS["mpi-cpu"].lookup(group) is mpi_cpu.p2p
    plain = ir.Group(ops=(ir.Send(peer=1, src=group.ops[0].src, loc=group.loc),), loc=group.loc)
    assert BACKENDS["cupy"].lookup(plain) is not None


GROUPED_FILE = """import clockworks_dist as cw


@cw.schedule(ranks=(2,))
def grouped(r):
    x = r.buffer("x", count=2, role="inout")
    y = r.buffer("y", count=2, role="inout")
    a, b = r.comm("a", range(r.world)), r.comm("b", range(r.world))
    with r.group():
        r.all_reduce(x, comm=a)
        r.all_reduce(y, comm=b)
"""


def test_run_on_cupy_refuses_a_grouped_collective_before_the_run(tmp_path):
    """The refusal names the group's file:line with exit 2 before anything is launched (and before
    asking for CuPy or GPUs), not as a crash of the ranks."""
    path = tmp_path / "grouped_file.py"
    path.write_text(GROUPED_FILE)
    done = subprocess.run([sys.executable, "-m", "clockworks_dist.cli", "run", str(path), "--np", "2",
                           "--backend", "cupy"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "grouped_file.py:9: the cupy backend cannot run group: this group holds all_reduce" in done.stderr
    assert "Traceback" not in done.stderr


def test_nccl_program_with_grouped_collectives_compiles(tmp_path):
    from clockworks_dist.codegen import build
    from clockworks_dist.codegen import program as codegen
    from clockworks_dist.lowering import Build, lower
    try:
        build.find_toolchain("nccl").require("nccl")
    except build.ToolchainMissing as missing:
        pytest.skip(f"no NCCL toolchain here: {missing}")
    cu = tmp_path / "grouped.cu"
    cu.write_text(codegen.generate(lower(two_comms(grouped=True), Build("nccl"))))
    assert build.compile_program(cu, "nccl", tmp_path / "bin").is_file()


def _model(body, world: int) -> Model:
    actors, _ = expand(cw.schedule(body, name="t").trace(world))
    matches, problems = match(actors.sched)
    assert not problems
    return Model(actors.sched, matches, home=actors.home)


def test_the_reduction_names_a_grouped_collective_by_its_joint_step_and_runs_ranks_past_it():
    """A frozen rank's current actions include its grouped collective's joint step (else the rank could
    move on a path that avoids the stubborn set), and a rank counts as able to pass a group whose
    collective every member's rank can reach (else a signal after the group looks unreachable, the wait
    on it never passes, and what the waiting rank does next is left out of the closure)."""
    def body(r):
        x = r.buffer("x", count=2, role="inout")
        z = r.buffer("z", count=2, role="scratch")
        sig = r.signal("sig", count=1)
        if r.rank == 1:
            r.wait_until(sig[0], "ge", 1)
            r.copy(z, x)
            return
        with r.group():
            r.all_reduce(x, comm=r.comm("a", (0, 2)))
        if r.rank == 0:
            r.signal_op(1, sig[0], 1, op="set")
    model = _model(body, 3)
    reducer = Reducer(model)
    reducer._index()
    assert reducer.action_of((0, 0, 0)) == Coll("coll", model.matches.cid_of[(0, 0, 0)])
    state = model.initial()
    assert reducer._current(state, 0) == [Coll("coll", 0)]
    # rank 0 passes its group and its signal, so rank 1's wait passes and it reaches its end
    assert reducer._limits(state, set(), set()) == [2, 2, 1]
    assert reducer._limits(state, {2}, set())[:2] == [0, 0]  # its peer frozen: rank 0 stops at the group


def test_no_action_is_alone_beside_a_group_member_that_touches_its_memory():
    """The other members of a group stay current and may run: a recv landing in x and an all-reduce of x
    in one group are never stubborn sets of their own."""
    def body(r):
        x = r.buffer("x", count=2, role="inout")
        y = r.buffer("y", count=2, role="inout")
        with r.group():
            r.all_reduce(x, comm=r.comm("a", range(r.world)))
            if r.rank == 0:
                r.send(1, y)
            else:
                r.recv(0, x)
    model = _model(body, 2)
    reducer = Reducer(model)
    state = model.apply(model.initial(), P2P("p2p", 0, 0, 1))  # the recv's data is in flight
    enabled = model.enabled(state)
    assert {a.kind for a in enabled} == {"coll", "deliver"}
    assert not any(reducer.alone(a) for a in enabled)
    assert check(cw.schedule(body, name="t").trace(2)).kinds() >= {"data_race"}
