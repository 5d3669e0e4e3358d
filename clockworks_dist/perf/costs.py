"""What each op costs in time: one rule per op kind, as the semantics has one rule per op.

`COSTS[kind]` (the `kind` strings of `ir`'s op classes) says, for an op of that kind:

- `host`: the constant the host spends issuing it when launches are eager, or None when the host
  launches no kernel for it (NVSHMEM calls run inside a kernel that is already running);
- `launch`: which kernel start the GPU pays for it, if any: "nccl" (an NCCL kernel,
  `graph_launch_us`, plus `eager_launch_us` when launched eagerly) or "local" (a plain kernel,
  `local_graph_launch_us`, plus `local_eager_launch_us`);
- `issue`: constants the rank spends on the op before its bytes move (a put's issue);
- `latency`: constants paid after its bytes have moved (a put's signal reaching the target);
- `nbytes(op, rank, size)`: the bytes it moves, `size(rank, region)` giving a region's bytes: a
  kernel's HBM traffic and a transfer's payload come from the op's data flow in the semantics
  (`rules.flows`), a collective's follow nccl-tests' conventions;
- `pulls`: its bytes flow from the peer (`op.pe`) to this rank, as a get's do;
- `one_thread` and `holds` (derived from the above, so an added op gets them right): a generated
  NVSHMEM program runs the op on one thread (it moves no buffer's bytes), and a delivery that
  carries a buffer's bytes keeps its rank until they have left (`programs`, `simulate`);
- `timing`: which of the simulator's processes times it: `local` (a kernel over the GPU's HBM),
  `p2p` (NCCL send/recv, per matched pair), `collective` (an NCCL collective, `nccl.plan`),
  `barrier` (a PE-wide barrier: `issue` once per dissemination round), `delivery` (issued on the
  rank, lands later), `get` (a blocking transfer from the peer), `fixed` (latencies only), `instant`
  (no time of its own: waits end when what they wait for has happened; a fence or quiet also takes
  `nvshmem_fence_us` and waits for its rank's stores to be acknowledged, `simulate.Simulator._fence`).

Names in `issue` and `latency` are fields of `topology.Constants`. Adding an op to `ir.Op` means
adding its entry here (tests/test_costs.py fails until then).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

from .. import ir
from ..errors import CostWarning
from ..lowering import Lowered
from ..semantics.rules import rule

Size = Callable[[int, ir.Region], float]
SIGNAL_BYTES = 8.0  # a signal or atomic update carries one 64-bit word


@dataclass(frozen=True)
class RunConditions:
    """How a run is set up, apart from the machine it runs on (what calibration varies per
    measured cell)."""

    # thread blocks issuing each NVSHMEM put or get; None: as many as the generated code spreads it
    # over (`lowering.nvshmem_blocks` of its bytes)
    nvshmem_blocks: int | None = None
    # NCCL_MAX_NCHANNELS of the run: it caps the channels a call uses, not NCCL's choice of protocol
    # (NCCL builds its tuning tables for the full channel count).
    channel_cap: int | None = None
    # A timed run of a generated program, as `clockworks validate` measures it: the schedule's
    # lowering (`lowering.Lowered`: its backend, its kernels per call, packets, copy-engine puts and
    # progress words, all decided there), one run from its start event to its stop event, with the
    # program's own per-run costs (`program_*` constants; an NVSHMEM program's kernels and its closing
    # barrier; the progress word before each op of a host-driven one) and its stand-in kernels for
    # compute ops. None: the schedule's own ops, run back to back.
    program: Lowered | None = None
    # The protocol every NCCL send/recv uses, "LL", "LL128" or "Simple" (an imported MSCCL algorithm's
    # `proto`: its thread blocks move every step with it); None: the protocol NCCL picks per send.
    protocol: str | None = None
    # The signal whose put_signals are flag-in-data packets (an MSCCL++ plan's LL packet flags,
    # `importers.mscclpp.PKT_FLAG`): each is timed as the packet path, as a lowering's packet sends are.
    packet_signal: str | None = None


@dataclass(frozen=True)
class Cost:
    """The cost rule of one op kind (fields: the module docstring)."""

    timing: str
    host: str | None = None
    launch: str | None = None
    issue: tuple[str, ...] = ()
    latency: tuple[str, ...] = ()
    nbytes: Callable[[object, int, Size], float] | None = None
    pulls: bool = False

    @property
    def one_thread(self) -> bool:
        """A generated NVSHMEM program runs the op on one thread of a block, with no step of the
        kernel's blocks before it: a one-sided op that moves no buffer's bytes (a wait, fence, quiet,
        signal, atomic or PE-wide barrier)."""
        return self.timing not in ("local", "p2p", "collective") and self.nbytes in (None, _signal_bytes)

    @property
    def holds(self) -> bool:
        """A delivery that carries a buffer's bytes (a put, put_signal, non-blocking get): where the
        issuing threads reach the peer's memory (NVLink, PCIe peer access, the PE itself) they move
        the bytes themselves, and the rank goes on once the bytes have left."""
        return self.timing == "delivery" and self.nbytes is _payload

    @property
    def launches_kernel(self) -> bool:
        """Whether the host launches a kernel for the op."""
        return self.host is not None


def fixed_us(consts, names: tuple[str, ...]) -> float:
    """The sum of the named constants."""
    return sum(getattr(consts, name) for name in names)


def _kernel_traffic(op, rank: int, size: Size) -> float:
    """A kernel's HBM traffic: every place its data flow reads, then every place it writes."""
    moves = rule(op).flows(op, rank)
    return sum(size(r, region) for move in moves for r, region in move.srcs + move.dsts)


def _payload(op, rank: int, size: Size) -> float:
    """What a transfer carries: the places its data flow writes."""
    return sum(size(r, region) for move in rule(op).flows(op, rank) for r, region in move.dsts)


def _src_bytes(op, rank: int, size: Size) -> float:
    return size(rank, op.src)


def _dst_bytes(op, rank: int, size: Size) -> float:
    return size(rank, op.dst)


def _signal_bytes(op, rank: int, size: Size) -> float:
    return SIGNAL_BYTES


def _no_bytes(op, rank: int, size: Size) -> float:
    return 0.0


_LOCAL = dict(timing="local", host="local_host_us", launch="local")
_NCCL_P2P = dict(timing="p2p", host="p2p_launch_us", launch="nccl")  # the host skips NCCL's tuning
_NCCL = dict(timing="collective", host="kernel_launch_us", launch="nccl")
_PUT = dict(timing="delivery", issue=("nvshmem_put_latency_us",), latency=("nvshmem_signal_latency_us",))
# A PE-wide barrier runs in the NVSHMEM kernel (no launch on the host), but its own start on the
# GPU is timed as an NCCL kernel's (the calibration has no barrier of its own yet).
_PE_BARRIER = dict(timing="barrier", launch="nccl", issue=("barrier_us",))
_WAIT = dict(timing="instant")

COSTS: dict[str, Cost] = {
    "reduce": Cost(**_LOCAL, nbytes=_kernel_traffic),
    "copy": Cost(**_LOCAL, nbytes=_kernel_traffic),
    "fill": Cost(**_LOCAL, nbytes=_kernel_traffic),
    # What it costs is its own (`compute_time`); its traffic by default is its reads and writes.
    "compute": Cost(**_LOCAL, nbytes=_kernel_traffic),
    # A send/recv's bytes are its send's, timed per matched pair; a group's are its members'.
    "send": Cost(**_NCCL_P2P, nbytes=_src_bytes),
    "recv": Cost(**_NCCL_P2P, nbytes=_dst_bytes),
    "group": Cost(**_NCCL_P2P),
    # nccl-tests' byte conventions: all-gather counts its output, the others their input.
    "all_reduce": Cost(**_NCCL, nbytes=_src_bytes),
    "all_gather": Cost(**_NCCL, nbytes=_dst_bytes),
    "reduce_scatter": Cost(**_NCCL, nbytes=_src_bytes),
    "broadcast": Cost(**_NCCL, nbytes=_src_bytes),
    "reduce_to": Cost(**_NCCL, nbytes=_src_bytes),
    "all_to_all": Cost(**_NCCL, nbytes=_src_bytes),
    "barrier": Cost(**_NCCL, nbytes=_no_bytes),
    "barrier_all": Cost(**_PE_BARRIER),
    "sync_all": Cost(**_PE_BARRIER),
    # NVSHMEM teams: a split agrees over its parent as a barrier would; a team barrier quiets first.
    "signal_store": Cost(timing="instant"),  # one store by one thread, on the rank
    "team_split": Cost(**_PE_BARRIER),
    "team_barrier": Cost(**_PE_BARRIER),
    "put": Cost(**_PUT, nbytes=_payload),
    "put_signal": Cost(**_PUT, nbytes=_payload),
    "signal_op": Cost(**_PUT, nbytes=_signal_bytes),
    "atomic": Cost(**_PUT, nbytes=_signal_bytes),
    # A get's request crosses to the peer and its bytes come back, at the rate of the blocks that
    # issue it; a non-blocking get costs the same but the rank goes on once it is issued (its data
    # lands as a delivery).
    "get": Cost(timing="get", issue=("nvshmem_put_latency_us",), latency=("nvshmem_signal_latency_us",),
                nbytes=_payload, pulls=True),
    "get_nbi": Cost(**_PUT, nbytes=_payload, pulls=True),
    # A fetching atomic is a round trip to the target and back: the route's latency both ways (the
    # simulator adds it) and these.
    "fetch_atomic": Cost(timing="fixed", latency=("nvshmem_signal_latency_us", "nvshmem_signal_latency_us")),
    "wait_until": Cost(**_WAIT),
    "wait_until_all": Cost(**_WAIT),
    "wait_until_any": Cost(**_WAIT),
    # the machine holds deliveries back behind a fence and enables a quiet once none is in flight;
    # the time of each is the thread's fence (`simulate.Simulator._fence`)
    "fence": Cost(**_WAIT),
    "quiet": Cost(**_WAIT),
    # events and thread barriers order a rank's threads, which the simulator does not time yet (it
    # refuses threads); when it does, they are waits of the threads
    "record_event": Cost(**_WAIT),
    "wait_event": Cost(**_WAIT),
    "thread_barrier": Cost(**_WAIT),
}


def cost(op) -> Cost:
    """The cost rule of `op`."""
    return COSTS[op.kind]


def launches_kernel(op) -> bool:
    """Whether the host launches a kernel for this op (one-sided ops run inside a kernel)."""
    return COSTS[op.kind].launches_kernel


def host_cost(op, consts) -> float:
    """The host's time to issue this op eagerly: a collective (NCCL tunes it on the host) or plain
    kernel, a send/recv group (and the kernel of each of its recvs that reduces), or nothing
    (one-sided ops run inside a kernel)."""
    rule = COSTS[op.kind]
    own = getattr(consts, rule.host) if rule.host is not None else 0.0
    return own + consts.local_host_us * len(reducing_recvs(op))


def launch_us(consts, mode: str, kernel: str = "nccl") -> float:
    """The GPU-side start of a kernel, "nccl" or "local" (the host's issue cost is counted by the
    host clock)."""
    if kernel == "local":
        return consts.local_graph_launch_us + (consts.local_eager_launch_us if mode == "eager" else 0.0)
    return consts.graph_launch_us + (consts.eager_launch_us if mode == "eager" else 0.0)


def reducing_recvs(op) -> list:
    """The recvs of a send/recv op or group that reduce into their destination: NCCL receives, so
    each is a kernel after the transfer (dst = dst op received: reads both, writes dst)."""
    members = op.ops if isinstance(op, ir.Group) else (op,)
    return [m for m in members if isinstance(m, ir.Recv) and m.reduce is not None]


def reduce_traffic(recv, size: Size, rank: int) -> float:
    """The HBM bytes of the kernel after a recv that reduces: dst and what arrived read, dst written."""
    return 3 * size(rank, recv.dst)


def compute_dtype(op, dtype_of: Callable[[ir.Region], str]) -> str | None:
    """The dtype a compute op's flops count in: its first write's, else its first read's."""
    first = (op.writes or op.reads or (None,))[0]
    return dtype_of(first) if first is not None else None


_WARNED: set[tuple[str, int]] = set()  # the compute op sites already warned about, this process


def warn_no_cost(op) -> None:
    """Warn, once per op site (file:line), that a compute op states no cost and what it is taken as."""
    site = (op.loc.file, op.loc.line)
    if site in _WARNED:
        return
    _WARNED.add(site)
    warnings.warn_explicit(
        f"compute {op.name} states no cost, so it is taken as a kernel bound by its reads and writes over HBM; "
        f"state it: r.compute({op.name!r}, ..., us=TIME_US), or flops=N and bytes=N for a roofline on the "
        "topology's GPU", CostWarning, op.loc.file, op.loc.line)
