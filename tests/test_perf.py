"""The performance model: max-min fair sharing, the timed simulator, NCCL plans, size binding and
bandwidth conventions, traces, predictions on shipped topologies, `clockworks predict`, and the
calibrated topology with its raw measurements."""

from __future__ import annotations

import json
import math
import signal
import textwrap
from types import SimpleNamespace
from pathlib import Path

import pytest

import clockworks_dist as cw
from clockworks_dist import cli, load_file
from clockworks_dist.errors import ScheduleError, TopologyError
from clockworks_dist.lowering import Build, as_built
from clockworks_dist.perf import fit, nccl, nccl_tuning
from clockworks_dist.perf.costs import RunConditions
from clockworks_dist.perf.flows import Flow, max_min_rates
from clockworks_dist.perf.microbench import KERNEL_OPS, MICROBENCHMARKS, broadcast_op
from clockworks_dist.perf.network import Network, from_topology
from clockworks_dist.perf.predict import (
    bound, busbw_factor, link_utilisation, parse_size, parse_sizes, predict_sizes, size_binding, steady_state_us,
)
from clockworks_dist.perf.simulate import PredictError, Simulator
from clockworks_dist.report.perf import chrome_trace
from clockworks_dist.topology import Constants, load_topology

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = ROOT / "protocols"
RING = str(PROTOCOLS / "ring_allreduce.py")
MEASURED = ROOT / "topologies" / "measured" / "h200x2-nv18.yaml"
RAW = ROOT / "topologies" / "measured" / "raw" / "calibration_raw.jsonl"

KiB, MiB = 1024, 1024 * 1024


def write(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).lstrip())
    return str(path)


def schedule_of(path) -> cw.ScheduleDef:
    return load_file(str(path))[0]


# ------------------------------------------------------------------------------ max-min fairness
def flow(fid, resources, ceiling=None, remaining=1.0):
    return Flow(fid=fid, resources=tuple(resources), remaining=remaining, ceiling=ceiling)


def test_one_flow_gets_the_capacity():
    f = flow(0, [0])
    max_min_rates([f], [7.5])
    assert f.rate == pytest.approx(7.5)


def test_two_flows_share_a_link_equally():
    a, b = flow(0, [0]), flow(1, [0])
    max_min_rates([a, b], [10.0])
    assert (a.rate, b.rate) == (pytest.approx(5.0), pytest.approx(5.0))


def test_flows_on_disjoint_links_do_not_interact():
    a, b = flow(0, [0]), flow(1, [1])
    max_min_rates([a, b], [10.0, 3.0])
    assert (a.rate, b.rate) == (pytest.approx(10.0), pytest.approx(3.0))


def test_classic_three_flow_example():
    # link A (cap 10) carries flows 1 and 2; link B (cap 4) carries flows 2 and 3.
    # B saturates first at 2 each; flow 1 then takes what is left of A: 10 - 2 = 8.
    f1, f2, f3 = flow(1, [0]), flow(2, [0, 1]), flow(3, [1])
    max_min_rates([f1, f2, f3], [10.0, 4.0])
    assert f1.rate == pytest.approx(8.0)
    assert f2.rate == pytest.approx(2.0)
    assert f3.rate == pytest.approx(2.0)
    # the allocation is feasible and saturates both links
    assert f1.rate + f2.rate == pytest.approx(10.0)
    assert f2.rate + f3.rate == pytest.approx(4.0)


def test_a_ceiling_below_the_fair_share_frees_bandwidth():
    slow, fast = flow(0, [0], ceiling=2.0), flow(1, [0])
    max_min_rates([slow, fast], [10.0])
    assert slow.rate == pytest.approx(2.0)
    assert fast.rate == pytest.approx(8.0)


def test_a_ceiling_above_the_fair_share_changes_nothing():
    a, b = flow(0, [0], ceiling=7.0), flow(1, [0])
    max_min_rates([a, b], [10.0])
    assert (a.rate, b.rate) == (pytest.approx(5.0), pytest.approx(5.0))


def test_three_ceilings_and_one_free_flow():
    flows = [flow(0, [0], ceiling=1.0), flow(1, [0], ceiling=2.0), flow(2, [0], ceiling=3.0), flow(3, [0])]
    max_min_rates(flows, [12.0])
    assert [f.rate for f in flows] == [pytest.approx(x) for x in (1.0, 2.0, 3.0, 6.0)]


def test_flows_with_no_resources():
    free, capped = flow(0, []), flow(1, [], ceiling=4.0)
    other = flow(2, [0])
    max_min_rates([free, capped, other], [5.0])
    assert free.rate == float("inf")
    assert capped.rate == pytest.approx(4.0)
    assert other.rate == pytest.approx(5.0)


def test_finished_flows_get_no_rate_and_leave_the_link_to_others():
    done, live = flow(0, [0], remaining=0.0), flow(1, [0])
    done.rate = 99.0
    max_min_rates([done, live], [10.0])
    assert done.rate == 0.0
    assert live.rate == pytest.approx(10.0)


def test_weighted_load_two_opposite_flows_with_acknowledgements():
    # each flow loads its own direction fully and the other with 0.25 of its rate:
    # d + 0.25 d = 100 on both directions, so d = 80 (one way alone: 100)
    ab = Flow(fid=0, resources=(0, 1), weights=(1.0, 0.25), remaining=1.0)
    ba = Flow(fid=1, resources=(1, 0), weights=(1.0, 0.25), remaining=1.0)
    max_min_rates([ab, ba], [100.0, 100.0])
    assert (ab.rate, ba.rate) == (pytest.approx(80.0), pytest.approx(80.0))
    alone = Flow(fid=2, resources=(0, 1), weights=(1.0, 0.25), remaining=1.0)
    max_min_rates([alone], [100.0, 100.0])
    assert alone.rate == pytest.approx(100.0)


def test_weighted_load_saturates_the_shared_resource_first():
    # a loads r0 (cap 60) fully; b loads r0 with half its rate and r1 (cap 30) fully. Raising both:
    # r0 fills at 40 (40 + 0.5 * 40), r1 at 30, so r1 first: b stops at 30; a gets 60 - 0.5 * 30 = 45
    a = Flow(fid=0, resources=(0,), remaining=1.0)
    b = Flow(fid=1, resources=(0, 1), weights=(0.5, 1.0), remaining=1.0)
    max_min_rates([a, b], [60.0, 30.0])
    assert b.rate == pytest.approx(30.0)
    assert a.rate == pytest.approx(45.0)


# ------------------------------------------------------------------------------ the simulator
LINK_01, LINK_10, HBM0, HBM1 = 0, 1, 2, 3


def two_ranks(link_GBs: float = 100.0, latency_us: float = 0.5, hbm_GBs: float = 3000.0,
              transport: str = "nvlink") -> Network:
    """Two GPUs, one link per direction (resources 0: 0->1, 1: 1->0), and an HBM each; the link is
    `transport` (over "net", a put's rank goes on once it is issued: a proxy moves the bytes)."""
    routes = {(0, 1): ((LINK_01,), latency_us), (1, 0): ((LINK_10,), latency_us)}
    return Network(names=["link 0->1", "link 1->0", "gpu0 HBM", "gpu1 HBM"],
                   capacity=[link_GBs * 1e3, link_GBs * 1e3, hbm_GBs * 1e3, hbm_GBs * 1e3],
                   hbm_of=[HBM0, HBM1], router=lambda s, d: routes[(s, d)],
                   transports={(0, 1): transport, (1, 0): transport})


# Distinct, made-up constants, so that every term of the expected time is visible.
CONSTS = dict(graph_launch_us=1.5, nccl_base_latency_us={"LL": 2.0, "LL128": 3.0, "Simple": 4.0},
              nccl_channel_GBs={"LL": 5.0, "LL128": 10.0, "Simple": 20.0}, nccl_p2p_max_channels=16,
              nccl_p2p_base_latency_us={"LL": 2.0, "LL128": 3.0, "Simple": 4.0}, nvshmem_put_latency_us=1.0,
              nvshmem_signal_latency_us=0.7, nvshmem_block_GBs=40.0)


def consts(**changes) -> Constants:
    return Constants(**{**CONSTS, **changes})


N = cw.size("N", 256)
M = cw.size("M", 16)


@cw.schedule
def ping(r):
    x = r.buffer("x", count=N, role="input")
    if r.rank == 0:
        r.send(1, x)
    else:
        r.recv(0, x)


@cw.schedule
def exchange(r):
    x = r.buffer("x", count=N, role="input")
    y = r.buffer("y", count=N, role="output")
    with r.group():
        r.send(1 - r.rank, x)
        r.recv(1 - r.rank, y)


@cw.schedule
def two_sends_same_way(r):
    x = r.buffer("x", count=2 * N, role="inout")
    with r.group():
        for part in range(2):
            if r.rank == 0:
                r.send(1, x.chunk(part, 2))
            else:
                r.recv(0, x.chunk(part, 2))


@cw.schedule
def ring_without_group(r):
    x = r.buffer("x", count=N, role="input")
    y = r.buffer("y", count=N, role="output")
    r.send(1 - r.rank, x)  # both ranks block here: sends are rendezvous
    r.recv(1 - r.rank, y)


@cw.schedule
def unmatched_send(r):
    x = r.buffer("x", count=N, role="input")
    if r.rank == 0:
        r.send(1, x)


@cw.schedule
def local_reduce(r):
    x = r.buffer("x", count=N, role="inout")
    t = r.buffer("t", count=N, role="scratch")
    r.reduce(x, x, t)


def put_then_signal(fence: bool):
    @cw.schedule(name=f"put_then_signal_{'fence' if fence else 'nofence'}")
    def body(r):
        big = r.symmetric("big", count=N, role="inout")
        small = r.symmetric("small", count=M, role="inout")
        ready = r.signal("ready")
        if r.rank == 0:
            r.put(1, big, big, nbi=True)
            if fence:
                r.fence()
            r.put_signal(1, small, small, ready, 1, op="set", nbi=True)
            r.quiet()
        else:
            r.wait_until(ready, "ge", 1)
    return body


PUT_FENCE, PUT_NOFENCE = put_then_signal(True), put_then_signal(False)


def run(defn, net=None, c=None, world=2, **sizes):
    return Simulator(defn.trace(world, sizes=sizes or None), net or two_ranks(), c or consts()).run()


def p2p_time(c: Constants, nbytes: float, link_GBs: float, latency_us: float) -> tuple[str, float]:
    proto, channels, ceiling = nccl.p2p_choice(c, nbytes, link_GBs)
    rate = min(link_GBs, ceiling) * 1e3
    # Simple: the receiver then copies its last chunk (at most 512 KiB on NVLink) out of the staging buffer
    staging = min(nbytes / channels, 512 * KiB) / (c.nccl_copy_channel_GBs * 1e3) if proto == "Simple" else 0.0
    fixed = c.graph_launch_us + c.nccl_p2p_base_latency_us[proto] + latency_us
    return proto, fixed + nbytes / nccl.EFFICIENCY[proto] / rate + staging


@pytest.mark.parametrize("nbytes, link_GBs, proto, limited_by", [
    (4 * KiB, 100.0, "LL", "channels"),  # LL, one channel at 5 GB/s
    # Simple, 8 channels (160 GB/s): NCCL gives a send at most half the 16 p2p channels on 2 ranks
    (4 * MiB, 100.0, "Simple", "link"),  # ... on a 100 GB/s link
    (4 * MiB, 500.0, "Simple", "channels"),  # ... on a 500 GB/s link
])
def test_single_send_recv_time(nbytes, link_GBs, proto, limited_by):
    c = consts()
    tl = run(ping, two_ranks(link_GBs, latency_us=0.5), c, N=nbytes // 4)
    chosen, _, ceiling = nccl.p2p_choice(c, nbytes, link_GBs)
    assert chosen == proto
    assert (ceiling < link_GBs) == (limited_by == "channels")
    _, expected = p2p_time(c, nbytes, link_GBs, 0.5)
    assert tl.total_us == pytest.approx(expected, rel=1e-9)
    # written out by hand for the first case: 1.5 launch + 2 LL base + 0.5 route + 4096 / 0.5 / 5000
    if nbytes == 4 * KiB:
        assert tl.total_us == pytest.approx(1.5 + 2.0 + 0.5 + 4096 / 0.5 / 5000)
    # both sides finish together; the link carried the wire bytes (LL doubles them)
    ends = {r.rank: r.end for r in tl.records if r.kind in ("send", "recv")}
    assert ends[0] == pytest.approx(ends[1])
    assert tl.link_bytes[LINK_01] == pytest.approx(nbytes / nccl.EFFICIENCY[proto])
    assert LINK_10 not in tl.link_bytes


def test_opposite_directions_do_not_slow_each_other():
    nbytes = 4 * MiB
    one = run(ping, N=nbytes // 4).total_us
    both = run(exchange, N=nbytes // 4)
    assert both.total_us == pytest.approx(one, rel=1e-9)
    assert both.link_bytes[LINK_01] == pytest.approx(nbytes)
    assert both.link_bytes[LINK_10] == pytest.approx(nbytes)


def test_same_direction_transfers_share_the_link():
    c, nbytes = consts(), 4 * MiB
    one = run(ping, c=c, N=nbytes // 4).total_us
    two = run(two_sends_same_way, c=c, N=nbytes // 4)  # two sends of nbytes each, at once
    channels = nccl.p2p_choice(c, nbytes, 100.0)[1]
    staging = min(nbytes / channels, 512 * KiB) / (c.nccl_copy_channel_GBs * 1e3)
    fixed = c.graph_launch_us + c.nccl_p2p_base_latency_us["Simple"] + 0.5 + staging
    assert one - fixed == pytest.approx(nbytes / 100e3)
    assert two.total_us - fixed == pytest.approx(2 * (one - fixed), rel=1e-6)
    assert two.link_bytes[LINK_01] == pytest.approx(2 * nbytes)


def test_ring_without_group_deadlocks():
    with pytest.raises(PredictError, match=r"deadlocks: rank\(s\) 0, 1 never finish.*clockworks check"):
        run(ring_without_group)


def test_shipped_ring_without_group_deadlocks():
    routes = lambda s, d: ((0,), 0.5)  # noqa: E731 - every pair over one shared link
    net = Network(names=["link", "h0", "h1", "h2", "h3"], capacity=[1e5] + [3e6] * 4, hbm_of=[1, 2, 3, 4],
                  router=routes)
    defn = schedule_of(PROTOCOLS / "buggy" / "ring_allreduce_no_group.py")
    with pytest.raises(PredictError, match="deadlocks"):
        Simulator(defn.trace(4), net, consts()).run()


def test_a_schedule_that_does_not_match_is_refused():
    with pytest.raises(PredictError, match="does not match.*clockworks check"):
        run(unmatched_send)


def test_local_reduce_is_bounded_by_hbm():
    c, nbytes = consts(), 1 * MiB
    tl = run(local_reduce, two_ranks(hbm_GBs=2000.0), c, N=nbytes // 4)
    # reads x and t, writes x: three times the buffer over HBM, after a plain kernel's launch
    assert tl.total_us == pytest.approx(c.local_graph_launch_us + 3 * nbytes / 2000e3)
    assert tl.link_bytes[HBM0] == pytest.approx(3 * nbytes)
    assert tl.link_bytes[HBM1] == pytest.approx(3 * nbytes)


def test_put_signal_wakes_the_waiter_after_delivery():
    c = consts()
    tl = run(PUT_NOFENCE, c=c, N=16, M=16)
    deliveries = {r.text: r for r in tl.records if r.kind == "delivery"}
    signal_delivery = next(r for t, r in deliveries.items() if "put_signal" in t)
    waiter = next(r for r in tl.records if r.kind == "wait_until")
    assert waiter.rank == 1
    assert waiter.end == pytest.approx(signal_delivery.end)
    assert waiter.cause is signal_delivery and waiter.cause_kind == "signal"
    # over NVLink the put's threads store its 64 bytes (at 40 GB/s) before rank 0 goes on: put_signal
    # issued at 1 + 64 / 40e3, + 1 issue, then its own 64 bytes cross (route 0.5), their acknowledgement
    # comes back (0.5), and only then the signal crosses (0.5 + the signal's own latency)
    issued = 2 * c.nvshmem_put_latency_us + 64 / 40e3
    assert signal_delivery.end == pytest.approx(issued + 64 / 40e3 + 3 * 0.5 + c.nvshmem_signal_latency_us)


def test_simulated_time_and_events_are_bounded():
    from clockworks_dist.perf.events import MAX_SIMULATED_US, FlowEngine

    engine = FlowEngine(two_ranks())
    engine.at(MAX_SIMULATED_US * 10, lambda: None)
    with pytest.raises(PredictError, match="simulated time passed.*at 3 of 4 ops done"):
        engine.run(100, lambda: "3 of 4 ops done")
    stuck = FlowEngine(two_ranks())

    def again():
        stuck.at(stuck.now, again)  # an event that only ever schedules itself, at the same time
    stuck.at(0.0, again)
    with pytest.raises(PredictError, match="handled 100 events without finishing.*time has stopped advancing"):
        stuck.run(100, lambda: "0 of 1 ops done")


def test_run_conditions_set_put_blocks_and_nccl_channels():
    """What calibration varies per measured cell is an argument of the run, not a constant."""
    c, net = consts(), two_ranks(link_GBs=400.0, transport="net")
    sched = PUT_NOFENCE.trace(2, sizes={"N": 1 << 20, "M": 16})
    one = Simulator(sched, net, c, conditions=RunConditions(nvshmem_blocks=1)).run().total_us
    four = Simulator(sched, net, c, conditions=RunConditions(nvshmem_blocks=4)).run().total_us
    moved = 4 * MiB / 40e3  # the big put: one block at 40 GB/s, or four at 160
    assert one - four == pytest.approx(moved - moved / 4, rel=1e-6)
    # by default a put gets the blocks the generated code spreads it over: 4 MiB / 64 KiB = 64 blocks
    # (2,560 GB/s, so the link is the ceiling), the 16-byte put one block
    from clockworks_dist import lowering

    assert lowering.nvshmem_blocks(4 * MiB) == 64 and lowering.nvshmem_blocks(16) == 1
    assert lowering.nvshmem_blocks(1 << 30) == lowering.NVSHMEM_MAX_BLOCKS
    spread = Simulator(sched, net, c).run().total_us
    assert spread == pytest.approx(Simulator(sched, net, c, conditions=RunConditions(nvshmem_blocks=64)).run().total_us)
    assert spread < four
    full = run(ping, c=c, N=1 << 20)
    capped = Simulator(ping.trace(2, sizes={"N": 1 << 20}), two_ranks(), c,
                       conditions=RunConditions(channel_cap=1)).run()
    assert [r.detail["channels"] for r in capped.records if "channels" in r.detail] == [1]
    assert capped.total_us > full.total_us


def test_fence_orders_deliveries_to_the_same_pe():
    big, net = 1 * MiB, two_ranks(transport="net")  # over a network, the rank goes on once a put is issued
    free = run(PUT_NOFENCE, net, N=big // 4, M=16)
    fenced = run(PUT_FENCE, net, N=big // 4, M=16)

    def delivery(tl, word):
        return next(r for r in tl.records if r.kind == "delivery" and r.text.startswith(f"delivery of {word}("))

    # without a fence the small signalling put overtakes the big one
    assert delivery(free, "put_signal").end < delivery(free, "put").end
    # with a fence it lands after it, and the waiter (rank 1) wakes only then
    assert delivery(fenced, "put_signal").end > delivery(fenced, "put").end
    waiter = next(r for r in fenced.records if r.kind == "wait_until")
    assert waiter.end >= delivery(fenced, "put").end
    assert fenced.total_us > free.total_us


def test_a_put_between_gpus_keeps_its_rank_until_its_bytes_have_left():
    """Over NVLink the issuing threads store a put's bytes themselves: the next op waits for them,
    so a small put_signal after a big put cannot start (or land) before the big put's bytes left."""
    held = run(PUT_NOFENCE, N=MiB // 4, M=16)
    free = run(PUT_NOFENCE, two_ranks(transport="net"), N=MiB // 4, M=16)
    c = consts()

    def record(tl, text):
        return next(r for r in tl.records if r.text.startswith(text))

    big, signal = record(held, "put("), record(held, "put_signal(")
    moved = MiB / min(100e3, 40e3 * 16)  # 1 MiB on 16 blocks of 40 GB/s, at most the link's 100 GB/s
    assert big.end == pytest.approx(c.nvshmem_put_latency_us + moved)
    assert signal.start == pytest.approx(big.end)
    assert record(free, "put(").end == pytest.approx(c.nvshmem_put_latency_us)  # a proxy moves them
    assert record(free, "delivery of put_signal(").end < record(free, "delivery of put(").end
    assert record(held, "delivery of put_signal(").end > record(held, "delivery of put(").end


def test_quiet_waits_for_every_delivery():
    tl = run(PUT_NOFENCE, two_ranks(transport="net"), N=MiB // 4, M=16)
    quiet = next(r for r in tl.records if r.kind == "quiet")
    last = max((r for r in tl.records if r.kind == "delivery" and r.rank == 0), key=lambda r: r.end)
    assert last.text.startswith("delivery of put(")  # the big put lands last
    assert quiet.end == pytest.approx(last.end)
    assert quiet.cause is last and quiet.cause_kind == "delivery completed"
    assert quiet.start < last.end  # it really waited


@cw.schedule
def bare_signal(r):
    r.buffer("x", count=N, role="input")  # the size axis; nothing moves it
    ready = r.signal("ready")
    if r.rank == 0:
        r.signal_op(1, ready, 1, op="set")
    else:
        r.wait_until(ready, "ge", 1)


def put_then(after: str):
    @cw.schedule(name=f"put_then_{after}")
    def body(r):
        big = r.symmetric("big", count=N, role="inout")
        x = r.buffer("x", count=M, role="inout")
        if r.rank == 0:
            r.put(1, big, big, nbi=True)
            getattr(r, after)()
            r.copy(x, x)  # after it, on rank 0
    return body


@cw.schedule
def one_put_signal(r):
    """Rank 0 put_signals its y into rank 1's; rank 1 waits for the signal."""
    y = r.symmetric("y", count=N, role="inout")
    ready = r.signal("ready")
    if r.rank == 0:
        r.put_signal(1, y, y, ready, 1, op="set")
    else:
        r.wait_until(ready, "ge", 1)


def test_a_bare_signal_takes_one_way_and_a_put_signal_three_over_nvlink():
    """On the load/store path a put_signal fences between its data and its signal: the signal leaves
    only once the data's acknowledgement is back (one route latency after the data lands), so it
    lands three one-way latencies after the data left; a signal_op alone takes one. Measured on
    2 x H200: 0.79 us one way for a signal, 2.34 us for a 1 KiB put_signal."""
    c = consts()
    signal = run(bare_signal, c=c, N=16)
    landed = next(r for r in signal.records if r.kind == "delivery")
    assert landed.end == pytest.approx(c.nvshmem_put_latency_us + 8 / 40e3 + 0.5 + c.nvshmem_signal_latency_us)

    moved = 64 / 40e3  # 16 floats on one block at 40 GB/s
    over_nvlink = run(one_put_signal, c=c, N=16)
    issued = next(r for r in over_nvlink.records if r.kind == "put_signal")
    delivered = next(r for r in over_nvlink.records if r.kind == "delivery")
    assert delivered.end == pytest.approx(c.nvshmem_put_latency_us + moved + 3 * 0.5 + c.nvshmem_signal_latency_us)
    # the issuing block's fence returns with the acknowledgement: rank 0 goes on one latency before the signal lands
    assert issued.end == pytest.approx(delivered.end - 0.5 - c.nvshmem_signal_latency_us)
    # over a network a proxy moves it: no thread waits for an acknowledgement here
    proxied = run(one_put_signal, two_ranks(transport="net"), c=c, N=16)
    assert next(r for r in proxied.records if r.kind == "delivery").end == pytest.approx(
        c.nvshmem_put_latency_us + moved + 0.5 + c.nvshmem_signal_latency_us)


@cw.schedule
def self_put_signal(r):
    """Each PE put_signals to itself and waits for its own signal."""
    y = r.symmetric("y", count=N, role="inout")
    z = r.symmetric("z", count=N, role="inout")
    ready = r.signal("ready")
    r.put_signal(r.rank, z, y, ready, 1, op="add")
    r.wait_until(ready, "ge", 1)


def test_a_put_signal_to_itself_still_pays_its_fence():
    """To the PE itself nothing crosses a link, but the put_signal's fence between its data and its
    signal still costs `nvshmem_fence_us` (0.51 us measured on one H200; a 1 KiB put_signal_block to
    itself takes 1.16 us there)."""
    c = consts(nvshmem_fence_us=0.25)
    tl = run(self_put_signal, c=c, N=16)
    issued = next(r for r in tl.records if r.kind == "put_signal" and r.rank == 0)
    landed = next(r for r in tl.records if r.kind == "delivery" and r.rank == 0)
    assert issued.end == pytest.approx(c.nvshmem_put_latency_us + 64 / 40e3 + 0.25)  # its bytes on one block, the fence
    assert landed.end == pytest.approx(issued.end + c.nvshmem_signal_latency_us)


@pytest.mark.parametrize("after", ["fence", "quiet"])
def test_a_fence_or_quiet_waits_for_its_stores_to_be_acknowledged(after):
    """NVSHMEM's fence and quiet on the load/store path are the thread's `__threadfence_system`: it
    returns once the stores it made are acknowledged (the put lands, then one route latency), and
    costs `nvshmem_fence_us` even with nothing in flight."""
    c = consts(nvshmem_fence_us=0.25)
    tl = run(put_then(after), c=c, N=MiB // 4, M=16)
    landed = next(r for r in tl.records if r.kind == "delivery")
    fence = next(r for r in tl.records if r.kind == after)
    assert fence.end == pytest.approx(landed.end + 0.5)
    assert next(r for r in tl.records if r.kind == "copy").start >= fence.end
    # nothing in flight: the fence's own cost
    @cw.schedule(name=f"only_{after}")
    def alone(r):
        x = r.buffer("x", count=N, role="inout")
        getattr(r, after)()
        r.copy(x, x)

    lone = next(r for r in run(alone, c=c, N=16).records if r.kind == after)
    assert lone.end - lone.start == pytest.approx(0.25)
    # over a network no thread stores the bytes: the quiet waits for the landing only, the fence not at all
    net = run(put_then(after), two_ranks(transport="net"), c=c, N=MiB // 4, M=16)
    landed, fence = (next(r for r in net.records if r.kind == k) for k in ("delivery", after))
    if after == "quiet":
        assert fence.end == pytest.approx(landed.end)
    else:
        assert fence.end == pytest.approx(fence.start + 0.25) and fence.end < landed.end


def test_a_get_is_a_request_and_the_bytes_back_and_a_fetching_atomic_a_round_trip():
    c = consts()

    @cw.schedule
    def get_and_fetch(r):
        y = r.symmetric("y", count=N, role="inout")
        z = r.buffer("z", count=N, role="output")
        word = r.symmetric("word", count=1, dtype="int64", role="scratch")
        old = r.buffer("old", count=1, dtype="int64", role="output")
        if r.rank == 0:
            r.get(1, z, y)
            r.fetch_add(1, word[0], 1, old[0])

    tl = run(get_and_fetch, c=c, N=16)
    get = next(r for r in tl.records if r.kind == "get")
    fetch = next(r for r in tl.records if r.kind == "fetch_atomic")
    assert get.end - get.start == pytest.approx(c.nvshmem_put_latency_us + 0.5 + 64 / 40e3 + 0.5
                                                + c.nvshmem_signal_latency_us)
    assert fetch.end - fetch.start == pytest.approx(2 * 0.5 + 2 * c.nvshmem_signal_latency_us)


def test_a_generated_program_fences_where_its_code_generator_plans():
    """In a generated NVSHMEM program a fence op emits no code: the order it asks for is kept by the
    fence the code generator plans before the next delivery to that PE (`plan_rank`: a step with
    `fence`), and that delivery's issue waits for the acknowledgement of the stores before it."""
    from clockworks_dist.lowering.nvshmem_plan import plan_rank

    @cw.schedule
    def publish(r):
        y = r.symmetric("y", count=N, role="inout")
        ready = r.signal("ready")
        if r.rank == 0:
            r.put(1, y, y)
            r.fence()
            r.signal_op(1, ready, 1, op="set")
        else:
            r.wait_until(ready, "ge", 1)

    sched, c = publish.trace(2, sizes={"N": 16}), consts(nvshmem_fence_us=0.25)
    assert [step.fence for step in plan_rank(sched, 0).steps] == [False, False, True]
    tl = Simulator(sched, two_ranks(), c, conditions=RunConditions(program=as_built(sched, Build("nvshmem")))).run()
    put, fence, signal = (next(r for r in tl.records if r.kind == k) for k in ("put", "fence", "signal_op"))
    landed = next(r for r in tl.records if r.kind == "delivery" and r.text.startswith("delivery of put("))
    assert fence.end == pytest.approx(fence.start)  # no code of its own
    assert signal.start == pytest.approx(landed.end + 0.5)  # the put's acknowledgement, then the signal
    # the schedule alone (NVSHMEM's API): the fence op is the thread's fence, and waits itself
    alone = run(publish, c=c, N=16)
    fence = next(r for r in alone.records if r.kind == "fence")
    landed = next(r for r in alone.records if r.kind == "delivery" and r.text.startswith("delivery of put("))
    assert fence.end == pytest.approx(landed.end + 0.5)


def test_a_kernel_per_call_starts_each_call_after_the_kernel_before():
    """`Lowered.kernel_starts` (`RunConditions.program`): in an NVSHMEM program with a kernel per call,
    a call's first op starts a plain kernel's start after the kernel before has ended (and eagerly
    after the host has issued it); with one kernel for the calls it follows at once."""
    from clockworks_dist.lowering.repeat import call_starts, repeat

    one = self_put_signal.trace(2, sizes={"N": 16})
    run2 = repeat(one, 3, "none")
    starts = call_starts(one, 3, "none")
    assert starts == {0: [2, 4], 1: [2, 4]}
    c = consts(local_graph_launch_us=0.7, local_eager_launch_us=0.2, local_host_us=5.0)
    split = RunConditions(program=as_built(run2, Build("nvshmem", 3, "none"), starts))
    fused = RunConditions(program=as_built(run2, Build("nvshmem", 3, "none", fuse_calls=True)))
    for mode, launch in (("graph", 0.7), ("eager", 0.9)):
        per_call = Simulator(run2, two_ranks(), c, mode, conditions=split).run()
        together = Simulator(run2, two_ranks(), c, mode, conditions=fused).run()
        ops = [r for r in per_call.records if r.rank == 0 and r.kind != "delivery"]
        assert [r.kind for r in ops] == ["put_signal", "wait_until"] * 3
        for before, first in ((ops[1], ops[2]), (ops[3], ops[4])):
            gap = first.start - before.end
            assert gap >= launch - 1e-9, (mode, gap)
        assert per_call.total_us > together.total_us
        if mode == "eager":  # the host issues three kernels: the third cannot start before 3 x 5 us
            assert ops[4].start >= 3 * 5.0 - 1e-9


def test_a_put_signal_sent_as_packets_crosses_once_with_twice_the_bytes():
    """`Lowered.packets` (`RunConditions.program`): a put_signal the generated code sends as
    flag-in-data packets is one stream of 16-byte stores, 8 bytes of payload and the flag in each:
    twice the bytes, no fence between data and signal, so it lands one route latency after its last
    store left, where a put_signal with a separate flag lands three."""
    c, sched = consts(), one_put_signal.trace(2, sizes={"N": 1024})
    payload = 4096 / 40e3  # 4 KiB on one block at 40 GB/s
    for sends, flow, crossings in (((), payload, 3), (((0, 0),), 2 * payload, 1)):
        # only the sends and the reduces reading packets are read (`packets.Lowered.sends`, `.reads`)
        sent = SimpleNamespace(sends=dict.fromkeys(sends), reads={}) if sends else None
        program = as_built(sched, Build("nvshmem"), packets=sent)
        tl = Simulator(sched, two_ranks(), c, conditions=RunConditions(program=program)).run()
        issued = next(r for r in tl.records if r.kind == "put_signal")
        landed = next(r for r in tl.records if r.kind == "delivery")
        assert landed.end - issued.start == pytest.approx(c.nvshmem_put_latency_us + flow + crossings * 0.5
                                                          + c.nvshmem_signal_latency_us)
        assert landed.detail.get("packets", False) is bool(sends)


def test_the_calibration_reads_the_signal_ping_pong_as_a_held_out_cell(tmp_path):
    rows = tmp_path / "raw.jsonl"
    rows.write_text('{"bench":"nvshmem","op":"signal_pingpong","us":0.793,"rtt_us":1.586,"iters":10000}\n')
    cells, _ = fit.load_cells(str(rows))
    assert [(c.op, c.nbytes, c.mode, c.measured_us) for c in cells] == [("signal", 8, "graph", 0.793)]
    assert fit.held_out(cells[0])  # 8 bytes: an odd power of two, never fitted on
    assert "signal" in fit.needs("nvshmem_signal_latency_us")
    topo = load_topology(str(MEASURED))
    predicted = fit.predict_cell(cells[0], topo, topo.constants)
    assert predicted == pytest.approx(0.793, rel=0.05)  # the shipped constants, on a cell they never saw


def check_critical_path(tl):
    path = tl.critical
    assert path, "an empty critical path"
    assert path[-1].end == pytest.approx(tl.total_us)
    assert path[-1].end == max(r.end for r in tl.records)
    for before, after in zip(path, path[1:]):
        assert after.cause is before
        joint = math.isclose(after.end, before.end, abs_tol=1e-9)  # partners of one transfer/collective
        # or it waited for its cause (a quiet for a delivery, then for the acknowledgement of its stores)
        waited = after.cause_kind == "delivery completed" and after.start <= before.end <= after.end + 1e-9
        assert after.start >= before.end - 1e-9 or joint or waited, (before.text, after.text)
        assert after.start >= 0 and after.end >= after.start - 1e-9


@pytest.mark.parametrize("defn, sizes", [
    (ping, {"N": 1024}), (exchange, {"N": 1024}), (PUT_FENCE, {"N": 4096, "M": 16}),
    (PUT_NOFENCE, {"N": 4096, "M": 16}), (local_reduce, {"N": 64}),
])
def test_critical_path_is_a_consistent_cause_chain(defn, sizes):
    check_critical_path(run(defn, **sizes))


def test_critical_path_of_shipped_schedules_is_consistent():
    topo = load_topology("dgx-h100")
    for name in ("ring_allreduce", "nvshmem_twoshot_allreduce", "tree_allreduce"):
        defn = schedule_of(PROTOCOLS / f"{name}.py")
        check_critical_path(predict_sizes(defn, topo, 4, [64 * KiB])[0].timeline)


@cw.schedule
def fill_then_send(r):
    x = r.buffer("x", count=N, role="inout")
    if r.rank == 0:
        r.fill(x, 1.0)
        r.send(1, x)
    else:
        r.recv(0, x)


def test_critical_path_reaches_back_through_a_send():
    tl = run(fill_then_send, N=256)
    kinds = [r.kind for r in tl.critical]
    assert "fill" in kinds  # rank 0 sends only after its fill
    assert tl.critical[0].start == 0.0


def test_bound_names_a_saturated_link():
    tl = run(ping, N=64 * MiB // 4)  # Simple, 8 x 20 GB/s channels on a 100 GB/s link: the link limits
    assert bound(tl).startswith("link bandwidth: link 0->1 busy 9")
    rows = link_utilisation(tl)
    assert rows[0][0] == "link 0->1"
    assert rows[0][1] == pytest.approx(64 * MiB / 1e9)
    assert rows[0][2] == pytest.approx(64 * MiB / 100e3 / tl.total_us)


def test_bound_names_reductions_on_hbm():
    tl = run(local_reduce, N=64 * MiB // 4)
    assert bound(tl).startswith("reduction (HBM): gpu0 HBM busy")


def test_bound_of_a_tiny_message_is_latency():
    c = consts()
    tl = run(ping, c=c, N=16)  # 64 bytes: 0.03 us of bandwidth in 4.03 us
    _, total = p2p_time(c, 64, 100.0, 0.5)
    assert tl.total_us == pytest.approx(total)
    assert bound(tl).startswith("latency")


# ------------------------------------------------------------------------------ sizes and busbw
def test_parse_sizes():
    assert parse_sizes("1KiB..8KiB") == [1024, 2048, 4096, 8192]
    assert parse_sizes("4KiB,1MiB") == [4096, 1048576]
    assert parse_sizes("4096, 64KB ,1GiB") == [4096, 64000, 1024 ** 3]
    assert parse_sizes("1KiB..1KiB") == [1024]
    assert parse_size("16MiB") == 16 * MiB and parse_size("1.5KiB") == 1536 and parse_size("12") == 12


@pytest.mark.parametrize("text", ["abc", "1XB", "KiB", "-4KiB", "1KiB..lots", "4KiB,,x"])
def test_parse_sizes_rejects_bad_input(text):
    with pytest.raises(ValueError, match="cannot read size"):
        parse_sizes(text)


@pytest.mark.parametrize("text", ["8KiB..1KiB", ","])
def test_parse_sizes_rejects_an_empty_sweep(text):
    with pytest.raises(ValueError):
        parse_sizes(text)


def test_parse_sizes_zero_range_terminates():
    def timeout(*_):
        raise TimeoutError("parse_sizes('0..1KiB') did not return")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    try:
        with pytest.raises(ValueError):
            parse_sizes("0..1KiB")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@cw.schedule(expect=cw.allgather("src", "dst"))
def gather_out_of_place(r):
    src = r.buffer("src", count=N, role="input")
    dst = r.buffer("dst", count=N * r.world, role="output")
    r.all_gather(src, dst)


@cw.schedule(expect=cw.reduce_scatter("src", "dst"))
def scatter_out_of_place(r):
    src = r.buffer("src", count=N * r.world, role="input")
    dst = r.buffer("dst", count=N, role="output")
    r.reduce_scatter(src, dst)


def main_bytes(defn, world, binding):
    sched = defn.trace(world, sizes=binding)
    return {b.name: b.count * 4 for b in sched.programs[0].buffers}


def test_size_binding_all_reduce():
    ring = schedule_of(RING)
    assert size_binding(ring, 8, 1 * MiB) == {"CHUNK": MiB // 4 // 8}
    assert main_bytes(ring, 8, size_binding(ring, 8, MiB))["x"] == MiB


def test_size_binding_all_gather_counts_the_output():
    binding = size_binding(gather_out_of_place, 4, 64 * KiB)
    assert binding == {"N": 64 * KiB // 4 // 4}
    assert main_bytes(gather_out_of_place, 4, binding) == {"src": 16 * KiB, "dst": 64 * KiB}


def test_size_binding_reduce_scatter_counts_the_input():
    binding = size_binding(scatter_out_of_place, 4, 64 * KiB)
    assert binding == {"N": 64 * KiB // 4 // 4}
    assert main_bytes(scatter_out_of_place, 4, binding) == {"src": 64 * KiB, "dst": 16 * KiB}


@pytest.mark.parametrize("nbytes", [1000, 0, 16])
def test_size_binding_unreachable_sizes(nbytes):
    # x holds 8 * CHUNK float32 at 8 ranks: multiples of 32 bytes, at least 32
    with pytest.raises(ScheduleError, match=f"{nbytes} bytes is not reachable.*multiples of 32 bytes"):
        size_binding(schedule_of(RING), 8, nbytes)


def test_size_binding_rejects_partial_elements():
    with pytest.raises(ScheduleError, match="1026 bytes is not a whole number of float32 elements"):
        size_binding(schedule_of(RING), 2, 1026)


def test_size_binding_needs_a_size_symbol(tmp_path):
    path = write(tmp_path, "fixed.py", """
        import clockworks_dist as cw

        @cw.schedule(expect=cw.allreduce("x"))
        def fixed(r):
            x = r.buffer("x", count=64, role="inout")
            r.all_reduce(x)
    """)
    with pytest.raises(ScheduleError, match="not a multiple of one size symbol"):
        size_binding(schedule_of(path), 2, 4096)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_busbw_factor_follows_nccl_tests(n):
    def factor(name):
        return busbw_factor(schedule_of(PROTOCOLS / f"{name}.py").trace(n))

    assert factor("ring_allreduce") == (pytest.approx(2 * (n - 1) / n), "allreduce")
    assert factor("ring_allgather") == (pytest.approx((n - 1) / n), "allgather")
    assert factor("ring_reduce_scatter") == (pytest.approx((n - 1) / n), "reduce_scatter")
    assert factor("direct_alltoall") == (pytest.approx((n - 1) / n), "alltoall")
    assert busbw_factor(broadcast_op.trace(n)) == (1.0, "broadcast")
    assert busbw_factor(MICROBENCHMARKS["sendrecv"].trace(n)) == (1.0, "custom")


# ------------------------------------------------------------------------------ chrome trace
@pytest.mark.parametrize("case", ["puts", "ring"])
def test_chrome_trace_is_well_formed(case):
    if case == "puts":
        tl = run(PUT_FENCE, N=4096, M=16)
    else:
        tl = predict_sizes(schedule_of(RING), load_topology("dgx-h100"), 4, [64 * KiB])[0].timeline
    trace = json.loads(json.dumps(chrome_trace(tl)))
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == len(tl.records)
    for event in complete:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(event)
        assert event["dur"] >= 0 and event["ts"] >= 0
        assert event["ts"] + event["dur"] <= tl.total_us + 1e-3
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    ranks = {r.rank for r in tl.records}
    assert ranks == set(range(2 if case == "puts" else 4))
    for rank in ranks:
        assert names[2 * rank] == f"rank {rank}"
    # every complete event sits on a named thread
    assert {e["tid"] for e in complete} <= set(names)
    if case == "puts":
        assert any(e["cat"] == "delivery" and e["tid"] == 1 for e in complete)


# ------------------------------------------------------------------------------ NCCL plans
LINK = 450.0


def test_plan_protocol_small_and_large():
    c = Constants()
    for n in (2, 4, 8):
        assert nccl.plan("all_reduce", n, 1 * KiB, c, LINK).protocol == "LL"
        assert nccl.plan("all_reduce", n, 256 * MiB, c, LINK).protocol == "Simple"


# NCCL 2.28.9's tuning table on 2 x H200 NV18 (NCCL_DEBUG_SUBSYS=TUNING): latency us / GB/s
NCCL_TABLE = {("all_reduce", "LL"): (7.8, 141.0), ("all_reduce", "LL128"): (17.8, 331.2),
              ("all_reduce", "Simple"): (15.2, 360.0), ("all_gather", "LL"): (7.2, 282.0),
              ("all_gather", "LL128"): (15.9, 662.4), ("all_gather", "Simple"): (11.8, 720.0),
              ("reduce_scatter", "Simple"): (11.8, 720.0), ("broadcast", "LL"): (7.2, 141.0),
              ("broadcast", "LL128"): (15.9, 331.2), ("broadcast", "Simple"): (11.8, 360.0)}


@pytest.mark.parametrize("kind, proto", sorted(NCCL_TABLE))
def test_nccl_tuning_reproduces_nccls_table_on_nv18(kind, proto):
    view = nccl_tuning.View(gpu="hopper", intra="nvlink", nodes=1, route_GBs=18 * 20.6, channels=24)
    assert view.graph() == (12, 30.0)  # 24 channels = a 12-channel search graph at 30 GB/s each
    latency, bandwidth = nccl_tuning.tuning(kind, 2, view, "ring", proto)
    assert (round(latency, 2), round(bandwidth, 1)) == NCCL_TABLE[(kind, proto)]


# NCCL 2.28.9's printed choices on the same machine ("AllReduce: 16384 Bytes -> Algo RING proto LL
# channel{Lo..Hi}={0..1}"); sizes as NCCL prints them: per rank for all-gather and reduce-scatter.
NCCL_CHOICES = {
    "all_reduce": [(1, "LL", 1), (8, "LL", 1), (16, "LL", 2), (32, "LL", 4), (64, "LL", 8), (128, "LL", 16),
                   (256, "LL", 22), (512, "LL", 24), (1024, "LL", 24), (2048, "Simple", 24), (1 << 20, "Simple", 24)],
    "all_gather": [(4, "LL", 1), (8, "LL", 2), (16, "LL", 4), (64, "LL", 16), (128, "LL", 22), (256, "LL", 22),
                   (1024, "LL", 24), (2048, "Simple", 24)],
    "reduce_scatter": [(4, "LL", 1), (8, "LL", 2), (32, "LL", 8), (128, "LL", 22), (1024, "LL", 24),
                       (2048, "Simple", 24)],
    "broadcast": [(8, "LL", 1), (16, "LL", 2), (64, "LL", 8), (128, "LL", 16), (256, "LL", 22),
                  (1024, "LL", 24), (2048, "Simple", 22), (4096, "Simple", 24)],
}


def test_nccl_decisions_match_the_ones_nccl_logged_during_calibration():
    """Every (algorithm, protocol, channels) NCCL printed (NCCL_DEBUG_SUBSYS=TUNING) while the
    calibration ran, default and one-channel runs: our restatement of its rules gives the same."""
    kinds = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
             "Broadcast": "broadcast"}
    view = nccl_tuning.View(gpu="hopper", intra="nvlink", route_GBs=18 * 20.6, channels=24)
    records = [json.loads(line) for line in RAW.read_text().splitlines() if '"nccl_choice"' in line]
    assert len(records) >= 100 and {r["run"] for r in records} == {"nccl_choices", "nccl_1ch_choices"}
    for r in records:
        kind = kinds[r["coll"]]
        nbytes = r["bytes"] * (2 if kind in ("all_gather", "reduce_scatter") else 1)  # NCCL prints per rank
        cap = 1 if r["run"] == "nccl_1ch_choices" else None
        algorithm, proto, _ = nccl_tuning.choose(kind, 2, nbytes, view)
        channels = nccl_tuning.collective_channels(kind, 2, nbytes, algorithm, proto, view, cap)
        assert (algorithm.upper(), proto.upper(), channels) == (r["algorithm"], r["protocol"], r["channels"]), r


@pytest.mark.parametrize("kind", sorted(NCCL_CHOICES))
def test_nccl_choice_and_channels_follow_nccls_printout(kind):
    view = nccl_tuning.View(route_GBs=18 * 20.6, channels=24)
    for kib, proto, channels in NCCL_CHOICES[kind]:
        nbytes = kib * KiB * (2 if kind in ("all_gather", "reduce_scatter") else 1)  # nccl-tests bytes
        algorithm, chosen, _ = nccl_tuning.choose(kind, 2, nbytes, view)
        assert (algorithm, chosen) == ("ring", proto), (kind, kib)
        assert nccl_tuning.collective_channels(kind, 2, nbytes, algorithm, chosen, view) == channels, (kind, kib)


def test_channel_cap_limits_channels_not_the_protocol():
    c = Constants(nccl_max_channels=24)
    full = nccl.plan("all_reduce", 2, 1 * MiB, c, LINK)
    capped = nccl.plan("all_reduce", 2, 1 * MiB, c, LINK, cap=1)
    assert (full.protocol, full.channels) == ("LL", 24)
    assert (capped.protocol, capped.channels) == ("LL", 1)
    assert capped.ceiling_GBs == pytest.approx(full.ceiling_GBs / 24)


@pytest.mark.parametrize("kib, expected, capped", [
    (1, ("LL", 1), ("LL", 1)), (16, ("LL", 2), ("LL", 1)), (64, ("LL", 8), ("Simple", 1)),
    (512, ("LL", 16), ("Simple", 1)), (1024, ("Simple", 16), ("Simple", 1)),
    (128 * 1024, ("Simple", 16), ("Simple", 1)),
    (512 * 1024, ("Simple", 32), ("Simple", 1)),
])
def test_p2p_protocol_and_channels_follow_nccl(kib, expected, capped):
    """NCCL 2.28 on 2 ranks, 32 p2p channels per peer: LL up to 32 x 16 KiB on 8 KiB parts, then
    Simple on 64 KiB..16 MiB parts; a send gets half the channels (16), doubled past 16 MiB parts."""
    view = nccl_tuning.View(channels=24, p2p_channels=32)
    assert nccl_tuning.p2p_plan(kib * KiB, 2, view) == expected
    assert nccl_tuning.p2p_plan(kib * KiB, 2, view, cap=1) == capped
    assert nccl_tuning.p2p_plan(kib * KiB, 2, view, self_send=True)[0] == "Simple"  # a copy: never LL


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_ring_all_reduce_bytes_per_edge(n):
    S = 8 * MiB
    transfers, steps = nccl.ring_transfers("all_reduce", n, S)
    assert steps == 2 * (n - 1)
    assert [(t.src, t.dst) for t in transfers] == [(i, (i + 1) % n) for i in range(n)]
    assert all(t.nbytes == pytest.approx(2 * (n - 1) / n * S) for t in transfers)
    gather, gsteps = nccl.ring_transfers("all_gather", n, S)
    assert gsteps == n - 1 and all(t.nbytes == pytest.approx((n - 1) / n * S) for t in gather)


@pytest.mark.parametrize("nbytes", [1 * KiB, 1 * MiB, 64 * MiB])
def test_plan_ring_wire_bytes_are_divided_by_protocol_efficiency(nbytes):
    c = Constants()
    p = nccl.plan("all_reduce", 2, nbytes, c, LINK)
    assert p.algorithm == "ring"
    for t in p.transfers:
        assert t.nbytes * nccl.EFFICIENCY[p.protocol] == pytest.approx(2 * (2 - 1) / 2 * nbytes)
    assert p.reduce_bytes == pytest.approx(3 * nbytes * (2 - 1) / 2)
    steps = 2 * (2 - 1)
    assert p.fixed_us == pytest.approx(c.nccl_base_latency_us[p.protocol] + c.nccl_kind_base_us["all_reduce"]
                                       + steps * c.step_us("nvlink", p.protocol))
    gather = nccl.plan("all_gather", 4, nbytes, c, LINK)
    assert all(t.nbytes * nccl.EFFICIENCY[gather.protocol] == pytest.approx(3 / 4 * nbytes)
               for t in gather.transfers)


def test_tree_is_considered_for_all_reduce_above_two_ranks():
    c = Constants()
    sizes = [2 ** k for k in range(10, 31, 2)]
    assert all(nccl.plan("all_reduce", 2, s, c, LINK).algorithm == "ring" for s in sizes)
    assert all(nccl.plan("all_gather", 8, s, c, LINK).algorithm == "ring" for s in sizes)
    # on one NVLink node NCCL's model keeps the ring; across nodes its tree wins below the largest sizes
    assert all(nccl.plan("all_reduce", 8, s, c, LINK).algorithm == "ring" for s in sizes)
    nodes = nccl_tuning.View(nodes=4, route_GBs=50.0, channels=32)
    chosen = [nccl.plan("all_reduce", 32, s, c, 50.0, nodes).algorithm for s in sizes]
    assert "tree" in chosen and chosen[-1] == "ring"
    transfers, steps = nccl.tree_transfers(8, 1000)
    assert steps == 2 * 3
    assert len(transfers) == 2 * 7  # one up and one down per non-root rank
    assert {(t.src, t.dst) for t in transfers} >= {(1, 0), (0, 1), (7, 3), (3, 7)}


def test_plan_ceiling_is_channels_times_rate_at_most_the_link():
    c = Constants()
    p = nccl.plan("all_reduce", 2, 64 * KiB, c, LINK)
    assert p.ceiling_GBs == pytest.approx(min(p.channels * c.nccl_channel_GBs[p.protocol], LINK))
    big = nccl.plan("all_reduce", 2, 1 << 30, c, 100.0)
    assert big.ceiling_GBs == pytest.approx(100.0)


def test_plan_barrier_and_all_to_all():
    c = Constants()
    barrier = nccl.plan("barrier", 4, 0, c, LINK)
    assert barrier.transfers == ()
    assert barrier.fixed_us == pytest.approx(c.nccl_base_latency_us["LL"] + 3 * c.step_us("nvlink", "LL"))
    over_pcie = nccl.plan("barrier", 4, 0, c, LINK, transport="pcie")
    assert over_pcie.fixed_us == pytest.approx(c.nccl_base_latency_us["LL"] + 3 * c.step_us("pcie", "LL"))
    a2a = nccl.plan("all_to_all", 4, 64 * KiB, c, LINK)
    assert len(a2a.transfers) == 4 * 4  # a chunk to every member, itself included
    assert a2a.algorithm == "p2p"
    assert a2a.protocol == "LL"  # 16 KiB per peer
    peers = [t for t in a2a.transfers if t.src != t.dst]
    assert len(peers) == 4 * 3 and all(t.ceiling_GBs is None for t in peers)
    assert all(t.nbytes == pytest.approx(16 * KiB / nccl.EFFICIENCY["LL"]) for t in peers)
    # the own chunk: a copy in HBM (read and written) on the channels of a send to itself
    own = [t for t in a2a.transfers if t.src == t.dst]
    _, own_channels = nccl_tuning.p2p_plan(16 * KiB, 4, nccl.default_view(c), self_send=True)
    assert sorted(t.src for t in own) == [0, 1, 2, 3]
    assert all(t.nbytes == 2 * 16 * KiB for t in own)
    assert all(t.ceiling_GBs == pytest.approx(own_channels * c.nccl_copy_channel_GBs) for t in own)
    # LL up to 16 KiB per p2p channel of the peer (32): 512 KiB per peer, inclusive
    assert nccl.plan("all_to_all", 4, 2 * MiB, c, LINK).protocol == "LL"
    assert nccl.plan("all_to_all", 4, 2 * MiB + 64, c, LINK).protocol == "Simple"


# ------------------------------------------------------------------------------ shipped topologies
def test_ring_allreduce_on_dgx_h100_grows_with_size():
    sizes = [4 ** k * KiB for k in range(0, 8)]  # 1 KiB .. 16 MiB
    preds = predict_sizes(schedule_of(RING), load_topology("dgx-h100"), 8, sizes)
    times = [p.time_us for p in preds]
    assert all(a < b for a, b in zip(times, times[1:])), times
    for p in preds:
        assert p.algbw_GBs == pytest.approx(p.nbytes / p.time_us / 1e3)
        assert p.busbw_GBs == pytest.approx(p.algbw_GBs * 2 * 7 / 8)
    # every transfer of the ring stays on NVLink through the switches; no HBM bottleneck at 16 MiB
    assert preds[-1].busbw_GBs > preds[0].busbw_GBs
    names = [name for name, _, _ in link_utilisation(preds[-1].timeline, top=20)]
    assert any(name.startswith("nvlink") for name in names)


def test_h200x2_at_two_ranks():
    topo = load_topology("h200x2-nv18")  # the model's own defaults, not the library's: the link bounds it
    topo = topo.model_copy(update={"constants": Constants()})
    preds = predict_sizes(schedule_of(RING), topo, 2, [KiB, MiB, 64 * MiB])
    assert [p.nbytes for p in preds] == [KiB, MiB, 64 * MiB]
    assert preds[0].time_us < preds[1].time_us < preds[2].time_us
    for p in preds:
        assert p.busbw_GBs == pytest.approx(p.algbw_GBs)  # 2 (n - 1) / n = 1 at two ranks
    # large messages stay below the NVLink bandwidth, which bounds them
    net = from_topology(topo, 2)
    assert net.transport(0, 1) == "nvlink"
    assert net.bottleneck(0, 1) == pytest.approx(478.116)
    assert preds[-1].busbw_GBs < 478.116
    assert bound(preds[-1].timeline).startswith("link bandwidth: nvlink gpu")


def test_more_ranks_than_gpus():
    with pytest.raises(TopologyError, match="16 ranks but dgx-h100 has 8 GPUs"):
        predict_sizes(schedule_of(RING), load_topology("dgx-h100"), 16, [KiB])
    with pytest.raises(TopologyError, match="has 2 GPUs"):
        from_topology(load_topology("h200x2-nv18"), 4)


# ------------------------------------------------------------------------------ the CLI
def test_cli_predict_json(capsys, tmp_path):
    trace_path = tmp_path / "trace.json"
    code = cli.main(["predict", RING, "-t", "h200x2-nv18", "--ranks", "2", "--sizes", "1KiB,1MiB", "--json",
                     "--trace", str(trace_path)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(captured.out)
    assert doc["schedule"] == "ring_allreduce" and doc["topology"] == "h200x2-nv18" and doc["ranks"] == 2
    preds = doc["predictions"]
    assert [p["bytes"] for p in preds] == [1024, 1048576]
    for p in preds:
        assert {"bytes", "time_us", "algbw_GBs", "busbw_GBs"} <= set(p)
        assert p["time_us"] > 0
        assert p["algbw_GBs"] == pytest.approx(p["bytes"] / p["time_us"] / 1e3, abs=2e-3)
        assert p["busbw_GBs"] == pytest.approx(p["algbw_GBs"], abs=1e-3)
    assert preds[0]["time_us"] < preds[1]["time_us"]
    assert isinstance(doc["bound"], str) and doc["bound"]
    assert doc["critical_path"]
    for step in doc["critical_path"]:
        assert {"rank", "op", "file", "line", "start_us", "end_us", "waited_for"} <= set(step)
        assert step["file"] == "ring_allreduce.py"
    assert doc["critical_path"][-1]["end_us"] == pytest.approx(preds[-1]["time_us"], abs=1e-3)
    assert doc["links"] and all({"link", "GB", "utilisation"} <= set(link) for link in doc["links"])
    assert any(link["link"].startswith("nvlink") for link in doc["links"])
    # the trace of the largest size loads
    trace = json.loads(trace_path.read_text())
    assert any(e["ph"] == "X" for e in trace["traceEvents"])
    assert f"wrote {trace_path}" in captured.err


def test_cli_predict_text(capsys):
    assert cli.main(["predict", RING, "-t", "h200x2-nv18", "--ranks", "2", "--sizes", "1KiB..4KiB"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ring_allreduce on h200x2-nv18, 2 ranks, graph launches: predicted")
    for size in (1024, 2048, 4096):
        assert f"  {size:>12}  " in out
    assert "critical path (last ops):" in out and "busiest links:" in out


@pytest.mark.parametrize("topology", ["h200x2-nv1", "no such machine"])
def test_cli_predict_unknown_topology(capsys, topology):
    assert cli.main(["predict", RING, "-t", topology, "--ranks", "2", "--sizes", "1KiB"]) == 2
    err = capsys.readouterr().err
    assert "no shipped topology of that name" in err
    assert "Traceback" not in err


def test_cli_predict_malformed_topology_file(capsys, tmp_path):
    path = write(tmp_path, "broken.yaml", "name: broken\ndevices: [\n")
    assert cli.main(["predict", RING, "-t", path, "--ranks", "2", "--sizes", "1KiB"]) == 2
    err = capsys.readouterr().err
    assert "broken.yaml" in err and "not valid YAML" in err
    assert "Traceback" not in err


def test_cli_predict_deadlock(capsys, tmp_path):
    path = write(tmp_path, "stuck.py", """
        import clockworks_dist as cw

        N = cw.size("N", 4)

        @cw.schedule(ranks=(2,))
        def stuck(r):
            x = r.buffer("x", count=N, role="input")
            y = r.buffer("y", count=N, role="output")
            r.send(1 - r.rank, x)
            r.recv(1 - r.rank, y)
    """)
    assert cli.main(["predict", path, "-t", "h200x2-nv18", "--sizes", "1KiB"]) == 2
    err = capsys.readouterr().err
    assert "deadlocks" in err and "clockworks check" in err
    assert "Traceback" not in err


def test_cli_predict_too_many_ranks(capsys):
    assert cli.main(["predict", RING, "-t", "h200x2-nv18", "--ranks", "4", "--sizes", "1KiB"]) == 2
    err = capsys.readouterr().err
    assert "4 ranks but h200x2-nv18 has 2 GPUs" in err and "Traceback" not in err


def test_cli_predict_unreachable_size(capsys):
    assert cli.main(["predict", RING, "-t", "h200x2-nv18", "--ranks", "2", "--sizes", "1004"]) == 2
    err = capsys.readouterr().err
    assert "1004 bytes is not reachable" in err and "Traceback" not in err


def test_cli_predict_bad_sizes(capsys):
    assert cli.main(["predict", RING, "-t", "h200x2-nv18", "--ranks", "2", "--sizes", "lots"]) == 2
    assert "cannot read size 'lots'" in capsys.readouterr().err


def test_cli_predict_descending_range(capsys):
    assert cli.main(["predict", RING, "-t", "h200x2-nv18", "--ranks", "2", "--sizes", "8KiB..1KiB"]) == 2


# ------------------------------------------------------------------------------ calibration
def test_calibrated_topology_has_provenance():
    measured, default = load_topology(MEASURED), load_topology("h200x2-nv18")
    assert measured.name == default.name == "h200x2-nv18"
    prov = measured.provenance
    assert "H200" in prov.gpu
    assert prov.driver == "580.159.04"
    assert prov.nccl == "2.28.9"
    assert prov.nvshmem == "3.4.5"
    assert prov.date is not None and prov.date.year >= 2024
    assert "calibrate" in prov.method
    # the same machine: links and devices as in the uncalibrated file
    assert measured.devices == default.devices
    assert measured.links == default.links


def test_calibrated_constants_differ_from_the_defaults():
    fitted = load_topology(MEASURED).constants
    default = Constants()
    for name in ("graph_launch_us", "nccl_base_latency_us", "nccl_channel_GBs", "nvshmem_block_GBs",
                 "nccl_kind_efficiency", "nccl_kind_link_efficiency", "nccl_kind_base_us", "nccl_p2p_base_latency_us"):
        assert getattr(fitted, name) != getattr(default, name), name
    # every fitted parameter names a field of the file, and its value stays inside the fit's bounds
    for path, lo, hi in fit.PARAMETERS + fit.EAGER:
        assert lo * 0.999 <= fit.get_value(fitted, path) <= hi * 1.001, path


def test_calibrated_file_round_trips_through_constants():
    fitted = load_topology(MEASURED).constants
    assert Constants.model_validate(fitted.model_dump()) == fitted
    changed = fit.with_values(fitted, {"nccl_step_latency_us.nvlink.LL": 0.5, "graph_launch_us": 2.0})
    assert (changed.step_us("nvlink", "LL"), changed.graph_launch_us) == (0.5, 2.0)
    assert changed.step_us("pcie", "LL") == fitted.step_us("pcie", "LL")


def test_per_kind_constants_a_file_leaves_out_keep_their_default():
    partial = Constants(nccl_kind_efficiency={"p2p": 0.5}, nccl_kind_base_us={"all_reduce": 2.0})
    assert partial.nccl_kind_efficiency == {**Constants().nccl_kind_efficiency, "p2p": 0.5}
    assert partial.nccl_kind_base_us["broadcast"] == 0.0 and partial.nccl_kind_base_us["all_reduce"] == 2.0


def test_calibrate_writes_the_fitted_constants_under_their_own_names(tmp_path, monkeypatch):
    from clockworks_dist.perf import calibration

    raw = tmp_path / "calibration_raw.jsonl"
    raw.write_text("\n".join([line for line in RAW.read_text().splitlines() if '"allreduce"' in line][:20]))
    log = tmp_path / "run.log"
    log.write_text("NCCL INFO 20 coll channels, 20 collnet channels, 0 nvls channels, 16 p2p channels per peer\n")
    seen = {}

    def fake_fit(cells, topo, start):
        seen["start"] = start
        return fit.with_values(start, {"graph_launch_us": 1.25, "nccl_step_latency_us.nvlink.LL": 0.25}), {}

    monkeypatch.setattr(calibration, "fit", fake_fit)
    base = load_topology("h200x2-nv18")
    out = tmp_path / "calibrated.yaml"
    calibration.calibrate(str(raw), base, str(ROOT / "topologies" / "h200x2-nv18.yaml"), str(out), str(log))
    assert (seen["start"].nccl_max_channels, seen["start"].nccl_p2p_max_channels) == (20, 16)
    written = load_topology(str(out)).constants
    assert written == fit.with_values(seen["start"], {"graph_launch_us": 1.25, "nccl_step_latency_us.nvlink.LL": 0.25})


@pytest.fixture(scope="module")
def raw_cells():
    return fit.load_cells(str(RAW))


def test_load_cells_covers_every_microbenchmark(raw_cells):
    cells, provenance = raw_cells
    assert set(MICROBENCHMARKS) == {
        "allreduce", "allgather", "reducescatter", "broadcast", "alltoall", "sendrecv", "sendrecv_bidir", "put",
        "signal", *KERNEL_OPS}
    # the committed run predates the plain-kernel microbenchmark (bench_kernels.cu)
    assert {c.op for c in cells} == set(MICROBENCHMARKS) - set(KERNEL_OPS)
    assert provenance["gpu"] == "NVIDIA H200"
    assert provenance["wheels"]["nvidia-nccl-cu13"] == "2.28.9"
    assert all(c.measured_us > 0 and c.nbytes > 0 for c in cells)
    assert {c.mode for c in cells if c.op not in ("put", "signal")} == {"graph", "eager"}
    assert {c.mode for c in cells if c.op in ("put", "signal")} == {"graph"}
    assert len({c.blocks for c in cells if c.op == "put"}) > 1  # the thread-block sweep
    assert any(c.max_channels == 1 for c in cells)  # the one-channel runs
    assert len({c.key for c in cells}) == len(cells)


def test_held_out_alternates_powers_of_two(raw_cells):
    cells, _ = raw_cells
    for c in cells:
        assert fit.held_out(c) == (round(math.log2(c.nbytes)) % 2 == 1)
    assert [fit.held_out(fit.Cell("allreduce", 2 ** k, "graph", 1.0)) for k in range(10, 16)] == [
        False, True, False, True, False, True]
    for op in {c.op for c in cells} - {"signal"}:  # the one signal ping-pong cell (8 bytes) is held out
        mine = [c for c in cells if c.op == op]
        assert any(fit.held_out(c) for c in mine) and not all(fit.held_out(c) for c in mine), op


def test_calibrated_model_predicts_held_out_cells(raw_cells):
    cells, _ = raw_cells
    topo = load_topology(MEASURED)
    for op, tolerance in (("allreduce", 0.2), ("put", 0.25)):
        errors = []
        for c in cells:
            if c.op == op and c.mode == "graph" and fit.held_out(c):
                predicted = fit.predict_cell(c, topo, topo.constants)
                errors.append(abs(predicted - c.measured_us) / c.measured_us)
        errors.sort()
        assert errors and errors[len(errors) // 2] < tolerance, (op, errors)


def test_fit_on_a_tiny_subset_lowers_the_cost(raw_cells, monkeypatch):
    optimize = pytest.importorskip("scipy.optimize")
    cells, _ = raw_cells
    subset = [c for c in cells if c.op == "allreduce" and c.mode == "graph" and c.max_channels is None
              and not fit.held_out(c)][:6]
    assert len(subset) == 6
    topo = load_topology("h200x2-nv18")
    start = topo.constants

    def cost(c: Constants) -> float:
        return 0.5 * sum((math.log(fit.predict_cell(cell, topo, c))
                          - math.log(cell.measured_us)) ** 2 for cell in subset)

    real = optimize.least_squares
    calls = []

    def few_evaluations(*args, **kwargs):
        kwargs["max_nfev"] = 3
        result = real(*args, **kwargs)
        calls.append(result)
        return result

    monkeypatch.setattr(optimize, "least_squares", few_evaluations)
    before = cost(start)
    fitted, summary = fit.fit(subset, topo, start)
    assert len(calls) == 1  # only graph cells: no eager fit
    assert set(summary) == {"graph"}
    assert summary["graph"]["cells"] == 6
    assert summary["graph"]["evaluations"] <= 3
    assert summary["graph"]["cost"] < before
    assert cost(fitted) < before
    assert start == topo.constants  # the starting point is not changed
    # the Jacobian's columns computed in worker processes give the very same fit
    serial, serial_summary = fit.fit(subset, topo, start, workers=1)
    parallel, parallel_summary = fit.fit(subset, topo, start, workers=2)
    assert serial == parallel == fitted
    assert serial_summary == parallel_summary


# ------------------------------------------------------------------------------ eager launches
@cw.schedule
def three_fills(r):
    x = r.buffer("x", count=N, role="output")
    for _ in range(3):
        r.fill(x, 0.0)


def test_eager_launches_wait_for_the_host_and_overlap_with_the_gpu():
    c = consts(local_host_us=10.0, local_graph_launch_us=1.5, local_eager_launch_us=0.5)
    net = two_ranks(hbm_GBs=1000.0)
    small = three_fills.trace(2, sizes={"N": 1})  # 4 bytes a fill: nothing but fixed costs
    graph = Simulator(small, net, c, "graph").run()
    assert graph.total_us == pytest.approx(3 * 1.5, abs=1e-3)
    eager = Simulator(small, net, c, "eager").run()
    # the host issues a launch every 10 us; each kernel then costs the GPU 1.5 + 0.5
    ends = sorted(r.end for r in eager.records if r.rank == 0)
    assert ends == [pytest.approx(t, abs=1e-3) for t in (12.0, 22.0, 32.0)]
    # back to back, an iteration is host-bound: 3 launches of 10 us
    assert steady_state_us(small, eager, c, "eager", net) == pytest.approx(30.0)
    # 1 MB fills at 1000 GB/s take 1 us of HBM each... 100 MB fills take 100 us: GPU-bound
    big = three_fills.trace(2, sizes={"N": 25_000_000})
    eager_big = Simulator(big, net, c, "eager").run()
    steady = steady_state_us(big, eager_big, c, "eager", net)
    assert steady == pytest.approx(3 * (2.0 + 100.0), rel=1e-6)
    assert eager_big.total_us == pytest.approx(10.0 + 3 * (2.0 + 100.0), rel=1e-6)


def test_a_send_to_itself_is_a_copy_in_hbm():
    c = consts()
    net = two_ranks()
    tl = Simulator(MICROBENCHMARKS["alltoall"].trace(2, sizes={"ELEMS": 1 << 20}), net, c).run()
    # each rank sends 4 MiB to the other over the link; its own 4 MiB chunk is read and written in HBM
    assert tl.link_bytes[LINK_01] == pytest.approx(4 * MiB)
    assert tl.link_bytes[HBM0] == pytest.approx(2 * 4 * MiB)
    own = [r for r in tl.records if r.kind == "send" and r.text.startswith("send(peer=0") and r.rank == 0]
    assert own and own[0].detail["protocol"] == "Simple"


def test_nvlink_acknowledgements_slow_traffic_both_ways():
    topo = load_topology("h200x2-nv18")
    topo = topo.model_copy(update={"constants": Constants()})  # the model's defaults: no reverse share
    # channels fast enough that the link is the limit
    c = fit.with_values(topo.constants, {"nccl_channel_GBs.Simple": 100.0})
    one_way = predict_sizes(MICROBENCHMARKS["sendrecv"], topo, 2, [256 * MiB], c)[0].time_us
    both = predict_sizes(MICROBENCHMARKS["sendrecv_bidir"], topo, 2, [256 * MiB], c)[0].time_us
    assert both == pytest.approx(one_way, rel=0.02)  # without acknowledgements: independent directions
    c = c.model_copy(update={"nvlink_reverse_share": 0.25})
    one_way_acks = predict_sizes(MICROBENCHMARKS["sendrecv"], topo, 2, [256 * MiB], c)[0].time_us
    both_acks = predict_sizes(MICROBENCHMARKS["sendrecv_bidir"], topo, 2, [256 * MiB], c)[0].time_us
    assert one_way_acks == pytest.approx(one_way, rel=0.02)
    assert both_acks > 1.15 * one_way_acks


def test_nccl_view_of_a_topology():
    net = from_topology(load_topology("h200x2-nv18"), 2)
    assert net.gpu_generation == "hopper"
    assert net.nominal_GBs(0, 1) == pytest.approx(18 * 20.6)  # 18 NVLink-4 lanes as NCCL counts them
    a100 = from_topology(load_topology("hgx-a100"), 8)
    assert a100.gpu_generation == "ampere"
    assert a100.nominal_GBs(0, 5) == pytest.approx(12 * 20.0)  # 12 NVLink-3 lanes through the NVSwitches



def test_slices_forwarded_cut_through_add_one_slice_time_per_later_hop():
    topo = load_topology("pcie-gen4-8gpu")
    net = from_topology(topo, 8)
    resources, _latency = net.route(0, 1)  # GPU -> PCIe switch -> GPU: two PCIe hops
    assert len(resources) == 2
    pcie = [link for link in topo.links if link.kind == "pcie"][0].GBs_per_dir
    # the last 256-byte packet crosses the second hop whole after the first
    assert net.fill_us(0, 1, 1 << 20) == pytest.approx(256 / (pcie * 1e3))
    assert net.fill_us(0, 1, 100) == pytest.approx(100 / (pcie * 1e3))  # a message under one packet
    # one NVLink hop between the two H200: nothing to add
    assert from_topology(load_topology("h200x2-nv18"), 2).fill_us(0, 1, 1 << 20) == 0.0
    # across nodes, InfiniBand forwards 4 KiB packets: the NIC and leaf hops add theirs
    cluster = from_topology(load_topology("dgx-h100-cluster", nodes=2), 16)
    cross = cluster.fill_us(0, 8, 1 << 20)
    assert cross > 2 * 4096 / (50.0 * 1e3)
    # and the simulator pays it once per transfer, on top of the route latency
    c = consts()
    net = from_topology(topo, 2)
    tl = Simulator(ping.trace(2, sizes={"N": 1 << 18}), net, c).run()
    send = [r for r in tl.records if r.kind == "send" and r.detail.get("flow_us")][0]
    _, route_latency = net.route(0, 1)
    proto = send.detail["protocol"]
    fixed = c.graph_launch_us + c.nccl_p2p_base_latency_us[proto]
    if proto == "Simple":  # the staging copy of the last chunk (128 KiB off NVLink)
        fixed += min((1 << 20) / send.detail["channels"], 128 * KiB) / (c.nccl_copy_channel_GBs * 1e3)
    assert send.end - send.start == pytest.approx(send.detail["flow_us"] + route_latency
                                                  + net.fill_us(0, 1, (1 << 20) / nccl.EFFICIENCY[proto]) + fixed)


def test_a_collective_on_a_one_rank_communicator_is_a_local_copy():
    # the shipped hierarchical all-reduce at 2 ranks, one node: its rail communicators have one rank
    # each (NCCL's ncclLaunchOneRank); the predictor divided by zero ring steps
    plan = nccl.plan("all_reduce", 1, 4096, load_topology("h200x2-nv18").constants, 100.0)
    assert (plan.algorithm, plan.transfers, plan.reduce_bytes) == ("one_rank", (), 8192.0)
    defn = load_file(str(ROOT / "protocols" / "hierarchical_allreduce.py"))[0]
    [prediction] = predict_sizes(defn, load_topology("h200x2-nv18"), 2, [4096])
    assert prediction.time_us > 0
