"""Routes between GPUs: the links a transfer crosses, in which direction, and the share of its bytes
each one carries. The simulator turns a transfer into a flow over `route(...).links`.

Rules (the paths NCCL and NVSHMEM use, not plain shortest paths):

1. Same node, NVLink first: a direct NVLink if the two GPUs have one, else through NVSwitches.
   Files describe NVSwitches as they are: DGX H100 has 4, and each GPU has 5, 4, 4 and 5 of its 18
   NVLinks to them. A route spreads over every switch both GPUs reach, each switch carrying a
   share of the bytes proportional to its capacity (5/18, 4/18, 4/18, 5/18), so the aggregate is
   the sum of the GPU's links: 450 GB/s per direction for 18 NVLink-4 links at 25 GB/s. A flow
   loads each GPU-switch link by its share only, which is what max-min sharing needs.
2. Same node, no NVLink: PCIe peer to peer on the fewest-hop path through PCIe switches, host
   bridges and the CPU interconnect (`upi`): through the shared switch when there is one, through
   both host bridges and the socket link when the GPUs sit under different sockets.
3. Different nodes: GPU -> PCIe -> its NIC -> leaf -> (spines) -> leaf -> NIC -> PCIe -> GPU. A GPU
   sends through its nearest NIC on PCIe, and among equally near NICs through the one whose rail
   is the GPU's local index (its position among its node's GPUs): NCCL's rail-optimised mapping,
   which on a DGX puts GPU i on NIC i, rail i (they share a PCIe switch). Same-rail traffic stays
   on one leaf; cross-rail traffic climbs to the spines and spreads over all of them (adaptive
   routing / ECMP), equally. With `pxn=True` (NCCL's PXN, its default for send/recv on rail-
   optimised fabrics) a cross-rail transfer first moves over NVLink to the source node's GPU on
   the destination's rail and leaves through that GPU's NIC, so it never crosses a spine.

GPUs and NICs never forward traffic that is not theirs. Where several fewest-hop paths join two
devices (NVSwitch planes, spines, parallel links), the flow splits over them in proportion to
each path's capacity, and `Route.bottleneck_GBs` is the rate the whole route sustains alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import networkx as nx

from ..errors import TopologyError
from .model import Topology, _suggest, cache_of, templates_for

Transport = Literal["local", "nvlink", "pcie", "net"]

NVLINK = ({"nvlink"}, {"nvswitch"})
PCIE = ({"pcie", "upi", "c2c"}, {"pcie_switch", "host_bridge", "cpu"})
NETWORK = ({"ib", "ethernet"}, {"ib_leaf", "ib_spine"})


class RouteLink(NamedTuple):
    """One link of a route: `direction` 0 is a -> b, 1 is b -> a; `share` is the fraction of the
    transfer's bytes that cross it (1.0 unless the route splits over parallel paths)."""

    link: int
    direction: int
    share: float


@dataclass(frozen=True)
class Route:
    """How bytes get from GPU `src` to GPU `dst`."""

    src: str
    dst: str
    transport: Transport  # what NCCL would call the hardware: nvlink, pcie or net (local: src == dst)
    links: tuple[RouteLink, ...]
    # The devices position by position, e.g. (gpu0,), (nvswitch0, .., nvswitch3), (gpu7,): a
    # position holds several devices where the route splits over parallel paths.
    stages: tuple[tuple[str, ...], ...]
    latency_us: float  # one way: the sum of the hops' latencies (the slowest of parallel paths)
    bottleneck_GBs: float  # the rate the route sustains alone: min over links of capacity / share

    @property
    def hops(self) -> int:
        """Links crossed one after another (parallel paths count once)."""
        return max(len(self.stages) - 1, 0)

    def describe(self) -> str:
        """`gpu0 -> nvswitch0|nvswitch1 -> gpu7` ."""
        return " -> ".join("|".join(stage) for stage in self.stages)


def gpus(topo: Topology) -> list[str]:
    """GPU ids in rank order: by node, then `rank_order` (default: file order)."""
    cache = cache_of(topo)
    cached = cache.get("gpus")
    if cached is None:
        keyed = [(d.node or 0, d.rank_order if d.rank_order is not None else i, d.id)
                 for i, d in enumerate(topo.devices) if d.kind == "gpu"]
        cached = cache["gpus"] = [gpu for *_, gpu in sorted(keyed)]
    return list(cached)


def local_index(topo: Topology, gpu: str) -> int:
    """The GPU's position among its node's GPUs in rank order (its rail, in NCCL's mapping)."""
    _check_gpu(topo, gpu)
    return _local_indices(topo)[gpu]


def _local_indices(topo: Topology) -> dict[str, int]:
    cache = cache_of(topo)
    table = cache.get("local_index")
    if table is None:
        table, seen = {}, {}
        for gpu_id in gpus(topo):
            node = topo.device(gpu_id).node
            table[gpu_id] = seen.get(node, 0)
            seen[node] = table[gpu_id] + 1
        cache["local_index"] = table
    return table


def incidence(topo: Topology) -> dict[str, dict[str, list[tuple[int, int]]]]:
    """device -> neighbour -> the (link index, direction) pairs of the parallel links joining them,
    neighbours in file order. Plain dicts, built once: a 1,000-node cluster has 130,000 of them."""
    cache = cache_of(topo)
    found = cache.get("incidence")
    if found is None:
        found = {}
        for i, link in enumerate(topo.links):
            found.setdefault(link.a, {}).setdefault(link.b, []).append((i, 0))
            found.setdefault(link.b, {}).setdefault(link.a, []).append((i, 1))
        cache["incidence"] = found
    return found


def build_graph(topo: Topology) -> nx.DiGraph:
    """One node per device (attributes kind, node); one edge per direction of every device pair
    that links join, with `links`: the (link index, direction) pairs of the parallel links."""
    cache = cache_of(topo)
    graph = cache.get("graph")
    if graph is None:
        graph = nx.DiGraph()
        graph.add_nodes_from((dev.id, {"kind": dev.kind, "node": dev.node}) for dev in topo.devices)
        graph.add_edges_from((u, v, {"links": list(links)})
                             for u, neighbours in incidence(topo).items() for v, links in neighbours.items())
        cache["graph"] = graph
    return graph


@dataclass
class _Segment:
    """All fewest-hop paths between two devices over some link kinds, with the fraction of the
    flow each path takes."""

    paths: list[list[str]]
    weights: list[float]
    edge_links: dict[tuple[str, str], list[tuple[int, int]]] = field(default_factory=dict)


def _adjacency(topo: Topology, rule: tuple[set[str], set[str]]) -> dict[str, dict[str, list[tuple[int, int]]]]:
    """device -> neighbour -> the (link, direction) pairs of the rule's link kinds, built once per rule
    (neighbours in the order of `incidence`)."""
    cache = cache_of(topo)
    key = ("adjacency", frozenset(rule[0]))
    found = cache.get(key)
    if found is None:
        usable = [link.kind in rule[0] for link in topo.links]
        found = {}
        for u, neighbours in incidence(topo).items():
            mine = {}
            for v, links in neighbours.items():
                if len(links) == 1:  # the common case, without building a list
                    if usable[links[0][0]]:
                        mine[v] = links
                else:
                    kept = [(i, d) for i, d in links if usable[i]]
                    if kept:
                        mine[v] = kept
            if mine:
                found[u] = mine
        cache[key] = found
    return found


def _passable(topo: Topology, rule: tuple[set[str], set[str]]) -> frozenset[str]:
    """The devices a path of this rule may pass through (not only start or end at)."""
    cache = cache_of(topo)
    key = ("passable", frozenset(rule[1]))
    found = cache.get(key)
    if found is None:
        found = cache[key] = frozenset(d.id for d in topo.devices if d.kind in rule[1])
    return found


def _segment(topo: Topology, src: str, dst: str, rule: tuple[set[str], set[str]]) -> _Segment | None:
    """Every fewest-hop path from `src` to `dst` over the rule's link kinds, passing only through
    the rule's device kinds (a breadth-first search that stops at `dst`'s depth)."""
    adjacency = _adjacency(topo, rule)
    passable = _passable(topo, rule)
    parents: dict[str, list[str]] = {src: []}
    frontier = [src]
    while frontier and dst not in parents:
        reached: dict[str, list[str]] = {}
        for u in frontier:
            for v in adjacency.get(u, {}):
                if v in parents or (v != dst and v not in passable):
                    continue
                reached.setdefault(v, []).append(u)
        parents.update(reached)
        frontier = list(reached)
    if dst not in parents:
        return None
    paths = [[dst]]
    while paths[0][0] != src:
        paths = [[parent] + path for path in paths for parent in parents[path[0]]]
    edge_links = {(u, v): adjacency[u][v] for path in paths for u, v in zip(path, path[1:])}
    capacity = [min(sum(topo.links[i].GBs_per_dir for i, _ in edge_links[u, v]) for u, v in zip(path, path[1:]))
                for path in paths]
    total = sum(capacity)
    if not total > 0:  # validated files have positive bandwidths; a model built in code may not
        raise TopologyError(f"{src} to {dst}: every path has a link of bandwidth 0 (GBs_per_dir must be > 0)")
    return _Segment(paths, [c / total for c in capacity], edge_links)


def _combine(topo: Topology, src: str, dst: str, transport: Transport, segments: list[_Segment]) -> Route:
    shares: dict[tuple[int, int], float] = {}
    stages: list[tuple[str, ...]] = []
    latency = 0.0
    for segment in segments:
        slowest = 0.0
        for path, weight in zip(segment.paths, segment.weights):
            hop_latency = 0.0
            for u, v in zip(path, path[1:]):
                parallel = segment.edge_links[u, v]
                edge_capacity = sum(topo.links[i].GBs_per_dir for i, _ in parallel)
                for i, direction in parallel:
                    key = (i, direction)
                    shares[key] = shares.get(key, 0.0) + weight * topo.links[i].GBs_per_dir / edge_capacity
                hop_latency += min(topo.links[i].latency_us for i, _ in parallel)
            slowest = max(slowest, hop_latency)
        latency += slowest
        positions = [tuple(dict.fromkeys(path[p] for path in segment.paths)) for p in range(len(segment.paths[0]))]
        stages += positions[1:] if stages else positions
    links = tuple(RouteLink(i, direction, share) for (i, direction), share in shares.items())
    bottleneck = min(topo.links[rl.link].GBs_per_dir / rl.share for rl in links)
    return Route(src, dst, transport, links, tuple(stages), latency, bottleneck)


def _check_gpu(topo: Topology, gpu: str) -> None:
    if gpu not in _local_indices(topo):
        all_gpus = gpus(topo)
        raise TopologyError(f"{gpu!r} is not a GPU of {topo.name}{_suggest(gpu, all_gpus)}; "
                            f"its GPUs are {_span(all_gpus)}")


def _span(ids: Sequence[str]) -> str:
    return ", ".join(ids) if len(ids) <= 4 else f"{ids[0]}, {ids[1]}, ..., {ids[-1]}"


def rail_nic(topo: Topology, gpu: str) -> str | None:
    """The NIC a GPU sends through: its nearest NIC on PCIe; among equally near ones, the NIC whose
    rail is the GPU's local index (else the local index modulo their number). None if no NIC is
    reachable."""
    cache = cache_of(topo)
    key = ("nic", gpu)
    if key not in cache:
        node = topo.device(gpu).node
        nics = {nic.id: nic for nic in _by_node(topo, "nic").get(node, ())}
        distance = _hops_to(topo, gpu, set(nics), PCIE)
        nearest = sorted(nic for nic in distance if distance[nic] == min(distance.values()))
        index = local_index(topo, gpu)
        matched = [nic for nic in nearest if nics[nic].rail == index]
        cache[key] = matched[0] if matched else (nearest[index % len(nearest)] if nearest else None)
    return cache[key]


def _hops_to(topo: Topology, src: str, targets: set[str], rule: tuple[set[str], set[str]]) -> dict[str, int]:
    """The nearest devices of `targets` from `src` over the rule's link kinds, passing only through
    the rule's device kinds, and their hop count: one breadth-first search for all of them, where
    `_segment` would search once per target."""
    adjacency = _adjacency(topo, rule)
    passable = _passable(topo, rule)
    seen, found, frontier, depth = {src}, {}, [src], 0
    while frontier and not found:  # only the nearest count
        depth += 1
        reached = []
        for u in frontier:
            for v in adjacency.get(u, {}):
                if v in seen:
                    continue
                if v in targets:
                    seen.add(v)
                    found[v] = depth
                elif v in passable:
                    seen.add(v)
                    reached.append(v)
        frontier = reached
    return found


def _by_node(topo: Topology, kind: str) -> dict[int | None, list]:
    """The devices of one kind, grouped by node in file order (built once: a cluster has thousands)."""
    cache = cache_of(topo)
    key = ("by_node", kind)
    if key not in cache:
        grouped: dict[int | None, list] = {}
        for dev in topo.devices:
            if dev.kind == kind:
                grouped.setdefault(dev.node, []).append(dev)
        cache[key] = grouped
    return cache[key]


def _no_route(topo: Topology, src: str, dst: str, why: str) -> TopologyError:
    return TopologyError(f"no route from {src} to {dst} in {topo.name}: {why}")


def route(topo: Topology, src: str, dst: str, *, pxn: bool = False) -> Route:
    """The route from GPU `src` to GPU `dst` (device ids), by the rules in this module's docstring."""
    cache = cache_of(topo)
    key = ("route", src, dst, pxn)
    if key in cache:
        return cache[key]
    _check_gpu(topo, src)
    _check_gpu(topo, dst)
    if src == dst:
        result = Route(src, dst, "local", (), ((src,),), 0.0, math.inf)
    elif topo.device(src).node == topo.device(dst).node:
        result = _intra_node(topo, src, dst)
    else:
        result = _inter_node(topo, src, dst, pxn)
    cache[key] = result
    return result


def _intra_node(topo: Topology, src: str, dst: str) -> Route:
    nvlink = _segment(topo, src, dst, NVLINK)
    if nvlink is not None:
        return _combine(topo, src, dst, "nvlink", [nvlink])
    pcie = _segment(topo, src, dst, PCIE)
    if pcie is not None:
        return _combine(topo, src, dst, "pcie", [pcie])
    raise _no_route(topo, src, dst, "they share no NVLink or NVSwitch, and no PCIe path through switches and "
                                    "host bridges joins them (check the file's links)")


def _inter_node(topo: Topology, src: str, dst: str, pxn: bool) -> Route:
    segments = []
    dst_nic = rail_nic(topo, dst)
    start = src
    if pxn and dst_nic is not None:
        # PXN: hand the data over NVLink to the GPU of the destination's rail on the source node.
        proxy = _gpu_on_rail(topo, topo.device(src).node, topo.device(dst_nic).rail)
        hop = _segment(topo, src, proxy, NVLINK) if proxy not in (None, src) else None
        if hop is not None:
            segments.append(hop)
            start = proxy
    src_nic = rail_nic(topo, start)
    for gpu, nic in ((start, src_nic), (dst, dst_nic)):
        if nic is None:
            raise _no_route(topo, src, dst, f"node {topo.device(gpu).node} has no NIC reachable from {gpu} "
                                            "over PCIe")
    pieces = [(start, src_nic, PCIE, "PCIe"), (src_nic, dst_nic, NETWORK, "network (leaves and spines)"),
              (dst_nic, dst, PCIE, "PCIe")]
    for a, b, rule, what in pieces:
        segment = _segment(topo, a, b, rule)
        if segment is None:
            raise _no_route(topo, src, dst, f"no {what} path from {a} to {b}")
        segments.append(segment)
    return _combine(topo, src, dst, "net", segments)


def _gpu_on_rail(topo: Topology, node: int | None, rail: int | None) -> str | None:
    """A GPU of `node` that sends through a NIC on `rail`, preferring the one whose local index is `rail`."""
    candidates = [gpu for gpu in _gpus_of_node(topo, node)
                  if (nic := rail_nic(topo, gpu)) is not None and topo.device(nic).rail == rail]
    candidates.sort(key=lambda gpu: local_index(topo, gpu) != rail)
    return candidates[0] if candidates else None


def _gpus_of_node(topo: Topology, node: int | None) -> list[str]:
    """The GPUs of one node in rank order."""
    cache = cache_of(topo)
    key = ("gpus_of_node",)
    if key not in cache:
        grouped: dict[int | None, list[str]] = {}
        for gpu in gpus(topo):
            grouped.setdefault(topo.device(gpu).node, []).append(gpu)
        cache[key] = grouped
    return cache[key].get(node, [])


@dataclass(frozen=True, eq=False)
class RouteTable:
    """Rank -> GPU placement and the routes between ranks, computed on first use."""

    topo: Topology
    gpus: tuple[str, ...]  # rank r runs on gpus[r]
    pxn: bool = False

    def __getitem__(self, pair: tuple[int, int]) -> Route:
        src, dst = pair
        return route(self.topo, self.gpus[src], self.gpus[dst], pxn=self.pxn)

    def node(self, rank: int) -> int:
        """The node rank `rank` runs on."""
        return self.topo.device(self.gpus[rank]).node or 0

    def all(self) -> dict[tuple[int, int], Route]:
        """Every route between two different ranks (raises at the first pair with no route)."""
        n = len(self.gpus)
        return {(s, d): self[s, d] for s in range(n) for d in range(n) if s != d}


def route_table(topo: Topology, ranks: int | Sequence[str], *, pxn: bool = False) -> RouteTable:
    """Place ranks on GPUs: `ranks` an int puts rank r on the r-th GPU in rank order; a list of GPU
    ids places them explicitly. A TopologyError if the topology has too few GPUs."""
    all_gpus = gpus(topo)
    if isinstance(ranks, int):
        if ranks > len(all_gpus):
            raise TopologyError(f"the schedule has {ranks} ranks but {topo.name} has {len(all_gpus)} GPUs "
                                f"({_more_gpus_hint(topo, ranks)})")
        return RouteTable(topo, tuple(all_gpus[:ranks]), pxn)
    placed = tuple(ranks)
    for gpu in placed:
        _check_gpu(topo, gpu)
    if len(set(placed)) != len(placed):
        twice = sorted({g for g in placed if placed.count(g) > 1})
        raise TopologyError(f"two ranks placed on one GPU of {topo.name}: {', '.join(twice)}")
    return RouteTable(topo, placed, pxn)


def _more_gpus_hint(topo: Topology, ranks: int) -> str:
    per_node = max(len(gpus(topo)) // topo.nodes, 1)
    needed = math.ceil(ranks / per_node)
    if "template" in cache_of(topo):
        return f"use --nodes {needed}"
    templates = templates_for(topo.name)
    if templates:
        return f"use --nodes {needed} with the cluster template {templates[0]}"
    return "use a topology with more GPUs, or a cluster template with --nodes N"
