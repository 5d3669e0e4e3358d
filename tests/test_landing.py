"""Each side of a send/recv and each member of a collective completes on its own (`rules.lands`).

NCCL and MPI do not complete a matched send and recv, or a collective, in one step on every rank:
a sender goes on once its recv has matched (or its data has left) while the receiver still writes
`dst`; a collective member goes on while another still writes its output; a posted send may
read its `src` at any time until it completes; and a collective member reads its `src` (and may
write its own `dst`) from its arrival, before the other members have called the collective.
Each test below is a schedule the checker used to verify (when it completed these in one joint
step) and must now report, beside its correct twin.
"""

from __future__ import annotations

import json

import pytest

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


ENGINES = (("dfs", True), ("dfs", False), ("bfs", True))


def _race_ops(result) -> set[frozenset]:
    """Each data race as the set of (rank, op kind) it names."""
    return {frozenset((o.rank, o.kind) for o in v.ops) for v in result.violations if v.kind == "data_race"}


def _every_engine(fn, world=2) -> list:
    sched = cw.schedule(ranks=(world,))(fn).trace(world)
    found = [check(sched, strategy=strategy, reduction=reduction) for strategy, reduction in ENGINES]
    assert all(result.complete for result in found)
    return found


def test_a_collective_member_reads_its_source_from_its_arrival():
    """NCCL's kernel reads a member's source as soon as that member runs it (its first chunks go to
    the peer's FIFO slots before the peer has called the collective), so rank 1's all-reduce may
    read x before rank 0's put lands: rank 0's quiet completes the put for rank 0 only."""
    def racy(r):
        x = r.symmetric("x", count=2, role="inout")
        y = r.buffer("y", count=2, role="input")
        if r.rank == 0:
            r.put(1, x, y)
            r.quiet()
        r.all_reduce(x)

    def met(r):  # every member meets after the quiet: the put has landed before rank 1 arrives
        x = r.symmetric("x", count=2, role="inout")
        y = r.buffer("y", count=2, role="input")
        if r.rank == 0:
            r.put(1, x, y)
            r.quiet()
        r.barrier()
        r.all_reduce(x)

    def acknowledged(r):  # rank 1 waits for the put's signal before it calls the all-reduce
        x = r.symmetric("x", count=2, role="inout")
        y = r.buffer("y", count=2, role="input")
        landed = r.signal("landed")
        if r.rank == 0:
            r.put_signal(1, x, y, landed, 1)
        else:
            r.wait_until(landed, "ge", 1)
        r.all_reduce(x)

    for result in _every_engine(racy):
        assert result.verdict == "violated" and result.kinds() == {"data_race"}
        assert _race_ops(result) == {frozenset({(0, "put"), (1, "all_reduce")})}
        message = next(v.message for v in result.violations if v.kind == "data_race")
        assert "all_reduce(x[0:2] -> x[0:2], sum), posted and not complete" in message
        assert "rank 0's put(pe=1, x[0:2] <- y[0:2]) writes x[0:2]" in message
    for twin in (met, acknowledged):
        assert [result.verdict for result in _every_engine(twin)] == ["verified"] * len(ENGINES)


def test_the_cli_reports_a_put_into_a_collective_source(capsys):
    from clockworks_dist import cli
    path = "protocols/buggy/put_into_collective_source.py"
    assert cli.main(["check", path, "--ranks", "2", "--json"]) == 1
    found = json.loads(capsys.readouterr().out)
    assert found["verdict"] == "violated"
    races = [v for v in found["violations"] if v["kind"] == "data_race"]
    assert races and {(o["rank"], o["kind"], o["line"]) for o in races[0]["ops"]} == {(0, "put", 34),
                                                                                     (1, "all_reduce", 36)}
    assert cli.main(["check", "protocols/put_signal_before_collective.py", "--ranks", "2"]) == 0


def _meet(r, meet: bool) -> None:
    if meet:
        r.barrier()


def _put_into_all_gather_dst(r, meet):  # a member may write its own chunk of dst at once
    x = r.buffer("x", count=2, role="input")
    g = r.symmetric("g", count=4, role="output")
    y = r.buffer("y", count=4, role="input")
    if r.rank == 0:
        r.put(1, g, y)
        r.quiet()
    _meet(r, meet)
    r.all_gather(x, g)


def _put_into_reduce_scatter_src(r, meet):
    x = r.symmetric("x", count=4, role="input")
    o = r.buffer("o", count=2, role="output")
    y = r.buffer("y", count=4, role="input")
    if r.rank == 0:
        r.put(1, x, y, nbi=True)
        r.quiet()
    _meet(r, meet)
    r.reduce_scatter(x, o)


def _put_into_broadcast_root(r, meet):
    x = r.symmetric("x", count=2, role="inout")
    y = r.buffer("y", count=2, role="input")
    if r.rank == 1:
        r.put(0, x, y)
        r.quiet()
    _meet(r, meet)
    r.broadcast(x, x, root=0)


def _put_into_reduce_src(r, meet):  # rank 1 is no root: it reads its source and writes nothing
    x = r.symmetric("x", count=2, role="input")
    o = r.buffer("o", count=2, role="output")
    y = r.buffer("y", count=2, role="input")
    if r.rank == 0:
        r.put(1, x, y)
        r.quiet()
    _meet(r, meet)
    r.reduce_to(0, x, o if r.rank == 0 else None)


def _put_into_grouped_collective(r, meet):
    x = r.symmetric("x", count=2, role="inout")
    b = r.buffer("b", count=2, role="inout")
    y = r.buffer("y", count=2, role="input")
    if r.rank == 0:
        r.put(1, x, y)
        r.quiet()
    _meet(r, meet)
    with r.group():
        r.all_reduce(b)
        r.all_reduce(x)


def _get_from_all_reduce_dst(r, meet):  # another rank's blocking read of what the member may write
    x = r.symmetric("x", count=2, role="inout")
    z = r.buffer("z", count=2, role="output")
    if r.rank == 0:
        r.get(1, z, x)
    _meet(r, meet)
    r.all_reduce(x)


def _put_into_team_reduce_src(r, meet):
    x = r.symmetric("x", count=2, role="input")
    o = r.symmetric("o", count=2, role="output")
    y = r.buffer("y", count=2, role="input")
    team = r.team_split_strided("pair", start=0, stride=1, size=2)
    if r.rank == 0:
        r.put(1, x, y)
        r.quiet()
    if meet:
        r.team_sync(team)
    r.team_reduce(team, o, x)


@pytest.mark.parametrize("case, other, member", [
    (_put_into_all_gather_dst, (0, "put"), (1, "all_gather")),
    (_put_into_reduce_scatter_src, (0, "put"), (1, "reduce_scatter")),
    (_put_into_broadcast_root, (1, "put"), (0, "broadcast")),
    (_put_into_reduce_src, (0, "put"), (1, "reduce_to")),
    (_put_into_grouped_collective, (0, "put"), (1, "all_reduce")),  # the member, inside its group
    (_get_from_all_reduce_dst, (0, "get"), (1, "all_reduce")),
    (_put_into_team_reduce_src, (0, "put"), (1, "all_reduce")),
], ids=lambda v: v.__name__.strip("_") if callable(v) else None)
def test_an_access_while_a_member_has_arrived_races_with_it(case, other, member):
    """From a member's arrival until its sources are read, its source and its own destination are in
    flight: another actor's conflicting access in that window races, and a barrier before the
    collective (or a team sync) takes it out of the window."""
    for result in _every_engine(lambda r: case(r, False)):
        assert result.verdict == "violated" and "data_race" in result.kinds()
        assert frozenset({other, member}) in _race_ops(result), _race_ops(result)
    for result in _every_engine(lambda r: case(r, True)):
        assert result.verdict == "verified", [v.message for v in result.violations]


def test_a_member_of_a_reduce_that_is_no_root_reads_its_source_until_it_completes():
    """A non-root member of a reduce writes nothing, and its completion says nothing of another
    member's reads: in NCCL's chain toward the root, rank 1 is done once its last chunk is in the next
    member's buffer, while rank 2 may still be reading its own x. So rank 1's put into rank 2's x
    after its reduce races with rank 2's reduce, unless the members meet first."""
    def racy(r, meet=False):
        x = r.symmetric("x", count=2, role="scratch")
        y = r.buffer("y", count=2, role="input")
        out = r.buffer("out", count=2, role="output")
        r.reduce_to(0, x, out if r.rank == 0 else None)
        if meet:
            r.barrier()
        if r.rank == 1:
            r.put(2, x, y)
            r.quiet()

    for result in _every_engine(racy, world=3):
        assert result.verdict == "violated" and result.kinds() == {"data_race"}
        assert _race_ops(result) == {frozenset({(1, "put"), (2, "reduce_to")})}
    for result in _every_engine(lambda r: racy(r, meet=True), world=3):
        assert result.verdict == "verified", [v.message for v in result.violations]


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
