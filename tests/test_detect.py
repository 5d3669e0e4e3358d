"""`clockworks topology detect`: a node's topology file from what it reports (NVML, nvidia-smi).

The facts are recorded on real nodes (tests/data/detect/: a 4 x H200 node on NVSwitch, as NVML and
nvidia-smi answered there); variants of them stand for nodes not lent here (two GPUs joined
directly, a partial answer). A GPU node runs the real probe (skipped elsewhere, with the reason).
"""

from __future__ import annotations

import copy
import ctypes.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clockworks_dist.topology import detect, load_topology, route_table
from clockworks_dist.topology.model import validate_document

DATA = Path(__file__).parent / "data" / "detect"
H200X4 = json.loads((DATA / "h200x4-nvswitch.json").read_text())


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clockworks_dist", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def _direct_pair() -> dict:
    """Two GPUs of the recorded node, their 18 NVLinks joining them to each other (as on a 2 x H200
    machine with NV18 between the two), instead of to an NVSwitch."""
    facts = copy.deepcopy(H200X4)
    facts["gpus"] = facts["gpus"][:2]
    facts["pairs"] = [p for p in facts["pairs"] if p["a"] < 2 and p["b"] < 2]
    for gpu, other in ((facts["gpus"][0], facts["gpus"][1]), (facts["gpus"][1], facts["gpus"][0])):
        for link in gpu["nvlinks"]:
            link["remote_kind"], link["remote_bus_id"] = "gpu", other["bus_id"]
    return facts


def test_recorded_switched_node():
    doc = detect.document(H200X4, today=None)
    topo = validate_document(doc, Path("h200x4.yaml"))
    gpus = [d for d in topo.devices if d.kind == "gpu"]
    assert [g.id for g in gpus] == ["gpu0", "gpu1", "gpu2", "gpu3"]
    assert {g.model for g in gpus} == {"H200"} and {g.sms for g in gpus} == {132}
    assert all(4700 < g.hbm_GBs < 4900 for g in gpus)  # 6016-bit HBM3e at 3,201 MHz: the datasheet's 4.8 TB/s
    assert all(139 < g.hbm_GB < 142 for g in gpus)
    assert [d.id for d in topo.devices if d.kind == "nvswitch"] == ["nvswitch0"]
    nvlinks = [link for link in topo.links if link.kind == "nvlink"]
    assert {(link.b, link.lanes, link.GBs_per_dir) for link in nvlinks} == {("nvswitch0", 18, 478.116)}
    assert topo.name == "h200x4-nvswitch" and topo.provenance.method == detect.DETECTED_BY
    table = route_table(topo, 4)
    assert table[0, 3].bottleneck_GBs == pytest.approx(478.116)
    assert len(table[0, 3].links) == 2  # through the switch


def test_direct_pair():
    doc = detect.document(_direct_pair())
    topo = validate_document(doc, Path("pair.yaml"))
    assert doc["name"] == "h200x2-nvlink" and not any(d.kind == "nvswitch" for d in topo.devices)
    (link,) = [link for link in topo.links if link.kind == "nvlink"]
    assert (link.a, link.b, link.lanes, link.GBs_per_dir, link.latency_us) == ("gpu0", "gpu1", 18, 478.116, 0.77)
    # the same links as the shipped 2 x H200 description, which calibration measured
    shipped = load_topology("h200x2-nv18.yaml")
    (same,) = [x for x in shipped.links if x.kind == "nvlink"]
    assert same.GBs_per_dir == link.GBs_per_dir and same.lanes == link.lanes


def test_pcie_tree_and_nics():
    """GPUs under two sockets, GPU 0 and 1 behind one PCIe switch with a NIC beside GPU 0."""
    facts = copy.deepcopy(H200X4)
    level = {(0, 1): "one_switch", (2, 3): "host_bridge"}
    for pair in facts["pairs"]:
        pair["common"] = level.get((pair["a"], pair["b"]), "system")
    facts["topo_matrix"] = ("\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\n" "GPU0\t X \tNV18\tNV18\tNV18\tPIX\n"
                            "GPU1\tNV18\t X \tNV18\tNV18\tPIX\n" "GPU2\tNV18\tNV18\t X \tNV18\tSYS\n"
                            "GPU3\tNV18\tNV18\tNV18\t X \tSYS\n" "NIC0\tPIX\tPIX\tSYS\tSYS\t X \n\n"
                            "NIC Legend:\n\n  NIC0: mlx5_0\n")
    facts["nic_rates_gbps"] = {"mlx5_0": 400.0}
    topo = validate_document(detect.document(facts), Path("x.yaml"))
    kinds = sorted(d.kind for d in topo.devices)
    assert kinds.count("host_bridge") == 2 and kinds.count("pcie_switch") == 1
    (nic,) = [d for d in topo.devices if d.kind == "nic"]
    assert nic.gbps == 400.0 and nic.model == "mlx5_0"
    ends = {(link.a, link.b) for link in topo.links}
    assert {("gpu0", "pcie0"), ("gpu1", "pcie0"), ("nic0", "pcie0"), ("gpu2", "host1")} <= ends
    assert any(link.kind == "upi" for link in topo.links)
    facts["nic_rates_gbps"] = {}  # a NIC whose rate the node does not give: left out, and said so
    doc = detect.document(facts)
    assert not any(d["kind"] == "nic" for d in doc["devices"]) and "mlx5_0" in doc["provenance"]["note"]


@pytest.mark.parametrize("change, words", [
    (lambda f: f.update(gpus=[]), "reports no GPU"),
    (lambda f: f["gpus"][1].update(memory_bytes=None), "GPU 1: the node did not report its memory_bytes"),
    (lambda f: f["gpus"][2].update(compute_capability="4.2"), "compute capability 4.2"),
    (lambda f: f["gpus"][0]["nvlinks"][3].update(remote_kind="unknown", remote_bus_id="0000:99:00.0"),
     "GPU 0 NVLink 3: the node did not say what is at its far end"),
    (lambda f: f["gpus"][0]["nvlinks"][0].update(version=None), "GPU 0 NVLink 0: the node did not report its version"),
    (lambda f: f.update(pairs=f["pairs"][:2]), "which PCIe point some pairs of GPUs share"),
    (lambda f: f["gpus"][3].update(name="NVIDIA H100 80GB HBM3"), "GPUs of different models"),
])
def test_partial_answers_name_what_is_missing(change, words):
    facts = copy.deepcopy(H200X4)
    change(facts)
    with pytest.raises(detect.DetectError, match=words.replace("(", r"\(")):
        detect.document(facts)


def test_cli_writes_a_file_that_loads(tmp_path):
    out = tmp_path / "mine.yaml"
    done = _cli("topology", "detect", "--facts", str(DATA / "h200x4-nvswitch.json"), "--out", str(out),
                "--name", "my-node")
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(out.read_text())["name"] == "my-node"
    shown = _cli("topology", "show", str(out))
    assert shown.returncode == 0 and "478.1 GB/s" in shown.stdout and "nvswitch0" in shown.stdout


@pytest.mark.parametrize("content, words", [(None, "cannot read"), ("{not json", "not JSON"),
                                            ('[1, 2]', "not a facts record"), ('{"gpus": []}', "reports no GPU")])
def test_cli_bad_facts_exit_2(tmp_path, content, words):
    facts = tmp_path / "facts.json"
    if content is not None:
        facts.write_text(content)
    done = _cli("topology", "detect", "--facts", str(facts))
    assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this machine has NVML")
def test_cli_without_nvml_exit_2():
    done = _cli("topology", "detect")
    assert done.returncode == 2 and "NVML" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is None, reason="needs a GPU node (NVML)")
def test_detect_on_this_node(tmp_path):
    facts = tmp_path / "facts.json"
    done = _cli("topology", "detect", "--out", str(tmp_path / "node.yaml"), "--save-facts", str(facts))
    assert done.returncode == 0, done.stderr
    topo = load_topology(str(tmp_path / "node.yaml"))
    assert len([d for d in topo.devices if d.kind == "gpu"]) == len(json.loads(facts.read_text())["gpus"])


def test_recorded_two_gpu_node_is_a_switch_slice():
    """The lent 2 x H200 kind: `nvidia-smi topo -m` shows NV18 between the two GPUs, as a direct
    bundle would, but NVML puts an NVSwitch at the far end of every link: two GPUs of a switched node.
    The model gives it the same per-GPU rate as the shipped h200x2-nv18 (direct) file; the route
    crosses the switch (two 0.4 us hops against 0.77 us)."""
    facts = json.loads((DATA / "h200x2-nvswitch.json").read_text())
    assert "NV18" in facts["topo_matrix"]
    topo = validate_document(detect.document(facts), Path("h200x2.yaml"))
    assert topo.name == "h200x2-nvswitch" and any(d.kind == "nvswitch" for d in topo.devices)
    route = route_table(topo, 2)[0, 1]
    shipped = route_table(load_topology("h200x2-nv18.yaml"), 2)[0, 1]
    assert route.bottleneck_GBs == shipped.bottleneck_GBs == pytest.approx(478.116)
    assert route.latency_us == pytest.approx(0.8) and shipped.latency_us == pytest.approx(0.77)
