"""The happens-before edge rules of `semantics.order`, one test per rule, and their two consumers:
the static order and the vector clocks of one execution (`check.hb`) must agree."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import clockworks_dist as cw
from clockworks_dist.check import happens_before
from clockworks_dist.check.symbolic.waits import static_order
from clockworks_dist.semantics.match import match
from clockworks_dist.semantics.order import (StaticOrder, completion, delivery_event, joints, op_event, signal_reads,
                                             signal_writes)
from clockworks_dist.semantics.rules import When

PROTOCOLS = Path(__file__).resolve().parent.parent / "protocols"


def trace(body, world: int = 2):
    return cw.schedule(body).trace(world)


def test_a_fence_orders_deliveries_to_one_pe_but_not_gets_nor_other_pes():
    def fenced(r):
        x = r.symmetric("x", count=4, role="scratch")
        if r.rank == 0:
            r.put(1, x.region(0, 1), x.region(3, 4))  # 0
            r.get(1, x.region(1, 2), x.region(1, 2), nbi=True)  # 1: a get, which fence does not order
            r.put(2, x.region(0, 1), x.region(3, 4))  # 2: to another PE
            r.fence()  # 3
            r.put(1, x.region(2, 3), x.region(3, 4))  # 4
            r.quiet()  # 5

    sched = trace(fenced, 3)
    order, clocks = StaticOrder(sched), happens_before(sched)
    assert order.happens_before(delivery_event(0, 0), delivery_event(0, 4))
    assert not order.happens_before(delivery_event(0, 1), delivery_event(0, 4))
    assert not order.happens_before(delivery_event(0, 2), delivery_event(0, 4))
    assert all(order.happens_before(delivery_event(0, i), op_event(0, 5)) for i in (0, 1, 2, 4))
    for earlier, ordered in ((0, True), (1, False), (2, False)):  # the landings, in the execution
        assert clocks.ordered((0, earlier, None), (0, 4, None)) == ordered


def test_quiet_and_barrier_all_complete_the_deliveries_issued_since_the_last_one():
    def completed(r):
        flag = r.signal("flag")
        if r.rank == 0:
            r.signal_op(1, flag, 1)  # 0
            r.quiet()  # 1
            r.signal_op(1, flag, 2)  # 2
            r.signal_op(1, flag, 3)  # 3
        r.barrier_all()  # 4 on rank 0

    program = trace(completed).programs[0]
    assert list(completion(program)) == [(delivery_event(0, 0), op_event(0, 1)),
                                         (delivery_event(0, 2), op_event(0, 4)),
                                         (delivery_event(0, 3), op_event(0, 4))]


def test_joint_events_are_the_pairs_and_instances_match_found():
    def exchange(r):
        x = r.buffer("x", count=2, role="inout")
        peer = 1 - r.rank
        if r.rank == 0:
            r.send(peer, x.region(0, 1))
            r.send(peer, x.region(1, 2))
        else:
            r.recv(peer, x.region(0, 1))
            r.recv(peer, x.region(1, 2))
        r.all_reduce(x)

    sched = trace(exchange)
    matches, _ = match(sched)
    assert dict(joints(matches)) == {("p2p", (0, 0, None)): [(0, 0, None), (1, 0, None)],
                                     ("p2p", (0, 1, None)): [(0, 1, None), (1, 1, None)],
                                     ("coll", 0): [(0, 2, None), (1, 2, None)]}
    order = StaticOrder(sched)
    assert order.ordered((0, 0, None), (1, 1, None)) and not order.ordered((1, 1, None), (0, 0, None))
    assert order.ordered((1, 0, None), (0, 2, None))  # the all-reduce joins both ranks


def test_signal_reads_and_writes_come_from_the_rules():
    def signals(r):
        flags = r.signal("flags", count=2)
        into = r.buffer("into", count=1, dtype="uint64", role="scratch")
        x = r.symmetric("x", count=2, role="scratch")
        if r.rank == 0:
            r.put_signal(1, x.region(0, 1), x.region(1, 2), flags[0], 1)
            r.fetch_add(1, flags[1], 1, into)
        else:
            r.wait_until(flags[0], "eq", 1)
            r.wait_until_all(flags, "ge", 1)
            r.wait_until_any(flags, "ge", 1)

    zero, one = trace(signals).programs
    put_signal, fetch = zero.ops
    assert signal_writes(0, put_signal, When.DELIVERY) == ((1, "flags", 0),)
    assert signal_writes(0, put_signal, When.ISSUE) == ()
    assert signal_reads(0, fetch) == ((1, "flags", 1),) == signal_writes(0, fetch, When.ISSUE)
    wait, wait_all, wait_any = one.ops
    assert signal_reads(1, wait) == ((1, "flags", 0),)
    assert signal_reads(1, wait_all) == ((1, "flags", 0), (1, "flags", 1))
    assert signal_reads(1, wait_any) == ()  # only the write that satisfied it orders it: values decide


def handoff(r):
    data = r.symmetric("data", count=1, role="scratch")
    flag = r.signal("flag")
    if r.rank == 0:
        r.put(1, data, r.buffer("src", count=1, role="input"))  # 0
        r.fence()  # 1
        r.signal_op(1, flag, 1)  # 2
    else:
        r.wait_until(flag, "eq", 1)  # 0
        r.copy(r.buffer("out", count=1, role="output"), data)  # 1


def test_waits_are_ordered_by_value_with_the_oracle_the_caller_brings():
    sched = trace(handoff)
    order = StaticOrder(sched)
    assert not order.ordered((0, 0, None), (1, 1, None))
    update = type("Update", (), {"key": (0, 2, None)})()
    order.order_waits([((1, 0, None), [update])], lambda number, updates: bool(updates))
    assert order.ordered((0, 0, None), (1, 1, None))  # the put lands before the flag, the flag before the copy


def test_the_static_order_needs_no_z3(monkeypatch):
    monkeypatch.setitem(sys.modules, "z3", None)  # makes `import z3` raise ImportError
    assert StaticOrder(trace(handoff)).happens_before(delivery_event(0, 0), delivery_event(0, 2))


@pytest.mark.parametrize("path", sorted(PROTOCOLS.glob("*.py")), ids=lambda p: p.stem)
def test_every_order_the_static_order_claims_holds_in_the_execution_the_clocks_stamp(path):
    for definition in cw.load_file(str(path)):
        sched = definition.trace(4)
        order, clocks = static_order(sched), happens_before(sched)
        keys = [(p.rank, i, sub) for p in sched.programs for i, op in enumerate(p.ops)
                for sub in (range(len(op.ops)) if op.kind == "group" else (None,))]
        for a in keys:
            for b in keys:
                for flags in ((True, True), (False, True), (True, False), (False, False)):
                    if order.ordered(a, b, *flags):
                        assert clocks.ordered(a, b, *flags), (a, b, flags)
