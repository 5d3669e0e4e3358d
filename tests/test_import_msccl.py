"""MSCCL XML algorithms as schedules (`importers.msccl`): the published corpus checks as its authors
meant (or with the defects the files really have), each seeded bug is found at its step's line, and
the command line reads the files directly and through `clockworks import`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from clockworks_dist import cli, load_file
from clockworks_dist.check import check
from clockworks_dist.importers.msccl import DEP_SIGNAL, ImportedDef, to_schedule
from clockworks_dist.importers.msccl_xml import parse

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus" / "msccl"
ALGORITHMS = sorted(CORPUS.glob("*.xml"))
SEEDED = sorted((CORPUS / "buggy").glob("*.xml"))

# What each published file is, as checked: verified, or the defect the file has.
REAL_FINDINGS = {
    # two thread blocks of GPU 2 receive from GPU 6 on channel 0 (and of GPU 3 from GPU 7): the order in
    # which they take the connection's messages is not fixed; the file was deleted upstream by a commit
    # titled "fix bug"
    "msccl_tools_allreduce_ndv2_8gpu_simple.xml": ("violated", {"send_recv_mismatch"}),
    # ranks sum the same chunk in different orders; RCCL removed the file because such algorithms "may
    # cause different output values on different ranks"
    "rccl_allreduce_1step_4gpu_ll.xml": ("verified", {"not_bitwise_reproducible"}),
}
SEEDED_KINDS = {
    "allpairs_dropped_dependency.xml": "data_race",
    "allpairs_send_before_reduce.xml": "data_race",
    "allpairs_wrong_offset.xml": "wrong_result",
}


def test_the_corpus_is_there():
    assert len(ALGORITHMS) >= 10 and set(SEEDED_KINDS) == {p.name for p in SEEDED}


@pytest.mark.parametrize("path", ALGORITHMS, ids=lambda p: p.stem)
def test_every_published_algorithm_checks_as_expected(path):
    [defn] = load_file(str(path))
    sched = defn.trace(defn.ranks[0])
    alg = parse(path)
    # every thread block is a thread of its GPU's rank: the concurrency is kept, not linearised
    assert [len(p.threads) for p in sched.programs] == [len(g.tbs) for g in sorted(alg.gpus, key=lambda g: g.id)]
    result = check(sched, timeout=120)
    assert result.complete, (path.name, result.stopped_by)
    verdict, kinds = REAL_FINDINGS.get(path.name, ("verified", set()))
    assert (result.verdict, result.kinds()) == (verdict, kinds), [v.message[:300] for v in result.violations]
    if alg.coll in ("allreduce", "allgather", "alltoall"):
        assert sched.expect  # the collective's postcondition is checked, not only deadlocks and races


def test_the_shared_connection_is_named_at_both_thread_blocks():
    result = check(load_file(str(CORPUS / "msccl_tools_allreduce_ndv2_8gpu_simple.xml"))[0].trace(8))
    found = [v for v in result.violations if "two threads of rank 2 receive from rank 6" in v.message]
    assert found, [v.message for v in result.violations]
    assert {o.thread for o in found[0].ops} == {"tb5", "tb8"}
    assert all(o.loc.file == "msccl_tools_allreduce_ndv2_8gpu_simple.xml" for o in found[0].ops)


def _bug_line(path: Path) -> int:
    lines = [i for i, text in enumerate(path.read_text().splitlines(), start=1) if "<!-- BUG" in text]
    assert len(lines) == 1
    return lines[0]


@pytest.mark.parametrize("path", SEEDED, ids=lambda p: p.stem)
def test_each_seeded_bug_is_found_at_its_step(path):
    kind, line = SEEDED_KINDS[path.name], _bug_line(path)
    result = check(load_file(str(path))[0].trace(8), timeout=120)
    assert result.complete and result.verdict == "violated"
    found = [v for v in result.violations if v.kind == kind]
    assert found, sorted(result.kinds())
    if kind == "data_race":  # the step itself is one side of the race
        assert any(o.loc.line == line and o.loc.file == path.name for v in found for o in v.ops)
    else:  # the wrong value is written later; the counterexample runs the step
        assert any(o.loc.line == line for v in found for s in v.trace for o in s.ops)


def test_steps_become_the_ops_of_their_type_at_their_line(tmp_path):
    xml = tmp_path / "two.xml"
    xml.write_text(
        '<algo name="two steps" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce" '
        'inplace="1">\n'
        + "".join(
            f'  <gpu id="{g}" i_chunks="2" o_chunks="0" s_chunks="1">\n'
            f'    <tb id="0" send="{1 - g}" recv="{1 - g}" chan="0">\n'
            f'      <step s="0" type="s" srcbuf="i" srcoff="{1 - g}" dstbuf="s" dstoff="0" cnt="1" depid="-1" '
            'deps="-1" hasdep="0"/>\n'
            f'      <step s="1" type="rrc" srcbuf="i" srcoff="{g}" dstbuf="i" dstoff="{g}" cnt="1" depid="-1" '
            'deps="-1" hasdep="1"/>\n'
            f'      <step s="2" type="s" srcbuf="i" srcoff="{g}" dstbuf="i" dstoff="{g}" cnt="1" '
            'depid="-1" deps="-1" hasdep="0"/>\n'
            f'      <step s="3" type="r" srcbuf="i" srcoff="{1 - g}" dstbuf="i" dstoff="{1 - g}" cnt="1" '
            'depid="-1" deps="-1" hasdep="0"/>\n'
            '    </tb>\n'
            '    <tb id="1" send="-1" recv="-1" chan="0">\n'
            '      <step s="0" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0" depid="0" deps="1" '
            'hasdep="0"/>\n'
            '    </tb>\n'
            '  </gpu>\n' for g in (0, 1))
        + "</algo>\n")
    sched = to_schedule(parse(xml), chunk=2, slots=1)
    assert sched.name == "two_steps"
    tb0, tb1 = sched.programs[0].threads
    kinds = [(op.kind, op.loc.line) for op in tb0.ops]
    # s; rrc in place (a recv that adds) and the flag it sets for tb1; the sum sent back; the other sum received
    assert kinds == [("send", 4), ("recv", 5), ("signal_op", 5), ("send", 6), ("recv", 7)]
    assert tb0.ops[1].reduce == "sum" and tb0.ops[0].src.start == 2 and tb0.ops[0].src.stop == 4
    assert tb0.ops[2].signal.signal == DEP_SIGNAL and tb0.ops[2].value == 2
    assert [(op.kind, op.value) for op in tb1.ops] == [("wait_until", 2)]
    # a two-GPU all-reduce: every rank ends with both sums
    result = check(sched)
    assert result.verdict == "verified", [v.message for v in result.violations]


def test_the_cli_reads_xml_directly_and_imports_it(tmp_path, capsys):
    path = str(CORPUS / "rccl_alltoall_8gpu_ll.xml")
    assert cli.main(["check", path]) == 0
    assert "alltoall_llm, 8 ranks: verified" in capsys.readouterr().out
    out = tmp_path / "a2a.json"
    assert cli.main(["import", path, "-o", str(out), "--slots", "2"]) == 0
    assert "120 thread blocks, 2 slot(s) per connection" in capsys.readouterr().err
    sched = json.loads(out.read_text())
    sends = [op for p in sched["programs"] for t in p["threads"] for op in t["ops"] if op["kind"] == "send"]
    assert sends and all(op["slots"] == 2 and op["loc"]["file"] == "rccl_alltoall_8gpu_ll.xml" for op in sends)
    assert cli.main(["check", str(out)]) == 0
    assert cli.main(["show", path]) == 0
    listing = capsys.readouterr().out
    assert re.search(r"block tb0 \(rccl_alltoall_8gpu_ll\.xml:\d+\)", listing)


@pytest.mark.parametrize("text, line, fragment", [
    ('<algo name="a" proto="LL" nchannels="1" nchunksperloop="1" ngpus="2" coll="allreduce" inplace="1">\n'
     '  <gpu id="0" i_chunks="1" o_chunks="0" s_chunks="0">\n'
     '    <tb id="0" send="1" recv="-1" chan="0">\n'
     '      <step s="0" type="zz" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" '
     'hasdep="0"/>\n', 4, "unknown step type 'zz'"),
    ('<algo name="a" proto="LL" nchannels="1"\n', 1, "malformed XML"),
])
def test_bad_xml_is_exit_2_at_its_line_without_a_traceback(tmp_path, capsys, text, line, fragment):
    path = tmp_path / "bad.xml"
    path.write_text(text)
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"bad.xml:{line}:" in err and fragment in err and "Traceback" not in err


def test_an_imported_algorithm_keeps_its_world():
    defn = ImportedDef(str(CORPUS / "rccl_alltoall_8gpu_ll.xml"))
    with pytest.raises(Exception, match="written for 8 GPUs, not 4"):
        defn.trace(4)


def test_a_step_after_one_that_wrote_its_data_needs_no_dependency_as_the_runtime_barriers_between_steps():
    # every primitive the MSCCL interpreter calls ends with a barrier of the whole thread block (the importer's
    # docstring cites where), so a thread block's steps are ordered as the checker runs them: a step that reads
    # what the block's previous step wrote, with no dependency, is exact. Pinned on a published file that does so.
    path = CORPUS / "scheduler_allreduce_hier_4gpu_simple.xml"
    alg = parse(path)
    assert alg.proto == "Simple"
    tb = next(t for t in next(g for g in alg.gpus if g.id == 0).tbs if t.id == 24)
    r, re_ = tb.steps[1], tb.steps[2]
    assert (r.type, r.dstbuf, r.dstoff, r.cnt) == ("r", "s", 0, 1) and re_.depid < 0
    assert (re_.type, re_.srcbuf, re_.srcoff, re_.cnt) == ("re", "s", 0, 1)
    sched = load_file(str(path))[0].trace(4)
    ops = sched.programs[0].threads[tb.id].ops
    lines = [op.loc.line for op in ops]
    # the recv, then the reduce of what it received, one after the other, nothing between them
    at = lines.index(r.line)
    assert [op.kind for op in ops[at:at + 2]] == ["recv", "reduce"] and ops[at + 1].loc.line == re_.line
    assert ops[at].dst == ops[at + 1].srcs[1]
    result = check(sched, timeout=120)
    assert result.complete and result.verdict == "verified" and not result.kinds()
