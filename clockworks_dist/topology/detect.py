"""`clockworks topology detect`: a GPU node's topology file, from what the node reports.

The facts come from NVML (`topology.nvml.probe`: GPUs, their memory, each NVLink and the device at
its far end, PCIe generation and width, the nearest PCIe point two GPUs share) and, for what NVML
does not know, from `nvidia-smi`: the per-link NVLink rate it prints (`nvidia-smi nvlink -s`) and
the NICs of `nvidia-smi topo -m` with their rates from sysfs. `document(facts)` is pure, so the
tests feed it facts recorded on real nodes (tests/data/detect/).

What the file says, and how:
- GPUs with their model, memory size and bandwidth (bus width x memory clock x 2), SM count (CUDA
  cores / cores per SM of the compute capability).
- NVLink: a GPU's links whose far end is another GPU become one link between the two (lanes = their
  count); links whose far end is an NVSwitch become one link from the GPU to one `nvswitch0` that
  stands for the node's switches (a GPU's links to its switches are one bundle of that many lanes:
  what the GPU can push into the fabric; a VM does not see the switches themselves). Rate = lanes x
  the per-link rate (`nvidia-smi nvlink -s`, else the NVLink version's).
- PCIe: GPUs grouped by the point they share (one switch, a host bridge, a NUMA node, the system):
  a PCIe switch per group under one switch, a host bridge per NUMA group, UPI between bridges.
- NICs: those `nvidia-smi topo -m` lists, under the GPU they share a switch with (PIX), with their
  rate; a NIC whose rate the node does not say is left out and named in the provenance note.
- No constants: a detected file takes the cross-machine library constants (`topology.library`), and
  says so in its provenance.

Errors (`DetectError`, exit 2 from the CLI) name what is missing: no NVML, no GPU, a GPU with no
memory size or compute capability, NVLinks with no version or far end.
"""

from __future__ import annotations

import datetime
import re
from collections import defaultdict

from ..errors import ClockworksError

DETECTED_BY = "clockworks topology detect"
# GB/s per direction of one NVLink, by the version NVML reports (nvmlNvlinkVersion_t: 2 = NVLink 2.0,
# 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0, 7 = 5.0): what `nvidia-smi nvlink -s` prints for such a link
# (NVLink 2 and 3: 25 GB/s; NVLink 4: 26.562; NVLink 5: 53.125).
LINK_GBS = {2: 25.0, 3: 25.0, 4: 25.0, 5: 25.0, 6: 26.562, 7: 53.125}
# CUDA cores per SM by compute capability major.minor (CUDA programming guide, arithmetic throughput).
CORES_PER_SM = {"7.0": 64, "7.5": 64, "8.0": 64, "8.6": 128, "8.7": 128, "8.9": 128, "9.0": 128, "10.0": 128,
                "10.3": 128, "12.0": 128}
# PCIe: usable GB/s per lane per direction, by generation (raw rate less 128b/130b coding and TLP
# overhead, ~87%: a Gen5 x16 link moves ~55 GB/s).
PCIE_LANE_GBS = {3: 0.86, 4: 1.72, 5: 3.44, 6: 6.88}
NVLINK_HOP_US = {"direct": 0.77, "switch": 0.4}  # one way: measured direct (2 x H200); a switch hop each way
PCIE_HOP_US = 0.5
# Levels of the PCIe tree two GPUs can share (topology.nvml.COMMON_ANCESTOR), nearest first.
SAME_SWITCH = ("same_board", "one_switch", "several_switches")
SAME_SOCKET = SAME_SWITCH + ("host_bridge", "numa_node")


class DetectError(ClockworksError):
    """The node's answer lacks what a topology file needs."""


def probe_node() -> dict:
    """The facts of the node this runs on: NVML, plus nvidia-smi's NVLink rate and NIC list."""
    import shutil
    import subprocess

    from . import nvml

    try:
        facts = nvml.probe()
    except nvml.NvmlMissing as exc:
        raise DetectError(str(exc)) from None
    smi = shutil.which("nvidia-smi")
    for key, command in (("nvlink_status", ["nvlink", "-s"]), ("topo_matrix", ["topo", "-m"])):
        if smi is None:
            continue
        try:
            facts[key] = subprocess.run([smi, *command], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired):
            facts[key] = None
    facts["nic_rates_gbps"] = _sysfs_nic_rates(nic_names(facts.get("topo_matrix") or ""))
    return facts


def _sysfs_nic_rates(names: list[str]) -> dict[str, float]:
    """Each InfiniBand/RoCE device's port-1 rate from /sys/class/infiniband (`400 Gb/sec (4X NDR)`)."""
    rates = {}
    for name in names:
        try:
            with open(f"/sys/class/infiniband/{name}/ports/1/rate", encoding="ascii") as handle:
                found = re.match(r"\s*([\d.]+)\s*Gb/sec", handle.read())
        except OSError:
            continue
        if found:
            rates[name] = float(found.group(1))
    return rates


def nic_names(topo_matrix: str) -> list[str]:
    """The NICs of `nvidia-smi topo -m`'s legend (`NIC0: mlx5_0`), in order."""
    return re.findall(r"^\s*NIC\d+:\s*(\S+)\s*$", topo_matrix, flags=re.M)


def link_rate(nvlink_status: str | None) -> float | None:
    """The per-link rate `nvidia-smi nvlink -s` prints (`Link 0: 26.562 GB/s`), if it is one figure."""
    rates = {float(x) for x in re.findall(r"Link \d+:\s*([\d.]+)\s*GB/s", nvlink_status or "")}
    return rates.pop() if len(rates) == 1 else None


def _gpu_model(name: str) -> str:
    """`NVIDIA H100 80GB HBM3` -> `H100-80GB-HBM3`: the NVML name without the vendor."""
    return re.sub(r"^NVIDIA\s+", "", name.strip()).replace(" ", "-")


def _gpu(entry: dict) -> dict:
    index = entry.get("index")
    missing = [key for key in ("name", "memory_bytes", "compute_capability") if not entry.get(key)]
    if missing:
        raise DetectError(f"GPU {index}: the node did not report its {', '.join(missing)} (NVML answered "
                          "without it; a driver too old or a GPU in a bad state)")
    cc = entry["compute_capability"]
    if cc not in CORES_PER_SM:
        raise DetectError(f"GPU {index} ({entry['name']}): compute capability {cc} is not one this version "
                          f"knows the SM size of ({', '.join(CORES_PER_SM)})")
    cores = entry.get("cuda_cores")
    if not cores:
        raise DetectError(f"GPU {index} ({entry['name']}): the node did not report its CUDA core count "
                          "(nvmlDeviceGetNumGpuCores: driver 520 or newer)")
    bits, clock = entry.get("memory_bus_bits"), entry.get("max_memory_clock_mhz")
    if not bits or not clock:
        raise DetectError(f"GPU {index} ({entry['name']}): the node did not report its memory bus width and "
                          "clock (needed for the memory bandwidth)")
    memory_gb = entry["memory_bytes"] / 2**30  # what nvidia-smi shows, and near the datasheet's "141 GB"
    return {"id": f"gpu{index}", "kind": "gpu", "model": _gpu_model(entry["name"]),
            "hbm_GBs": round(bits * clock * 2 / 8 / 1000, 1), "hbm_GB": round(memory_gb, 1),
            "sms": cores // CORES_PER_SM[cc]}


def _nvlinks(gpus: list[dict], per_link: float | None) -> tuple[list[dict], str]:
    """NVLink links and the fabric ('switch', 'direct' or 'none')."""
    by_bus = {_bus(g["bus_id"]): g["index"] for g in gpus}
    to_gpu: dict[tuple[int, int], int] = defaultdict(int)
    to_switch: dict[int, int] = defaultdict(int)
    versions = set()
    for g in gpus:
        for link in g.get("nvlinks") or []:
            if not link.get("active"):
                continue
            if link.get("version") is None:
                raise DetectError(f"GPU {g['index']} NVLink {link['link']}: the node did not report its version")
            versions.add(link["version"])
            far, kind = _bus(link.get("remote_bus_id") or ""), link.get("remote_kind")
            if kind == "gpu" or (kind in (None, "unknown") and far in by_bus):
                if far not in by_bus:
                    raise DetectError(f"GPU {g['index']} NVLink {link['link']}: its far end is a GPU at "
                                      f"{link.get('remote_bus_id')!r}, not one of this node's GPUs")
                if by_bus[far] != g["index"]:
                    to_gpu[(g["index"], by_bus[far])] += 1
            elif kind == "nvswitch":
                to_switch[g["index"]] += 1
            else:
                raise DetectError(f"GPU {g['index']} NVLink {link['link']}: the node did not say what is at its far "
                                  f"end ({kind or 'no answer'}, {link.get('remote_bus_id') or 'no address'})")
    if len(versions) > 1:
        raise DetectError(f"NVLinks of versions {sorted(versions)} on one node: not a machine this version models")
    if not versions:
        return [], "none"
    rate = per_link or LINK_GBS.get(versions.pop())
    if rate is None:
        raise DetectError("NVLink version unknown to this version and nvidia-smi printed no per-link rate")
    links = []
    for (a, b), lanes in sorted(to_gpu.items()):
        if a < b:
            back = to_gpu.get((b, a), 0)
            if back != lanes:
                raise DetectError(f"GPU {a} reports {lanes} NVLinks to GPU {b}, GPU {b} reports {back} back")
            links.append({"a": f"gpu{a}", "b": f"gpu{b}", "kind": "nvlink", "lanes": lanes,
                          "GBs_per_dir": round(lanes * rate, 3), "latency_us": NVLINK_HOP_US["direct"]})
    for index, lanes in sorted(to_switch.items()):
        links.append({"a": f"gpu{index}", "b": "nvswitch0", "kind": "nvlink", "lanes": lanes,
                      "GBs_per_dir": round(lanes * rate, 3), "latency_us": NVLINK_HOP_US["switch"]})
    return links, "switch" if to_switch else "direct"


def _bus(bus_id: str) -> str:
    """A PCI address in one spelling: NVML gives `00000000:00:06.0`, nvidia-smi `00000000:00:06.0` too,
    some answers `0000:00:06.0`: the domain's leading zeros dropped, lower case."""
    parts = bus_id.strip().lower().split(":")
    if len(parts) == 3:
        parts[0] = parts[0].lstrip("0") or "0"
    return ":".join(parts)


def _groups(count: int, pairs: list[dict], levels: tuple[str, ...]) -> list[list[int]]:
    """GPUs joined when a pair shares a point at one of `levels` (connected components)."""
    parent = list(range(count))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for pair in pairs:
        if pair.get("common") in levels:
            parent[root(pair["a"])] = root(pair["b"])
    found: dict[int, list[int]] = defaultdict(list)
    for i in range(count):
        found[root(i)].append(i)
    return sorted(found.values())


def _pcie(gpus: list[dict], pairs: list[dict], nics: list[tuple[str, int, float]]) -> tuple[list, list]:
    """Host bridges, PCIe switches and their links; NICs under the switch of the GPU they sit by."""
    count = len(gpus)
    known = [p for p in pairs if p.get("common")]
    if count > 1 and len(known) < count * (count - 1) // 2:
        raise DetectError("the node did not say which PCIe point some pairs of GPUs share "
                          "(nvmlDeviceGetTopologyCommonAncestor)")
    devices, links = [], []
    sockets = _groups(count, known, SAME_SOCKET)
    switches = [g for g in _groups(count, known, SAME_SWITCH) if len(g) > 1]
    under_switch = {i: n for n, group in enumerate(switches) for i in group}
    nic_at = defaultdict(list)
    for name, gpu, gbps in nics:
        nic_at[gpu].append((name, gbps))
    for s, group in enumerate(sockets):
        devices.append({"id": f"host{s}", "kind": "host_bridge"})
        for i in group:
            g = gpus[i]
            gen, width = g.get("pcie_generation"), g.get("pcie_width")
            if gen not in PCIE_LANE_GBS or not width:
                raise DetectError(f"GPU {i}: the node did not report its PCIe generation and width "
                                  f"(got generation {gen}, width {width})")
            rate = round(PCIE_LANE_GBS[gen] * width, 1)
            top = f"pcie{under_switch[i]}" if i in under_switch else f"host{s}"
            links.append({"a": f"gpu{i}", "b": top, "kind": "pcie", "lanes": width, "GBs_per_dir": rate,
                          "latency_us": PCIE_HOP_US})
            for name, gbps in nic_at.get(i, []):
                nic = f"nic{len([d for d in devices if d['kind'] == 'nic'])}"
                devices.append({"id": nic, "kind": "nic", "model": name, "gbps": gbps})
                links.append({"a": nic, "b": top, "kind": "pcie", "lanes": width, "GBs_per_dir": rate,
                              "latency_us": PCIE_HOP_US})
        for n, group_of_switch in enumerate(switches):
            if group_of_switch[0] in group:
                devices.append({"id": f"pcie{n}", "kind": "pcie_switch"})
                first = gpus[group_of_switch[0]]
                links.append({"a": f"pcie{n}", "b": f"host{s}", "kind": "pcie", "lanes": first["pcie_width"],
                              "GBs_per_dir": round(PCIE_LANE_GBS[first["pcie_generation"]] * first["pcie_width"], 1),
                              "latency_us": PCIE_HOP_US})
    for s in range(1, len(sockets)):
        links.append({"a": "host0", "b": f"host{s}", "kind": "upi", "lanes": 4, "GBs_per_dir": 128.0,
                      "latency_us": 0.3})
    return devices, links


def _nics(topo_matrix: str | None, rates: dict[str, float]) -> tuple[list[tuple[str, int, float]], list[str]]:
    """(NIC name, the GPU it shares a PCIe switch with, Gb/s) for each NIC `topo -m` lists beside a
    GPU (PIX), and the NICs left out (no rate, or no GPU beside it)."""
    names = nic_names(topo_matrix or "")
    found, left = [], []
    rows = {}
    for line in (topo_matrix or "").splitlines():
        cells = line.replace("\x1b[4m", "").replace("\x1b[0m", "").split("\t")
        if cells and re.fullmatch(r"GPU\d+", cells[0].strip()):
            rows[int(cells[0].strip()[3:])] = [c.strip() for c in cells[1:]]
    gpu_count = len(rows)
    for n, name in enumerate(names):
        beside = [g for g, cells in rows.items() if len(cells) > gpu_count + n and cells[gpu_count + n] == "PIX"]
        if name not in rates or not beside:
            left.append(name)
            continue
        found.append((name, beside[0], rates[name]))
    return found, left


def document(facts: dict, name: str | None = None, today: datetime.date | None = None) -> dict:
    """The topology file (as a dict, ready for YAML) for a node's facts."""
    gpus = facts.get("gpus") or []
    if not gpus:
        raise DetectError("the node reports no GPU (NVML found none: is the driver loaded, and are the GPUs "
                          "visible to this process? CUDA_VISIBLE_DEVICES does not hide GPUs from NVML)")
    devices = [_gpu(g) for g in gpus]
    models = {d["model"] for d in devices}
    if len(models) > 1:
        raise DetectError(f"GPUs of different models on one node ({', '.join(sorted(models))}): not a machine this "
                          "version models")
    nvlinks, fabric = _nvlinks(gpus, link_rate(facts.get("nvlink_status")))
    if fabric == "switch":
        devices.append({"id": "nvswitch0", "kind": "nvswitch", "model": "NVSwitch"})
    nics, left = _nics(facts.get("topo_matrix"), facts.get("nic_rates_gbps") or {})
    pcie_devices, pcie_links = _pcie(gpus, facts.get("pairs") or [], nics)
    model = devices[0]["model"]
    short = model.split("-")[0].lower()
    name = name or f"{short}x{len(gpus)}-{ {'switch': 'nvswitch', 'direct': 'nvlink', 'none': 'pcie'}[fabric] }"
    lanes = sorted({link["lanes"] for link in nvlinks})
    what = {"switch": f"NVSwitch, {'/'.join(map(str, lanes))} NVLinks a GPU", "none": "no NVLink, PCIe only",
            "direct": f"NVLink GPU to GPU ({'/'.join(map(str, lanes))} links a pair)"}[fabric]
    note = ("detected from NVML and nvidia-smi; no constants: the cross-machine library constants apply "
            "(data/library/nccl.yaml), calibrate on this machine for the machine's own")
    if left:
        note += f"; NICs left out (no rate or no GPU beside them): {', '.join(left)}"
    return {
        "name": name,
        "description": f"{len(gpus)} x {model}, {what} (detected)",
        "nodes": 1,
        "provenance": {"date": (today or datetime.date.today()).isoformat(), "gpu": gpus[0].get("name"),
                       "driver": facts.get("driver"), "method": DETECTED_BY, "note": note},
        "devices": devices + pcie_devices,
        "links": nvlinks + pcie_links,
    }
