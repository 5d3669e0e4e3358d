"""Connections with slots and channels (`send(..., channel=, slots=)`): what the checker, the DSL, the
simulator and the backends make of them. The executors run them in tests/test_runtime_mpi.py; the
reduction's exactness with them is tests/test_por_properties.py's `fifo` events."""

from __future__ import annotations

import inspect
import os

import pytest

import clockworks_dist as cw
from clockworks_dist.check import check
from clockworks_dist.codegen import program as codegen
from clockworks_dist.errors import ScheduleError
from clockworks_dist.runtime import cupy_nccl  # noqa: F401  (registers its backend table)
from clockworks_dist.semantics.backends import BACKENDS, Unsupported

HERE = os.path.basename(__file__)


def line_of(fn, marker: str = "# HERE") -> int:
    lines, first = inspect.getsourcelines(fn)
    return next(first + i for i, text in enumerate(lines) if marker in text)


def exchange(messages: int, slots: int, channel_of=lambda k: 0):
    """Two ranks each send `messages` messages to the other, then receive them."""
    def body(r):
        peer = 1 - r.rank
        x = r.buffer("x", count=2 * messages, role="inout")
        for k in range(messages):
            r.send(peer, x.region(r.rank * messages + k, r.rank * messages + k + 1), slots=slots,
                   channel=channel_of(k))
        for k in range(messages):
            r.recv(peer, x.region(peer * messages + k, peer * messages + k + 1), slots=slots, channel=channel_of(k))
    return cw.schedule(body, name="exchange", expect=cw.allgather("x")).trace(2)


@pytest.mark.parametrize("messages, slots, verdict", [
    (1, 0, "violated"),  # rendezvous: both ranks block in their first send
    (1, 1, "verified"),
    (2, 1, "violated"),  # the second send finds the FIFO full
    (2, 2, "verified"),
    (3, 2, "violated"),
    (3, 3, "verified"),
])
@pytest.mark.parametrize("reduction", [True, False])
def test_a_send_completes_alone_exactly_while_its_fifo_has_room(messages, slots, verdict, reduction):
    result = check(exchange(messages, slots), reduction=reduction)
    assert result.complete and result.verdict == verdict
    if verdict == "violated":
        assert result.kinds() == {"deadlock"}
        text = result.errors[0].message
        assert ("connection to rank 1 is full" in text) == (slots > 0), text


def test_channels_are_separate_fifos():
    # two messages each way, one per channel, one slot each: both sends find room in their own FIFO
    assert check(exchange(2, 1, channel_of=lambda k: k)).verdict == "verified"
    assert check(exchange(2, 1)).verdict == "violated"


def test_a_recv_takes_the_oldest_message_of_its_connection():
    # rank 0 sends a then b on one connection; rank 1 receives into p then q: p gets a, q gets b
    @cw.schedule(expect=cw.custom(lambda world: [cw.equals(1, "p", 0, 1, (0, "a", 0)),
                                                 cw.equals(1, "q", 0, 1, (0, "b", 0))]))
    def ordered(r):
        a, b = r.buffer("a", count=1, role="input"), r.buffer("b", count=1, role="input")
        p, q = r.buffer("p", count=1, role="output"), r.buffer("q", count=1, role="output")
        if r.rank == 0:
            r.send(1, a, slots=2)
            r.send(1, b, slots=2)
        else:
            r.recv(0, p, slots=2)
            r.recv(0, q, slots=2)
    assert check(ordered.trace(2)).verdict == "verified"


def test_a_send_reads_its_source_when_it_goes_so_a_later_write_does_not_race():
    @cw.schedule(expect=cw.custom(lambda world: [cw.equals(1, "y", 0, 1, (0, "x", 0))]))
    def reuse(r):
        x, y = r.buffer("x", count=1, role="input"), r.buffer("y", count=1, role="output")
        if r.rank == 0:
            r.send(1, x, slots=1)
            r.fill(x, 7.0)  # the message holds a copy: overwriting the source is fine
        else:
            r.recv(0, y, slots=1)
    result = check(reuse.trace(2))
    assert result.verdict == "verified", [v.message for v in result.violations]


def test_both_ends_must_state_the_same_slots():
    def body(r):
        x = r.buffer("x", count=1)
        if r.rank == 0:
            r.send(1, x, slots=2)
        else:
            r.recv(0, x, slots=1)  # HERE
    result = check(cw.schedule(body, name="t").trace(2))
    assert result.kinds() == {"send_recv_mismatch"}
    v = result.errors[0]
    assert "2 slots but the matching recv says 1" in v.message
    assert {o.loc.line for o in v.ops} >= {line_of(body)}


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(slots=-1), "slots -1 is out of range 0..1024"),
    (dict(slots=2000), "slots 2000 is out of range 0..1024"),
    (dict(slots=1.5), "slots must be an integer, got float 1.5"),
    (dict(channel=True), "channel must be an integer, got bool True"),
    (dict(channel=4096), "channel 4096 is out of range 0..1023"),
])
def test_bad_slots_and_channels_name_the_users_line(kwargs, fragment):
    def body(r):
        x = r.buffer("x", count=1)
        r.send(1 - r.rank, x, **kwargs)  # HERE
    with pytest.raises(ScheduleError) as info:
        cw.schedule(body, name="t").trace(2)
    err = info.value
    assert (err.file, err.line, err.rank, err.op) == (HERE, line_of(body), 0, "send"), str(err)
    assert fragment in str(err)


def test_nccl_backends_refuse_slots_and_channels_with_the_reason():
    sched = exchange(2, 2)
    problems = codegen.unsupported(sched, "nccl")
    assert problems and all("slots=2" in p for p in problems), problems
    assert f"{HERE}:" in problems[0]
    send = sched.programs[0].ops[0]
    with pytest.raises(Unsupported, match="channel=1: NCCL matches"):
        BACKENDS["cupy"].lookup(send.model_copy(update={"slots": 0, "channel": 1}))
    assert BACKENDS["cupy"].lookup(send.model_copy(update={"slots": 0})) is not None


def test_the_simulator_times_a_send_that_completes_alone():
    from clockworks_dist.perf.network import from_topology
    from clockworks_dist.perf.simulate import Simulator
    from clockworks_dist.topology import load_topology

    topo = load_topology("h200x2-nv18")
    sched = exchange(2, 2)
    timeline = Simulator(sched, from_topology(topo, 2), topo.constants).run()
    sends = [r for r in timeline.records if r.kind == "send"]  # a record per send, and one per transfer
    assert {(r.rank, r.index) for r in sends} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert all(r.end > r.start for r in sends)
    # no send waits for a receiver: each starts once the one before it on its rank has ended, and
    # every transfer is over before the first recv completes
    recvs = [r for r in timeline.records if r.kind == "recv"]
    assert len(recvs) == 4 and max(r.end for r in sends) <= min(r.end for r in recvs) + 1e-9
