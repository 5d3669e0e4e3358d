"""How NCCL runs a collective: algorithm (ring, tree), protocol (LL, LL128, Simple), channels.

NCCL picks, per call, the (algorithm, protocol) pair its cost model predicts fastest, and spreads
the data over a number of channels that grows with the size. We model each choice by its cost:
`base + steps * step_latency` fixed time, plus the bytes each rank puts on the wire (divided by the
protocol's wire efficiency: LL sends a flag with every 4 data bytes, LL128 one 8-byte flag per 128
bytes) at most `channels * per-channel rate`, shared with everything else on the links, and we pick
the cheapest pair as NCCL does. The constants come from calibration (`clockworks calibrate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PROTOCOLS = ("LL", "LL128", "Simple")
EFFICIENCY = {"LL": 0.5, "LL128": 120 / 128, "Simple": 1.0}


@dataclass(frozen=True)
class Transfer:
    """Bytes from member `src` to member `dst` (indices into the member list)."""

    src: int
    dst: int
    nbytes: float


@dataclass(frozen=True)
class Plan:
    algorithm: str
    protocol: str
    channels: int
    transfers: tuple[Transfer, ...]
    fixed_us: float
    ceiling_GBs: float  # per transfer
    reduce_bytes: float  # HBM traffic per member for the reduction


def ring_transfers(kind: str, n: int, nbytes: float) -> tuple[list[Transfer], int]:
    """Per ring edge bytes and the number of sequential steps (nccl-tests byte conventions)."""
    if n == 1:
        return [], 0
    if kind == "all_reduce":
        per, steps = 2 * (n - 1) / n * nbytes, 2 * (n - 1)
    elif kind in ("all_gather", "reduce_scatter"):
        per, steps = (n - 1) / n * nbytes, n - 1
    else:  # broadcast, reduce_to: pipelined along the ring
        per, steps = nbytes, n - 1
    return [Transfer(i, (i + 1) % n, per) for i in range(n)], steps


def tree_transfers(n: int, nbytes: float) -> tuple[list[Transfer], int]:
    """Double binary tree all-reduce: every rank sends and receives about the whole buffer once up
    and once down; 2 * ceil(log2 n) steps."""
    depth = max(1, math.ceil(math.log2(n)))
    transfers = []
    for i in range(1, n):
        parent = (i - 1) // 2
        transfers.append(Transfer(i, parent, nbytes))
        transfers.append(Transfer(parent, i, nbytes))
    return transfers, 2 * depth


def channels_for(consts, step_bytes: float) -> int:
    return max(1, min(int(consts.max_channels), int(math.ceil(step_bytes / consts.channel_bytes))))


def p2p_choice(consts, nbytes: float, link_GBs: float = float("inf"), kind: str = "p2p") -> tuple[str, int, float]:
    """NCCL send/recv: LL for small messages, else Simple, on up to `p2p_max_channels` channels.
    `kind` is "all_to_all" when the send is one of a grouped exchange with every peer."""
    proto = "LL" if nbytes <= consts.p2p_ll_max_bytes else "Simple"
    ch = max(1, min(int(consts.p2p_max_channels), int(math.ceil(nbytes / consts.channel_bytes))))
    return proto, ch, ceiling_for(consts, kind, proto, ch, link_GBs)


def ceiling_for(consts, kind: str, proto: str, channels: int, link_GBs: float) -> float:
    """A transfer's rate ceiling: its channels at the kernel's per-channel rate, and no more than
    the fraction of the route's bandwidth that kind of kernel reaches."""
    per_channel = channels * consts.channel_GBs[proto] * consts.kind_efficiency.get(kind, 1.0)
    return min(per_channel, link_GBs * consts.kind_link_efficiency.get(kind, 1.0))


def plan(kind: str, n: int, nbytes: float, consts, link_GBs: float) -> Plan:
    """The (algorithm, protocol, channels) NCCL would pick, with its transfers and fixed cost.
    `nbytes` follows nccl-tests: all-gather output size, reduce-scatter input size."""
    if kind == "barrier":
        return Plan("ring", "LL", 1, (), consts.proto_base_us["LL"] + (n - 1) * consts.proto_step_us["LL"],
                    0.0, 0.0)
    if kind == "all_to_all":
        per = nbytes / n
        proto, ch, ceiling = p2p_choice(consts, per, link_GBs, "all_to_all")
        transfers = tuple(Transfer(i, j, per / EFFICIENCY[proto]) for i in range(n) for j in range(n) if i != j)
        return Plan("p2p", proto, ch, transfers, consts.proto_base_us[proto], ceiling, 0.0)
    candidates = [("ring", ring_transfers(kind, n, nbytes))]
    if kind == "all_reduce" and n > 2:
        candidates.append(("tree", tree_transfers(n, nbytes)))
    best = None
    for algorithm, (transfers, steps) in candidates:
        step_bytes = nbytes / max(n, 1)
        for proto in PROTOCOLS:
            if proto == "LL" and nbytes > consts.ll_max_bytes:
                continue
            ch = channels_for(consts, step_bytes)
            ceiling = ceiling_for(consts, kind, proto, ch, link_GBs)
            step_us = consts.proto_step_us[proto]
            if proto == "Simple":  # small steps finish their synchronisation sooner
                step_us *= min(1.0, step_bytes / ch / consts.simple_ramp_bytes)
            fixed = consts.proto_base_us[proto] + steps * step_us
            sent: dict[int, float] = {}
            for t in transfers:  # what the busiest rank's port carries
                sent[t.src] = sent.get(t.src, 0.0) + t.nbytes
            wire = max(sent.values(), default=0.0) / EFFICIENCY[proto]
            estimate = fixed + wire / (min(ceiling, link_GBs) * 1e3)
            if best is None or estimate < best[0]:
                reduce_bytes = 3 * nbytes * (n - 1) / n if kind in ("all_reduce", "reduce_scatter", "reduce_to") else 0.0
                best = (estimate, Plan(algorithm, proto, ch,
                                       tuple(Transfer(t.src, t.dst, t.nbytes / EFFICIENCY[proto]) for t in transfers),
                                       fixed, ceiling, reduce_bytes))
    return best[1]
