"""MSCCL++ execution plans as schedules (`importers.mscclpp`): every plan in corpus/mscclpp gets its verdict
(verified, a real defect, or a refusal naming the op and its line), each seeded bug is found at its op's line,
bad input is exit 2 at file:line without a traceback, a plan runs on mpi-cpu, and `clockworks import` round
trips."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clockworks_dist import cli, load_file
from clockworks_dist.check import check
from clockworks_dist.errors import ScheduleError
from clockworks_dist.importers.mscclpp import MEM_SEM, PKT_FLAG, ImportedPlan
from clockworks_dist.importers.mscclpp_json import parse

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus" / "mscclpp"
PLANS = sorted(CORPUS.glob("*.json"))
SEEDED = sorted((CORPUS / "buggy").glob("*.json"))

# Plans that are not simply verified: the defect found, or the refusal (its line and words).
REAL_FINDINGS = {
    # a thread block group splits the copy into scratch by chunk (tb0 chunk 0, tb1 chunk 1) but the reads
    # of the peer by half chunks (tb1 reads the second half of chunk 0, which the peer's tb0 copied), and
    # each thread block waits only for the peer's thread block of its own id
    "executor_reduce_tbg.json": ("violated", {"data_race", "wrong_result", "nondeterministic_result"}),
    # recspkt also writes the sum as packets into the gpu's own scratch, which nothing reads
    "executor_reduce_pack.json": ("verified", {"unfinished_deliveries"}),
    "executor_reduce_pack_tbg.json": ("verified", {"unfinished_deliveries"}),
}
REFUSED = {
    "executor_reduce_nvls.json": (40, '"glres" (multimem load-reduce-store (switch channel)) is not supported'),
    # the DSL writes "glre" for a switch-channel reduce; the executor's reader accepts "glres" only
    "dsl_switch_reduce_3gpu.json": (17, 'unknown op type "glre": the MSCCL++ executor does not accept it'),
}
SEEDED_KINDS = {
    "reduce_dropped_wait.json": "data_race",
    "reduce_wrong_offset.json": "wrong_result",
    "reduce_relaxed_final_signal.json": "unfinished_output",
}
# Seeded bugs the importer refuses (the checker could not order the op soundly): the words of the refusal.
SEEDED_REFUSED = {
    # rlxwait before a read of the peer's scratch: the read may see stale data on the GPU
    "reduce_relaxed_wait_read.json": (0, "after the relaxed wait at line 47 (rlxwait: no acquire, so no memory "
                                         "ordering)"),
    # rlxsignal after a copy into scratch that the peer reads after waiting for it: the read may see stale data
    "reduce_relaxed_signal_copy.json": (1, "signals gpu 0 relaxed here (rlxsignal: no release, so no memory "
                                           "ordering) after writing its own scratch[0:2] (line 217); gpu 0 thread "
                                           "block 0 waits for this signal (line 47), and then reads gpu 1's "
                                           "scratch[0:1] (line 57)"),
    # a get after reading packets, of the scratch the sender copied before writing them: a packet orders only its
    # own data (no release), so the get may see stale data
    # the nop between an rre and the copy of its sums dropped: one thread may copy what another has not reduced
    "reduce_missing_nop.json": (1, "thread block 0: this op reading its own buffer[2:4] overlaps the rre at line 257 "
                                   "(writing its own buffer[2:4]) with no nop between them"),
    "transfer_pack_get_after_packet.json": (0, "thread block 0 writes packets here (ppkt: an LL packet is a plain "
                                               "store of its data and flag, no release, so it orders nothing but "
                                               "its own data) after writing its own scratch[0:1] (line 17); gpu 1 "
                                               "thread block 2 reads these packets (line 187), and then reads gpu "
                                               "0's scratch[0:1] (line 207)"),
}


def test_the_corpus_is_there_and_listed():
    assert len(PLANS) >= 12 and {p.name for p in SEEDED} == set(SEEDED_KINDS) | set(SEEDED_REFUSED)
    sources = (CORPUS / "SOURCES.md").read_text()
    for path in PLANS:
        assert f"`{path.name}`" in sources, f"{path.name} is not described in SOURCES.md"
    for path in SEEDED:
        assert f"`buggy/{path.name}`" in sources, f"{path.name} is not described in SOURCES.md"
    assert (CORPUS / "LICENSE-mscclpp.txt").read_text().startswith("    MIT License")


@pytest.mark.parametrize("path", [p for p in PLANS if p.name not in REFUSED], ids=lambda p: p.stem)
def test_every_plan_checks_as_expected(path):
    [defn] = load_file(str(path))
    assert isinstance(defn, ImportedPlan)
    sched = defn.trace(defn.ranks[0])
    plan = json.loads(path.read_text())
    # every thread block is a thread of its gpu's rank: the concurrency is kept, not linearised
    assert [len(p.threads) for p in sched.programs] == [len(g["threadblocks"]) for g in plan["gpus"]]
    result = check(sched, timeout=120)
    assert result.complete, (path.name, result.stopped_by)
    verdict, kinds = REAL_FINDINGS.get(path.name, ("verified", set()))
    assert (result.verdict, result.kinds()) == (verdict, kinds), [v.message[:300] for v in result.violations]
    if plan["collective"] in ("allreduce", "allgather", "alltoall"):
        assert sched.expect  # the collective's postcondition is checked, not only deadlocks and races


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unsupported_plans_are_refused_at_the_op(name, capsys):
    line, words = REFUSED[name]
    assert cli.main(["check", str(CORPUS / name)]) == 2
    err = capsys.readouterr().err
    assert f"{name}:{line}: rank 0: " in err and words in err and "Traceback" not in err


def _bug_line(path: Path) -> int:
    """The line of the op object marked BUG (its "comment" key comes first, on the line after the brace)."""
    lines = [i for i, text in enumerate(path.read_text().splitlines(), start=1) if '"BUG:' in text]
    assert len(lines) == 1
    return lines[0] - 1


@pytest.mark.parametrize("path", [p for p in SEEDED if p.name in SEEDED_KINDS], ids=lambda p: p.stem)
def test_each_seeded_bug_is_found_at_its_op(path):
    kind, line = SEEDED_KINDS[path.name], _bug_line(path)
    result = check(load_file(str(path))[0].trace(2), timeout=120)
    assert result.complete and result.verdict == "violated"
    found = [v for v in result.violations if v.kind == kind]
    assert found, sorted(result.kinds())
    if kind == "data_race":  # the op itself is one side of the race
        assert any(o.loc.line == line and o.loc.file == path.name for v in found for o in v.ops)
    else:  # the counterexample runs the op
        assert any(o.loc.line == line for v in found for s in v.trace for o in s.ops)


@pytest.mark.parametrize("name", sorted(SEEDED_REFUSED))
def test_seeded_bugs_the_importer_refuses_are_refused_at_their_op(name, capsys):
    path = CORPUS / "buggy" / name
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    rank, words = SEEDED_REFUSED[name]
    assert f"{name}:{_bug_line(path)}: rank {rank}: " in err and words in err and "Traceback" not in err, err


def _relaxed(path: Path, tmp_path: Path, gpu: int, nth: int) -> Path:
    """A copy of plan `path` whose `nth` wait of gpu `gpu` (thread block 0) is an rlxwait, at the same lines."""
    lines = path.read_text().splitlines(keepends=True)
    plan = json.loads(path.read_text())
    waits = [i for i, op in enumerate(plan["gpus"][gpu]["threadblocks"][0]["ops"]) if op["name"] == "wait"]
    assert len(waits) > nth
    # the op's "name" line: count the ops of that thread block in the text
    tb_start = [i for i, t in enumerate(lines) if '"threadblocks"' in t][gpu]
    names = [i for i, t in enumerate(lines) if i > tb_start and '"name": ' in t and '"BUG' not in t]
    at = names[waits[nth]]
    assert '"name": "wait"' in lines[at]
    lines[at] = lines[at].replace('"wait"', '"rlxwait"')
    out = tmp_path / f"relaxed_{gpu}_{nth}.json"
    out.write_text("".join(lines))
    return out


def test_a_relaxed_wait_before_reads_of_peer_data_is_refused_before_writes_it_is_not(tmp_path, capsys):
    plan = CORPUS / "executor_reduce.json"
    # gpu 0's first wait relaxed: its rres then reads gpu 1's scratch, which gpu 1 copied before its signal
    read = _relaxed(plan, tmp_path, 0, 0)
    assert cli.main(["check", str(read)]) == 2
    err = capsys.readouterr().err
    assert "relaxed_0_0.json:57: rank 0: rres: thread block 0 reads gpu 1's scratch" in err, err
    assert "gpu 1 thread block 0 writes it (line 217)" in err and "Traceback" not in err
    # gpu 1's first wait relaxed: after it come a read of gpu 0's input, which only this thread block writes
    # (its put), a local copy and the put into gpu 0: writes, which the relaxed wait does order
    write = _relaxed(plan, tmp_path, 1, 0)
    assert cli.main(["check", str(write)]) == 0
    assert "reduce, 2 ranks: verified" in capsys.readouterr().out
    # the corpus's DSL plans put their relaxed waits before puts (the handshake) and still verify
    for name in ("dsl_allreduce_4gpu.json", "dsl_alltoall_4gpu.json", "test_allreduce.json"):
        assert '"rlxwait"' in (CORPUS / name).read_text()
        assert name not in REAL_FINDINGS and name not in REFUSED
    # an acquiring wait on the channel ends the window: alltoall reads what the peers put after it
    tb0 = json.loads((CORPUS / "dsl_alltoall_4gpu.json").read_text())["gpus"][0]["threadblocks"][0]["ops"]
    names = [op["name"] for op in tb0]
    assert names.index("rlxwait") < names.index("wait") < names.index("copy")
    assert tb0[names.index("copy")]["src_buff"][0]["type"] == "s"  # the scratch the peers put into


def test_a_relaxed_wait_before_the_read_of_what_the_peers_put_is_refused(tmp_path, capsys):
    # alltoall with thread block 0's acquiring wait relaxed too: its copy reads the scratch a peer put into
    path = _relaxed(CORPUS / "dsl_alltoall_4gpu.json", tmp_path, 0, 0)
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "rank 0: copy: thread block 0 reads its own scratch[0:1]" in err and "Traceback" not in err, err


def test_an_acquiring_wait_on_another_channel_does_not_end_the_window(tmp_path, capsys):
    # alltoall's thread block 0 given a second channel (to gpu 1 again), its acquiring wait moved onto it: an
    # acquire synchronizes only with the release it reads, so the copy of what gpu 1 put is still refused
    plan = json.loads((CORPUS / "dsl_alltoall_4gpu.json").read_text())
    gpu = plan["gpus"][0]
    gpu["channels"][0]["connected_to"].append(1)
    tb = gpu["threadblocks"][0]
    tb["channels"][0]["channel_ids"].append(len(gpu["channels"][0]["connected_to"]) - 1)
    [wait] = [op for op in tb["ops"] if op["name"] == "wait"]
    wait["channel_ids"] = [1]
    path = tmp_path / "other_channel.json"
    path.write_text(json.dumps(plan, indent=2))
    copy_line = next(op.line for op in parse(str(path)).top["gpus"][0]["threadblocks"][0]["ops"]
                     if op["name"] == "copy")
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"other_channel.json:{copy_line}: rank 0: copy: thread block 0 reads its own scratch" in err, err
    assert "Traceback" not in err


def _ops(plan: dict, gpu: int, tb: int = 0) -> list[dict]:
    return plan["gpus"][gpu]["threadblocks"][tb]["ops"]


def _line_of(path: Path, gpu: int, index: int, tb: int = 0) -> int:
    """The line of op `index` (counting every op) of thread block `tb` of gpu `gpu` in the file at `path`."""
    return parse(str(path)).top["gpus"][gpu]["threadblocks"][tb]["ops"][index].line


def test_a_relaxed_signal_after_an_access_the_peer_then_conflicts_with_is_refused(tmp_path, capsys):
    # the seeded plan's gpu 1 copies input chunks 0-1 into scratch, then signals relaxed; gpu 0 waits for it and
    # reads that scratch (a read after a write, at the rres), then puts into gpu 1's input chunk 0
    plan = json.loads((CORPUS / "buggy" / "reduce_relaxed_signal_copy.json").read_text())
    assert [op["name"] for op in _ops(plan, 1)][:3] == ["copy", "nop", "rlxsignal"]
    # the copy moved to scratch chunks 2-3, which gpu 0 never reads: what is left is gpu 0's rres writing gpu 1's
    # input chunk 0 after the wait, which gpu 1's copy read before its relaxed signal (a write after a read)
    for ref in _ops(plan, 1)[0]["dst_buff"]:
        ref["index"] = 2
    path = tmp_path / "war.json"
    path.write_text(json.dumps(plan, indent=2))
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    sig, copy, wait, rres = _line_of(path, 1, 2), _line_of(path, 1, 0), _line_of(path, 0, 4), _line_of(path, 0, 6)
    assert f"war.json:{sig}: rank 1: rlxsignal: thread block 0 signals gpu 0 relaxed here" in err, err
    assert f"after reading its own buffer[0:2] (line {copy}); gpu 0 thread block 0 waits for this signal (line " \
        f"{wait}), and then writes gpu 1's buffer[0:1] (line {rres})" in err and "Traceback" not in err, err
    # the same relaxed signal followed by a release signal that gpu 0 waits for before its rres: verified (the
    # release orders the copy; gpu 0's last wait counts one more signal)
    plan = json.loads((CORPUS / "buggy" / "reduce_relaxed_signal_copy.json").read_text())
    signal = {"name": "signal", "channel_ids": [0], "channel_type": "memory"}
    _ops(plan, 1).insert(3, signal)
    wait_op = {"name": "wait", "channel_ids": [0], "channel_type": "memory"}
    _ops(plan, 0).insert(5, wait_op)
    path = tmp_path / "released.json"
    path.write_text(json.dumps(plan, indent=2))
    assert cli.main(["check", str(path)]) == 0
    assert "reduce, 2 ranks: verified" in capsys.readouterr().out


def test_the_dsl_start_up_handshake_with_relaxed_signals_still_verifies(tmp_path, capsys):
    # the DSL's handshake: every thread block signals relaxed first, before any access, then waits relaxed;
    # nothing comes before the relaxed signal for it to leave unordered
    for name in ("dsl_allreduce_4gpu.json", "dsl_alltoall_4gpu.json", "test_allreduce.json"):
        plan = json.loads((CORPUS / name).read_text())
        firsts = {next(op["name"] for op in tb["ops"] if op["name"] != "nop")
                  for g in plan["gpus"] for tb in g["threadblocks"]}
        assert firsts == {"rlxsignal"}, name
        assert cli.main(["check", str(CORPUS / name)]) == 0, capsys.readouterr().err
        assert ": verified" in capsys.readouterr().out
    # executor_reduce with a relaxed signal and a wait put first on both gpus: the peer then copies, reduces and
    # puts (into the signaller's memory too) after waiting for it, but nothing came before the relaxed signal
    plan = json.loads((CORPUS / "executor_reduce.json").read_text())
    for g in (0, 1):
        _ops(plan, g)[0:0] = [{"name": "rlxsignal", "channel_ids": [0], "channel_type": "memory"},
                              {"name": "wait", "channel_ids": [0], "channel_type": "memory"}, {"name": "nop"}]
    path = tmp_path / "handshake.json"
    path.write_text(json.dumps(plan, indent=2))
    assert cli.main(["check", str(path)]) == 0, capsys.readouterr().err
    assert "reduce, 2 ranks: verified" in capsys.readouterr().out


def test_ops_become_their_semantics_at_their_line():
    sched = ImportedPlan(str(CORPUS / "executor_reduce.json")).trace(2)
    tb = sched.programs[0].threads[0]
    kinds = [op.kind for op in tb.ops]
    # copy; signal = fence + increment of the peer's word; wait for the first signal; rres = get, reduce, put
    assert kinds[:6] == ["copy", "fence", "signal_op", "wait_until", "get", "reduce"]
    assert tb.ops[2].pe == 1 and tb.ops[2].signal.signal == MEM_SEM and tb.ops[2].sig_op == "add"
    assert tb.ops[3].value == 1 and tb.ops[3].cmp == "ge"
    assert kinds[-3:] == ["fence", "signal_op", "wait_until"] and tb.ops[-1].value == 2  # the second wait
    text = (CORPUS / "executor_reduce.json").read_text().splitlines()
    assert '"name": "copy"' in text[tb.ops[0].loc.line]  # the line of the op's brace; its name follows
    # packets: a put_signal per element that sets its flag, and the reader waits for every flag
    pk = ImportedPlan(str(CORPUS / "executor_transfer_pack.json")).trace(2)
    put = pk.programs[0].threads[0].ops[0]
    assert put.kind == "put_signal" and put.pe == 1 and put.signal.signal == PKT_FLAG and put.value == 1
    upkt = pk.programs[0].threads[1].ops
    assert [op.kind for op in upkt] == ["wait_until_all", "copy"]


def test_the_cli_checks_plans_and_imports_them(tmp_path, capsys):
    path = str(CORPUS / "executor_transfer_pack.json")
    assert cli.main(["check", path]) == 0
    assert "transfer_pack, 2 ranks: verified" in capsys.readouterr().out
    out = tmp_path / "x.json"
    assert cli.main(["import", path, "-o", str(out)]) == 0
    assert "2 ranks, 5 thread blocks, from an MSCCL++ execution plan" in capsys.readouterr().err
    sched = json.loads(out.read_text())
    assert sched["world"] == 2 and all(t["kind"] == "block" for p in sched["programs"] for t in p["threads"])
    assert cli.main(["check", str(out)]) == 0
    assert "transfer_pack, 2 ranks: verified" in capsys.readouterr().out
    assert cli.main(["show", path]) == 0
    assert "block tb0 (executor_transfer_pack.json:" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("mpiexec") is None, reason="needs mpiexec")
def test_a_plan_runs_on_mpi_cpu(capsys):
    assert cli.main(["run", str(CORPUS / "executor_reduce.json"), "--np", "2"]) == 0
    assert "results match" in capsys.readouterr().out


PLAN_HEAD = '{\n  "name": "p",\n  "collective": "allreduce",\n  "protocol": "Simple",\n  "inplace": true,\n'


def _gpu(ops: str, channels: str = "[]") -> str:
    return ('    {"id": %d, "input_chunks": 1, "output_chunks": 1, "scratch_chunks": 1,\n'
            f'     "channels": {channels}, "remote_buffers": [],\n'
            '     "threadblocks": [{"id": 0, "channels": [], "ops": [\n' + ops + '\n     ]}]}')


@pytest.mark.parametrize("text, line, fragment", [
    (PLAN_HEAD + '  "gpus": [\n', 7, "malformed JSON: Expecting value"),
    (PLAN_HEAD + '  "gpus": [\n' + _gpu('       {"name": "zz"}') % 0 + "\n  ]\n}\n", 10,
     'unknown op type "zz"'),
    (PLAN_HEAD + '  "gpus": [\n' + _gpu('       {"name": "nop"}', '[{"channel_type": "tunnel", "connected_to": [1]}]')
     % 0 + "\n  ]\n}\n", 8, 'unknown channel type "tunnel"'),
    (PLAN_HEAD + '  "gpus": [\n' + _gpu('       {"name": "signal", "channel_ids": [3], "channel_type": "memory"}') % 0
     + "\n  ]\n}\n", 10, "memory channel 3, but the thread block has 0 memory channel(s)"),
])
def test_bad_plans_are_exit_2_at_their_line_without_a_traceback(tmp_path, capsys, text, line, fragment):
    path = tmp_path / "bad.json"
    path.write_text(text)
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"bad.json:{line}:" in err and fragment in err and "Traceback" not in err, err


def test_a_flush_the_checker_cannot_say_exactly_is_refused(tmp_path, capsys):
    # a thread block that drives two port channels: a flush completes one channel's puts, the checker's
    # quiet all of the block's, so the importer refuses rather than approximate
    ports = '[{"channel_type": "port", "connected_to": [1, 1]}]'
    flush = '       {"name": "flush", "channel_ids": [0, 1], "channel_type": "port"}'
    gpus = [(_gpu(flush, ports) % 0).replace('"channels": [], "ops"',
                                             '"channels": [{"channel_type": "port", "channel_ids": [0, 1]}], "ops"'),
            _gpu('       {"name": "nop"}', ports.replace("[1, 1]", "[0, 0]")) % 1]
    path = tmp_path / "flush.json"
    path.write_text(PLAN_HEAD + '  "gpus": [\n' + ",\n".join(gpus) + "\n  ]\n}\n")
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "flush.json:10: rank 0: flush: the thread block drives port channels [0, 1]" in err, err
    assert "Traceback" not in err


def test_an_imported_plan_keeps_its_world():
    with pytest.raises(ScheduleError, match="written for 2 GPUs, not 4"):
        ImportedPlan(str(CORPUS / "executor_reduce.json")).trace(4)


def _seeded_packet_plan() -> dict:
    return json.loads((CORPUS / "buggy" / "transfer_pack_get_after_packet.json").read_text())


def test_without_the_packet_check_the_seeded_packet_plan_would_verify(monkeypatch):
    # the hole the check closes: the checker orders the get after gpu 0's copy through the packet's flag
    path = CORPUS / "buggy" / "transfer_pack_get_after_packet.json"
    with pytest.raises(ScheduleError) as refused:
        load_file(str(path))[0].trace(2)
    assert refused.value.line == _bug_line(path)
    from clockworks_dist.importers import mscclpp
    monkeypatch.setattr(mscclpp._Builder, "check_packets", lambda self: None)
    result = check(load_file(str(path))[0].trace(2), timeout=120)
    assert result.complete and result.verdict == "verified" and not result.kinds()


def test_a_release_signal_or_a_barrier_between_the_accesses_makes_a_packet_plan_verify(tmp_path, capsys):
    # the fix the refusal names: gpu 0 signals after its copy, gpu 1 waits before its get
    plan = _seeded_packet_plan()
    _ops(plan, 0)[1:1] = [{"name": "nop"}, {"name": "signal", "channel_ids": [0], "channel_type": "memory"}]
    _ops(plan, 1, 2)[2:2] = [{"name": "wait", "channel_ids": [0], "channel_type": "memory"}, {"name": "nop"}]
    path = tmp_path / "signalled.json"
    path.write_text(json.dumps(plan, indent=2))
    assert cli.main(["check", str(path)]) == 0, capsys.readouterr().err
    assert "transfer_pack, 2 ranks: verified" in capsys.readouterr().out
    # the wait placed after the get orders nothing: refused, at the ppkt, naming the copy and the get
    plan = _seeded_packet_plan()
    _ops(plan, 0)[1:1] = [{"name": "nop"}, {"name": "signal", "channel_ids": [0], "channel_type": "memory"}]
    _ops(plan, 1, 2).append({"name": "wait", "channel_ids": [0], "channel_type": "memory"})
    path = tmp_path / "late_wait.json"
    path.write_text(json.dumps(plan, indent=2))
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    ppkt, copy, get = _line_of(path, 0, 3), _line_of(path, 0, 0), _line_of(path, 1, 2, tb=2)
    assert f"late_wait.json:{ppkt}: rank 0: ppkt: thread block 0 writes packets here" in err, err
    assert f"(line {copy})" in err and f"(line {get})" in err and "Traceback" not in err
    # on one gpu, a barrier: gpu 1's thread block 0 copies into its scratch chunk 2, then writes packets to its
    # own scratch chunk 1 (cpkt); thread block 1 reads those packets (rppkt) and then copies scratch chunk 2
    plan = json.loads((CORPUS / "executor_transfer_pack.json").read_text())
    copy_in = {"name": "copy", "src_buff": [{"type": "o", "index": 1, "size": 1}],
               "dst_buff": [{"type": "s", "index": 2, "size": 1}]}
    copy_out = {"name": "copy", "src_buff": [{"type": "s", "index": 2, "size": 1}],
                "dst_buff": [{"type": "s", "index": 3, "size": 1}]}
    plan["gpus"][1]["scratch_chunks"] = 4
    _ops(plan, 1, 0).insert(0, copy_in)
    _ops(plan, 1, 1).append(copy_out)
    path = tmp_path / "local.json"
    path.write_text(json.dumps(plan, indent=2))
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"local.json:{_line_of(path, 1, 1, tb=0)}: rank 1: cpkt: thread block 0 writes packets here" in err, err
    assert f"then reads its own scratch[2:3] (line {_line_of(path, 1, 1, tb=1)})" in err, err
    barrier = {"name": "barrier", "barrier_id": 0, "num_threadblocks": 2}
    _ops(plan, 1, 0).insert(1, dict(barrier))
    _ops(plan, 1, 1).insert(0, dict(barrier))  # before its rppkt: the copy is ordered before it either way
    path.write_text(json.dumps(plan, indent=2))
    assert cli.main(["check", str(path)]) == 0, capsys.readouterr().err
    assert "transfer_pack, 2 ranks: verified" in capsys.readouterr().out


def test_a_write_after_reading_packets_of_what_the_sender_wrote_before_them_is_refused(tmp_path, capsys):
    # the seeded plan with the get turned into a put back into gpu 0's scratch chunk 0, which gpu 0's copy wrote
    # before its packets: a write after a write that only the packet orders
    plan = _seeded_packet_plan()
    get = _ops(plan, 1, 2)[2]
    get.update(name="put", src_buff=[{"type": "o", "index": 0, "size": 1}],
               dst_buff=[{"buffer_id": 0, "index": 0, "size": 1}])
    path = tmp_path / "waw.json"
    path.write_text(json.dumps(plan, indent=2))
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "waw.json:34: rank 0: ppkt: " in err and "then writes gpu 0's scratch[0:1] (line 207)" in err, err


def test_packet_plans_whose_writes_are_computed_from_what_the_sender_read_still_verify():
    # test_allreduce_packet's gpu 0 thread block 0 puts its input chunks 2-3 as packets; gpu 1 sums them and
    # sends the sums back as packets, which gpu 0's thread block 1 unpacks into those input chunks (in place).
    # Only the packets order that write after the read, and it is sound: the value written is computed from the
    # value read, so the read cannot see it (the GPU's memory model has no values out of thin air)
    plan = json.loads((CORPUS / "test_allreduce_packet.json").read_text())
    assert plan["inplace"]
    ppkt, upkt = _ops(plan, 0, 0)[0], _ops(plan, 0, 1)[1]
    assert (ppkt["name"], ppkt["src_buff"][0]) == ("ppkt", {"type": "i", "index": 2, "size": 2})
    assert (upkt["name"], upkt["dst_buff"][0]) == ("upkt", {"type": "i", "index": 2, "size": 2})
    for name in ("test_allreduce_packet.json", "dsl_allreduce_pkt_4gpu.json", "executor_reduce_pack.json"):
        sched = load_file(str(CORPUS / name))[0].trace(len(json.loads((CORPUS / name).read_text())["gpus"]))
        assert check(sched, timeout=120).verdict == "verified", name


# --- one thread block is many threads: the ops the executor does not synchronize -----------------------------------


def test_without_the_block_check_the_seeded_missing_nop_plan_would_verify(monkeypatch):
    # the hole the check closes: the checker runs a thread block's ops one after the other, so the copy reads the
    # sums, while on the GPU nothing orders one thread's part of the rre before another's part of the copy
    path = CORPUS / "buggy" / "reduce_missing_nop.json"
    with pytest.raises(ScheduleError) as refused:
        load_file(str(path))[0].trace(2)
    assert refused.value.line == _bug_line(path)
    from clockworks_dist.importers import mscclpp
    monkeypatch.setattr(mscclpp._Builder, "check_block_sync", lambda self: None)
    result = check(load_file(str(path))[0].trace(2), timeout=120)
    assert result.complete and result.verdict == "verified" and not result.kinds()


def _missing_nop_plan() -> dict:
    return json.loads((CORPUS / "buggy" / "reduce_missing_nop.json").read_text())


def test_a_nop_or_a_barrier_between_dependent_ops_is_the_synchronization_the_check_accepts(tmp_path, capsys):
    # handleNop is __syncthreads, and DeviceSyncer::sync (handleBarrier) begins with one, even for one block
    for sync in ({"name": "nop"}, {"name": "barrier", "barrier_id": 0, "num_threadblocks": 1}):
        plan = _missing_nop_plan()
        ops = _ops(plan, 1)
        at = [o["name"] for o in ops].index("rre") + 1
        ops.insert(at, sync)
        path = tmp_path / "synced.json"
        path.write_text(json.dumps(plan, indent=2))
        assert cli.main(["check", str(path)]) == 0, capsys.readouterr().err
        assert "reduce, 2 ranks: verified" in capsys.readouterr().out
    # another op between them synchronizes nothing: a signal (thread 0 alone) is refused for the rre before it
    plan = _missing_nop_plan()
    ops = _ops(plan, 1)
    ops.insert([o["name"] for o in ops].index("rre") + 1, {"name": "signal", "channel_ids": [0],
                                                           "channel_type": "memory"})
    path = tmp_path / "signal_between.json"
    path.write_text(json.dumps(plan, indent=2))
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    line = _line_of(path, 1, 7)
    assert f"signal_between.json:{line}: rank 1: signal: thread block 0: this op follows the rre " in err
    assert "performed by thread 0 alone" in err and "Traceback" not in err, err


def test_an_op_right_after_a_wait_or_right_before_a_signal_is_refused(tmp_path, capsys):
    # handleWait and handleSignal run on the threads below the op's channel count only: without the nop after a
    # wait the other threads read the peer's scratch without having waited; without the nop before a signal the
    # other threads' copy is not ordered before it
    for name, drop, at, words in (("wait", 5, 5, "this op follows the wait at line"),
                                  ("signal", 1, 1, "this op follows the copy at line")):
        plan = json.loads((CORPUS / "executor_reduce.json").read_text())
        ops = _ops(plan, 0)
        assert ops[drop]["name"] == "nop"
        del ops[drop]
        path = tmp_path / f"no_nop_{name}.json"
        path.write_text(json.dumps(plan, indent=2))
        assert cli.main(["check", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"no_nop_{name}.json:{_line_of(path, 0, at)}: rank 0: " in err and words in err, err
        assert "put {\"name\": \"nop\"} between" in err and "Traceback" not in err


def test_ops_of_thread_0_alone_and_packet_ops_on_the_same_operand_need_no_nop(tmp_path, capsys):
    # a pwsf and a wait on one channel each are both thread 0's (tid < 1): program order, as the checker has it
    plan = json.loads((CORPUS / "dsl_put_with_signal_and_flush_2gpu.json").read_text())
    names = [o["name"] for o in _ops(plan, 0)]
    assert names[5:7] == ["pwsf", "wait"] and [len(o["channel_ids"]) for o in _ops(plan, 0)[5:7]] == [1, 1]
    assert cli.main(["check", str(CORPUS / "dsl_put_with_signal_and_flush_2gpu.json")]) == 0
    capsys.readouterr()
    # test_allreduce_packet's gpu 1 thread block 0 reads its input chunks 0-1 as it writes them as packets (ppkt)
    # and unpacks the sums into them (upkt) with no nop: both ops give packet k of the operand to thread
    # k % blockDim.x, so each element is read and then written by one thread
    plan = json.loads((CORPUS / "test_allreduce_packet.json").read_text())
    ppkt, _respkt, upkt = _ops(plan, 1)
    assert (ppkt["name"], ppkt["src_buff"][0]) == ("ppkt", {"type": "i", "index": 0, "size": 2})
    assert (upkt["name"], upkt["dst_buff"][0]) == ("upkt", {"type": "i", "index": 0, "size": 2})
    assert cli.main(["check", str(CORPUS / "test_allreduce_packet.json")]) == 0
    capsys.readouterr()
    # a plain copy into those chunks instead (another mapping of elements to threads) is refused
    upkt.update(name="copy", src_buff=[{"type": "s", "index": 2, "size": 2}])
    path = tmp_path / "copy_back.json"
    path.write_text(json.dumps(plan, indent=2))
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"copy_back.json:{_line_of(path, 1, 2)}: rank 1: copy: thread block 0: this op writing its own " in err, err
    assert "overlaps the ppkt at line" in err
