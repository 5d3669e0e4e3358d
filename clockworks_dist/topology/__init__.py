"""The machine a schedule runs on: topology files (devices, links, constants), routes between GPUs,
and their rendering (summary text, Graphviz DOT, PNG).

    topo = load_topology("dgx-h100-cluster", nodes=2)
    table = route_table(topo, 16)          # rank r on the r-th GPU in rank order
    r = table[3, 11]                       # Route: links (index, direction, share), latency, bottleneck

networkx is imported here only (routing.py).
"""

from .model import (
    ClusterTemplate, Constants, Device, Fabric, Link, LinkSpec, PerProtocol, Provenance, StepLatency, Topology,
    expand, load_topology, shipped_topologies,
)
from .render import draw_png, summary, to_dot
from .routing import Route, RouteLink, RouteTable, build_graph, gpus, local_index, rail_nic, route, route_table

__all__ = [
    "ClusterTemplate", "Constants", "Device", "Fabric", "Link", "LinkSpec", "PerProtocol", "Provenance", "Route",
    "RouteLink", "RouteTable", "StepLatency", "Topology", "build_graph", "draw_png", "expand", "gpus",
    "load_topology", "local_index", "rail_nic", "route", "route_table", "shipped_topologies", "summary", "to_dot",
]
