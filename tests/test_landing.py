"""Each side of a send/recv and each member of a collective completes on its own (`rules.lands`).

NCCL and MPI do not complete a matched send and recv, or a collective, in one step on every rank:
a sender goes on once its recv has matched (or its data has left) while the receiver still writes
`dst`; a collective member goes on while another still writes its output; and a posted send may
read its `src` at any time until it completes. Each test below is a schedule the checker used to
verify (when it completed these in one joint step) and must now report, beside its correct twin.
"""

from __future__ import annotations

import clockworks_dist as cw
from clockworks_dist.check import check
from clockworks_dist.perf.simulate import Simulator
from clockworks_dist.semantics.match import match
from clockworks_dist.semantics.order import StaticOrder
from test_engines_agree import CONSTANTS, TOPOLOGY, from_topology


def _verdict(fn, world=2):
    result = check(cw.schedule(ranks=(world,))(fn).trace(world))
    assert result.complete
    return result


def _race_lines(result) -> set[int]:
    return {o.loc.line for v in result.violations if v.kind == "data_race" for o in v.ops}


def test_a_sender_goes_on_before_its_recv_writes():
    def racy(r):
        y = r.symmetric("y", count=4, role="output")
        got = r.buffer("got", count=4, role="output")
        if r.rank == 0:
            x = r.buffer("x", count=4, role="input")
            r.send(1, x)
            r.get(1, got, y)  # rank 1 may still be writing y
        else:
            r.recv(0, y)

    def ordered(r):
        y = r.symmetric("y", count=4, role="output")
        got = r.buffer("got", count=4, role="output")
        ready = r.signal("ready", count=1)
        if r.rank == 0:
            x = r.buffer("x", count=4, role="input")
            r.send(1, x)
            r.wait_until(ready[0], "ge", 1)  # rank 1 says y is written
            r.get(1, got, y)
        else:
            r.recv(0, y)
            r.signal_op(0, ready[0], 1, op="add")
            r.quiet()

    found = _verdict(racy)
    assert found.verdict == "violated" and "data_race" in {v.kind for v in found.violations}
    message = next(v.message for v in found.violations if v.kind == "data_race")
    assert "recv(peer=0, y[0:4]) completing writes y[0:4]" in message and "get(pe=1" in message
    assert _verdict(ordered).verdict == "verified"


def test_a_posted_send_may_read_its_source_before_it_meets_its_recv():
    def racy(r):
        x = r.symmetric("x", count=4, role="inout")
        if r.rank == 0:
            r.send(1, x)  # reads x from its post on, while rank 1's put may still land in it
        else:
            fresh = r.buffer("fresh", count=4, role="input")
            got = r.buffer("got", count=4, role="output")
            r.put(0, x, fresh)
            r.quiet()
            r.recv(0, got)

    def ordered(r):
        x = r.symmetric("x", count=4, role="inout")
        if r.rank == 0:
            r.barrier_all()  # rank 1's put has landed before the send is posted
            r.send(1, x)
        else:
            fresh = r.buffer("fresh", count=4, role="input")
            got = r.buffer("got", count=4, role="output")
            r.put(0, x, fresh)
            r.barrier_all()
            r.recv(0, got)

    found = _verdict(racy)
    assert found.verdict == "violated"
    message = next(v.message for v in found.violations if v.kind == "data_race")
    assert "send(peer=1, x[0:4]), posted and not complete" in message and "put(pe=0" in message
    assert _verdict(ordered).verdict == "verified"


def test_a_collective_member_goes_on_before_another_writes():
    def racy(r):
        x = r.symmetric("x", count=4, role="input")
        out = r.symmetric("out", count=8, role="output")
        mine = r.buffer("mine", count=8, role="output")
        r.all_gather(x, out)
        r.get(1 - r.rank, mine, out)  # the peer may still be writing out

    def ordered(r):
        x = r.symmetric("x", count=4, role="input")
        out = r.symmetric("out", count=8, role="output")
        mine = r.buffer("mine", count=8, role="output")
        r.all_gather(x, out)
        r.barrier()
        r.get(1 - r.rank, mine, out)

    assert _verdict(racy).verdict == "violated"
    assert _verdict(ordered).verdict == "verified"


def test_overlapping_members_of_one_group_race():
    def racy(r):
        x = r.buffer("x", count=2, role="inout")
        with r.group():
            r.recv(1 - r.rank, x.element(0))
            r.send(1 - r.rank, x.element(0))

    def disjoint(r):
        x = r.buffer("x", count=2, role="inout")
        with r.group():
            r.recv(1 - r.rank, x.element(0))
            r.send(1 - r.rank, x.element(1))

    assert _verdict(racy).verdict == "violated"
    assert _verdict(disjoint).verdict == "verified"


def _ring_sched(world=4):
    path = cw.load_file("protocols/ring_allreduce.py")[0]
    return path.trace(world)


def test_the_static_order_orders_a_recv_before_its_rank_and_not_its_sender():
    sched = cw.schedule(ranks=(2,))(pair).trace(2)
    order = StaticOrder(sched, matches=match(sched)[0])
    recv, receiver_next, sender_next = (1, 0, None), (1, 1, None), (0, 1, None)
    assert order.ordered(recv, receiver_next, False, False)
    assert not order.ordered(recv, sender_next, False, False)
    assert order.ordered((0, 0, None), sender_next, False, False)


def pair(r):
    y = r.symmetric("y", count=4, role="output")
    if r.rank == 0:
        x = r.buffer("x", count=4, role="input")
        r.send(1, x)
        r.fill(x, 0.0)
    else:
        r.recv(0, y)
        r.fill(y, 1.0)


def test_the_simulator_lands_at_once():
    """A landing takes no time of its own in the simulator (the transfer's time covers the write):
    after every timed step, none is left in flight, and the run ends with every rank done."""
    sched = _ring_sched(4)
    sim = Simulator(sched, from_topology(TOPOLOGY, sched.world), CONSTANTS)
    seen = []
    apply = sim._apply

    def watched(action):
        apply(action)
        seen.append(any(index < 0 for _issuer, index, _ in sim.state.in_flight))

    sim._apply = watched
    timeline = sim.run()
    assert timeline.total_us > 0 and seen and not any(seen)
    assert sim.model.done(sim.state)
