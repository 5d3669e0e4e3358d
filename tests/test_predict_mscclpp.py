"""`clockworks predict` on MSCCL++ execution plans, through the same path as MSCCL XML files
(`importers.imported.Imported`): the message size sets the plan's chunk, memory-channel puts and gets
are one thread block's NVSHMEM transfers, LL packet writes take the packet path, and what cannot be
predicted (a size off the chunks, more GPUs than the topology, a refused op) is exit 2 at the file."""

from __future__ import annotations

import json
from pathlib import Path

from clockworks_dist import cli, load_file
from clockworks_dist.importers.imported import is_imported
from clockworks_dist.importers.mscclpp import to_schedule
from clockworks_dist.perf.predict import imported_conditions, imported_sizes, predict_sizes
from clockworks_dist.topology import load_topology

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus" / "mscclpp"
SIMPLE = CORPUS / "test_allreduce.json"  # 2 GPUs, in place, 16 chunks, puts and gets over memory channels
PACKET = CORPUS / "test_allreduce_packet.json"  # 2 GPUs, in place, 4 chunks, LL packets
TBG = CORPUS / "executor_reduce_tbg.json"  # 2 GPUs, thread block groups of 2: chunks of 2k elements
TOPO = "h200x2-nv18"


def rows(out: str, sizes: list[int]) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.split() and line.split()[0] in map(str, sizes)]


def test_both_importers_are_one_kind_for_predict():
    assert is_imported(load_file(str(SIMPLE))[0])
    assert is_imported(load_file(str(ROOT / "corpus" / "msccl" / "scheduler_allreduce_tree_4gpu_ll.xml"))[0])
    assert not is_imported(load_file(str(ROOT / "protocols" / "ring_allreduce.py"))[0])


def test_predict_on_a_plan_prints_a_table_with_its_pricing(capsys):
    sizes = [64 * 1024, 4 << 20]
    assert cli.main(["predict", str(SIMPLE), "-t", TOPO, "--sizes", "64KiB,4MiB"]) == 0
    out = capsys.readouterr().out
    assert "allreduce on h200x2-nv18, 2 ranks" in out
    assert "priced as: each memory-channel put (put, and the remote writes of res and rres) as an NVSHMEM put" in out
    assert "one thread block" in out and "the whole message in one pass" in out
    found = rows(out, sizes)
    assert [int(r[0]) for r in found] == sizes
    times = [float(r[1]) for r in found]
    assert 0 < times[0] < times[1]
    # the critical path is the plan's ops, at their lines, on their thread blocks
    path = [line for line in out.splitlines() if "test_allreduce.json:" in line]
    assert path and all(" thread tb" in line for line in path)


def test_a_packet_plan_prices_its_packets_as_the_packet_path(capsys):
    assert cli.main(["predict", str(PACKET), "-t", TOPO, "--sizes", "16KiB,1MiB"]) == 0
    out = capsys.readouterr().out
    assert "packet writes (LL: ppkt" in out and "as the packet path" in out
    assert [int(r[0]) for r in rows(out, [16384, 1 << 20])] == [16384, 1 << 20]
    defn = load_file(str(PACKET))[0]
    topo = load_topology(TOPO)
    one = predict_sizes(defn, topo, 2, [1 << 20], conditions=imported_conditions(defn))[0]
    packets = [r for r in one.timeline.records if r.kind == "delivery" and "put_signal" in r.text]
    assert packets and all(r.detail.get("packets") for r in packets)
    # the same plan with its packets priced as fenced put_signals instead moves half the bytes
    fenced = predict_sizes(defn, topo, 2, [1 << 20], conditions=imported_conditions(defn).__class__(
        protocol="LL", nvshmem_blocks=1))[0]
    moved = sum(v for k, v in one.timeline.link_bytes.items() if "HBM" not in one.timeline.network.names[k])
    moved_fenced = sum(v for k, v in fenced.timeline.link_bytes.items()
                       if "HBM" not in fenced.timeline.network.names[k])
    assert moved > 1.9 * moved_fenced


def test_the_message_size_sets_the_chunk_exactly():
    """A plan traced for a message (`trace_chunk`) is the plan at that chunk: with thread block groups
    (chunks of a multiple of 2 elements here) every region scales with the chunk."""
    defn = load_file(str(TBG))[0]
    assert defn.chunk_unit == 2
    wide, exact = defn.trace_chunk(2, 12), to_schedule(defn.plan, 12)
    assert wide.expect == exact.expect
    for mine, theirs in zip(wide.programs, exact.programs):
        assert mine.buffers == theirs.buffers and mine.threads == theirs.threads
        # only the packet flags stay at the smallest chunk's elements: one flag per 6 elements here
        flags = {s.name: s.count for s in mine.signals}, {s.name: s.count for s in theirs.signals}
        assert flags[0].pop("mscclpp_pkt") * 6 == flags[1].pop("mscclpp_pkt") and flags[0] == flags[1]
    assert imported_sizes(defn, 2)[0] == 1024 and all(s % 32 == 0 for s in imported_sizes(defn, 2))


def test_a_size_off_the_chunks_is_exit_2_naming_the_multiple(capsys):
    assert cli.main(["predict", str(SIMPLE), "-t", TOPO, "--sizes", "1000"]) == 2
    err = capsys.readouterr().err
    assert "test_allreduce.json:1: 1000 bytes per rank is not a whole number of chunks" in err
    assert "16 chunks" in err and "multiples of 64 bytes" in err and "Traceback" not in err
    assert cli.main(["predict", str(TBG), "-t", TOPO, "--sizes", "48"]) == 2
    err = capsys.readouterr().err
    assert "executor_reduce_tbg.json:1:" in err and "4 chunks of 2 float32 elements" in err
    assert "multiples of 32 bytes" in err


def test_a_plan_for_more_gpus_than_the_topology_is_exit_2_naming_the_file(capsys):
    assert cli.main(["predict", str(CORPUS / "dsl_allreduce_pkt_4gpu.json"), "-t", TOPO, "--sizes", "1MiB"]) == 2
    err = capsys.readouterr().err
    assert "dsl_allreduce_pkt_4gpu.json:1: the schedule has 4 ranks but h200x2-nv18 has 2 GPUs" in err
    assert "Traceback" not in err


def test_a_refused_plan_is_exit_2_at_its_line(capsys):
    assert cli.main(["predict", str(CORPUS / "executor_reduce_nvls.json"), "-t", TOPO, "--sizes", "1MiB"]) == 2
    err = capsys.readouterr().err
    assert "executor_reduce_nvls.json:40: rank 0: glres:" in err and "not supported" in err
    assert "Traceback" not in err


def test_predict_json_on_a_plan(capsys):
    plan = CORPUS / "dsl_allreduce_pkt_4gpu.json"  # 16 chunks of float32 in place: multiples of 64 bytes
    assert cli.main(["predict", str(plan), "-t", "dgx-h100", "--sizes", "64KiB,1MiB", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert [p["bytes"] for p in found["predictions"]] == [64 * 1024, 1 << 20]
    assert found["ranks"] == 4 and "as the packet path" in found["priced_as"]
    assert all(p["time_us"] > 0 for p in found["predictions"])
    # busbw follows nccl-tests' all-reduce factor, 2 (n - 1) / n
    p = found["predictions"][0]
    assert abs(p["busbw_GBs"] - p["algbw_GBs"] * 1.5) <= 1e-3 * p["busbw_GBs"] + 2e-3
    assert any(step["file"] == plan.name and (step["thread"] or "").startswith("tb") for step in found["critical_path"])
