"""Unit tests of the checker's parts on tiny hand-written schedules: static matching, atoms and
symbolic values, the transition model's semantics (through `check` and `terminal_outcomes`), the
messages of deadlocks and wrong results, `happens_before` and `expected_values`."""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import pytest

import clockworks_dist as cw
from clockworks_dist import ir, load_file
from clockworks_dist.check import check, expected_values, happens_before, terminal_outcomes
from clockworks_dist.semantics.match import match
from clockworks_dist.semantics.machine import Model
from clockworks_dist.semantics.atoms import collect_alignments, split_atoms
from clockworks_dist.semantics.values import Values

ROOT = Path(__file__).resolve().parent.parent
HERE = os.path.basename(__file__)


def line_of(fn, marker: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    found = [first + i for i, text in enumerate(lines) if marker in text]
    assert len(found) == 1, f"{marker!r} marks {len(found)} lines"
    return found[0]


def trace(fn, world: int = 2, expect=None) -> ir.Schedule:
    return cw.schedule(fn, expect=expect).trace(world)


def one(result, kind: str):
    found = [v for v in result.violations if v.kind == kind]
    assert found, f"no {kind}; got {sorted(result.kinds())}"
    return found[0]


def finals(sched: ir.Schedule, rank: int, buffer: str) -> set[tuple[str, ...]]:
    """The final values of `buffer` on `rank` (one string per atom) over every terminal state."""
    model = Model(sched, match(sched)[0])
    lo, hi = model.layout.span(rank, ir.Region(buffer=buffer, start=0, stop=sched.programs[rank].buffer(buffer).count))
    out = set()
    for done, _pcs, values, _sigs in terminal_outcomes(sched):
        assert done
        out.add(values[rank][lo:hi])
    return out


def signals_at_end(sched: ir.Schedule) -> set[tuple]:
    return {sigs for _done, _pcs, _values, sigs in terminal_outcomes(sched)}


# --------------------------------------------------------------------------------- match.py
def test_p2p_matches_first_in_first_out_per_pair():
    def sched(r):
        x = r.buffer("x", 4)
        if r.rank == 0:
            r.send(1, x.region(0, 1))
            r.send(2, x.region(0, 3))
            r.send(1, x.region(1, 3))
        elif r.rank == 1:
            r.recv(0, x.region(3, 4))
            r.recv(0, x.region(0, 2))
        else:
            r.recv(0, x.region(1, 4))
    matches, problems = match(trace(sched, world=3))
    assert problems == []
    assert matches.recv_of == {(0, 0, None): (1, 0, None), (0, 2, None): (1, 1, None), (0, 1, None): (2, 0, None)}
    assert matches.send_of == {v: k for k, v in matches.recv_of.items()}


def test_group_members_match_by_their_own_keys():
    def sched(r):
        x = r.buffer("x", 2)
        y = r.buffer("y", 2)
        with r.group():
            r.send(1 - r.rank, x)
            r.recv(1 - r.rank, y)
    matches, problems = match(trace(sched))
    assert problems == []
    assert matches.recv_of == {(0, 0, 0): (1, 0, 1), (1, 0, 0): (0, 0, 1)}


def test_p2p_size_and_dtype_mismatch_messages():
    def sched(r):
        x = r.buffer("x", 2)
        i = r.buffer("i", 2, dtype="int32")
        if r.rank == 0:
            r.send(1, x)  # SEND1
            r.send(1, x)
        else:
            r.recv(0, x.region(0, 1))  # RECV1
            r.recv(0, i)
    s = trace(sched)
    result = check(s)
    assert result.verdict == "violated" and result.states == 0 and result.complete
    size, dtype = result.violations
    assert size.kind == dtype.kind == "send_recv_mismatch"
    assert size.message.startswith("the 1st send from rank 0 to rank 1 has 2 elements but the matching recv expects 1")
    assert [(o.rank, o.loc.line) for o in size.ops] == [(0, line_of(sched, "# SEND1")), (1, line_of(sched, "# RECV1"))]
    assert dtype.message.startswith("the 2nd send from rank 0 to rank 1 is float32 but the matching recv is int32")


def test_never_matched_send_and_recv():
    def sched(r):
        x = r.buffer("x", 2)
        if r.rank == 0:
            r.send(1, x)
            r.send(1, x)  # EXTRA
        elif r.rank == 1:
            r.recv(0, x)
            r.recv(2, x)  # NOBODY
    result = check(trace(sched, world=3))
    messages = [v.message for v in result.violations]
    assert "rank 0 sends 2 message(s) to rank 1 on world, but rank 1 posts only 1 recv(s) from rank 0: " \
           "this send is never matched" in messages
    assert "rank 1 posts 1 recv(s) from rank 2 on world, but rank 2 sends only 0: " \
           "this recv is never matched" in messages
    lines = {v.ops[0].loc.line for v in result.violations}
    assert lines == {line_of(sched, "# EXTRA"), line_of(sched, "# NOBODY")}


def test_communicators_are_separate_channels():
    def sched(r):
        x = r.buffer("x", 2)
        pair = r.comm("pair", [0, 1])
        if r.rank == 0:
            r.send(1, x, comm=pair)
        else:
            r.recv(0, x)
    result = check(trace(sched))
    assert {v.message.split(":")[0] for v in result.violations} == {
        "rank 0 sends 1 message(s) to rank 1 on pair, but rank 1 posts only 0 recv(s) from rank 0",
        "rank 1 posts 1 recv(s) from rank 0 on world, but rank 0 sends only 0"}


@pytest.mark.parametrize("field, other, fragment", [
    ("kind", lambda r, x: r.broadcast(x, root=0), "differs in kind: rank 0 calls all_reduce"),
    ("count", lambda r, x: r.all_reduce(x.region(0, 2)), "differs in count"),
    ("op", lambda r, x: r.all_reduce(x, op="max"), "differs in op"),
    ("root", lambda r, x: r.broadcast(x, root=1), "differs in root"),
])
def test_collective_mismatch(field, other, fragment):
    def sched(r):
        x = r.buffer("x", 4)
        if r.rank == 2:
            other(r, x)
        elif field == "root":
            r.broadcast(x, root=0)
        else:
            r.all_reduce(x)
    result = check(trace(sched, world=3))
    (violation,) = result.violations
    assert violation.kind == "collective_mismatch"
    assert violation.message.startswith("the 1st collective on communicator world " + fragment), violation.message
    assert violation.ranks == (0, 2)
    assert "every member must call the same collectives in the same order" in violation.message


def test_missing_collective():
    def sched(r):
        x = r.buffer("x", 2)
        r.all_reduce(x)
        if r.rank != 1:
            r.barrier()  # ONLY_SOME
    result = check(trace(sched, world=3))
    (violation,) = result.violations
    assert violation.kind == "collective_mismatch"
    assert violation.message == ("the 2nd collective on communicator world (barrier(world)) is reached by rank(s) "
                                 "0, 2 but never by rank(s) 1")
    assert {o.loc.line for o in violation.ops} == {line_of(sched, "# ONLY_SOME")}


def test_barrier_all_and_sync_all_match_on_the_nvshmem_team():
    def sched(r):
        if r.rank == 0:
            r.barrier_all()
        else:
            r.sync_all()
    (violation,) = check(trace(sched)).violations
    assert "the NVSHMEM world team differs in kind" in violation.message


# -------------------------------------------------------------------------------- values.py
def test_atoms_split_through_transfers():
    bounds = {"a": {0, 1, 4}, "b": {0, 4}, "c": {0, 4, 8}}
    transfers = [("a", 0, "b", 0, 4), ("b", 0, "c", 4, 4)]  # a -> b, b -> second half of c
    assert split_atoms(bounds, transfers) == {"a": [0, 1, 4], "b": [0, 1, 4], "c": [0, 4, 5, 8]}


def test_atoms_split_backwards_and_through_p2p():
    def sched(r):
        x = r.buffer("x", 4)
        y = r.buffer("y", 4)
        if r.rank == 0:
            r.copy(y.region(0, 2), x.region(2, 4))
            r.send(1, y)
        else:
            r.recv(0, x)
            r.fill(x.region(0, 1), 0.0)
    s = trace(sched)
    matches, _ = match(s)
    bounds, transfers = collect_alignments(s, matches)
    assert bounds == {"x": {0, 1, 2, 4}, "y": {0, 2, 4}}
    assert sorted(transfers) == [("x", 2, "y", 0, 2), ("y", 0, "x", 0, 4)]
    # x:1 (fill) -> y:1 (recv) -> x:3 (copy) -> y:3 (recv)
    assert split_atoms(bounds, transfers) == {"x": [0, 1, 2, 3, 4], "y": [0, 1, 2, 3, 4]}
    model = Model(s, matches)
    assert model.layout.atom_names[0][:4] == (("x", 0, 1), ("x", 1, 2), ("x", 2, 3), ("x", 3, 4))
    assert len(model.layout.atom_names[1]) == 8  # buffers of one name share one partition on every rank


def test_normal_form_flattens_and_sorts_sums():
    values = Values()
    a, b, c = (values.initial(r, "x", 0, 1) for r in range(3))
    left = values.combine("sum", (a, b, c))  # (a + b) + c, operands of each node in canonical order
    assert values.render(left) == "(x@r2[0:1] + (x@r0[0:1] + x@r1[0:1]))"
    other = values.combine("sum", (c, values.combine("sum", (b, a))))  # c + (b + a)
    assert values.normal(left) == values.normal(other)
    assert values.render_normal(values.normal(other)) == "x@r0[0:1] + x@r1[0:1] + x@r2[0:1]"
    doubled = values.combine("sum", (a, a, b))
    assert values.render_normal(values.normal(doubled)) == "x@r0[0:1] + x@r0[0:1] + x@r1[0:1]"
    mixed = values.combine("max", (a, values.combine("sum", (b, c))))  # a different op is not flattened
    assert values.normal(mixed) != values.normal(values.combine("max", (a, b, c)))
    assert values.render_normal(values.normal(mixed)) == "max(x@r0[0:1], x@r1[0:1] + x@r2[0:1])"


def test_combine_is_binary_left_nested_with_canonical_operands():
    values = Values()
    a, b, c = (values.initial(r, "x", 0, 1) for r in range(3))
    assert values.combine("sum", (a, b)) == values.combine("sum", (b, a))  # IEEE addition commutes
    left = values.combine("sum", (values.combine("sum", (a, b)), c))
    right = values.combine("sum", (a, values.combine("sum", (b, c))))
    assert left != right  # but does not associate: the trees differ ...
    assert values.normal(left) == values.normal(right)  # ... the multisets agree
    assert values.combine("sum", (a, b, c)) == left
    assert values.terms[left][0] == "op" and len(values.terms[left][2]) == 2
    assert values.combine("sum", (a,)) == a


# ---------------------------------------------------------------------------- model semantics
def test_rendezvous_sends_deadlock_unless_grouped():
    def blocking(r):
        x = r.buffer("x", 2)
        y = r.buffer("y", 2)
        r.send(1 - r.rank, x)  # SEND
        r.recv(1 - r.rank, y)
    result = check(trace(blocking))
    assert result.verdict == "violated" and result.kinds() == {"deadlock"}
    deadlock = one(result, "deadlock")
    line = line_of(blocking, "# SEND")
    assert deadlock.message.startswith("deadlock: wait-for cycle 0 -> 1 -> 0; ")
    for rank in (0, 1):
        assert (f"rank {rank} blocks in send(peer={1 - rank}, x[0:2]) at {HERE}:{line} waiting for rank(s) {1 - rank}"
                in deadlock.message)
    assert deadlock.details["cycle"] == [0, 1]
    assert [(o.rank, o.loc.line) for o in deadlock.ops] == [(0, line), (1, line)]

    def grouped(r):
        x = r.buffer("x", 2)
        y = r.buffer("y", 2)
        with r.group():
            r.send(1 - r.rank, x)
            r.recv(1 - r.rank, y)
    assert check(trace(grouped)).verdict == "verified"
    assert finals(trace(grouped), 0, "y") == {("x@r1[0:2]",)}


def test_deadlock_terminal_states_are_outcomes():
    def sched(r):
        x = r.buffer("x", 2)
        r.recv(1 - r.rank, x)
        r.send(1 - r.rank, x)
    (outcome,) = terminal_outcomes(trace(sched))
    done, pcs, _values, _sigs = outcome
    assert not done and pcs == (0, 0)


def test_blocking_put_reads_src_at_issue_nbi_at_delivery():
    def make(nbi: bool):
        def sched(r):
            x = r.buffer("x", 2)
            s = r.symmetric("s", 2)
            if r.rank == 0:
                r.put(1, s, x, nbi=nbi)  # PUT
                r.fill(x, 7.0)  # OVERWRITE
            r.barrier_all()
        return sched

    blocking = trace(make(False))
    assert check(blocking).verdict == "verified"
    assert finals(blocking, 1, "s") == {("x@r0[0:2]",)}

    nbi_fn = make(True)
    nbi = trace(nbi_fn)
    result = check(nbi)
    race = one(result, "data_race")
    lines = {line_of(nbi_fn, "# PUT"), line_of(nbi_fn, "# OVERWRITE")}
    assert {(o.rank, o.loc.line) for o in race.ops} == {(0, line) for line in lines}
    assert "data race on rank 0's x[0:2]" in race.message
    assert finals(nbi, 1, "s") == {("x@r0[0:2]",), ("7",)}


def _fenced(fence: bool, second_pe: int):
    def sched(r):
        x = r.buffer("x", 1)
        out = r.buffer("out", 1, role="output")
        s = r.symmetric("s", 1)
        flag = r.signal("flag")
        if r.rank == 0:
            r.put(1, s, x)
            if fence:
                r.fence()
            r.signal_op(second_pe, flag, 1)
        elif r.rank == second_pe:
            r.wait_until(flag, "ge", 1)
            r.get(1, out, s)  # READ
        r.barrier_all()
    return sched


def test_fence_orders_deliveries_to_the_same_pe():
    result = check(trace(_fenced(True, 1), world=3))
    assert result.verdict == "verified", [v.message for v in result.violations]
    assert finals(trace(_fenced(True, 1), world=3), 1, "out") == {("x@r0[0:1]",)}
    unfenced = check(trace(_fenced(False, 1), world=3))
    assert "data_race" in unfenced.kinds()


def test_fence_does_not_order_deliveries_to_different_pes():
    fn = _fenced(True, 2)
    result = check(trace(fn, world=3))
    race = one(result, "data_race")
    assert "data race on rank 1's s[0:1]" in race.message
    assert (2, line_of(fn, "# READ")) in {(o.rank, o.loc.line) for o in race.ops}
    assert finals(trace(fn, world=3), 2, "out") == {("s@r1[0:1]",), ("x@r0[0:1]",)}


def test_quiet_waits_for_this_pes_deliveries_only():
    def own(r):
        x = r.buffer("x", 1)
        s = r.symmetric("s", 1)
        flag = r.signal("flag")
        if r.rank == 0:
            r.put(1, s, x)
            r.quiet()
            r.signal_op(2, flag, 1)  # to another PE: only quiet orders it after the put
        if r.rank == 2:
            r.wait_until(flag, "ge", 1)
            r.get(1, x, s)
        r.barrier_all()
    assert check(trace(own, world=3)).verdict == "verified"

    def others(r):
        x = r.buffer("x", 1)
        s = r.symmetric("s", 1)
        if r.rank == 0:
            r.put(1, s, x)
        if r.rank == 1:
            r.quiet()  # completes rank 1's deliveries, not rank 0's
            r.copy(x, s)
        r.barrier_all()
    assert "data_race" in check(trace(others)).kinds()


@pytest.mark.parametrize("meet, racy", [("barrier_all", False), ("sync_all", True)])
def test_barrier_all_completes_deliveries_sync_all_does_not(meet, racy):
    def sched(r):
        x = r.buffer("x", 1)
        s = r.symmetric("s", 1)
        if r.rank == 0:
            r.put(1, s, x)
        getattr(r, meet)()
        if r.rank == 1:
            r.copy(x, s)
        r.barrier_all()
    result = check(trace(sched))
    assert ("data_race" in result.kinds()) is racy
    assert result.verdict == ("violated" if racy else "verified")


def test_put_signal_delivers_data_before_the_signal():
    def sched(r):
        x = r.buffer("x", 2)
        out = r.buffer("out", 2, role="output")
        s = r.symmetric("s", 2)
        flag = r.signal("flag")
        if r.rank == 0:
            r.put_signal(1, s, x, flag, value=1, op="add")
        else:
            r.wait_until(flag, "ge", 1)
            r.copy(out, s)
        r.barrier_all()
    s = trace(sched)
    assert check(s).verdict == "verified"
    assert finals(s, 1, "out") == {("x@r0[0:2]",)}
    assert signals_at_end(s) == {((0,), (1,))}


def test_put_signal_implies_its_own_data_only():
    def sched(r):
        x = r.buffer("x", 2)
        out = r.buffer("out", 2, role="output")
        s = r.symmetric("s", 2)
        flag = r.signal("flag")
        if r.rank == 0:
            r.put(1, s.region(0, 1), x.region(0, 1))  # EARLIER
            r.put_signal(1, s.region(1, 2), x.region(1, 2), flag, value=1)
        else:
            r.wait_until(flag, "eq", 1)
            r.copy(out, s)
        r.barrier_all()
    result = check(trace(sched))
    race = one(result, "data_race")
    assert "rank 1's s[0:1]" in race.message
    assert (0, line_of(sched, "# EARLIER")) in {(o.rank, o.loc.line) for o in race.ops}


def test_fetch_add_returns_old_values():
    def sched(r):
        tick = r.buffer("tick", 1, dtype="uint64", role="output")
        counter = r.signal("counter")
        if r.rank > 0:
            r.fetch_add(0, counter, r.rank * 10, tick)
        r.barrier_all()
    s = trace(sched, world=3)
    outcomes = terminal_outcomes(s)
    assert len(outcomes) == 2
    ticks = {(values[1][0], values[2][0]) for _done, _pcs, values, _sigs in outcomes}
    assert ticks == {("0", "10"), ("20", "0")}
    assert {sigs[0] for *_rest, sigs in outcomes} == {(30,)}
    assert "nondeterministic_result" in check(s).kinds()


def test_compare_swap_has_one_winner():
    def sched(r):
        old = r.buffer("old", 1, dtype="uint64", role="output")
        lock = r.signal("lock")
        if r.rank > 0:
            r.compare_swap(0, lock, cond=0, value=r.rank, into=old)
        r.barrier_all()
    outcomes = terminal_outcomes(trace(sched, world=3))
    seen = {(sigs[0][0], values[1][0], values[2][0]) for _done, _pcs, values, sigs in outcomes}
    assert seen == {(1, "0", "1"), (2, "2", "0")}


def test_atomic_adds_from_different_pes_commute():
    def sched(r):
        counter = r.symmetric("counter", 1, dtype="int64", role="output")
        if r.rank > 0:
            r.atomic_add(0, counter.element(0), r.rank)
        r.barrier_all()
    s = trace(sched, world=3)
    assert check(s).verdict == "verified"
    assert check(s, reduction=False).verdict == "verified"
    assert len(finals(s, 0, "counter")) == 1
    assert terminal_outcomes(s, reduction=True) == terminal_outcomes(s, reduction=False)


def test_get_reads_the_remote_value_at_that_moment():
    def sched(r):
        x = r.buffer("x", 1)
        s = r.symmetric("s", 1)
        if r.rank == 1:
            r.fill(s, 5.0)
        r.barrier_all()
        if r.rank == 0:
            r.get(1, x, s)
        r.barrier_all()
    s = trace(sched)
    assert check(s).verdict == "verified"
    assert finals(s, 0, "x") == {("5",)}


@pytest.mark.parametrize("cmp, value, can_deadlock", [
    ("eq", 3, False), ("ne", 0, False), ("gt", 2, False), ("ge", 3, False), ("le", 3, False),
    ("eq", 4, True), ("gt", 3, True),
    ("lt", 1, True),  # holds at first, but not once the set has landed
])
def test_wait_until_comparators(cmp, value, can_deadlock):
    def sched(r):
        flag = r.signal("flag")
        if r.rank == 0:
            r.signal_op(1, flag, 3, op="set")
        else:
            r.wait_until(flag, cmp, value)
        r.barrier_all()
    s = trace(sched)
    result = check(s)
    assert ("deadlock" in result.kinds()) is can_deadlock
    finished = {done for done, *_ in terminal_outcomes(s)}
    assert finished == ({True, False} if cmp == "lt" else {not can_deadlock})


def test_deadlock_on_a_wait_names_the_signal():
    def sched(r):
        flag = r.signal("flag")
        if r.rank == 1:
            r.wait_until(flag, "ge", 2)  # WAIT
        else:
            r.signal_op(1, flag, 1, op="add")
    deadlock = one(check(trace(sched)), "deadlock")
    assert f"rank 1 blocks in wait_until(flag[0] ge 2) at {HERE}:{line_of(sched, '# WAIT')}" in deadlock.message
    assert "flag[0] is 1, and no rank can still change it" in deadlock.message


def test_wrong_result_shows_expected_actual_and_double_counting():
    def sched(r):
        x = r.buffer("x", 2)
        tmp = r.buffer("tmp", 2, role="scratch")
        with r.group():
            r.send(1 - r.rank, x)
            r.recv(1 - r.rank, tmp)
        r.reduce(x, x, tmp, x)  # SUM
    result = check(trace(sched, expect=cw.allreduce("x")))
    assert result.verdict == "violated"
    wrong = one(result, "wrong_result")
    assert wrong.message.startswith(
        "wrong result: x[0:2] on rank 0 = x@r0[0:2] + x@r0[0:2] + x@r1[0:2], expected x@r0[0:2] + x@r1[0:2] "
        "(x@r0[0:2] counted 2 times)"), wrong.message
    assert f"last written by {HERE}:{line_of(sched, '# SUM')} rank 0" in wrong.message
    assert wrong.message.endswith("[allreduce('x')]")
    assert wrong.details["expected"] == "x@r0[0:2] + x@r1[0:2]"


def test_wrong_result_names_a_missing_term():
    def sched(r):
        r.buffer("x", 1)
        r.barrier()
    wrong = one(check(trace(sched, expect=cw.allreduce("x"))), "wrong_result")
    assert "x[0:1] on rank 0 = x@r0[0:1], expected x@r0[0:1] + x@r1[0:1] (x@r1[0:1] missing)" in wrong.message


def test_run_to_run_association_is_reported_whatever_the_search_order():
    """Three racing puts leave (a0 + a1) + a2, a0 + (a1 + a2) or a0 in s: two executions hold the same
    terms associated differently, whichever terminal state the search happens to reach first."""
    def sched(r):
        a = r.buffer("a", 3, role="input")
        t = r.buffer("t", 3, role="scratch")
        s = r.symmetric("s", 1, role="output")
        if r.rank == 0:
            r.reduce(t[0], a[0], a[1])
            r.reduce(t[0], t[0], a[2])
            r.reduce(t[1], a[1], a[2])
            r.reduce(t[1], a[0], t[1])
            r.put(1, s, t[0])
            r.put(1, s, t[1])
            r.put(1, s, a[0])
            r.quiet()
        r.barrier_all()
    s = trace(sched)
    assert len(finals(s, 1, "s")) == 3
    for strategy in ("dfs", "bfs"):
        for reduction in (True, False):
            kinds = check(s, strategy=strategy, reduction=reduction).kinds()
            assert kinds == {"data_race", "nondeterministic_result", "not_bitwise_reproducible"}, (strategy, reduction)


# ----------------------------------------------------------------- happens_before, expected
def _ring():
    (ring,) = load_file(str(ROOT / "protocols" / "ring_allreduce.py"))
    return ring.trace(4)


def test_happens_before_orders_a_ranks_ops():
    hb = happens_before(_ring())
    for rank in range(4):
        # the step-0 group (send and recv) happens before the reduce that follows it
        assert hb.ordered((rank, 0, 0), (rank, 1, None))
        assert hb.ordered((rank, 0, 1), (rank, 1, None))
        assert hb.ordered((rank, 1, None), (rank, 2, 0))
        assert not hb.ordered((rank, 1, None), (rank, 0, 0))
        assert hb.ordered((rank, 0, 0), (rank, 8, 1))  # ... and before the last step


def test_happens_before_leaves_sends_of_one_step_unordered():
    hb = happens_before(_ring())
    unordered = {(a, b) for a in range(4) for b in range(4) if a < b and hb.unordered((a, 0, 0), (b, 0, 0))}
    assert unordered == {(a, b) for a in range(4) for b in range(4) if a < b}


def test_expected_values_of_allreduce():
    def sched(r):
        x = r.buffer("x", 4)
        r.all_reduce(x)
    s = trace(sched, expect=cw.allreduce("x"))
    assert expected_values(s) == {(rank, "x", 0, 4): "x@r0[0:4] + x@r1[0:4]" for rank in range(2)}

    def split(r):
        x = r.buffer("x", 4)
        r.all_reduce(x.region(0, 1))
        r.all_reduce(x.region(1, 4))
    expected = expected_values(trace(split, expect=cw.allreduce("x")))
    assert expected == {(rank, "x", lo, hi): f"x@r0[{lo}:{hi}] + x@r1[{lo}:{hi}]"
                        for rank in range(2) for lo, hi in ((0, 1), (1, 4))}


# ------------------------------------------------- the APIs that need one execution: bad input
def test_the_execution_apis_name_the_users_line_for_a_mismatch_a_deadlock_and_a_bound():
    from clockworks_dist.errors import CheckIncomplete, ScheduleError

    def lonely(r):
        x = r.buffer("x", 4)
        if r.rank == 1:
            r.recv(0, x)  # never matched

    sched = cw.schedule(lonely).trace(2)
    for api in (expected_values, happens_before, terminal_outcomes):
        with pytest.raises(ScheduleError) as caught:
            api(sched)
        assert (caught.value.file, caught.value.rank) == (HERE, 1) and "never matched" in str(caught.value)
    buggy = load_file(str(ROOT / "protocols" / "buggy" / "ring_allreduce_no_group.py"))[0].trace(2)
    with pytest.raises(ScheduleError, match=r"ring_allreduce_no_group.py:\d+: rank 0: .*the schedule deadlocks"):
        happens_before(buggy)
    ring = load_file(str(ROOT / "protocols" / "ring_allreduce.py"))[0].trace(4)
    with pytest.raises(CheckIncomplete, match="stopped at"):
        terminal_outcomes(ring, max_states=5)


def test_deliveries_are_the_ops_of_the_ir_delivery_group():
    # one declaration of which ops land later as a delivery (ir.DELIVERY_KINDS), read by the model,
    # the symbolic checks and the simulator alike
    sched = load_file(str(ROOT / "protocols" / "buggy" / "signal_without_fence.py"))[0].trace(2)
    kinds = {op.kind for p in sched.programs for op in p.ops}
    assert kinds & ir.DELIVERY_KINDS and kinds - ir.DELIVERY_KINDS
    model = Model(sched, match(sched)[0])
    for row in model.code:
        for code in row:
            assert (code.delivery is not None) == (code.kind in ir.DELIVERY_KINDS), code.kind
    union = {cls.model_fields["kind"].default for cls in ir.Op.__args__[0].__args__}
    assert ir.DELIVERY_KINDS <= union


# ------------------------------------------------------------------------- outputs final at the end
def test_a_put_into_an_output_its_target_never_waits_for_is_an_error_with_a_counterexample():
    def sched(r):
        out = r.symmetric("out", count=2, role="output")
        x = r.symmetric("x", count=2, role="input")
        if r.rank == 0:
            r.put(1, out, x)  # MARK-put
            r.quiet()  # completes the put before rank 0's end, not before rank 1's

    result = check(trace(sched))
    assert result.verdict == "violated"
    v = one(result, "unfinished_output")
    assert v.severity == "error" and v.details == {"rank": 1, "region": "out[0:2]"}
    assert [(o.rank, o.loc.line) for o in v.ops] == [(0, line_of(sched, "MARK-put"))]
    # the counterexample ends where rank 1 has finished and the put is in flight
    from clockworks_dist.check.actions import replay
    model = Model(result.schedule, match(result.schedule)[0])
    states, _ = replay(model, [step.action for step in v.trace])
    assert states[-1].pcs[1] == model.nops[1] and states[-1].in_flight
    assert not [w for w in result.violations if w.kind == "unfinished_deliveries"]  # reported once, as the error


def test_the_same_put_into_scratch_is_only_the_warning():
    def sched(r):
        box = r.symmetric("box", count=2, role="scratch")
        x = r.symmetric("x", count=2, role="input")
        if r.rank == 0:
            r.put(1, box, x)  # no quiet: in flight when every rank has finished

    result = check(trace(sched))
    assert result.verdict == "verified"
    assert result.kinds() == {"unfinished_deliveries"}


def test_a_postcondition_region_in_scratch_is_an_output_too():
    def sched(r):
        box = r.symmetric("box", count=2, role="scratch")
        x = r.symmetric("x", count=2, role="input")
        if r.rank == 0:
            r.put(1, box, x)
            r.quiet()

    expect = cw.custom(lambda world: [cw.equals(1, "box", 0, 2, (0, "x", 0))], label="copy")
    result = check(trace(sched, expect=expect))
    assert "unfinished_output" in result.kinds() and result.verdict == "violated"


def test_an_output_is_final_once_the_target_waits_for_the_signal_that_lands_after_it():
    def sched(r):
        out = r.symmetric("out", count=2, role="output")
        x = r.symmetric("x", count=2, role="input")
        ready = r.signal("ready")
        if r.rank == 0:
            r.put_signal(1, out, x, ready)
        else:
            r.wait_until(ready, "eq", 1)

    for reduction in (True, False):
        result = check(trace(sched), reduction=reduction)
        assert result.verdict == "verified" and not result.violations


def test_a_rank_with_no_ops_reads_its_outputs_at_once():
    def sched(r):
        out = r.symmetric("out", count=1, role="output")
        x = r.symmetric("x", count=1, role="input")
        if r.rank == 0:
            r.put(1, out, x)  # rank 1 has an empty program: its end comes before anything

    result = check(trace(sched))
    v = one(result, "unfinished_output")
    assert "empty program" in v.message and v.details["rank"] == 1


def test_a_fetching_atomic_on_a_finished_ranks_output_word_is_an_error():
    def sched(r):
        word = r.symmetric("word", count=1, dtype="uint64", role="output")
        old = r.buffer("old", count=1, dtype="uint64", role="scratch")
        if r.rank == 0:
            r.fetch_add(1, word.element(0), 1, old.element(0))

    result = check(trace(sched))
    assert one(result, "unfinished_output").details == {"rank": 1, "region": "word[0:1]"}
