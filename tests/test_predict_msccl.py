"""`clockworks predict` on imported MSCCL algorithms: the simulator times their thread blocks, the
message size sets the chunk, the file's protocol prices every step, and what cannot be predicted
(a file that deadlocks, a size that is not a whole number of chunks, more GPUs than the topology
has, a file whose blocks share a connection) is an exit-2 error at the file's line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clockworks_dist import cli, load_file
from clockworks_dist.perf.costs import RunConditions
from clockworks_dist.perf.network import from_topology
from clockworks_dist.perf.predict import predict_sizes
from clockworks_dist.perf.simulate import Simulator
from clockworks_dist.topology import load_topology

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus" / "msccl"
RING = CORPUS / "msccl_tools_allreduce_ring_8gpu_ll128.xml"  # 8 GPUs, 8 chunks, LL128
TREE = CORPUS / "scheduler_allreduce_tree_4gpu_ll.xml"  # 4 GPUs, 24 chunks, LL
DGX = load_topology("dgx-h100")

# Each GPU receives from the other before it sends: the two thread blocks wait for each other.
DEADLOCK = """<algo name="recv_first" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather"
      inplace="1">
  <gpu id="0" i_chunks="0" o_chunks="2" s_chunks="0">
    <tb id="0" send="1" recv="1" chan="0">
      <step s="0" type="r" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="s" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="0" o_chunks="2" s_chunks="0">
    <tb id="0" send="0" recv="0" chan="0">
      <step s="0" type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="s" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"""


def test_predict_on_an_xml_prints_a_table_with_its_pricing(capsys):
    assert cli.main(["predict", str(RING), "-t", "dgx-h100", "--sizes", "32KiB,1MiB"]) == 0
    out = capsys.readouterr().out
    assert "allreduce_ring_8channelsperring on dgx-h100, 8 ranks" in out
    assert "priced as: each step's send and recv as an NCCL send/recv with the file's protocol, LL128" in out
    assert "LL128's point-to-point constants were never measured" in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(("32768 ", "1048576 "))]
    assert [int(r[0]) for r in rows] == [32768, 1048576]
    times = [float(r[1]) for r in rows]
    assert 0 < times[0] < times[1]
    # the critical path names the rank's thread block and the peer rank, not the checker's actors
    path = [line for line in out.splitlines() if "msccl_tools_allreduce_ring_8gpu_ll128.xml:" in line]
    assert path and all(" thread tb" in line for line in path)
    assert all("peer=" not in line or any(f"peer={r}," in line for r in range(8)) for line in path)


def test_predict_json_has_each_size_and_the_thread_of_each_step(capsys):
    assert cli.main(["predict", str(TREE), "-t", "dgx-h100", "--sizes", "96KiB,1536KiB", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [p["bytes"] for p in found["predictions"]] == [96 * 1024, 1536 * 1024]
    assert found["ranks"] == 4 and "protocol, LL," in found["priced_as"]
    assert all(step["thread"] is not None and step["thread"].startswith("tb") for step in found["critical_path"]
               if step["file"] == TREE.name)
    # busbw follows nccl-tests' all-reduce factor, 2 (n - 1) / n
    p = found["predictions"][0]
    assert p["busbw_GBs"] == pytest.approx(p["algbw_GBs"] * 1.5, rel=1e-3)


def test_the_message_size_sets_the_chunk_and_a_size_off_the_chunks_is_exit_2(capsys):
    defn = load_file(str(TREE))[0]
    one = predict_sizes(defn, DGX, 4, [96 * 1024], conditions=RunConditions(protocol="LL"))[0]
    assert one.nbytes == 96 * 1024
    sends = [r for r in one.timeline.records if r.kind == "send" and "protocol" in r.detail]  # the transfers
    assert sends and all(r.detail["protocol"] == "LL" and r.detail["channels"] == 1 for r in sends)
    assert cli.main(["predict", str(TREE), "-t", "dgx-h100", "--sizes", "1MiB"]) == 2
    err = capsys.readouterr().err
    assert "scheduler_allreduce_tree_4gpu_ll.xml:1:" in err and "not a whole number of chunks" in err
    assert "multiples of 96 bytes" in err and "Traceback" not in err


def test_the_default_sweep_of_an_xml_is_whole_chunks(capsys):
    from clockworks_dist.perf.predict import imported_sizes

    sizes = imported_sizes(load_file(str(TREE))[0], 4)
    assert sizes[0] == 1536 and sizes[-1] <= 1 << 30 and all(s % 96 == 0 for s in sizes)


def test_the_protocol_prices_the_steps():
    """The same algorithm priced with LL (a flag beside every 4 data bytes: twice the bytes on the
    wire) and with Simple: at a large size LL is the slower one."""
    defn = load_file(str(RING))[0]
    size = [8 << 20]
    ll = predict_sizes(defn, DGX, 8, size, conditions=RunConditions(protocol="LL"))[0]
    simple = predict_sizes(defn, DGX, 8, size, conditions=RunConditions(protocol="Simple"))[0]
    assert ll.time_us > simple.time_us
    moved_ll, moved_simple = sum(ll.timeline.link_bytes.values()), sum(simple.timeline.link_bytes.values())
    assert moved_ll > 1.5 * moved_simple


def test_a_deadlocking_xml_is_reported_with_each_blocked_block(tmp_path, capsys):
    path = tmp_path / "recv_first.xml"
    path.write_text(DEADLOCK)
    assert cli.main(["predict", str(path), "-t", "dgx-h100", "--sizes", "8KiB"]) == 2
    err = capsys.readouterr().err
    assert "recv_first.xml:5: the schedule deadlocks: rank(s) 0, 1 never finish" in err
    assert "rank 0 block tb0 blocks in recv(peer=1," in err and "rank 1 block tb0 blocks in recv(peer=0," in err
    assert "clockworks check" in err and "Traceback" not in err


def test_a_file_for_more_gpus_than_the_topology_is_exit_2(capsys):
    path = CORPUS / "rccl_allgather_allpairs_16gpu_ll.xml"
    assert cli.main(["predict", str(path), "-t", "dgx-h100", "--sizes", "64KiB"]) == 2
    err = capsys.readouterr().err
    assert "16 ranks but dgx-h100 has 8 GPUs" in err and "Traceback" not in err


def test_a_16_gpu_file_predicts_on_two_cluster_nodes(capsys):
    path = CORPUS / "rccl_allgather_allpairs_16gpu_ll.xml"
    assert cli.main(["predict", str(path), "-t", "dgx-h100-cluster", "--nodes", "2", "--sizes", "64KiB"]) == 0
    out = capsys.readouterr().out
    assert "allgather_allpairs on dgx-h100-cluster" in out and "16 ranks" in out


def test_a_file_whose_blocks_share_a_connection_is_exit_2_at_its_line(capsys):
    path = CORPUS / "msccl_tools_allreduce_ndv2_8gpu_simple.xml"
    assert cli.main(["predict", str(path), "-t", "dgx-h100", "--sizes", "64KiB"]) == 2
    err = capsys.readouterr().err
    assert "msccl_tools_allreduce_ndv2_8gpu_simple.xml:100: the schedule does not match: two threads of rank 2" in err
    assert "Traceback" not in err


def test_thread_blocks_share_their_gpus_links():
    """Two blocks of GPU 0 sending to GPU 1 at once share its links: each takes longer than one
    block sending alone would, and the run ends when both have."""
    defn = load_file(str(CORPUS / "rccl_alltoall_8gpu_ll.xml"))[0]
    sched = defn.trace_chunk(8, 1 << 16)
    timeline = Simulator(sched, from_topology(DGX, 8), DGX.constants, conditions=RunConditions(protocol="LL")).run()
    sends = [r for r in timeline.records if r.kind == "send" and r.rank == 0 and "protocol" in r.detail]
    assert len({r.thread for r in sends}) == 7  # seven blocks of GPU 0 send at once, one to each peer
    starts = sorted(r.start for r in sends)
    assert starts[-1] - starts[0] < min(r.end - r.start for r in sends)  # concurrent, not one after another
