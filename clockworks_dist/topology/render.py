"""A topology for people: a text summary, Graphviz DOT (written by hand, no graphviz needed) and a
PNG drawn with matplotlib (the optional `plot` extra)."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

from ..errors import ClockworksError, MissingDependency
from .model import FABRIC_KINDS, Device, Topology
from .routing import Route, build_graph, gpus, incidence, local_index, rail_nic, route

# A drawing of more devices is unreadable and takes minutes (a 64-node DGX H100 cluster has 1,940).
MAX_DRAWN_DEVICES = 2000
KIND_ORDER = ("gpu", "nvswitch", "pcie_switch", "host_bridge", "cpu", "nic", "ib_leaf", "ib_spine")
# Drawing layers, top to bottom: the network above the hosts, NVSwitches below the GPUs.
LAYER = {"ib_spine": 0, "ib_leaf": 1, "nic": 2, "host_bridge": 3, "cpu": 3, "pcie_switch": 4, "gpu": 5,
         "nvswitch": 6}
COLOUR = {"gpu": "#76b900", "nvswitch": "#9bd4e4", "pcie_switch": "#f2d49b", "host_bridge": "#d9d9d9",
          "cpu": "#d9d9d9", "nic": "#f4a6a6", "ib_leaf": "#c3b1e1", "ib_spine": "#a48fd0",
          "nvlink": "#4e8a00", "pcie": "#b8860b", "upi": "#707070", "ib": "#6a4fb3", "ethernet": "#6a4fb3",
          "c2c": "#2f7f9f"}


# ----------------------------------------------------------------------------------- summary
def summary(topo: Topology) -> str:
    """Devices by kind and node, links by kind with total bandwidth, per-GPU bandwidth, and example
    routes (GPU 0 to the last GPU; for clusters also to GPU 0's rail peer on the last node)."""
    gpu_ids = gpus(topo)
    lines = [f"topology {topo.name}: {topo.description}" if topo.description else f"topology {topo.name}",
             f"  {_plural(topo.nodes, 'node')}, {_plural(len(gpu_ids), 'GPU')}, "
             f"{_plural(len(topo.devices), 'device')}, {_plural(len(topo.links), 'link')}"]
    if topo.provenance is not None:
        fields = topo.provenance.model_dump(exclude_none=True)
        lines.append("  provenance: " + ", ".join(f"{key} {value}" for key, value in fields.items()))
    lines += ["", "devices"] + _device_lines(topo)
    lines += ["", "links (bandwidth per direction)"] + _link_lines(topo)
    lines += ["", "per GPU (per direction)"] + _gpu_lines(topo, gpu_ids)
    lines += [""] + _example_routes(topo, gpu_ids)
    return "\n".join(lines)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _gbs(value: float) -> str:
    return f"{value:,.1f} GB/s"


def _describe_kind(kind: str, members: list[Device]) -> str:
    text = f"{len(members)} {kind}"
    if kind == "gpu":
        models = Counter((d.model, d.sms, d.hbm_GBs, d.hbm_GB) for d in members)
        details = [f"{model or 'gpu'}: {sms} SMs, {_gbs(bw)}" + (f", {capacity:g} GB" if capacity else "")
                   for model, sms, bw, capacity in models]
        text += f" ({'; '.join(details)})"
    elif kind == "nic":
        rails = sorted({d.rail for d in members if d.rail is not None})
        rates = sorted({f"{d.model + ' ' if d.model else ''}{d.gbps:g} Gb/s" for d in members})
        text += f" ({', '.join(rates)}" + (f", rails {_range(rails)}" if rails else "") + ")"
    elif members[0].model:
        text += f" ({', '.join(sorted({d.model for d in members if d.model}))})"
    return text


def _range(values: list[int]) -> str:
    if values == list(range(values[0], values[-1] + 1)) and len(values) > 2:
        return f"{values[0]}..{values[-1]}"
    return ", ".join(map(str, values))


def _device_lines(topo: Topology) -> list[str]:
    by_node: dict[int | None, list[Device]] = {}
    for dev in topo.devices:
        by_node.setdefault(dev.node if dev.kind not in FABRIC_KINDS else None, []).append(dev)
    described = []
    for node in sorted((n for n in by_node if n is not None)):
        kinds = {kind: [d for d in by_node[node] if d.kind == kind] for kind in KIND_ORDER}
        described.append((node, ", ".join(_describe_kind(k, m) for k, m in kinds.items() if m)))
    lines = []
    # Nodes alike (a cluster) print once: "nodes 0..127, each: ...".
    for text, group in itertools.groupby(described, key=lambda item: item[1]):
        nodes = [node for node, _ in group]
        label = f"node {nodes[0]}" if len(nodes) == 1 else f"nodes {_range(nodes)}, each"
        lines.append(f"  {label}: {text}")
    if None in by_node:
        kinds = {kind: [d for d in by_node[None] if d.kind == kind] for kind in KIND_ORDER}
        lines.append("  fabric: " + ", ".join(_describe_kind(k, m) for k, m in kinds.items() if m))
    return lines


def _link_lines(topo: Topology) -> list[str]:
    lines = []
    for kind in ("nvlink", "pcie", "upi", "c2c", "ib", "ethernet"):
        members = [link for link in topo.links if link.kind == kind]
        if members:
            lanes = sum(link.lanes for link in members)
            total = sum(link.GBs_per_dir for link in members)
            lines.append(f"  {kind:<8} {_plural(len(members), 'link'):>11}, {lanes:>5} lanes, "
                         f"{_gbs(total)} in total")
    return lines


def _gpu_lines(topo: Topology, gpu_ids: list[str]) -> list[str]:
    links_of = incidence(topo)
    nic_of = {gpu: rail_nic(topo, gpu) for gpu in gpu_ids}
    sharing = Counter(nic_of.values())
    rows = []
    for gpu in gpu_ids:
        by_kind: dict[str, list[float]] = {}
        for parallel in links_of.get(gpu, {}).values():
            for i, _ in parallel:
                link = topo.links[i]
                by_kind.setdefault(link.kind, [0.0, 0])
                by_kind[link.kind][0] += link.GBs_per_dir
                by_kind[link.kind][1] += link.lanes
        parts = [f"{kind if kind != 'nvlink' else 'NVLink'} {_gbs(bw)} ({lanes} lanes)"
                 for kind, (bw, lanes) in sorted(by_kind.items())]
        nic = nic_of[gpu]
        if nic is not None:
            parts.append(f"NIC {_gbs(topo.device(nic).gbps / 8)} "
                         + ("(its own)" if sharing[nic] == 1 else f"(shared by {sharing[nic]} GPUs)"))
        rows.append((gpu, ", ".join(parts).replace("pcie ", "PCIe ") or "no links"))
    lines = []
    for text, group in itertools.groupby(rows, key=lambda row: row[1]):
        members = [gpu for gpu, _ in group]
        label = members[0] if len(members) == 1 else f"{members[0]} .. {members[-1]} ({len(members)} GPUs, each)"
        lines.append(f"  {label}: {text}")
    return lines


def _example_routes(topo: Topology, gpu_ids: list[str]) -> list[str]:
    if len(gpu_ids) < 2:
        return ["example route: the topology has fewer than two GPUs"]
    pairs = [(gpu_ids[0], gpu_ids[-1])]
    if topo.nodes > 1:
        last_node = topo.device(gpu_ids[-1]).node
        peer = next((g for g in gpu_ids if topo.device(g).node == last_node and local_index(topo, g) == 0), None)
        if peer is not None and peer != gpu_ids[-1]:
            pairs.insert(0, (gpu_ids[0], peer))
    lines = []
    for src, dst in pairs:
        lines += [f"example route {src} -> {dst}", *describe_route(route(topo, src, dst), indent="  ")]
    return lines


def describe_route(r: Route, indent: str = "") -> list[str]:
    """Two lines: the devices crossed, and transport, hops, latency, bottleneck."""
    return [f"{indent}{r.describe()}",
            f"{indent}{r.transport}, {_plural(r.hops, 'hop')}, {r.latency_us:.2f} us one way, "
            f"bottleneck {_gbs(r.bottleneck_GBs)} per direction"]


# ----------------------------------------------------------------------------------- DOT
def _quote(*lines: str) -> str:
    """A DOT string of one or more lines."""
    return '"' + "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"') for line in lines) + '"'


def _node_label(dev: Device) -> list[str]:
    extra = dev.model or ""
    if dev.kind == "nic" and dev.rail is not None:
        extra = f"{extra} rail {dev.rail}".strip()
    return [dev.id, extra] if extra else [dev.id]


def to_dot(topo: Topology) -> str:
    """Graphviz DOT text: one box per device (a cluster per node), one edge per link labelled with
    its kind, lanes and bandwidth per direction. Render with `dot -Tsvg FILE.dot`."""
    lines = [f"graph {_quote(topo.name)} {{",
             f"  graph [label={_quote(topo.description or topo.name)}, labelloc=t, rankdir=TB, newrank=true];",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=8];']

    def node_line(dev: Device, pad: str) -> str:
        return f"{pad}{_quote(dev.id)} [label={_quote(*_node_label(dev))}, fillcolor={_quote(COLOUR[dev.kind])}];"

    by_node: dict[int, list[Device]] = {}
    for dev in topo.devices:
        if dev.node is not None and dev.kind not in FABRIC_KINDS:
            by_node.setdefault(dev.node, []).append(dev)
    for node in sorted(by_node):
        members = by_node[node]
        if members:
            lines.append(f"  subgraph {_quote(f'cluster_node{node}')} {{")
            lines.append(f"    label={_quote(f'node {node}')};")
            lines += [node_line(dev, "    ") for dev in members]
            lines.append("  }")
    lines += [node_line(dev, "  ") for dev in topo.devices if dev.kind in FABRIC_KINDS]
    for link in topo.links:
        kind = f"{link.kind} x{link.lanes}" if link.lanes > 1 else link.kind
        label = _quote(kind, f"{link.GBs_per_dir:g} GB/s")
        lines.append(f"  {_quote(link.a)} -- {_quote(link.b)} [label={label}, color={_quote(COLOUR[link.kind])}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------- PNG
def draw_png(topo: Topology, path: str | Path) -> None:
    """Draw the topology in layers (spines, leaves, NICs, host bridges, PCIe switches, GPUs,
    NVSwitches) with matplotlib, into `path`."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependency("drawing a PNG needs matplotlib: pip install 'clockworks-dist[plot]' "
                                "(or write Graphviz with --dot)") from None
    import networkx as nx

    if len(topo.devices) > MAX_DRAWN_DEVICES:
        raise ClockworksError(f"cannot draw {path}: {topo.name} has {len(topo.devices):,} devices, and a drawing of "
                              f"more than {MAX_DRAWN_DEVICES:,} is unreadable (draw fewer nodes, e.g. --nodes 4, or "
                              "write Graphviz with --dot)")
    formats = FigureCanvasAgg.get_supported_filetypes()
    extension = Path(path).suffix.lstrip(".").lower()
    if extension not in formats:
        raise ClockworksError(f"cannot draw {path}: cannot tell the image format from the name; end it in .png "
                              f"(or one of .{', .'.join(sorted(formats))})")

    graph = build_graph(topo).to_undirected()
    # Each layer in file order, node by node, spread evenly: the drawing follows the file.
    layers: dict[int, list[str]] = {}
    for dev in sorted(topo.devices, key=lambda d: -1 if d.node is None else d.node):
        layers.setdefault(LAYER[dev.kind], []).append(dev.id)
    pos = {device: ((i + 0.5) / len(members), -layer)
           for layer, members in layers.items() for i, device in enumerate(members)}
    width = max(8.0, 0.45 * max(Counter(LAYER[d.kind] for d in topo.devices).values()))
    figure = Figure(figsize=(width, 7), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    edge_colours = [COLOUR[topo.links[graph[u][v]["links"][0][0]].kind] for u, v in graph.edges]
    nx.draw_networkx_edges(graph, pos, ax=axes, edge_color=edge_colours, width=0.8, alpha=0.7)
    nx.draw_networkx_nodes(graph, pos, ax=axes, node_size=260,
                           node_color=[COLOUR[graph.nodes[n]["kind"]] for n in graph.nodes])
    nx.draw_networkx_labels(graph, pos, ax=axes, font_size=6)
    axes.set_title(f"{topo.name}: {topo.description}", fontsize=9)
    axes.set_axis_off()
    figure.tight_layout()
    figure.savefig(path)
