"""The network the simulator sees: resources with capacities, and a route between any two ranks.

A resource is one direction of a link, or a GPU's HBM. Capacities are in bytes per microsecond
(1 GB/s = 1000 B/us). Routes come from the topology layer (`topology.routing`), computed once per
pair of ranks and cached.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import nccl_tuning

GB = 1e3
# What each kind of link forwards whole at every hop (cut-through at this granularity): the largest
# packet payload, NVLink 256 B, PCIe 256 B (a common Max Payload Size), InfiniBand and Ethernet a
# 4 KiB MTU, UPI a 64 B cache line, NVLink-C2C 256 B.
SLICE_BYTES = {"nvlink": 256, "pcie": 256, "upi": 64, "ib": 4096, "ethernet": 4096, "c2c": 256}


@dataclass
class Network:
    names: list[str]
    capacity: list[float]
    hbm_of: list[int]
    router: Callable[[int, int], tuple[tuple[int, ...], float]]
    _routes: dict = field(default_factory=dict)
    transports: dict = field(default_factory=dict)
    gpu_generation: str = "hopper"  # what NCCL's tables are indexed by
    node_of: list[int] = field(default_factory=list)
    nominal: dict = field(default_factory=dict)  # (src, dst) -> GB/s as NCCL's topology search counts it
    reverse: dict = field(default_factory=dict)  # link resource -> (the opposite direction's resource, link kind)
    slices: dict = field(default_factory=dict)  # (src, dst) -> [(slice bytes, GB/s) of every hop after the first]
    gpus: list = field(default_factory=list)  # the topology's GPU device of each rank

    def peak_flops(self, rank: int, dtype: str | None, op) -> float:
        """Rank's GPU's peak rate for `dtype`, TFLOP/s; PredictError naming the op where the topology
        gives none."""
        gpu = self.gpus[rank] if rank < len(self.gpus) else None
        rate = (gpu.peak_tflops or {}).get(dtype) if gpu is not None else None
        if rate is None:
            from ..errors import PredictError

            what = f"{gpu.id} ({gpu.model or 'a GPU'})" if gpu is not None else "its GPU"
            raise PredictError(f"{op.loc}: compute {op.name} states flops={op.flops:g}, but {what} has no peak "
                               f"FLOP rate for {dtype}: add peak_tflops: {{{dtype}: TFLOPS}} to that GPU in the "
                               "topology file, or state the kernel's time with us=")
        return rate

    def fill_us(self, src: int, dst: int, nbytes: float) -> float:
        """Slices forwarded cut-through: the last slice still crosses every hop after the first
        whole, one slice time per hop, on top of the route's latency and the bytes' own time."""
        self.route(src, dst)
        return sum(min(size, nbytes) / (rate * GB) for size, rate in self.slices.get((src, dst), ()))

    def nominal_GBs(self, src: int, dst: int) -> float:
        """The route's bandwidth as NCCL sees it (NVLink: lanes times NCCL's per-lane figure)."""
        self.route(src, dst)
        return self.nominal.get((src, dst), self.bottleneck(src, dst))

    def transport(self, src: int, dst: int) -> str:
        """nvlink | pcie | net | local: the hardware a route crosses (after routing it)."""
        self.route(src, dst)
        return self.transports.get((src, dst), "nvlink" if src != dst else "local")

    def route(self, src: int, dst: int) -> tuple[tuple[int, ...], float]:
        """(resources, latency in us) from rank src to rank dst; a rank to itself uses its HBM."""
        key = (src, dst)
        found = self._routes.get(key)
        if found is None:
            found = ((self.hbm_of[src],), 0.0) if src == dst else self.router(src, dst)
            self._routes[key] = found
        return found

    def hbm(self, rank: int) -> int:
        return self.hbm_of[rank]

    def local_bytes(self, rank: int, nbytes: float, l2_GBs: float) -> float:
        """What a plain kernel's `nbytes` of reads and writes cost the rank's HBM resource: all of
        them, unless they fit in its GPU's L2 (the device's l2_MiB), where they move at `l2_GBs`
        (as if fewer bytes crossed HBM, so a kernel in L2 still shares what HBM others use).
        Counting every access (a reduce's destination twice) errs towards HBM near the size."""
        gpu = self.gpus[rank] if rank < len(self.gpus) else None
        l2 = getattr(gpu, "l2_MiB", None)
        if not l2 or nbytes > l2 * (1 << 20):
            return nbytes
        return nbytes * min(1.0, self.capacity[self.hbm_of[rank]] / (l2_GBs * GB))

    def bottleneck(self, src: int, dst: int) -> float:
        """The smallest capacity on the route, in GB/s."""
        resources, _ = self.route(src, dst)
        return min(self.capacity[r] for r in resources) / GB


def from_topology(topo, ranks: int) -> Network:
    """Map ranks onto the topology's GPUs in rank order and route every pair through it."""
    from ..topology import gpus, route

    devices = gpus(topo)
    if ranks > len(devices):
        from ..errors import TopologyError

        raise TopologyError(f"the schedule has {ranks} ranks but {topo.name} has {len(devices)} GPUs "
                            "(use a larger topology, or --nodes with a cluster template)")
    names: list[str] = []
    capacity: list[float] = []
    index: dict[tuple[int, str], int] = {}

    def resource(key, name: str, GBs: float) -> int:
        if key not in index:
            index[key] = len(capacity)
            names.append(name)
            capacity.append(GBs * GB)
        return index[key]

    by_id = {d.id: d for d in topo.devices}
    efficiency = topo.constants.hbm_efficiency  # what a streaming kernel reaches of the datasheet rate
    hbm = [resource(("hbm", devices[r]), f"{devices[r]} HBM", by_id[devices[r]].hbm_GBs * efficiency)
           for r in range(ranks)]

    generation = nccl_tuning.generation(by_id[devices[0]].model)

    def router(src: int, dst: int):
        path = route(topo, devices[src], devices[dst])
        resources = []
        seen = []
        hops = []
        for hop in path.links:
            link = topo.links[hop.link]
            a, b = (link.a, link.b) if hop.direction == 0 else (link.b, link.a)
            # a route spread over parallel links (NVSwitch planes) puts `share` of its bytes on each:
            # the flow sees that link as capacity / share
            name = f"{link.kind} {a}->{b}" + (f" ({hop.share:.0%} of the route)" if hop.share < 1 else "")
            here = resource(("link", hop.link, hop.direction, round(hop.share, 6)), name, link.GBs_per_dir / hop.share)
            back = f"{link.kind} {b}->{a}" + (f" ({hop.share:.0%} of the route)" if hop.share < 1 else "")
            there = resource(("link", hop.link, 1 - hop.direction, round(hop.share, 6)), back,
                             link.GBs_per_dir / hop.share)
            reverse[here] = (there, link.kind)
            resources.append(here)
            hops.append((SLICE_BYTES.get(link.kind, 256), link.GBs_per_dir / hop.share))
            lane = nccl_tuning.NVLINK_LANE_GBS[generation] * link.lanes if link.kind == "nvlink" else link.GBs_per_dir
            seen.append(lane / hop.share)
        transports[(src, dst)] = path.transport
        nominal[(src, dst)] = min(seen, default=float("inf"))
        slices[(src, dst)] = hops[1:]
        return tuple(resources), path.latency_us

    transports: dict[tuple[int, int], str] = {}
    nominal: dict[tuple[int, int], float] = {}
    reverse: dict[int, tuple[int, str]] = {}
    slices: dict[tuple[int, int], list] = {}
    net = Network(names=names, capacity=capacity, hbm_of=hbm, router=router, gpu_generation=generation,
                  node_of=[by_id[devices[r]].node or 0 for r in range(ranks)])
    net.transports, net.nominal, net.reverse, net.slices = transports, nominal, reverse, slices
    net.gpus = [by_id[devices[r]] for r in range(ranks)]
    return net
