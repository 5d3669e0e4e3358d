"""NVSHMEM teams (`r.team_split_strided`, `team_sync`, `team_barrier`, the team collectives): what a
split makes, how team ops match (per team, NVSHMEM_TEAM_WORLD apart from NCCL's world), what a team
barrier completes (its members' deliveries, no one else's), the DSL's refusals at the user's line,
the JSON round trip, and the engines that refuse teams with the reason."""

from __future__ import annotations

import inspect
import os

import pytest

import clockworks_dist as cw
from clockworks_dist import ir
from clockworks_dist.check import check
from clockworks_dist.errors import ScheduleError
from clockworks_dist.semantics.backends import BACKENDS, Unsupported

HERE = os.path.basename(__file__)


def line_of(fn, marker: str = "# HERE") -> int:
    lines, first = inspect.getsourcelines(fn)
    return next(first + i for i, text in enumerate(lines) if marker in text)


def trace(body, world: int = 2, expect=None) -> ir.Schedule:
    return cw.schedule(body, name="t", expect=expect).trace(world)


# ------------------------------------------------------------------------------ what a split makes
def test_a_split_of_a_split_takes_indices_in_the_parent_and_gives_none_to_the_others():
    seen = {}

    def body(r):
        evens = r.team_split_strided("evens", start=0, stride=2, size=3)  # world ranks 0, 2, 4
        inner = r.team_split_strided("inner", start=1, stride=1, size=2, parent=evens) if evens else None
        seen[r.rank] = (evens.ranks if evens else None, inner.ranks if inner else None)
        if inner is not None:
            r.team_sync(inner)

    sched = trace(body, world=6)
    assert seen == {0: ((0, 2, 4), None), 1: (None, None), 2: ((0, 2, 4), (2, 4)), 3: (None, None),
                    4: ((0, 2, 4), (2, 4)), 5: (None, None)}
    team = sched.comm("inner")
    assert team.team == ir.TeamOf(parent="evens", start=1, stride=1, size=2)
    assert team.members(2) == (2, 4)
    splits = [op for op in sched.programs[1].ops if op.kind == "team_split"]
    assert [(op.team, op.comm) for op in splits] == [("evens", "world")]  # rank 1 is in no parent of inner
    assert check(sched).verdict == "verified"


def test_json_round_trips_a_schedule_with_teams():
    def body(r):
        x = r.symmetric("x", count=2, role="inout")
        pair = r.team_split_strided("pair", start=0, stride=1, size=2)
        r.team_reduce(pair, x, x)
        r.team_barrier(pair)

    sched = trace(body)
    assert ir.Schedule.from_json(sched.to_json()) == sched


# --------------------------------------------------------------------------------------- matching
def test_a_parent_member_outside_the_new_team_that_never_splits_is_named():
    def body(r):
        if r.rank != 2:
            r.team_split_strided("pair", start=0, stride=1, size=2)  # HERE

    result = check(trace(body, world=3))
    found = [v for v in result.violations if v.kind == "collective_mismatch"]
    assert found and "never by rank(s) 2" in found[0].message
    assert found[0].ops[0].loc.line == line_of(body)


def test_a_member_of_the_new_team_that_never_splits_is_refused_at_the_split():
    def body(r):
        if r.rank == 0:
            r.team_split_strided("pair", start=0, stride=1, size=2)  # HERE

    with pytest.raises(ScheduleError) as info:
        trace(body)
    assert (info.value.file, info.value.line) == (HERE, line_of(body))
    assert "rank 1 is one of its members [0, 1] but never calls team_split_strided(pair" in str(info.value)


def test_team_ops_and_nccl_collectives_are_two_orders_that_block_each_other():
    def body(r):
        x = r.buffer("x", count=1, role="inout")
        if r.rank == 0:
            r.all_reduce(x)
            r.team_split_strided("pair", start=0, stride=1, size=2)
        else:
            r.team_split_strided("pair", start=0, stride=1, size=2)  # HERE
            r.all_reduce(x)

    # NCCL's world communicator and NVSHMEM_TEAM_WORLD match apart (no mismatch), and both block
    result = check(trace(body))
    assert "collective_mismatch" not in result.kinds()
    found = [v for v in result.violations if v.kind == "deadlock"]
    assert found and "team_split_strided(pair" in found[0].message and "all_reduce" in found[0].message

    def swapped(r):
        if r.rank == 0:
            r.barrier_all()
            r.team_split_strided("pair", start=0, stride=1, size=2)
        else:
            r.team_split_strided("pair", start=0, stride=1, size=2)  # HERE
            r.barrier_all()

    result = check(trace(swapped))
    found = [v for v in result.violations if v.kind == "collective_mismatch"]
    assert found and "NVSHMEM world team" in found[0].message
    assert any(o.loc.line == line_of(swapped) for o in found[0].ops)


def test_different_arguments_to_a_split_are_a_mismatch_naming_both_lines():
    def body(r):
        size = 2 if r.rank == 0 else 1  # HERE
        r.team_split_strided("pair", start=0, stride=1, size=size)

    with pytest.raises(ScheduleError):  # the members disagree on who is in the team: refused at trace time
        trace(body)

    def stride(r):
        if r.rank == 0:
            r.team_split_strided("solo", start=0, stride=1, size=1)
        else:
            r.team_split_strided("solo", start=0, stride=2, size=1)
    result = check(trace(stride))
    found = [v for v in result.violations if v.kind == "collective_mismatch"]
    assert found and "differs in stride" in found[0].message
    assert {o.rank for o in found[0].ops} == {0, 1}


# ------------------------------------------------------------------- what a team barrier completes
def members_put_then(finish: str):
    """World 3, team {0, 1}: rank 1 (a member) puts into rank 0, then the team meets and rank 0 reads
    what landed."""
    def body(r):
        box = r.symmetric("box", count=1, role="scratch")
        out = r.buffer("out", count=1, role="output")
        src = r.buffer("src", count=1, role="input")
        pair = r.team_split_strided("pair", start=0, stride=1, size=2)
        if pair is None:
            return
        if r.rank == 1:
            r.put(0, box, src)
        getattr(r, finish)(pair)
        if r.rank == 0:
            r.copy(out, box)  # HERE
    return body


def test_a_team_barrier_completes_the_members_puts():
    result = check(trace(members_put_then("team_barrier"), world=3))
    assert result.verdict == "verified", [v.message for v in result.violations]


def test_a_team_sync_completes_no_put():
    body = members_put_then("team_sync")
    result = check(trace(body, world=3))
    races = [v for v in result.violations if v.kind == "data_race"]
    assert races and any(o.loc.line == line_of(body) for o in races[0].ops)


def test_a_team_barrier_does_not_wait_for_a_put_from_outside_the_team():
    def body(r):
        box = r.symmetric("box", count=1, role="scratch")
        out = r.buffer("out", count=1, role="output")
        src = r.buffer("src", count=1, role="input")
        pair = r.team_split_strided("pair", start=0, stride=1, size=2)
        if r.rank == 2:
            r.put(0, box, src)  # rank 2 is outside the team: its put may still be in flight
            return
        r.team_barrier(pair)
        if r.rank == 0:
            r.copy(out, box)  # HERE

    for reduction in (True, False):
        result = check(trace(body, world=3), reduction=reduction)
        races = [v for v in result.violations if v.kind == "data_race"]
        assert races, (reduction, sorted(result.kinds()))
        assert any(o.loc.line == line_of(body) for o in races[0].ops)


# ------------------------------------------------------------------------------ the DSL's refusals
@pytest.mark.parametrize("case,fragment", [
    ("none", "NVSHMEM_TEAM_INVALID"),
    ("nccl", "is an NVSHMEM team, not an NCCL communicator"),
    ("triplet", "its last member has index 2 in a parent of 2 members"),
    ("twice", "names a team or communicator already"),
    ("per_rank", "in a per-rank buffer"),
])
def test_the_dsl_refuses_at_the_users_line(case, fragment):
    def body(r):
        x = r.symmetric("x", count=2, role="inout")
        y = r.buffer("y", count=2, role="inout")
        solo = r.team_split_strided("solo", start=0, stride=1, size=1)
        if case == "none":
            r.team_sync(solo)  # HERE none
        elif case == "nccl":
            r.all_reduce(x, comm=solo)  # HERE nccl
        elif case == "triplet":
            r.team_split_strided("bad", start=0, stride=2, size=2)  # HERE triplet
        elif case == "twice":
            r.team_split_strided("solo", start=1, stride=1, size=1)  # HERE twice
        elif solo is not None:
            r.team_reduce(solo, y, y)  # HERE per_rank

    with pytest.raises(ScheduleError) as info:
        trace(body)
    assert (info.value.file, info.value.line) == (HERE, line_of(body, f"# HERE {case}")), str(info.value)
    assert fragment in str(info.value)


# ------------------------------------------------------------------------------------- the engines
@pytest.mark.parametrize("name", ["nccl-codegen", "cupy"])
@pytest.mark.parametrize("cls", [ir.TeamSplit, ir.TeamBarrier])
def test_engines_without_teams_refuse_them_with_the_reason(name, cls):
    import clockworks_dist.codegen.nccl  # noqa: F401  (backends register when their module loads)
    import clockworks_dist.codegen.nvshmem  # noqa: F401
    import clockworks_dist.runtime.cupy_nccl  # noqa: F401

    backend = BACKENDS[name]
    op = cls(loc=ir.SourceLoc(file="f.py", line=3), comm="pair", **(
        dict(team="t", start=0, stride=1, size=1) if cls is ir.TeamSplit else {}))
    with pytest.raises(Unsupported, match="f.py:3") as info:
        backend.lookup(op)
    assert "team" in str(info.value).lower()
    if name == "nccl-codegen":  # it names the backend that generates teams
        assert "--backend nvshmem" in str(info.value)


def test_mpi_cpu_runs_team_ops():
    from clockworks_dist.runtime import mpi_cpu

    assert mpi_cpu.MPI_CPU.table[ir.TeamSplit] is mpi_cpu.team_split
    assert mpi_cpu.MPI_CPU.table[ir.TeamBarrier] is mpi_cpu.team_barrier
