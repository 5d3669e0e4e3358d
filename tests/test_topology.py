"""Topology files (schema, loader, errors that name file, line and field), the cluster template,
routing (NVLink / NVSwitch, PCIe through switches and sockets, the rail-optimised network) and the
`clockworks topology` command."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from clockworks_dist import cli
from clockworks_dist.errors import MissingDependency, TopologyError
from clockworks_dist.topology import library
from clockworks_dist.topology.model import Constants
from clockworks_dist.topology import (
    ClusterTemplate, Topology, gpus, load_topology, local_index, rail_nic, route, route_table, shipped_topologies,
    summary, to_dot,
)

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ["dgx-h100", "dgx-h100-cluster", "dgx-h200", "h200x2-nv18", "hgx-a100", "pcie-gen4-8gpu"]

GOOD = """\
name: tiny
devices:
  - {id: gpu0, kind: gpu, hbm_GBs: 3350, sms: 132}
  - {id: gpu1, kind: gpu, hbm_GBs: 3350, sms: 132}
links:
  - {a: gpu0, b: gpu1, kind: nvlink, lanes: 18, GBs_per_dir: 450, latency_us: 0.8}
"""


def write(tmp_path: Path, body: str, name: str = "topo.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).lstrip())
    return path


def link_kinds(topo: Topology, r) -> set[str]:
    return {topo.links[rl.link].kind for rl in r.links}


# ------------------------------------------------------------------------------------ shipped files
def test_shipped_names():
    assert set(SHIPPED) <= set(shipped_topologies())


@pytest.mark.parametrize("name", shipped_topologies())
def test_every_shipped_file_loads(name):
    topo = load_topology(name)
    assert topo.name == name
    assert len(gpus(topo)) >= 2
    for link in topo.links:
        assert link.GBs_per_dir > 0
    # the example route of `topology show` exists
    all_gpus = gpus(topo)
    assert route(topo, all_gpus[0], all_gpus[-1]).bottleneck_GBs > 0


def test_repository_topologies_folder_holds_the_shipped_files():
    assert sorted(p.stem for p in (ROOT / "topologies").glob("*.yaml")) == shipped_topologies()


def test_path_and_name_load_the_same():
    assert load_topology(ROOT / "topologies" / "dgx-h100.yaml") == load_topology("dgx-h100")
    assert load_topology("dgx-h100.yaml") == load_topology("dgx-h100")


def test_datasheet_numbers():
    h100 = load_topology("dgx-h100").device("gpu0")
    assert (h100.hbm_GBs, h100.sms, h100.hbm_GB) == (3350, 132, 80)
    h200 = load_topology("dgx-h200").device("gpu0")
    assert (h200.hbm_GBs, h200.sms, h200.hbm_GB) == (4800, 132, 141)
    a100 = load_topology("hgx-a100")
    assert (a100.device("gpu0").hbm_GBs, a100.device("gpu0").sms) == (2039, 108)
    assert sum(1 for d in a100.devices if d.kind == "nvswitch") == 6
    dgx = load_topology("dgx-h100")
    assert sum(1 for d in dgx.devices if d.kind == "nvswitch") == 4
    assert sorted(link.lanes for link in dgx.links if link.kind == "nvlink" and link.a == "gpu0") == [4, 4, 5, 5]
    assert {d.gbps for d in dgx.devices if d.kind == "nic"} == {400}
    assert not [link for link in load_topology("pcie-gen4-8gpu").links if link.kind == "nvlink"]


def test_h200x2_provenance():
    topo = load_topology("h200x2-nv18")
    assert topo.provenance.nccl == "2.28.9" and topo.provenance.driver == "580.159.04"
    assert str(topo.provenance.date) == "2026-11-21"


def test_constants_defaults_and_override(tmp_path):
    assert Constants().nvshmem_put_latency_us == pytest.approx(0.04)  # measured on one H200
    assert Constants().nvshmem_fence_us == pytest.approx(0.51)
    assert Constants().nccl_base_latency_us.Simple == pytest.approx(8.4)  # NCCL's own table
    # an uncalibrated file takes the library's constants (topology/library.py) ...
    shipped = load_topology("dgx-h100").constants
    assert shipped.nccl_base_latency_us.Simple == library.constants()["nccl_base_latency_us"]["Simple"]
    path = write(tmp_path, GOOD + "constants: {kernel_launch_us: 2.5}\n")
    assert load_topology(path).constants.kernel_launch_us == 2.5


# ------------------------------------------------------------------------------------ schema
def test_schema_documents_every_constant(capsys):
    """`topology schema` carries, for each constant, the comment written above it in model.py:
    what it means, its unit and where its default comes from."""
    assert cli.main(["topology", "schema"]) == 0
    constants = json.loads(capsys.readouterr().out)["$defs"]["Constants"]["properties"]
    assert len(constants) > 30
    assert not [name for name, prop in constants.items() if not prop.get("description")]
    assert "__threadfence_system" in constants["nvshmem_fence_us"]["description"]
    assert "measured on one H200" in constants["nvshmem_put_latency_us"]["description"]
    # a comment above several fields in a row describes each; the next comment starts afresh
    assert constants["local_graph_launch_us"]["description"] == constants["local_host_us"]["description"]
    assert constants["p2p_launch_us"]["description"] != constants["kernel_launch_us"]["description"]


def test_schema_is_json_with_topology_title(capsys):
    assert cli.main(["topology", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "Topology"
    assert schema["additionalProperties"] is False
    assert set(schema["$defs"]["Device"]["properties"]["kind"]["enum"]) >= {"gpu", "nvswitch", "nic", "ib_spine"}
    assert cli.main(["topology", "schema", "--template"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "ClusterTemplate"


def test_models_are_frozen():
    topo = load_topology("h200x2-nv18")
    with pytest.raises(Exception, match="frozen"):
        topo.name = "other"
    assert Topology.model_config["extra"] == "forbid" and ClusterTemplate.model_config["frozen"]


def test_json_round_trip():
    topo = load_topology("dgx-h100")
    assert Topology.model_validate_json(topo.model_dump_json()) == topo


# ------------------------------------------------------------------------------------ bad files
def bad(tmp_path: Path, body: str) -> str:
    path = write(tmp_path, body)
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    return message


def test_typo_in_a_field_names_file_line_and_field(tmp_path):
    message = bad(tmp_path, GOOD.replace("hbm_GBs: 3350, sms: 132}\n  - {id: gpu1",
                                         "hbm_gbs: 3350, sms: 132}\n  - {id: gpu1"))
    assert ":3: devices[0].hbm_gbs: unknown field 'hbm_gbs' (did you mean 'hbm_GBs'?)" in message
    assert "allowed: id, kind, node" in message


def test_unknown_device_kind(tmp_path):
    message = bad(tmp_path, GOOD.replace("{id: gpu1, kind: gpu", "{id: gpu1, kind: gpuu"))
    assert (":4: devices[1].kind: 'gpuu' is not one of gpu, nvswitch, pcie_switch, host_bridge, cpu, nic, "
            "ib_leaf, ib_spine (did you mean 'gpu'?)") in message


def test_unknown_link_kind(tmp_path):
    message = bad(tmp_path, GOOD.replace("kind: nvlink", "kind: nvlnk"))
    assert "links[0].kind: 'nvlnk' is not one of nvlink, pcie, upi, ib, ethernet, c2c (did you mean 'nvlink'?)" \
        in message


def test_link_to_a_missing_device(tmp_path):
    message = bad(tmp_path, GOOD.replace("b: gpu1", "b: gpu9"))
    assert ":6: links[0].b: no device 'gpu9' (did you mean 'gpu1'?)" in message


def test_negative_bandwidth(tmp_path):
    message = bad(tmp_path, GOOD.replace("GBs_per_dir: 450", "GBs_per_dir: -450"))
    assert "links[0].GBs_per_dir: must be > 0, got -450" in message


def test_every_problem_is_listed(tmp_path):
    message = bad(tmp_path, GOOD.replace("kind: nvlink", "kind: nvlnk").replace("kind: gpu,", "kind: gpuu,", 1))
    assert "devices[0].kind" in message and "links[0].kind" in message


def test_fields_of_another_kind(tmp_path):
    message = bad(tmp_path, GOOD.replace("sms: 132}\n  - {id: gpu1", "sms: 132, rail: 3}\n  - {id: gpu1"))
    assert "devices[0].rail: only nic devices have rail; gpu0 is a gpu" in message
    message = bad(tmp_path, GOOD.replace("{id: gpu1, kind: gpu, hbm_GBs: 3350, sms: 132}", "{id: gpu1, kind: gpu}"))
    assert "devices[1].hbm_GBs: a gpu needs hbm_GBs" in message


def test_duplicate_ids_and_self_links(tmp_path):
    message = bad(tmp_path, GOOD.replace("{id: gpu1,", "{id: gpu0,").replace("b: gpu1", "b: gpu0"))
    assert "devices[1].id: duplicate id 'gpu0' (also devices[0])" in message


def test_nodes_out_of_range(tmp_path):
    body = GOOD.replace("name: tiny", "name: tiny\nnodes: 2")
    message = bad(tmp_path, body.replace("{id: gpu0, kind: gpu,", "{id: gpu0, kind: gpu, node: 2,"))
    assert "devices[0].node: node 2, but the topology has 2 node(s): 0..1" in message
    assert "devices[1].node: gpu1 needs a node index (0..1)" in message


def test_not_yaml_and_not_a_mapping(tmp_path):
    message = bad(tmp_path, "name: x\ndevices: [\n")
    assert "not valid YAML" in message
    message = bad(tmp_path, "- a\n- b\n")
    assert "expected a mapping" in message


def test_unknown_name_suggests_a_shipped_one():
    with pytest.raises(TopologyError, match=r"dgx-h10: no such file.*did you mean 'dgx-h100'\?"):
        load_topology("dgx-h10")


def test_nodes_needs_a_template():
    with pytest.raises(TopologyError, match=r"fixed 1-node topology; --nodes 2 needs a cluster template "
                                            r"\(e.g. dgx-h100-cluster --nodes 2\)"):
        load_topology("dgx-h100", nodes=2)


def test_template_errors(tmp_path):
    body = """
        name: mine
        node: dgx-h100
        fabric:
          rails: 4
          spines: 2
          nic_link: {kind: ib, GBs_per_dir: 50, latency_us: 0.6}
          uplink: {kind: ib, GBs_per_dir: 50, latency_us: 0.3, lane: 3}
    """
    message = bad(tmp_path, body)
    assert ":7: fabric.uplink.lane: unknown field 'lane' (did you mean 'lanes'?)" in message
    message = bad(tmp_path, body.replace(", lane: 3", ""))
    assert ":4: fabric.rails: dgx-h100 has nic4 on rail 4, but the fabric has 4 rails (0..3)" in message


# ------------------------------------------------------------------------------------ cluster template
def test_cluster_expands_to_n_nodes():
    two = load_topology("dgx-h100-cluster")
    assert two.nodes == 2 and len(gpus(two)) == 16
    four = load_topology("dgx-h100-cluster", nodes=4)
    assert four.nodes == 4 and len(gpus(four)) == 32
    assert gpus(four)[:2] == ["n0.gpu0", "n0.gpu1"] and gpus(four)[-1] == "n3.gpu7"
    assert four.device("n2.gpu5").node == 2 and local_index(four, "n2.gpu5") == 5
    leaves = [d for d in four.devices if d.kind == "ib_leaf"]
    spines = [d for d in four.devices if d.kind == "ib_spine"]
    assert len(leaves) == 8 and len(spines) == 4 and all(d.node is None for d in leaves + spines)
    # NIC i of every node connects to the leaf of rail i; each leaf to every spine
    nic_leaf = {(link.a, link.b) for link in four.links if link.kind == "ib" and link.a.startswith("n")}
    assert ("n3.nic6", "leaf6.0") in nic_leaf and len(nic_leaf) == 32
    assert sum(1 for link in four.links if link.a.startswith("leaf")) == 8 * 4


def test_cluster_needs_more_leaves_for_more_nodes():
    big = load_topology("dgx-h100-cluster", nodes=40)  # 32 nodes per leaf: 2 leaves per rail
    assert sum(1 for d in big.devices if d.kind == "ib_leaf") == 16
    r = route(big, "n0.gpu2", "n39.gpu2")
    assert any("spine" in device for stage in r.stages for device in stage)


# ------------------------------------------------------------------------------------ routing
def test_dgx_h100_nvswitch_aggregate():
    topo = load_topology("dgx-h100")
    r = route(topo, "gpu0", "gpu7")
    assert r.transport == "nvlink" and link_kinds(topo, r) == {"nvlink"}
    assert r.stages == (("gpu0",), ("nvswitch0", "nvswitch1", "nvswitch2", "nvswitch3"), ("gpu7",))
    assert r.hops == 2
    assert r.bottleneck_GBs == pytest.approx(478.116)  # 18 links at the 26.562 GB/s nvidia-smi reports
    assert r.latency_us == pytest.approx(0.8)
    # every GPU-switch link carries its share: 5/18 or 4/18 of the bytes, leaving gpu0 and entering gpu7
    assert sum(rl.share for rl in r.links if topo.links[rl.link].a == "gpu0") == pytest.approx(1.0)
    for rl in r.links:
        link = topo.links[rl.link]
        assert rl.share == pytest.approx(link.lanes / 18)
        assert rl.direction == (0 if link.a == "gpu0" else 1)


def test_hgx_a100_nvswitch_aggregate():
    r = route(load_topology("hgx-a100"), "gpu1", "gpu6")
    assert r.bottleneck_GBs == pytest.approx(300.0) and len(r.stages[1]) == 6


def test_h200x2_one_nvlink_hop():
    topo = load_topology("h200x2-nv18")
    r = route(topo, "gpu0", "gpu1")
    assert r.hops == 1 and r.transport == "nvlink"
    assert r.bottleneck_GBs == pytest.approx(478.1, abs=0.05)
    assert r.latency_us == pytest.approx(0.77)
    assert r.links == ((0, 0, 1.0),)
    assert route(topo, "gpu1", "gpu0").links == ((0, 1, 1.0),)


def test_pcie_same_switch_and_cross_socket():
    topo = load_topology("pcie-gen4-8gpu")
    near = route(topo, "gpu0", "gpu3")
    assert near.transport == "pcie" and near.stages == (("gpu0",), ("pcie0",), ("gpu3",))
    assert link_kinds(topo, near) == {"pcie"}
    far = route(topo, "gpu1", "gpu6")
    assert [stage[0] for stage in far.stages] == ["gpu1", "pcie0", "socket0", "socket1", "pcie1", "gpu6"]
    assert link_kinds(topo, far) == {"pcie", "upi"}
    assert {topo.device(s[0]).kind for s in far.stages[2:4]} == {"host_bridge"}
    assert far.latency_us > near.latency_us
    assert near.bottleneck_GBs == far.bottleneck_GBs == pytest.approx(26.0)


def test_nvlink_preferred_over_pcie():
    topo = load_topology("dgx-h100")
    r = route(topo, "gpu0", "gpu1")  # both also reach each other over PCIe through socket0
    assert r.transport == "nvlink" and "pcie" not in link_kinds(topo, r)


def test_cluster_same_rail_uses_one_leaf():
    topo = load_topology("dgx-h100-cluster", nodes=2)
    r = route(topo, "n0.gpu3", "n1.gpu3")
    assert r.transport == "net"
    devices = [stage[0] for stage in r.stages]
    assert devices == ["n0.gpu3", "n0.pcie3", "n0.nic3", "leaf3.0", "n1.nic3", "n1.pcie3", "n1.gpu3"]
    assert topo.device("n0.nic3").rail == 3
    assert not any(topo.device(s[0]).kind == "ib_spine" for s in r.stages)
    assert r.bottleneck_GBs == pytest.approx(50.0)
    assert 2.0 <= r.latency_us <= 5.0


def test_cluster_cross_rail_climbs_to_the_spines():
    topo = load_topology("dgx-h100-cluster", nodes=2)
    r = route(topo, "n0.gpu3", "n1.gpu5")
    assert r.stages[3:6] == (("leaf3.0",), ("spine0", "spine1", "spine2", "spine3"), ("leaf5.0",))
    assert r.stages[-3:] == (("n1.nic5",), ("n1.pcie5",), ("n1.gpu5",))
    assert r.bottleneck_GBs == pytest.approx(50.0)
    # the flow spreads equally over the spines, and wholly over each NIC link
    spine_links = [rl for rl in r.links if "spine" in topo.links[rl.link].b]
    assert len(spine_links) == 8 and all(rl.share == pytest.approx(0.25) for rl in spine_links)


def test_cluster_pxn_stays_on_rail():
    topo = load_topology("dgx-h100-cluster", nodes=2)
    r = route(topo, "n0.gpu3", "n1.gpu5", pxn=True)
    devices = [stage[0] for stage in r.stages]
    assert devices[2] == "n0.gpu5" and "n0.nic5" in devices and "leaf5.0" in devices
    assert not any("spine" in d for stage in r.stages for d in stage)
    assert "nvlink" in link_kinds(topo, r)


def test_rail_nic_is_the_nearest_then_rail_matched():
    dgx = load_topology("dgx-h100")
    assert [rail_nic(dgx, f"gpu{i}") for i in range(8)] == [f"nic{i}" for i in range(8)]
    a100 = load_topology("hgx-a100")  # two GPUs and two NICs per PCIe switch
    assert rail_nic(a100, "gpu0") == "nic0" and rail_nic(a100, "gpu1") == "nic1"
    pcie = load_topology("pcie-gen4-8gpu")  # one NIC per switch, shared by 4 GPUs
    assert [rail_nic(pcie, f"gpu{i}") for i in range(8)] == ["nic0"] * 4 + ["nic1"] * 4


def test_local_route_is_empty():
    r = route(load_topology("dgx-h100"), "gpu2", "gpu2")
    assert r.transport == "local" and r.links == () and r.hops == 0 and r.latency_us == 0


def test_no_route(tmp_path):
    topo = load_topology(write(tmp_path, GOOD.replace("links:\n", "links: []\n").split("  - {a:")[0]))
    with pytest.raises(TopologyError, match=r"no route from gpu0 to gpu1 in tiny: they share no NVLink"):
        route(topo, "gpu0", "gpu1")


def test_not_a_gpu():
    with pytest.raises(TopologyError, match=r"'gpu9' is not a GPU of dgx-h100 \(did you mean 'gpu7'\?\); "
                                            r"its GPUs are gpu0, gpu1, ..., gpu7"):
        route(load_topology("dgx-h100"), "gpu0", "gpu9")
    with pytest.raises(TopologyError, match="'nic0' is not a GPU"):
        route(load_topology("dgx-h100"), "nic0", "gpu1")


def test_route_table_places_ranks_in_order():
    topo = load_topology("dgx-h100-cluster", nodes=2)
    table = route_table(topo, 16)
    assert table.gpus[8] == "n1.gpu0" and table.node(8) == 1
    assert table[3, 11].stages[3] == ("leaf3.0",)
    assert table[0, 1].transport == "nvlink"
    assert len(table.all()) == 16 * 15
    explicit = route_table(topo, ["n1.gpu0", "n0.gpu0"])
    assert explicit[0, 1].stages[0] == ("n1.gpu0",)


def test_more_ranks_than_gpus():
    with pytest.raises(TopologyError, match=r"^the schedule has 16 ranks but dgx-h100 has 8 GPUs "
                                            r"\(use --nodes 2 with the cluster template dgx-h100-cluster\)$"):
        route_table(load_topology("dgx-h100"), 16)
    with pytest.raises(TopologyError, match=r"has 16 GPUs \(use --nodes 3\)"):
        route_table(load_topology("dgx-h100-cluster"), 20)
    with pytest.raises(TopologyError, match="two ranks placed on one GPU"):
        route_table(load_topology("dgx-h100"), ["gpu0", "gpu0"])


def test_rank_order(tmp_path):
    body = GOOD.replace("sms: 132}\n  - {id: gpu1", "sms: 132, rank_order: 1}\n  - {id: gpu1")
    message = bad(tmp_path, body)
    assert "rank_order must be set on every GPU of node 0 or on none" in message
    body = body.replace("{id: gpu1, kind: gpu, hbm_GBs: 3350, sms: 132}",
                        "{id: gpu1, kind: gpu, hbm_GBs: 3350, sms: 132, rank_order: 0}")
    assert gpus(load_topology(write(tmp_path, body))) == ["gpu1", "gpu0"]


# ------------------------------------------------------------------------------------ rendering, CLI
def test_summary():
    text = summary(load_topology("dgx-h100"))
    assert "8 gpu (H100-SXM5-80GB: 132 SMs, 3,350.0 GB/s, 80 GB)" in text
    assert "NVLink 478.1 GB/s (18 lanes), PCIe 55.0 GB/s (16 lanes), NIC 50.0 GB/s (its own)" in text
    assert "gpu0 -> nvswitch0|nvswitch1|nvswitch2|nvswitch3 -> gpu7" in text
    assert "nvlink, 2 hops, 0.80 us one way, bottleneck 478.1 GB/s per direction" in text
    cluster = summary(load_topology("dgx-h100-cluster", nodes=3))
    assert "nodes 0..2, each: 8 gpu" in cluster and "fabric: 8 ib_leaf (QM9700), 4 ib_spine (QM9700)" in cluster


def test_dot_is_graphviz_text():
    dot = to_dot(load_topology("dgx-h100-cluster"))
    assert dot.startswith('graph "dgx-h100-cluster" {') and dot.rstrip().endswith("}")
    assert 'subgraph "cluster_node1" {' in dot
    assert '"n0.gpu0" -- "n0.nvswitch0" [label="nvlink x5\\n132.81 GB/s"' in dot
    assert dot.count(" -- ") == len(load_topology("dgx-h100-cluster").links)


def test_cli_show(tmp_path, capsys):
    dot = tmp_path / "out.dot"
    assert cli.main(["topology", "show", "dgx-h100-cluster", "--nodes", "3", "--dot", str(dot)]) == 0
    captured = capsys.readouterr()
    assert "3 nodes, 24 GPUs" in captured.out and f"wrote {dot}" in captured.err
    assert dot.read_text().startswith("graph ")
    assert cli.main(["topology", "show", "h200x2-nv18", "--json"]) == 0  # a name: its calibrated file
    calibrated = load_topology(ROOT / "topologies" / "measured" / "h200x2-nv18.yaml")
    assert Topology.model_validate_json(capsys.readouterr().out) == calibrated


def test_cli_malformed_file_exit_2_without_traceback(tmp_path, capsys):
    path = write(tmp_path, GOOD.replace("kind: nvlink", "kind: nvlnk"))
    assert cli.main(["topology", "show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"clockworks: error: {path}:6: links[0].kind: 'nvlnk' is not one of")
    assert "Traceback" not in err
    assert cli.main(["topology", "show", "no-such-machine"]) == 2
    assert cli.main(["topology", "show", "dgx-h100", "--nodes", "0"]) == 2
    assert cli.main(["topology"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_cli_png(tmp_path, capsys):
    out = tmp_path / "topo.png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert cli.main(["topology", "show", "h200x2-nv18", "--png", str(out)]) == 2
        assert "pip install 'clockworks-dist[plot]'" in capsys.readouterr().err
        with pytest.raises(MissingDependency):
            from clockworks_dist.topology import draw_png
            draw_png(load_topology("h200x2-nv18"), out)
        return
    assert cli.main(["topology", "show", "dgx-h100", "--png", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
