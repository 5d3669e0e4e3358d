"""What NCCL decides before it runs a call: its algorithm and protocol, and how many channels.

NCCL picks the (algorithm, protocol) pair with the lowest time in its own cost model (latency
tables plus bytes over a bandwidth derived from its topology search), then splits the data over
channels by fixed thresholds. Those decisions are not what the hardware does, only what NCCL
believes; `nccl.py` times the chosen plan with calibrated constants. This module restates NCCL's
published model (src/graph/tuning.cc, src/enqueue.cc, src/transport/p2p and paths, NCCL 2.23-2.28)
in our own terms, so a prediction can follow NCCL's choice on machines we have never measured.

On the 2 x H200 machine this reproduces NCCL's printed tuning table (ring all-reduce LL 7.8 us /
141 GB/s, Simple 15.2 us / 360 GB/s, ...) and its printed choices: LL up to about 1.7 MB, Simple
above, LL on 2, 8, 16, 22, 24 channels at 16, 64, 128, 256, 512 KiB (tests/test_perf.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PROTOCOLS = ("LL", "LL128", "Simple")

# Fixed latency of an algorithm and protocol, and per-step hardware latency, in us.
BASE_LATENCY = {"tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
                "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}}
STEP_LATENCY = {
    "nvlink": {"tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0}, "ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}},
    "pcie": {"tree": {"LL": 1.0, "LL128": 1.9, "Simple": 4.0}, "ring": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7}},
    "net": {"tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}, "ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}},
}
# Per GPU generation, for 1, 2 and 4+ nodes: the LL bandwidth cap (GB/s) and the per-channel caps
# of ring LL128, tree and tree LL128.
LL_MAX_GBS = {"volta": (39.0, 39.0, 20.4), "ampere": (87.7, 22.5, 19.0), "hopper": (141.0, 45.0, 35.0),
              "blackwell": (282.0, 90.0, 70.0)}
RING_LL128_CHANNEL_GBS = {"volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 73.4}
TREE_CHANNEL_GBS = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8), "hopper": (38.7, 41.4, 36.0),
                    "blackwell": (77.4, 82.8, 72.0)}
TREE_LL128_CHANNEL_GBS = {"volta": (20.0, 20.0, 20.0), "ampere": (20.0, 20.0, 20.0), "hopper": (36.7, 36.7, 29.0),
                          "blackwell": (73.4, 73.4, 58.0)}
# What NCCL's topology search assumes one NVLink lane carries, GB/s per direction.
NVLINK_LANE_GBS = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}
# The per-channel speeds its ring search tries, fastest first (Hopper's intra-node list).
SEARCH_SPEEDS = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0, 2.4, 1.2)
# Threads per channel and bytes per thread below which NCCL drops a channel (ring LL: times ranks).
THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
MIN_TRAFFIC_PER_CHANNEL = 16 * 1024
# Point-to-point: LL while a send is at most this per channel; chunk (step) sizes per protocol.
P2P_LL_THRESHOLD = 16384
P2P_STEP_BYTES = {"LL": 64 * 1024, "nvlink": 512 * 1024, "pcie": 128 * 1024, "net": 128 * 1024}


def generation(gpu_model: str | None) -> str:
    """The GPU generation NCCL's tables are indexed by, from a model name (Hopper if unknown)."""
    name = (gpu_model or "").upper()
    for key, gen in (("B200", "blackwell"), ("B100", "blackwell"), ("GB2", "blackwell"), ("A100", "ampere"),
                     ("A800", "ampere"), ("A30", "ampere"), ("A40", "ampere"), ("V100", "volta")):
        if key in name:
            return gen
    return "hopper"


@dataclass(frozen=True)
class View:
    """The machine as NCCL's tuner sees one communicator."""

    gpu: str = "hopper"  # generation
    intra: str = "nvlink"  # nvlink | pcie: how GPUs of a node reach each other
    nodes: int = 1
    route_GBs: float = 370.8  # NCCL's nominal bandwidth of the ring's narrowest hop, per direction
    channels: int = 24  # the communicator's channel count (twice the search graph's)
    p2p_channels: int = 32  # p2p channels, and per peer

    def graph(self) -> tuple[int, float]:
        """(search-graph channels, per-channel speed): the fastest speed whose channels fit the route."""
        graph_channels = max(1, self.channels // 2)
        for speed in SEARCH_SPEEDS:
            if graph_channels * speed <= self.route_GBs * 1.0001:
                return graph_channels, speed
        return graph_channels, self.route_GBs / graph_channels

    def hw(self) -> str:
        return "net" if self.nodes > 1 else self.intra

    def index(self) -> int:
        return 0 if self.nodes == 1 else 1 if self.nodes == 2 else 2


def ring_steps(kind: str, n: int) -> int:
    if kind == "all_reduce":
        return 2 * (n - 1)
    if kind in ("all_gather", "reduce_scatter"):
        return n - 1
    return n  # broadcast, reduce


def tuning(kind: str, n: int, view: View, algorithm: str, proto: str) -> tuple[float, float] | None:
    """NCCL's (latency us, algorithm bandwidth GB/s) for one algorithm and protocol, or None where
    NCCL does not offer it."""
    if algorithm == "tree" and kind != "all_reduce":
        return None
    graph_channels, speed = view.graph()
    gen, k = view.gpu, view.index()
    bus = graph_channels * speed
    if algorithm == "ring":
        if proto == "LL":
            bus = min(LL_MAX_GBS[gen][k], bus * 0.5)
        elif proto == "LL128":
            bus = min(bus * 0.92, graph_channels * RING_LL128_CHANNEL_GBS[gen])
        steps = ring_steps(kind, n)
        bandwidth = bus * n / steps
        intra = STEP_LATENCY[view.intra]["ring"][proto]
        if kind in ("broadcast", "reduce_to"):  # one pipeline along the ring: its hop latency once
            latency = BASE_LATENCY["ring"][proto] + STEP_LATENCY[view.hw()]["ring"][proto]
        else:
            inter_steps = 0 if view.nodes == 1 else (2 * (view.nodes - 1) if kind == "all_reduce" else view.nodes - 1)
            inter = STEP_LATENCY["net"]["ring"][proto]
            latency = BASE_LATENCY["ring"][proto] + (steps - inter_steps) * intra + inter_steps * inter
            if proto == "Simple" and view.nodes > 1:
                latency *= 1.4
        return latency, bandwidth
    bus = min(bus * 0.92, graph_channels * TREE_CHANNEL_GBS[gen][k])
    if proto == "LL":
        bus = min(bus / 3.8, LL_MAX_GBS[gen][k])
    elif proto == "LL128":
        bus = min(bus * (7 / 9 if view.nodes == 1 else 120 / 128), graph_channels * TREE_LL128_CHANNEL_GBS[gen][k])
    intra = STEP_LATENCY[view.intra]["tree"][proto]
    inter = STEP_LATENCY["net"]["tree"][proto]
    per_node = max(1, n // view.nodes)
    latency = BASE_LATENCY["tree"][proto] + 2 * ((per_node - 1) * intra + int(math.log2(view.nodes)) * inter)
    return latency, bus * 0.5


def choose(kind: str, n: int, nbytes: float, view: View) -> tuple[str, str, float]:
    """NCCL's (algorithm, protocol) for one call and the time its model predicts (us). `nbytes`
    follows nccl-tests (all-gather: the gathered output; reduce-scatter: the input), which is
    also the size NCCL's tuner uses."""
    best = None
    for algorithm in ("ring", "tree"):
        if algorithm == "tree" and n <= 2:
            continue
        for proto in PROTOCOLS:
            found = tuning(kind, n, view, algorithm, proto)
            if found is None or found[1] <= 0:
                continue
            latency, bandwidth = found
            time = latency + nbytes / (1e3 * bandwidth)
            if best is None or time < best[2]:
                best = (algorithm, proto, time)
    return best


def _per_rank_bytes(kind: str, n: int, nbytes: float) -> float:
    """The size NCCL's task carries: all-gather and reduce-scatter count one rank's share."""
    return nbytes / n if kind in ("all_gather", "reduce_scatter") else nbytes


def collective_channels(kind: str, n: int, nbytes: float, algorithm: str, proto: str, view: View,
                        cap: int | None = None) -> int:
    """How many channels NCCL spreads one collective over: it drops channels until every thread
    has enough bytes, then deals the traffic out in cells of at least 16 KiB a channel."""
    channels = view.channels if cap is None else max(1, min(view.channels, int(cap)))
    threshold = THREAD_THRESHOLD[proto] * (n if algorithm == "ring" and proto == "LL" else 1)
    while channels > 1 and nbytes < channels * THREADS[proto] * threshold:
        channels -= 1
    count = _per_rank_bytes(kind, n, nbytes)
    per_byte = 2 if kind == "all_reduce" else n if kind in ("all_gather", "reduce_scatter") else 1
    if proto == "LL":
        per_byte *= 4
    traffic = max(MIN_TRAFFIC_PER_CHANNEL, count * per_byte)
    per_channel = max(MIN_TRAFFIC_PER_CHANNEL, traffic / channels)
    cell = math.ceil(math.ceil(MIN_TRAFFIC_PER_CHANNEL / per_byte) / 16) * 16
    cells = max(1, math.ceil(count / cell))
    per = min(cells, math.ceil(per_channel / (cell * per_byte)))
    mid, hi = divmod(cells - per, per)
    return max(1, min(channels, 1 + mid + (1 if hi else 0)))


def p2p_plan(nbytes: float, n: int, view: View, cap: int | None = None, self_send: bool = False) -> tuple[str, int]:
    """NCCL's protocol and channel count for one send of `nbytes` in a communicator of `n` ranks."""
    most = view.p2p_channels if cap is None else max(1, min(view.p2p_channels, int(cap)))
    least = most
    while least > 1 and least * n > view.p2p_channels:
        least //= 2
    proto = "LL" if (not self_send and nbytes <= most * P2P_LL_THRESHOLD) else "Simple"
    step = P2P_STEP_BYTES["LL"] if proto == "LL" else P2P_STEP_BYTES["net" if view.nodes > 1 else view.intra]
    min_part, max_part = (step / 2, step) if view.nodes > 1 else (step / 8, step * 32)
    channels = max(1, min(least, math.ceil(nbytes / min_part)))
    part = max(min_part, nbytes / channels)
    while part > max_part and channels <= most // 2:
        channels *= 2
        part = nbytes / channels
    return proto, channels
