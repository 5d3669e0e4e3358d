"""The cost rules (`perf/costs.py`): one entry per op kind of `ir.Op`, naming constants that exist."""

from __future__ import annotations

import typing

import pytest

from clockworks_dist import ir
from clockworks_dist.perf.costs import COSTS, RunConditions, host_cost, launches_kernel
from clockworks_dist.topology import Constants

TIMINGS = {"local", "p2p", "collective", "barrier", "delivery", "get", "fixed", "instant"}


def op_kinds() -> set[str]:
    """Every `kind` of the `ir.Op` union."""
    union, *_ = typing.get_args(ir.Op)
    return {cls.model_fields["kind"].default for cls in typing.get_args(union)}


def test_every_op_kind_has_a_cost_rule():
    missing = op_kinds() - set(COSTS)
    assert not missing, f"add a cost rule to clockworks_dist/perf/costs.py COSTS for: {sorted(missing)}"


@pytest.mark.parametrize("kind", sorted(COSTS))
def test_a_cost_rule_names_fields_of_the_constants(kind):
    rule = COSTS[kind]
    assert rule.timing in TIMINGS
    for name in (rule.host,) * (rule.host is not None) + rule.issue + rule.latency:
        assert name in Constants.model_fields, (kind, name)


def test_the_host_launches_kernels_for_nccl_and_local_ops_only():
    c = Constants(kernel_launch_us=7.0, p2p_launch_us=4.0)
    loc = ir.SourceLoc(file="x.py", line=1)
    region = ir.Region(buffer="x", start=0, stop=4)
    assert host_cost(ir.AllReduce(loc=loc, src=region, dst=region), c) == 7.0
    assert host_cost(ir.Send(loc=loc, peer=1, src=region), c) == 4.0
    put = ir.Put(loc=loc, pe=1, dst=region, src=region)
    assert host_cost(put, c) == 0.0 and not launches_kernel(put)
    assert not launches_kernel(ir.BarrierAll(loc=loc)) and COSTS["barrier_all"].launch


def test_run_conditions_default_to_the_generated_spread_and_no_cap():
    """None: each put gets the blocks the generated NVSHMEM code spreads it over (test_perf checks the
    rate); a calibration cell sets its own count."""
    assert RunConditions() == RunConditions(nvshmem_blocks=None, channel_cap=None)


def test_bytes_come_from_the_data_flow_and_nccl_tests_conventions():
    loc = ir.SourceLoc(file="x.py", line=1)
    four, eight = ir.Region(buffer="x", start=0, stop=4), ir.Region(buffer="y", start=0, stop=8)

    def size(rank, region):  # 4-byte elements, whatever the rank
        return 4.0 * region.count

    reduce = ir.LocalReduce(loc=loc, dst=four, srcs=(four, four))
    assert COSTS["reduce"].nbytes(reduce, 0, size) == 3 * 16  # two sources read, one destination written
    put = ir.Put(loc=loc, pe=1, dst=four, src=four)
    assert COSTS["put"].nbytes(put, 0, size) == 16  # the payload, once
    gather = ir.AllGather(loc=loc, src=four, dst=eight)
    assert COSTS["all_gather"].nbytes(gather, 0, size) == 32  # nccl-tests: the gathered output
    assert COSTS["all_reduce"].nbytes(ir.AllReduce(loc=loc, src=four, dst=four), 0, size) == 16


def test_one_thread_and_holds_derive_from_each_cost_rule():
    """The op facts the NVSHMEM program model reads come from the cost rule (not from a kind list in
    the simulator): one thread runs a one-sided op that moves no buffer's bytes, and a delivery that
    carries a buffer's bytes keeps its rank until they have left. Pinned as they were when they were
    kind lists (perf/simulate.py's _ONE_THREAD and _holds)."""
    assert {k for k, c in COSTS.items() if c.one_thread} == {
        "wait_until", "wait_until_all", "wait_until_any", "fence", "quiet", "signal_op", "atomic", "fetch_atomic",
        "barrier_all", "sync_all",
        # waits of a rank's threads (semantics/threads.py lowers them to signal words before anything is timed)
        "record_event", "wait_event", "thread_barrier",
        # NVSHMEM team ops and a plain store to the rank's own signal word: one thread, no buffer's bytes
        "team_split", "team_barrier", "signal_store"}
    assert {k for k, c in COSTS.items() if c.holds} == {"put", "put_signal", "get_nbi"}
