"""The z3 checks: sizes proven for every admissible value, and waits that some updates can satisfy."""

import os
import sys
import time

import pytest

import clockworks_dist as cw
from clockworks_dist.check.symbolic import check_sizes, check_waits, show_form
from clockworks_dist.errors import MissingDependency
from clockworks_dist.semantics.rules import describe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.basename(__file__)

# Every @cw.schedule in this file sees these module-level sizes as its symbols.
CHUNK = cw.size("CHUNK", 4)
EVEN = cw.size("EVEN", 4, multiple_of=2)


def ring_allreduce():
    return cw.load_file(os.path.join(ROOT, "protocols", "ring_allreduce.py"))[0]


def line_of(fn, text):
    """The source line of `fn` that contains `text`."""
    import inspect

    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def sized(violations):
    assert all(v.kind == "symbolic_size" for v in violations)
    return violations


# ----------------------------------------------------------------------------------- bounds
def test_ring_allreduce_is_proven_for_every_chunk():
    sched = ring_allreduce().trace(4)
    assert sched.symbols[0].name == "CHUNK"
    assert check_sizes(sched) == []
    assert check_waits(sched) == []


def test_region_in_bounds_at_the_traced_value_but_not_for_every_chunk():
    def body(r):
        x = r.buffer("x", count=CHUNK + 4)
        y = r.buffer("y", count=2 * CHUNK)
        r.copy(y, x.region(0, 2 * CHUNK))  # fits 8 elements at CHUNK = 4, not at CHUNK = 5

    sched = cw.schedule(body).trace(1)
    [v] = sized(check_sizes(sched))
    line = line_of(body, "r.copy(")
    assert v.details["valuation"]["CHUNK"] == 5  # the admissible value closest to the traced 4
    assert v.details["check"] == "bounds"
    assert v.message == (f"{HERE}:{line}: rank 0: copy src x[0:2*CHUNK] is out of bounds when CHUNK = 5 "
                         f"(x[0:10], but x has CHUNK + 4 elements = 9) "
                         f"(it fails for every admissible CHUNK >= 5; the traced CHUNK = 4 is fine)")
    [ref] = v.ops
    assert (ref.rank, ref.index, ref.sub, ref.kind) == (0, 0, None, "copy")
    assert ref.text == describe(sched.programs[0].ops[0])
    assert v.ranks == (0,)


def test_one_past_the_chunk_fails_for_small_chunks_on_one_rank():
    def body(r):
        x = r.buffer("x", count=r.world * CHUNK - 1)
        k = r.rank
        if k < r.world - 1:
            r.fill(x.region(k * CHUNK, k * CHUNK + CHUNK + 1), 2.0)  # one past the chunk

    sched = cw.schedule(body).trace(3)
    [v] = sized(check_sizes(sched))
    # rank 1 ends at 2*CHUNK + 1 <= 3*CHUNK - 1 only while CHUNK >= 2; rank 0 fits for every CHUNK.
    assert v.ranks == (1,)
    assert v.message == (f"{HERE}:{line_of(body, 'r.fill(')}: rank 1: fill x[CHUNK:2*CHUNK + 1] is out of "
                         f"bounds when CHUNK = 1 (x[1:3], but x has 3*CHUNK - 1 elements = 2) "
                         f"(only CHUNK = 1 fails; the traced CHUNK = 4 is fine)")


def test_constant_bounds_in_a_symbolic_buffer_report_once_per_line():
    def bad(r):
        x = r.buffer("x", count=2 * CHUNK - 2)
        r.fill(x.region(r.rank, r.rank + 3), 1.0)  # constant bounds in a symbolic buffer

    sched = cw.schedule(bad).trace(2)
    [v] = sized(check_sizes(sched))  # one report for the line, both ranks in it
    assert v.ranks == (0, 1) and v.details["sites"] == 2
    assert v.details["valuation"] == {"CHUNK": 2}
    assert v.message == (f"{HERE}:{line_of(bad, 'r.fill(')}: rank 0: fill x[0:3] is out of bounds when "
                         f"CHUNK = 2 (x[0:3], but x has 2*CHUNK - 2 elements = 2) "
                         f"(it fails for every admissible CHUNK from 1 to 2; the traced CHUNK = 4 is fine)")


def test_remote_side_uses_the_symmetric_buffer_of_the_target():
    def body(r):
        x = r.symmetric("x", count=2 * CHUNK)
        y = r.buffer("y", count=CHUNK + 4)
        if r.rank == 0:
            r.put(1, x.region(CHUNK, CHUNK + 4), y.region(0, 4))
        r.barrier_all()

    sched = cw.schedule(body).trace(2)
    [v] = sized(check_sizes(sched))
    assert "rank 0: put dst x[CHUNK:CHUNK + 4] on rank 1 is out of bounds when CHUNK = 3" in v.message


# ----------------------------------------------------------------------------------- counts
def test_send_and_matched_recv_must_agree_for_every_chunk():
    def body(r):
        x = r.buffer("x", count=2 * CHUNK + 4)
        if r.rank == 0:
            r.send(1, x.region(0, CHUNK))
            r.send(1, x.region(CHUNK, 2 * CHUNK))
        else:
            r.recv(0, x.region(0, CHUNK))
            r.recv(0, x.region(CHUNK, CHUNK + 4))  # 4 elements: right only at CHUNK = 4

    sched = cw.schedule(body).trace(2)
    [v] = sized(check_sizes(sched))
    assert v.details["check"] == "count"
    assert v.ranks == (0, 1)
    assert [(o.rank, o.index) for o in v.ops] == [(0, 1), (1, 1)]
    chunk = v.details["valuation"]["CHUNK"]
    assert chunk in (3, 5)
    assert v.message == (f"{HERE}:{line_of(body, 'r.send(1, x.region(CHUNK')}: rank 0: send x[CHUNK:2*CHUNK] "
                         f"has CHUNK elements but the matching recv x[CHUNK:CHUNK + 4] "
                         f"({HERE}:{line_of(body, 'CHUNK + 4))')}, rank 1) has 4 when CHUNK = {chunk} "
                         f"({chunk} vs 4) (it fails for every admissible CHUNK but the traced 4)")


def test_a_send_left_unproven_keeps_its_place_in_the_fifo_matching():
    def body(r):
        x = r.buffer("x", count=CHUNK)
        if r.rank == 0:
            r.send(1, x.region(0, CHUNK // 2))  # not affine: checked at the traced size only
            r.send(1, x.region(0, CHUNK))
        else:
            r.recv(0, x.region(0, 2))
            r.recv(0, x.region(0, CHUNK))

    violations = check_sizes(cw.schedule(body).trace(2))
    # the second send meets the second recv (match's pairing), never the first
    assert [v.details.get("check") for v in violations if v.kind == "symbolic_size"] == ["bounds"]
    assert [v.kind for v in violations if v.kind != "symbolic_size"] == ["symbolic_unproven"]


def test_multiple_of_makes_the_split_exact():
    def even(r):
        src = r.buffer("src", count=EVEN)
        dst = r.buffer("dst", count=EVEN)
        r.all_to_all(src, dst)  # EVEN / 2 elements per peer

    assert check_sizes(cw.schedule(even).trace(2)) == []

    def any_chunk(r):
        src = r.buffer("src", count=CHUNK)
        dst = r.buffer("dst", count=CHUNK)
        r.all_to_all(src, dst)  # 4 splits in two at the traced value, 3 or 5 do not

    violations = sized(check_sizes(cw.schedule(any_chunk).trace(2)))
    assert len(violations) == 1
    [v] = violations
    assert v.details["check"] == "divides"
    assert v.details["valuation"]["CHUNK"] in (3, 5)
    assert v.ranks == (0, 1)
    assert "must split into 2 equal chunks when CHUNK = " in v.message

    # multiple_of also narrows the admissible values: x[0:2] fits every even count.
    def low(r):
        x = r.buffer("x", count=EVEN)
        r.fill(x.region(0, 2), 0.0)

    assert check_sizes(cw.schedule(low).trace(1)) == []


# --------------------------------------------------------------------------------- overlaps
def _two_recvs(second_start, second_stop, count=lambda: 2 * CHUNK):
    def body(r):
        x = r.buffer("x", count=count())
        if r.rank == 0:
            with r.group():
                r.recv(1, x.region(0, CHUNK))
                r.recv(2, x.region(second_start(), second_stop()))
        else:
            r.send(0, x.region(0, CHUNK))

    return body


def test_group_members_writing_overlapping_regions_are_reported():
    body = _two_recvs(lambda: CHUNK - 1, lambda: 2 * CHUNK - 1)
    [v] = sized(check_sizes(cw.schedule(body).trace(3)))
    assert v.details["check"] == "overlap"
    assert [(o.rank, o.index, o.sub) for o in v.ops] == [(0, 0, 0), (0, 0, 1)]
    assert v.details["valuation"] == {"CHUNK": 4}  # they overlap as traced already
    assert "rank 0: recv x[0:CHUNK] and" in v.message
    assert "rank 0: recv x[CHUNK - 1:2*CHUNK - 1] can run concurrently and overlap when CHUNK = 4" in v.message
    assert "share x[3:4]" in v.message


def test_overlap_only_for_some_chunk_values():
    # x[0:CHUNK] and x[6:CHUNK + 6] are disjoint while CHUNK <= 6: fine as traced, not at CHUNK = 7.
    body = _two_recvs(lambda: 6, lambda: CHUNK + 6, count=lambda: CHUNK + 8)
    [v] = sized(check_sizes(cw.schedule(body).trace(3)))
    assert v.details["valuation"] == {"CHUNK": 7}
    assert "x[0:7] and x[6:13] share x[6:7]" in v.message


def test_disjoint_group_members_are_proven():
    body = _two_recvs(lambda: CHUNK, lambda: 2 * CHUNK)
    assert check_sizes(cw.schedule(body).trace(3)) == []


def test_puts_from_two_ranks_into_one_buffer():
    def body(r):
        x = r.symmetric("x", count=2 * CHUNK)
        y = r.buffer("y", count=CHUNK)
        if r.rank == 1:
            r.put(0, x.region(0, CHUNK), y)
        if r.rank == 2:
            r.put(0, x.region(CHUNK - 1, 2 * CHUNK - 1), y)
        r.barrier_all()
        if r.rank == 2:
            r.put(0, x.region(0, CHUNK), y)  # after the barrier: ordered with the first put

    sched = cw.schedule(body).trace(3)
    [v] = sized(check_sizes(sched))
    assert {(o.rank, o.index) for o in v.ops} == {(1, 0), (2, 0)}
    # The caller's happens-before order overrides the structural default.
    assert check_sizes(sched, unordered=lambda a, b, *_: False) == []
    seen = []
    check_sizes(sched, unordered=lambda a, b, *_: seen.append((a, b)) or True)
    assert ((1, 0, None), (2, 0, None)) in seen or ((2, 0, None), (1, 0, None)) in seen


def test_a_wait_on_the_signal_orders_the_delivery_before_local_writes():
    def body(r):
        x = r.symmetric("x", count=2 * CHUNK)
        y = r.buffer("y", count=CHUNK)
        ready = r.signal("ready")
        if r.rank == 1:
            r.put_signal(0, x.region(0, CHUNK), y, ready, 1, op="add")
        if r.rank == 0:
            r.wait_until(ready, "ge", 1)
            r.fill(x.region(CHUNK - 1, 2 * CHUNK), 0.0)

    assert check_sizes(cw.schedule(body).trace(2)) == []

    def racy(r):
        x = r.symmetric("x", count=2 * CHUNK)
        y = r.buffer("y", count=CHUNK)
        ready = r.signal("ready")
        if r.rank == 1:
            r.put_signal(0, x.region(0, CHUNK), y, ready, 1, op="add")
        if r.rank == 0:
            r.fill(x.region(CHUNK - 1, 2 * CHUNK), 0.0)  # before the wait: races with the put
            r.wait_until(ready, "ge", 1)

    [v] = sized(check_sizes(cw.schedule(racy).trace(2)))
    assert "put_signal dst x[0:CHUNK] on rank 0" in v.message and "fill x[CHUNK - 1:2*CHUNK]" in v.message


def _relay(quiet: bool):
    """Rank 0 puts into rank 2, then tells rank 1, which tells rank 2: a chain of two signals."""
    def body(r):
        x = r.symmetric("x", count=2 * CHUNK)
        y = r.buffer("y", count=CHUNK)
        go = r.signal("go", 2)
        if r.rank == 0:
            r.put(2, x.region(0, CHUNK), y)
            if quiet:
                r.quiet()  # the put is delivered before anyone hears from rank 0
            r.signal_op(1, go[0], 1, op="add")
        elif r.rank == 1:
            r.wait_until(go[0], "ge", 1)
            r.signal_op(2, go[1], 1, op="add")
        else:
            r.wait_until(go[1], "ge", 1)
            r.fill(x.region(CHUNK - 1, 2 * CHUNK), 0.0)
        r.barrier_all()

    return body


def test_a_chain_of_signals_orders_a_completed_put():
    assert check_sizes(cw.schedule(_relay(quiet=True)).trace(3)) == []
    [v] = sized(check_sizes(cw.schedule(_relay(quiet=False)).trace(3)))
    assert {(o.rank, o.kind) for o in v.ops} == {(0, "put"), (2, "fill")}


def _reused_scratch(sync: bool):
    """Two iterations that put_signal into one scratch slot; the signal is set to the iteration."""
    def body(r):
        x = r.symmetric("x", count=CHUNK)
        slot = r.symmetric("slot", count=CHUNK)
        out = r.buffer("out", count=CHUNK)
        ready = r.signal("ready")
        peer = 1 - r.rank
        for it in range(2):
            if it and sync:
                r.sync_all()  # the peer has read the slot before it is overwritten
            r.put_signal(peer, slot, x, ready, it + 1, op="set")
            r.wait_until(ready, "ge", it + 1)
            r.reduce(out, x, slot)

    return body


def test_waits_order_by_value_across_iterations():
    # Iteration 1's wait (>= 1) could also be met by iteration 2's set: only the sync_all keeps the
    # second put out of the slot while the first is being read.
    assert check_sizes(cw.schedule(_reused_scratch(sync=True)).trace(2)) == []
    violations = sized(check_sizes(cw.schedule(_reused_scratch(sync=False)).trace(2)))
    kinds = {frozenset(o.kind for o in v.ops) for v in violations}  # one report per pair of lines
    assert kinds == {frozenset({"put_signal", "reduce"}),  # iteration 2's delivery, iteration 1's read
                     frozenset({"put_signal"})}  # two deliveries to one slot, no fence or quiet between


def test_ops_that_can_never_run_are_not_reported():
    def body(r):
        x = r.buffer("x", count=2 * CHUNK)
        peer = 1 - r.rank
        r.send(peer, x.region(0, CHUNK))  # both ranks send first: rendezvous deadlock
        with r.group():
            r.recv(peer, x.region(0, CHUNK))
            r.recv(peer, x.region(CHUNK - 1, 2 * CHUNK - 1))
        r.send(peer, x.region(0, CHUNK))

    assert check_sizes(cw.schedule(body).trace(2)) == []


# ------------------------------------------------------------------------------------ waits
def _counter(iterations, threshold):
    def body(r):
        n = r.world
        ready = r.signal("ready")
        data = r.symmetric("data", count=n * CHUNK)
        for it in range(1, iterations + 1):
            if r.rank == 0:
                r.wait_until(ready, "ge", threshold(it, n))
            else:
                r.put_signal(0, data.chunk(r.rank, n), data.chunk(r.rank, n), ready, 1, op="add")
        r.barrier_all()

    return body


def test_counter_waits_pass_when_enough_adds_can_reach_them():
    sched = cw.schedule(_counter(3, lambda it, n: it * (n - 1))).trace(4)
    assert check_waits(sched) == []


def test_wait_threshold_off_by_one_is_reported():
    body = _counter(1, lambda it, n: n)  # 3 senders add 1 each; waiting for 4
    sched = cw.schedule(body).trace(4)
    [v] = check_waits(sched)
    assert v.kind == "unsatisfiable_wait"
    line = line_of(body, "r.wait_until(")
    assert v.message.startswith(f"{HERE}:{line}: rank 0 waits for ready[0] >= 4, but at most 3 adds of 1 "
                                f"can reach it, so it never exceeds 3: rank 1 put_signal(")
    assert [o.kind for o in v.ops] == ["wait_until", "put_signal", "put_signal", "put_signal"]
    assert v.ranks == (0, 1, 2, 3)
    assert v.details["adds"] == {"1": 3}


def test_only_the_last_of_consecutive_waits_is_short():
    sched = cw.schedule(_counter(3, lambda it, n: it * (n - 1) + (it == 3))).trace(3)
    [v] = check_waits(sched)
    assert "waits for ready[0] >= 7" in v.message and "at most 6 adds of 1" in v.message


def test_updates_after_the_wait_do_not_count():
    def body(r):
        flag = r.signal("flag")
        if r.rank == 0:
            r.wait_until(flag, "eq", 1)
            r.signal_op(0, flag, 1, op="set")  # its own update, after the wait: never seen by it

    [v] = check_waits(cw.schedule(body).trace(2))
    assert "nothing that can reach it updates flag[0] on rank 0" in v.message
    assert "(1 more update comes only after the wait)" in v.message


def test_equality_needs_an_exact_combination():
    def body(r, target):
        flag = r.signal("flag")
        if r.rank == 0:
            r.wait_until(flag, "eq", target)
        else:
            r.signal_op(0, flag, 2, op="add")  # ranks 1 and 2 add 2 each
        r.barrier_all()

    assert check_waits(cw.schedule(lambda r: body(r, 4)).trace(3)) == []
    [v] = check_waits(cw.schedule(lambda r: body(r, 3)).trace(3))
    assert ("waits for flag[0] == 3, but no combination of the 2 adds of 2 that can reach it makes that "
            "true (it can only be 0, 2, 4)") in v.message


def test_a_set_then_adds():
    def body(r):
        flag = r.signal("flag", 2)
        if r.rank == 0:
            r.wait_until(flag[1], "eq", 6)
            r.wait_until(flag[1], "gt", 6)
        elif r.rank == 1:
            r.signal_op(0, flag[1], 5, op="set")
        else:
            r.atomic_inc(0, flag[1])

    [v] = check_waits(cw.schedule(body).trace(3))  # 5 + 1 = 6 is reachable; more than 6 is not
    assert "waits for flag[1] > 6, but at most 1 add of 1 and 1 set to 5 can reach it, so it never exceeds 6" \
        in v.message


def test_an_atomic_of_unknown_effect_makes_any_value_reachable():
    def body(r):
        flag = r.signal("flag")
        if r.rank == 0:
            r.wait_until(flag, "eq", 12345)
        else:
            r.atomic(0, flag, "xor", 7)

    assert check_waits(cw.schedule(body).trace(2)) == []


def test_barrier_separates_later_updates():
    def body(r):
        flag = r.signal("flag")
        if r.rank == 0:
            r.wait_until(flag, "ge", 1)
        r.barrier_all()
        if r.rank == 1:
            r.signal_op(0, flag, 1, op="add")  # after the barrier that rank 0 reaches after its wait

    [v] = check_waits(cw.schedule(body).trace(2))
    assert "(1 more update comes only after the wait)" in v.message
    assert check_waits(cw.schedule(body).trace(2), ordered=lambda w, c: False) == []


# ----------------------------------------------------------------------------- the rest
def test_fast_on_ring_allreduce_at_eight_ranks():
    sched = ring_allreduce().trace(8)
    start = time.perf_counter()
    assert check_sizes(sched) == []
    assert check_waits(sched) == []
    assert time.perf_counter() - start < 1.0


def test_show_form():
    assert show_form((-2, (("CHUNK", 4),))) == "4*CHUNK - 2"
    assert show_form((0, (("A", -1), ("B", 1)))) == "-A + B"
    assert show_form((0, ())) == "0"


def test_missing_z3_names_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "z3", None)  # makes `import z3` raise ImportError
    sched = ring_allreduce().trace(2)
    with pytest.raises(MissingDependency, match="pip install z3-solver"):
        check_sizes(sched)
    with pytest.raises(MissingDependency, match="pip install z3-solver"):
        check_waits(sched)
