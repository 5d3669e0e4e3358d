"""Soundness and precision, pinned: each case a user found, as a correct program that must verify
and its buggy twin that must not (issue: never a wrong "verified", never a false alarm)."""

from __future__ import annotations

from pathlib import Path

import pytest

import clockworks_dist as cw
from clockworks_dist.check import check
from clockworks_dist.semantics.match import match
from clockworks_dist.semantics.machine import Model
from clockworks_dist.report.text import render_verdict, render_violation

PROTOCOLS = Path(__file__).resolve().parents[1] / "protocols"
MASK64 = (1 << 64) - 1
CHUNK = cw.size("CHUNK", 4)


def kinds(result) -> set[str]:
    return {v.kind for v in result.violations if v.severity == "error"}


def trace(fn, world: int = 2, expect=None):
    return cw.schedule(fn, expect=expect).trace(world)


# -------------------------------------------------------------------- signal words wrap (uint64)
def _decrement_then_wait(second: int, cmp: str = "ge", value: int = 1):
    def decrement(r):
        flag = r.signal("flag")
        if r.rank == 0:
            r.signal_op(1, flag, 1, op="add")
            r.signal_op(1, flag, second, op="add")  # MASK64: a decrement, as DeepEP writes it
            r.quiet()
        else:
            r.wait_until(flag, cmp, value)
    return decrement


def test_a_decrement_may_make_a_ge_wait_false_again_so_the_reduction_keeps_the_order():
    sched = trace(_decrement_then_wait(MASK64))
    reduced, full = check(sched), check(sched, reduction=False)
    assert kinds(full) == {"deadlock"}
    assert kinds(reduced) == {"deadlock"}  # it said "verified" when adds were taken not to wrap
    assert Model(sched, match(sched)[0]).may_wrap == {(1, 0)}


def test_adds_that_cannot_wrap_still_commute_with_a_ge_wait():
    sched = trace(_decrement_then_wait(2))
    model = Model(sched, match(sched)[0])
    assert model.may_wrap == frozenset()
    wait = model.code[1][0]
    assert wait.footprint[0][4] == "sm"  # monotone: the reduction may reorder it with the adds
    reduced, full = check(sched), check(sched, reduction=False)
    assert reduced.verdict == full.verdict == "verified"
    assert reduced.states < full.states


def test_a_set_near_the_top_makes_a_small_add_wrap():
    def body(r):
        flag = r.signal("flag")
        if r.rank == 0:
            r.signal_op(1, flag, MASK64, op="set")
            r.signal_op(1, flag, 1, op="add")
            r.quiet()
        else:
            r.wait_until(flag, "gt", 0)

    sched = trace(body)
    assert Model(sched, match(sched)[0]).may_wrap == {(1, 0)}
    assert kinds(check(sched)) == kinds(check(sched, reduction=False))


def test_or_and_xor_leave_a_word_unproven():
    def body(r):
        flag = r.signal("flag")
        if r.rank == 0:
            r.atomic(1, flag, "or", 1)
            r.signal_op(1, flag, 1, op="add")
        r.barrier_all()

    sched = trace(body)
    assert Model(sched, match(sched)[0]).may_wrap == {(1, 0)}


def _two_decrements(awaited: int):
    """The architecture review's schedule: two adds of 2**64 - 1, and a wait for `awaited`."""
    def wrap(r):
        flag = r.signal("flag")
        if r.rank == 0:
            r.signal_op(1, flag, MASK64, op="add")
            r.signal_op(1, flag, MASK64, op="add")
            r.quiet()
        else:
            r.wait_until(flag, "eq", awaited)
    return wrap


def test_two_decrements_reach_the_wrapped_value_in_every_engine_of_the_checker():
    # the state search and the z3 wait check now agree
    result = check(trace(_two_decrements(MASK64 - 1)))
    assert result.verdict == "verified", [v.message for v in result.violations]
    # BUG in the twin: two decrements from 0 give 2**64 - 2, never 2**64 - 3
    result = check(trace(_two_decrements(MASK64 - 2)))
    assert kinds(result) == {"deadlock", "unsatisfiable_wait"}
    wait = next(v for v in result.violations if v.kind == "unsatisfiable_wait")
    assert "never exceeds" not in wait.message  # the sum wraps: no upper bound to quote


# --------------------------------------------------------------------- atomic fetch is a read
def _read_peer_counter(fetch: str):
    def body(r):
        counter = r.symmetric("counter", count=1, dtype="uint64", role="inout")
        seen = r.buffer("seen", count=1, dtype="uint64", role="scratch")
        r.barrier_all()
        peer = (r.rank + 1) % r.world
        if fetch == "fetch":
            r.atomic_fetch(peer, counter[0], seen[0])
        else:
            r.fetch_add(peer, counter[0], 1, seen[0])  # BUG (in the twin): changes the counter
        r.barrier_all()
    return body


def _unchanged(world: int):
    return cw.custom(lambda world: [cw.equals(r, "counter", 0, 1, (r, "counter", 0)) for r in range(world)],
                     label="counter unchanged")


def test_an_atomic_fetch_on_a_data_word_leaves_it_unchanged():
    result = check(trace(_read_peer_counter("fetch"), expect=_unchanged(2)))
    assert result.verdict == "verified", [v.message for v in result.violations]
    twin = check(trace(_read_peer_counter("fetch_add"), expect=_unchanged(2)))
    assert kinds(twin) == {"wrong_result"}


def _fetch_beside(local: str):
    def body(r):
        counter = r.symmetric("counter", count=1, dtype="uint64", role="inout")
        seen = r.buffer("seen", count=1, dtype="uint64", role="scratch")
        copy = r.symmetric("copy", count=1, dtype="uint64", role="scratch")
        if r.rank == 0:
            if local == "fetch":
                r.atomic_fetch(1, counter[0], seen[0])
            else:
                r.fetch_add(1, counter[0], 1, seen[0])  # BUG (in the twin): an atomic write
        else:
            r.copy(copy[0], counter[0])  # a plain load of the same word, unordered with rank 0
        r.barrier_all()
    return body


def test_an_atomic_fetch_beside_a_plain_load_is_not_a_race():
    result = check(trace(_fetch_beside("fetch")))
    assert result.verdict == "verified", [v.message for v in result.violations]
    twin = check(trace(_fetch_beside("fetch_add")))
    assert kinds(twin) == {"data_race"}
    assert "atomically updates counter[0:1]" in twin.violations[0].message


# ------------------------------------------------- a blocking put reads its source at issue
def _reuse_staging(nbi: bool):
    def body(r):
        dst = r.symmetric("dst", count=2 * CHUNK, role="output")
        stage = r.buffer("stage", count=CHUNK, role="scratch")
        peer = (r.rank + 1) % r.world
        r.fill(stage.all(), 1.0)
        r.put(peer, dst.region(0, CHUNK), stage.all(), nbi=nbi)
        r.fill(stage.all(), 2.0)  # BUG only with nbi: the source is read at delivery
        r.put(peer, dst.region(CHUNK, 2 * CHUNK), stage.all(), nbi=nbi)
        r.barrier_all()
    return body


def test_reusing_the_staging_buffer_after_a_blocking_put_verifies():
    result = check(trace(_reuse_staging(nbi=False)))
    assert result.verdict == "verified", [v.message for v in result.violations]


def test_reusing_it_after_an_nbi_put_is_one_race_not_also_a_size_report():
    for strategy in ("dfs", "bfs"):
        result = check(trace(_reuse_staging(nbi=True)), strategy=strategy)
        assert "data_race" in kinds(result)
        assert "symbolic_size" not in kinds(result), strategy


# ------------------------------------------------------------- one bug, one report
def _overlapping_puts(second_start):
    def body(r):
        x = r.symmetric("x", count=2 * CHUNK + 8, role="inout")
        y = r.buffer("y", count=CHUNK, role="scratch")
        if r.rank == 1:
            r.put(0, x.region(0, CHUNK), y)
            r.put(0, x.region(second_start(), second_start() + CHUNK), y)  # BUG: unordered deliveries
        r.barrier_all()
    return body


def test_an_overlap_at_the_traced_size_is_reported_once_as_a_race():
    sched = trace(_overlapping_puts(lambda: CHUNK - 1))  # overlaps at every CHUNK
    for strategy in ("dfs", "bfs"):
        for reduction in (True, False):
            result = check(sched, strategy=strategy, reduction=reduction)
            assert kinds(result) == {"data_race", "nondeterministic_result"}, (strategy, reduction)


def test_an_overlap_only_at_other_sizes_says_which_sizes_fail():
    result = check(trace(_overlapping_puts(lambda: 6)))  # disjoint while CHUNK <= 6
    [v] = [v for v in result.violations if v.kind == "symbolic_size"]
    assert kinds(result) == {"symbolic_size"}
    assert "overlap when CHUNK = 7" in v.message
    assert "it fails for every admissible CHUNK >= 7; the traced CHUNK = 4 is fine" in v.message


# ------------------------------------------------------------------------------- reports
def test_a_deadlock_without_a_cycle_prints_no_empty_cycle_line():
    result = check(trace(_decrement_then_wait(MASK64)))
    [v] = [v for v in result.violations if v.kind == "deadlock"]
    assert "cycle" not in v.details
    assert "cycle:" not in render_violation(v, 2)


def test_a_delivery_is_drawn_in_its_target_column():
    result = check(trace(_decrement_then_wait(MASK64)), strategy="bfs")
    [v] = [v for v in result.violations if v.kind == "deadlock"]
    lines = render_violation(v, 2).splitlines()
    rows = [[c.strip() for c in line.split("|")] for line in lines if line.strip()[:1].isdigit()]
    delivered = [row for row in rows if any("from rank 0" in cell for cell in row)]
    assert delivered and all(row[1] == "" and row[2].startswith("from rank 0: signal_op") for row in delivered)


# --------------------------------------------------------- one time bound for every phase
def test_the_timeout_bounds_every_phase_not_only_the_search():
    from clockworks_dist.semantics.budget import Deadline, OutOfTime
    from clockworks_dist.check.symbolic import check_sizes

    sched = cw.load_file(str(PROTOCOLS / "ring_allreduce.py"))[0].trace(64)
    result = check(sched, timeout=1e-9)  # already over when the first phase starts
    assert (result.verdict, result.complete, result.stopped_by) == ("incomplete", False, "timeout")
    assert result.stopped_in == "matching sends, receives and collectives" and result.states == 0
    assert "stopped by the timeout in matching sends, receives and collectives, before the search" \
        in render_verdict(result)
    with pytest.raises(OutOfTime):
        check_sizes(sched, deadline=Deadline(1e-9))
    # the 64-rank ring takes seconds to verify (scripts/results/bench_checker.md); half a second
    # of budget must come back promptly, whatever phase it ends in
    result = check(sched, timeout=0.5)
    assert result.verdict == "incomplete" and result.stopped_by == "timeout"
    assert result.seconds < 10


def test_a_local_kernel_whose_source_is_shifted_over_its_destination_is_rejected():
    from clockworks_dist.errors import ScheduleError

    def shifted(r):
        x = r.buffer("x", count=8, role="inout")
        r.copy(x.region(2, 6), x.region(0, 4))  # threads read what other threads write

    with pytest.raises(ScheduleError,
                       match=r"test_soundness.py:\d+: rank 0: copy: dst x\[2:6\] and src x\[0:4\] overlap"):
        trace(shifted)

    def in_place_and_apart(r):
        x = r.buffer("x", count=8, role="inout")
        r.reduce(x.region(0, 4), x.region(0, 4), x.region(4, 8))  # in place, and a disjoint source
        r.copy(x.region(4, 8), x.region(0, 4))

    assert check(trace(in_place_and_apart)).verdict == "verified"


def test_the_simulator_wraps_signal_adds_like_the_checker():
    from clockworks_dist.perf.network import from_topology
    from clockworks_dist.perf.predict import simulate
    from clockworks_dist.topology import load_topology

    sched = trace(_two_decrements(MASK64 - 1))
    assert check(sched).verdict == "verified"
    topo = load_topology("h200x2-nv18")
    # it reported a deadlock: its adds did not wrap
    timeline = simulate(sched, from_topology(topo, 2), topo.constants)
    assert timeline.total_us > 0 and {record.rank for record in timeline.records} == {0, 1}


def test_a_time_bound_is_a_number_of_seconds():
    from clockworks_dist.semantics.budget import Deadline

    sched = trace(_decrement_then_wait(2))
    assert check(sched, timeout=float("inf")).verdict == "verified"  # no bound, not an overflow
    assert Deadline(1e400).remaining() is None
    for bad in (float("nan"), -1.0):
        with pytest.raises(ValueError, match="non-negative number of seconds"):
            check(sched, timeout=bad)
