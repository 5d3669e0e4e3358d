"""The ops added through the add-an-op checklist: `wait_until_all`, `wait_until_any` and the
non-blocking get. One test per sentence of their semantics (rules.WaitAllRule, WaitAnyRule,
GetNbiRule), each a correct schedule beside its buggy twin."""

from __future__ import annotations

import pytest

import clockworks_dist as cw
from clockworks_dist import ir
from clockworks_dist.check import check, terminal_outcomes
from clockworks_dist.errors import ScheduleError


def _verdict(fn, world: int = 3) -> tuple[str, set[str]]:
    result = check(cw.schedule(fn).trace(world))
    assert result.complete
    return result.verdict, result.kinds()


def _gather(wait: str):
    def gather(r):
        n = r.world
        tokens = r.buffer("tokens", count=2, role="input")
        recv = r.symmetric("recv", count=2 * n, role="scratch")
        out = r.buffer("out", count=2 * n, role="output")
        arrived = r.signal("arrived", count=n)
        if r.rank != 0:
            r.put_signal(0, recv.chunk(r.rank, n), tokens, arrived[r.rank], 1, op="add")
            r.quiet()
        else:
            getattr(r, wait)([arrived[p] for p in range(1, n)], "ge", 1)
            r.copy(out.region(2, 2 * n), recv.region(2, 2 * n))
        r.barrier_all()
    return gather


def test_wait_until_all_waits_for_every_word_where_any_lets_the_reader_race():
    assert _verdict(_gather("wait_until_all")) == ("verified", set())
    verdict, kinds = _verdict(_gather("wait_until_any"))
    assert verdict == "violated" and "data_race" in kinds


def _stop_flag(wait: str):
    """Rank 1 raises its stop flag, rank 2 never does; rank 0 waits on both."""
    def stop(r):
        flag = r.signal("stop", count=3)
        if r.rank == 1:
            r.signal_op(0, flag[1], 1)
            r.quiet()
        elif r.rank == 0:
            getattr(r, wait)(flag, "eq", 1)
        r.barrier_all()
    return stop


def test_wait_until_any_proceeds_on_one_word_where_all_deadlocks():
    # `flag` as a whole array: its three words, word 0 included (never written)
    assert _verdict(_stop_flag("wait_until_any")) == ("verified", set())
    verdict, kinds = _verdict(_stop_flag("wait_until_all"))
    assert verdict == "violated" and "deadlock" in kinds


def test_wait_until_any_whose_words_can_never_hold_deadlocks():
    def never(r):
        flag = r.signal("flag", count=2)
        if r.rank == 1:
            r.signal_op(0, flag[0], 2)
            r.quiet()
        elif r.rank == 0:
            r.wait_until_any([flag[0], flag[1]], "eq", 1)
        r.barrier_all()
    verdict, kinds = _verdict(never, world=2)
    assert verdict == "violated" and "deadlock" in kinds


def test_wait_until_all_needs_every_word_at_once():
    """A word that holds and is then reset does not count once the other one holds."""
    def reset(r):
        flag = r.signal("flag", count=2)
        if r.rank == 1:
            r.signal_op(0, flag[0], 1)
            r.fence()
            r.signal_op(0, flag[0], 0)
            r.fence()
            r.signal_op(0, flag[1], 1)
            r.quiet()
        elif r.rank == 0:
            r.wait_until_all([flag[0], flag[1]], "eq", 1)
        r.barrier_all()
    verdict, kinds = _verdict(reset, world=2)
    assert verdict == "violated" and "deadlock" in kinds


def _fetch(complete: str):
    def fetch(r):
        block = r.symmetric("block", count=4, role="input")
        fetched = r.buffer("fetched", count=4, role="output")
        r.barrier_all()
        r.get_nbi((r.rank + 1) % r.world, fetched, block)
        if complete == "quiet":
            r.quiet()
            r.copy(block, fetched)  # the peer may still be reading our block: the barrier below orders it
        r.barrier_all()
        if complete == "late":
            r.copy(block, fetched)
    return fetch


def test_get_nbi_lands_by_the_next_barrier_all_with_the_peers_data():
    sched = cw.schedule(_fetch("late")).trace(2)
    assert check(sched).verdict == "verified"
    (outcome,) = terminal_outcomes(sched)
    finished, _pcs, values, _signals = outcome
    assert finished and values[0][-1] == "block@r1[0:4]" and values[1][-1] == "block@r0[0:4]"


def test_get_nbi_destination_written_before_the_peer_is_done_reading_races():
    verdict, kinds = _verdict(_fetch("quiet"), world=2)
    assert verdict == "violated" and "data_race" in kinds


def test_get_nbi_destination_read_before_quiet_races_and_after_quiet_does_not():
    def use(before_quiet: bool):
        def fn(r):
            block = r.symmetric("block", count=2, role="input")
            fetched = r.buffer("fetched", count=2, role="scratch")
            out = r.buffer("out", count=2, role="output")
            r.get_nbi(1 - r.rank, fetched, block)
            if before_quiet:
                r.copy(out, fetched)
            r.quiet()
            if not before_quiet:
                r.copy(out, fetched)
            r.barrier_all()
        return fn
    assert _verdict(use(False), world=2) == ("verified", set())
    verdict, kinds = _verdict(use(True), world=2)
    assert verdict == "violated" and "data_race" in kinds


def test_fence_does_not_order_a_get_nbi_before_a_later_put():
    """NVSHMEM's fence orders puts, atomics and signals to one PE, not gets: the put may land on the
    peer's block before the get reads it. A quiet orders them."""
    def swap(sep: str):
        def fn(r):
            block = r.symmetric("block", count=2, role="input")
            mine = r.buffer("mine", count=2, role="input")
            old = r.buffer("old", count=2, role="output")
            if r.rank == 0:
                r.get_nbi(1, old, block)
                getattr(r, sep)()
                r.put(1, block, mine)
                r.quiet()
            r.barrier_all()
        return fn
    assert _verdict(swap("quiet"), world=2) == ("verified", set())
    verdict, kinds = _verdict(swap("fence"), world=2)
    assert verdict == "violated" and "data_race" in kinds


@pytest.mark.parametrize("call,message", [
    (lambda r, f: r.wait_until_all([], "ge", 1), "the list of signal words is empty"),
    (lambda r, f: r.wait_until_any([f[0], f[0]], "ge", 1), r"flag\[0\] is listed twice"),
    (lambda r, f: r.wait_until_all(f[0], "ge", 1), "expected a list of signal words or a signal array"),
    (lambda r, f: r.wait_until_any([f[0]], "gte", 1), "gte"),
    (lambda r, f: r.wait_until_all([f[0]], "ge", -1), "-1"),
    (lambda r, f: r.get(0, r.buffer("d", count=2), r.symmetric("s", count=2), nbi=1), "nbi must be True or False"),
])
def test_bad_arguments_name_the_line_and_the_op(call, message):
    def bad(r):
        flag = r.signal("flag", count=2)
        call(r, flag)
    with pytest.raises(ScheduleError, match=message) as info:
        cw.schedule(bad).trace(2)
    assert info.value.line is not None


def test_the_new_ops_round_trip_through_json():
    sched = cw.schedule(_gather("wait_until_all")).trace(3)
    assert ir.Schedule.from_json(sched.to_json()) == sched
    sched = cw.schedule(_fetch("late")).trace(2)
    assert ir.Schedule.from_json(sched.to_json()) == sched


def test_the_z3_wait_check_reports_a_wait_until_all_with_one_impossible_word_and_an_any_with_none():
    def waits(kind: str, values: tuple[int, int]):
        def fn(r):
            flag = r.signal("flag", count=2)
            if r.rank == 1:
                r.signal_op(0, flag[0], 1, op="add")
                r.signal_op(0, flag[1], 1, op="add")
                r.quiet()
            elif r.rank == 0:
                getattr(r, kind)([flag[0], flag[1]], "eq", values[0])
            r.barrier_all()
        return fn
    def unsatisfiable(kind, values):
        result = check(cw.schedule(waits(kind, values)).trace(2))
        return [v.message for v in result.violations if v.kind == "unsatisfiable_wait"]
    (message,) = unsatisfiable("wait_until_all", (2, 0))
    assert "waits for flag[0] == 2 (one of the words of its wait_until_all)" in message
    (message,) = unsatisfiable("wait_until_any", (3, 0))
    assert "(wait_until_any: its other word cannot hold either)" in message
    assert unsatisfiable("wait_until_any", (1, 0)) == []
    assert unsatisfiable("wait_until_all", (1, 0)) == []
