"""The machine a schedule runs on: topology files (devices, links, constants), routes between GPUs,
and their rendering (summary text, Graphviz DOT, PNG).

    topo = load_topology("dgx-h100-cluster", nodes=2)
    chosen = choose_topology("h200x2-nv18")   # a prediction's pick: the calibrated file, when one ships
    table = route_table(topo, 16)          # rank r on the r-th GPU in rank order
    r = table[3, 11]                       # Route: links (index, direction, share), latency, bottleneck

networkx is imported here only (routing.py).
"""

from .calibrated import Chosen, choose_topology, is_calibrated
from .model import (
    ClusterTemplate, Constants, Device, Fabric, Link, LinkSpec, PerProtocol, Provenance, StepLatency, Topology,
    expand, load_topology, shipped_topologies,
)
from .render import draw_png, summary, to_dot
from .routing import Route, RouteLink, RouteTable, build_graph, gpus, local_index, rail_nic, route, route_table

__all__ = [
    "Chosen", "ClusterTemplate", "Constants", "Device", "Fabric", "Link", "LinkSpec", "PerProtocol", "Provenance",
    "Route", "RouteLink", "RouteTable", "StepLatency", "Topology", "build_graph", "choose_topology", "draw_png",
    "expand", "gpus", "is_calibrated", "load_topology", "local_index", "rail_nic", "route", "route_table",
    "shipped_topologies", "summary", "to_dot",
]
