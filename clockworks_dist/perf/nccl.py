"""How NCCL runs a collective: algorithm (ring, tree), protocol (LL, LL128, Simple), channels.

NCCL decides the algorithm, protocol and channel count from its own cost model (`nccl_tuning`);
we time what it decided with calibrated constants: `base + kind extra + steps * step latency`
fixed time, plus the bytes each rank puts on the wire (divided by the protocol's wire efficiency:
LL sends a flag with every 4 data bytes, LL128 one 8-byte flag per 128 bytes) at most `channels *
per-channel rate`, shared with everything else on the links. The constants come from calibration
(`clockworks calibrate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import nccl_tuning
from .nccl_tuning import View

PROTOCOLS = nccl_tuning.PROTOCOLS
EFFICIENCY = {"LL": 0.5, "LL128": 120 / 128, "Simple": 1.0}


@dataclass(frozen=True)
class Transfer:
    """Bytes from member `src` to member `dst` (indices into the member list); `src == dst`: a copy
    within the member's HBM. `ceiling_GBs`: its own rate ceiling (None: the plan's)."""

    src: int
    dst: int
    nbytes: float
    ceiling_GBs: float | None = None


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


def p2p_choice(consts, nbytes: float, link_GBs: float = float("inf"), kind: str = "p2p", view: View | None = None,
               n: int = 2, self_send: bool = False, cap: int | None = None) -> tuple[str, int, float]:
    """NCCL send/recv: the protocol and channels NCCL picks (`nccl_tuning.p2p_plan`) and the rate
    ceiling they give. `kind` is "all_to_all" when the send is one of a grouped exchange with
    every peer; `cap` is the run's channel cap (`RunConditions.channel_cap`)."""
    view = view or default_view(consts)
    proto, ch = nccl_tuning.p2p_plan(nbytes, n, view, cap, self_send)
    ramp = exchange_ramp(consts, kind, proto, ch, nbytes, view)
    return proto, ch, ceiling_for(consts, kind, proto, ch, link_GBs, ramp)


# An exchange channel reaches its full rate at this many chunks (NCCL's largest part per channel,
# `nccl_tuning.p2p_plan`'s max_part, is 32 steps).
RAMP_CHUNKS = 32


def exchange_ramp(consts, kind: str, proto: str, channels: int, nbytes: float, view: View) -> float:
    """The fraction of its per-channel rate a channel of an exchange (kind all_to_all) reaches, by
    the chunks it moves: `nccl_exchange_ramp` at one chunk or less, climbing log-linearly to 1 at
    RAMP_CHUNKS; 1 for other kinds, LL, and one channel."""
    if kind != "all_to_all" or proto != "Simple" or channels <= 1 or consts.nccl_exchange_ramp >= 1:
        return 1.0
    chunk = nccl_tuning.P2P_STEP_BYTES["net" if view.nodes > 1 else view.intra]
    chunks = nbytes / channels / chunk
    climb = min(1.0, max(0.0, math.log2(chunks) / math.log2(RAMP_CHUNKS))) if chunks > 0 else 0.0
    return consts.nccl_exchange_ramp + (1 - consts.nccl_exchange_ramp) * climb


def p2p_fixed_us(consts, proto: str, kind: str = "p2p", own: bool = False) -> float:
    """A send/recv's fixed cost past its launch: the protocol's p2p base and the kind's extra. A
    send to itself has no protocol between two sides: the kernel copies one buffer to the other."""
    return (0.0 if own else consts.nccl_p2p_base_latency_us[proto]) + consts.nccl_kind_base_us[kind]


def p2p_staging_us(consts, proto: str, nbytes: float, channels: int, transport: str) -> float:
    """Simple sends land in the receiver's staging buffer in chunks; the receiver copies the last
    chunk out after it has arrived (LL data is read in place)."""
    if proto != "Simple":
        return 0.0
    chunk = nccl_tuning.P2P_STEP_BYTES["nvlink" if transport == "nvlink" else "pcie"]
    return min(nbytes / channels, chunk) / (consts.nccl_copy_channel_GBs * 1e3)


def ceiling_for(consts, kind: str, proto: str, channels: int, link_GBs: float, ramp: float = 1.0) -> float:
    """A transfer's rate ceiling: its channels at the kernel's per-channel rate (times `ramp`, the
    fraction an exchange's channels reach at its size), and no more than the fraction of the
    route's bandwidth that kind of kernel reaches with that protocol (LL's 8-byte stores carry
    more packet overhead per byte than Simple's bulk writes)."""
    per_channel = channels * consts.nccl_channel_GBs[proto] * consts.nccl_kind_efficiency[kind] * ramp
    return min(per_channel, link_GBs * consts.nccl_kind_link_efficiency[kind]
               * consts.nccl_protocol_link_efficiency[proto])


def default_view(consts, n_nodes: int = 1) -> View:
    """NCCL's view of a single NVLink node with the constants' channel counts (for callers that
    have no topology at hand)."""
    return View(channels=consts.nccl_max_channels, p2p_channels=consts.nccl_p2p_max_channels, nodes=n_nodes)


def own_chunk_us(consts, kind: str, n: int, nbytes: float) -> float:
    """The time a ring rank's work on its own chunk adds (`Constants.nccl_chunk_GBs`): the chunk is
    nbytes / n for the all-reduce, all-gather (nbytes: its output) and reduce-scatter (its input)."""
    rate = consts.nccl_chunk_GBs.get(kind)
    return nbytes / n / (rate * 1e3) if rate else 0.0


def plan(kind: str, n: int, nbytes: float, consts, link_GBs: float, view: View | None = None,
         transport: str = "nvlink", cap: int | None = None, inplace: bool = False) -> Plan:
    """The plan NCCL runs for one collective, timed with the calibrated constants.

    The algorithm, protocol and channel count are NCCL's own decisions (`nccl_tuning`: its cost
    model picks them for the communicator's full channel count; a cap such as NCCL_MAX_NCHANNELS,
    `cap`, only limits the channels the call then runs on). The fixed cost is the protocol's base,
    the kind's extra and one step latency per ring step over `transport` (the slowest hardware the
    ring crosses); the bytes are flows at most `channels` times the per-channel rate. `nbytes`
    follows nccl-tests: all-gather output, reduce-scatter input; `inplace`: the call's source is its
    destination."""
    view = view or default_view(consts)
    if n == 1 and kind != "barrier":
        # NCCL skips its algorithms on a one-rank communicator (ncclLaunchOneRank): out of place it
        # copies the send buffer to the receive buffer (one HBM read and write), in place it does
        # nothing.
        return Plan("one_rank", "Simple", 1, (), 0.0, 0.0, 0.0 if inplace else 2.0 * nbytes)
    if kind == "barrier":
        return Plan("ring", "LL", 1, (), consts.nccl_base_latency_us["LL"] + (n - 1) * consts.step_us(transport, "LL"),
                    0.0, 0.0)
    if kind == "all_to_all":
        # a send and a recv per member, the member itself included: that chunk is a copy in HBM (read
        # and written) on the channels of a send to itself, at their copy rate
        per = nbytes / n
        proto, ch, ceiling = p2p_choice(consts, per, link_GBs, "all_to_all", view, n, cap=cap)
        _, own_ch = nccl_tuning.p2p_plan(per, n, view, cap, self_send=True)
        transfers = tuple(Transfer(i, j, per / EFFICIENCY[proto]) if i != j else
                          Transfer(i, i, 2 * per, own_ch * consts.nccl_copy_channel_GBs)
                          for i in range(n) for j in range(n))
        return Plan("p2p", proto, ch, transfers, p2p_fixed_us(consts, proto, "all_to_all"), ceiling, 0.0)
    algorithm, proto, _ = nccl_tuning.choose(kind, n, nbytes, view)
    ch = nccl_tuning.collective_channels(kind, n, nbytes, algorithm, proto, view, cap)
    transfers, steps = ring_transfers(kind, n, nbytes) if algorithm == "ring" else tree_transfers(n, nbytes)
    ceiling = ceiling_for(consts, kind, proto, ch, link_GBs)
    # a broadcast or reduce is one pipeline along the ring: its fill costs one step's latency, as in
    # NCCL's own model (`nccl_tuning.tuning`); the rings of the other kinds wait at every step
    latency_steps = 1 if kind in ("broadcast", "reduce_to") else steps
    fixed = (consts.nccl_base_latency_us[proto] + consts.nccl_kind_base_us[kind]
             + latency_steps * consts.step_us(transport, proto) + own_chunk_us(consts, kind, n, nbytes))
    reduce_bytes = 3 * nbytes * (n - 1) / n if kind in ("all_reduce", "reduce_scatter", "reduce_to") else 0.0
    return Plan(algorithm, proto, ch, tuple(Transfer(t.src, t.dst, t.nbytes / EFFICIENCY[proto]) for t in transfers),
                fixed, ceiling, reduce_bytes)
