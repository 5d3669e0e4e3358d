"""`clockworks tune --emit`: the winners of a tune as a library with a size dispatcher
(`codegen.library`): which kernel each size runs, the sizes it refuses, when it resets, what the
checker verifies for it (every prefix of K calls with the caller's accesses, `lowering.repeat.with_caller`),
the names that reach C++, the emitted header and source compiled and linked with the NVSHMEM wheel
(skipped, with the reason, where nvcc or the wheel is missing), and the CLI end to end in dry mode.
Running the library needs 2 GPUs: scripts/gpu/dispatch_h200x2.sh."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from clockworks_dist import cli
from clockworks_dist.check import check
from clockworks_dist.codegen import build, library
from clockworks_dist.lowering import packets
from clockworks_dist.dsl import load_file
from clockworks_dist.lowering.repeat import call_starts, library_schedules, prefix, repeat, with_caller

from test_packets import FAMILY, family

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "results" / "h200x2" / "tune_all" / "allreduce_family"
W = library.Winner


def _defn():
    return load_file(str(FAMILY))[0]


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = cli.main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ------------------------------------------------------------------------------ what is verified
def test_the_caller_model_writes_inputs_between_calls_and_reads_outputs_after_each():
    one = family("oneshot", 2)
    rep = repeat(one, 3, "alternate")
    starts = call_starts(one, 3, "alternate")
    modelled = with_caller(rep, starts, 3)
    for p_rep, p_mod in zip(rep.programs, modelled.programs):
        ops = p_mod.ops
        # saved first, then call 0, a read of out, new inputs (a fill), call 1, a read, the restore, call 2, a read
        assert ops[0].kind == "copy" and ops[0].dst.buffer == "x_saved" and ops[0].src.buffer == "x"
        reads = [m for m, op in enumerate(ops) if op.kind == "compute"]
        assert len(reads) == 3 and all(ops[m].reads[0].buffer == "out" and not ops[m].writes for m in reads)
        fills = [op for op in ops if op.kind == "fill"]
        assert [(op.dst.buffer, op.value) for op in fills] == [("x", 1001.0)]
        restore = [op for op in ops if op.kind == "copy" and op.src.buffer == "x_saved"]
        assert len(restore) == 1 and ops.index(restore[0]) > ops.index(fills[0])
        assert len(ops) == len(p_rep.ops) + 1 + 3 + 1 + 1  # save, 3 reads, 1 fill, 1 restore
        assert any(d.name == "x_saved" and d.role == "scratch" for d in p_mod.buffers)


def test_the_callers_regions_of_part_of_a_buffer_keep_the_ops_symbolic_bounds():
    # A reduce-scatter's postcondition names half of its input, x[0:CHUNK], in traced numbers. The
    # caller's copies of that half must carry CHUNK as the ops do, or the symbolic size check reads
    # x[0:131072] as out of bounds for every CHUNK below 65536 and no library of the family can be made.
    path = ROOT / "protocols" / "nvshmem_reduce_scatter_family.py"
    defn = load_file(str(path))[0]
    sched = defn.trace(2, defn.ranks_per_node, sizes={"CHUNK": 8})
    starts = call_starts(sched, 2, "alternate")
    for modelled in library_schedules(repeat(sched, 2, "alternate"), starts, 2):
        result = check(modelled)
        assert result.verdict == "verified", [e.message for e in result.errors]
    copies = [op for op in with_caller(repeat(sched, 2, "alternate"), starts, 2).programs[0].ops
              if op.kind == "copy" and op.src.buffer == "x"]
    assert copies and all(op.src.stop_sym is not None for op in copies)


def test_a_prefix_ends_before_the_next_calls_first_op_and_its_separator():
    one = family("twoshot", 2)
    rep = repeat(one, 3, "barrier")
    starts = call_starts(one, 3, "barrier")
    two = prefix(rep, starts, 2)
    for p_one, p_two in zip(one.programs, two.programs):
        assert len(p_two.ops) == 2 * len(p_one.ops) + 1  # two calls and the barrier between them
        assert p_two.ops[-1].loc == p_one.ops[-1].loc  # the second call's last op; the next barrier is gone
    assert prefix(rep, starts, 3) == rep


@pytest.mark.parametrize("algo,between,lowered,verdicts", [
    ("oneshot", "alternate", True, ["verified"] * 4),
    ("oneshot", "sync", False, ["verified"] * 4),
    ("twoshot", "none", False, ["verified"] * 4),
    ("twoshot", "none", True, ["verified"] * 4),
    # a fast rank's next call overwrites a word its peer still waits on with eq (README): from 2 calls on
    ("oneshot", "none", False, ["verified"] + ["violated"] * 3),
])
def test_every_prefix_is_checked_with_the_callers_accesses(algo, between, lowered, verdicts):
    one = family(algo, 2)
    rep, starts = repeat(one, 4, between), call_starts(one, 4, between)
    if lowered:
        low = packets.lower(rep, 32768)
        rep, starts = low.sched, low.remap(starts)
    found = [check(s, timeout=60).verdict for s in library_schedules(rep, starts, 4)]
    assert found == verdicts


PULL = """
import clockworks_dist as cw

CHUNK = cw.size("CHUNK", 4)


@cw.schedule(expect=cw.broadcast("x", root=0, dst="out"))
def pull(r):
    x = r.symmetric("x", count=CHUNK, role="input")
    out = r.symmetric("out", count=CHUNK, role="output")
    ready = r.signal("ready", count=1)
    if r.rank == 0:
        r.copy(out, x)
        r.signal_op(1, ready[0], 1, "add")
    else:
        r.wait_until(ready[0], "ge", 1)
        r.get(0, out, x)
"""


def test_the_caller_model_finds_a_race_that_back_to_back_calls_alone_do_not(tmp_path):
    """Rank 1 reads rank 0's x by a get after rank 0's signal, and rank 0's call does not wait for it:
    K calls back to back are fine (nothing writes x), but a caller that writes new inputs into x before
    the next call races with the get of the call before."""
    path = tmp_path / "pull.py"
    path.write_text(PULL)
    one = load_file(str(path))[0].trace(2)
    rep, starts = repeat(one, 2, "none"), call_starts(one, 2, "none")
    assert check(rep, timeout=60).verdict == "verified"
    first, second = library_schedules(rep, starts, 2)
    assert check(first, timeout=60).verdict == "verified"
    result = check(second, timeout=60)
    assert result.verdict == "violated" and result.errors[0].kind == "data_race"
    assert "x" in result.errors[0].message
    # The library refuses it with every separator: the caller's write comes before the next call's
    # separator (a barrier at the start of the next call's kernel), so nothing orders it after the get.
    defn = load_file(str(path))[0]
    with pytest.raises(library.LibraryError, match="16 B: pull: no separator makes 2 calls") as caught:
        library.plan_entries(defn, 2, [W(16, {}, 0, "none", label="pull")], calls=2)
    assert all(f"{b}: 2 call(s) with the caller's accesses between them: violated: data_race" in str(caught.value)
               for b in ("none", "alternate", "sync", "barrier"))


# ------------------------------------------------------------------------- sizes and separators
def test_winners_become_sizes_sorted_with_the_separator_the_checker_verifies():
    winners = [W(16 << 20, {"ALGO": "twoshot"}, 0, None, 72.9, label="ALGO=twoshot"),
               W(1024, {"ALGO": "oneshot"}, 32768, "alternate", 2.89, label="ALGO=oneshot, packets <= 32 KiB"),
               # measured with nothing between the calls, which the library model does not verify
               W(8192, {"ALGO": "oneshot"}, 0, "none", 5.0, label="ALGO=oneshot")]
    entries = library.plan_entries(_defn(), 2, winners, calls=3, endless=False)
    assert [e.winner.nbytes for e in entries] == [1024, 8192, 16 << 20]
    assert [e.between for e in entries] == ["alternate", "alternate", "none"]
    assert entries[1].said["none"].startswith("2 call(s)") and "deadlock" in entries[1].said["none"]
    assert entries[0].program.packets is not None and entries[0].program.packets.channels  # the packets rewrite runs
    for e in entries:
        assert all(len(ms) == 2 for ms in e.starts.values())


def test_a_winner_proven_for_any_number_of_calls_runs_one_kernel_for_every_call(tmp_path):
    entries, out = _emit(tmp_path, calls=3, endless=True)
    assert [(e.between, e.endless) for e in entries] == [("alternate", 2), ("none", 1)]
    assert all(e.proof.verified and e.said[f"{e.between}, calls without end"].startswith("verified") for e in entries)
    text = (out / "cw_nvshmem_allreduce_family.cu").read_text()
    for k in range(2):
        body = text[text.index(f"namespace cw_size{k} {{"):text.index(f"}}  // namespace cw_size{k}")]
        for rank in range(2):
            assert f"cw_nv_rank{rank}_every_call(" in body and f"cw_nv_rank{rank}_call0(" not in body
        assert body.count("cw_nv_call_number(a.calls, a.calls_arrive)") == 2
    # 1 KiB: two copies by call parity, the packet flags moved on by the call's epoch (M = 2 a copy):
    # the kernel is call 2's (flag 3), so call 0 (epoch -1) sends flag 1, call 2 flag 3, call 4 flag 5
    assert "cw_call % 2 == 1" in text and "(uint32_t)(3ULL + cw_epoch * 2ULL)" in text
    assert text.count(", nullptr, 0},") == 2  # no size resets after a number of calls
    described = json.loads((out / "cw_nvshmem_allreduce_family.json").read_text())
    assert [s["calls_without_end"] for s in described["sizes"]] == [True, True]


def test_two_winners_for_one_size_and_no_winner_are_errors():
    with pytest.raises(library.LibraryError, match="two winners for one size"):
        library.plan_entries(_defn(), 2, [W(1024, {"ALGO": "oneshot"}), W(1024, {"ALGO": "twoshot"})], calls=2)
    with pytest.raises(library.LibraryError, match="no winner"):
        library.plan_entries(_defn(), 2, [], calls=2)
    with pytest.raises(library.LibraryError, match="at least one call"):
        library.plan_entries(_defn(), 2, [W(1024, {"ALGO": "oneshot"})], calls=0)


def _emit(tmp_path, calls=2, winners=None, endless=False):
    winners = winners or [W(1024, {"ALGO": "oneshot"}, 32768, "alternate", 2.89, 5.84, True,
                            "ALGO=oneshot, packets <= 32 KiB"),
                          W(16 << 20, {"ALGO": "twoshot"}, 0, None, 72.9, 75.6, True, "ALGO=twoshot")]
    entries = library.plan_entries(_defn(), 2, winners, calls=calls, endless=endless)
    out = tmp_path / "lib"
    library.emit(entries, {"source": "test", "topology": "h200x2-nv18", "file": "f.py", "hash": "0" * 64}, out)
    return entries, out


def test_the_source_has_a_namespace_and_a_kernel_per_call_for_each_size(tmp_path):
    entries, out = _emit(tmp_path, calls=3)
    text = (out / "cw_nvshmem_allreduce_family.cu").read_text()
    for k, entry in enumerate(entries):
        body = text[text.index(f"namespace cw_size{k} {{"):text.index(f"}}  // namespace cw_size{k}")]
        for rank in range(2):
            assert [f"cw_nv_rank{rank}_call{c}(" in body for c in range(3)] == [True] * 3
            assert f"cw_nv_rank{rank}_call3(" not in body
            assert f"static void rank{rank}(" not in body  # the program's host launcher is not emitted
    # the dispatcher's table: the sizes in order, and a call of size k launches size k's kernels
    assert "const size_t CWL_SIZE_BYTES[] = {1024ULL, 16777216ULL};" in text
    assert "const CwlFn cwl_calls_of[] = {cwl_call_0, cwl_call_1};" in text
    assert text.count(", nullptr, 3},") == 2  # each size's row: a reset every 3 calls
    # the caller's buffers and how many elements each size uses on each PE
    header = (out / "cw_nvshmem_allreduce_family.h").read_text()
    assert "CW_NVSHMEM_ALLREDUCE_FAMILY_BUF_OUT = 0,  /* output, float32 */" in header
    assert "CW_NVSHMEM_ALLREDUCE_FAMILY_BUF_X = 1,  /* input, float32 */" in header
    assert "#define CW_NVSHMEM_ALLREDUCE_FAMILY_SIZES {1024ULL, 16777216ULL}" in header
    assert "{{{256, 256}, {256, 256}}, {{4194304, 4194304}, {4194304, 4194304}}}" in text
    described = json.loads((out / "cw_nvshmem_allreduce_family.json").read_text())
    assert [(s["bytes"], s["between"], s["packets"]) for s in described["sizes"]] == [
        (1024, "alternate", 32768), (16 << 20, "none", 0)]


def test_the_kernels_are_the_ones_validate_runs_for_that_many_calls(tmp_path):
    """A size's kernels in the library are, text for text, those of `validate --calls K` (a kernel per
    call) on the same winner: the program the tune measured and the checker's values were compared with."""
    from clockworks_dist.codegen import program

    from test_call_kernels import _kernels

    entries, out = _emit(tmp_path, calls=3)
    text = (out / "cw_nvshmem_allreduce_family.cu").read_text()
    for k, entry in enumerate(entries):
        body = text[text.index(f"namespace cw_size{k} {{"):text.index(f"}}  // namespace cw_size{k}")]
        alone = program.generate(entry.program)
        # less the validation run's copy of the outputs at the rank's end, which a library never takes
        alone = re.sub(r"  // the caller reads this rank's outputs now.*?\n  }\n\n", "", alone, flags=re.S)
        for rank in range(2):
            assert _kernels(body, rank) == _kernels(alone, rank) and len(_kernels(body, rank)) == 3
            # the K-th call's kernel ends with every block's quiet and every PE meeting, which a reset
            # right after it does not repeat (cwl_step's CWL_RESET_AFTER_BLOCK); the others do not
            ends = ["// the end of a run" in k_ and "nvshmem_barrier_all();" in k_.split("// the end of a run")[-1]
                    for k_ in _kernels(body, rank)]
            assert ends == [False, False, True]


def test_every_added_sync_says_why(tmp_path):
    _entries, out = _emit(tmp_path)
    text = (out / "cw_nvshmem_allreduce_family.cu").read_text()
    reset = text[text.index("__global__ void __launch_bounds__(CW_NV_THREADS) cwl_reset_kernel"):]
    reset = reset[:reset.index("\n}\n")]
    lines = reset.split("\n")
    for i, line in enumerate(lines):
        if "nvshmem_barrier_all()" in line or "__threadfence_system()" in line or "__syncthreads()" in line:
            said = "\n".join(lines[max(0, i - 6):i + 1])  # a comment on the line, or just above it
            assert "//" in said, line


# ------------------------------------------------------------------ the dispatcher's decisions, run
DECIDE_MAIN = r"""
#include <cstdio>
#include <cstddef>
%s
int main() {
  const size_t sizes[] = {1024, 8192, 16777216};
  char msg[512];
  printf("find %%d %%d %%d %%d\n", cwl_find_in(sizes, 3, 1024), cwl_find_in(sizes, 3, 16777216),
         cwl_find_in(sizes, 3, 4096), cwl_find_in(sizes, 3, 0));
  cwl_size_message(msg, sizeof msg, sizes, 3, 4096);
  printf("message %%s\n", msg);
  CwlState st;
  int call = 0;
  // 10 eager calls of size 0 with K = 4, then 1 of size 1, then 2 of size 0
  for (int i = 0; i < 13; ++i) {
    int k = i < 10 ? 0 : (i == 10 ? 1 : 0);
    int reset = cwl_step(st, k, false, 0, 4, &call);
    printf("eager %%d %%d %%d\n", k, reset, call);
  }
  // a capture (id 7) of 5 calls, another capture (id 9) of 2, then eager calls
  for (int i = 0; i < 5; ++i) { int r = cwl_step(st, 0, true, 7, 4, &call); printf("graph7 %%d %%d\n", r, call); }
  for (int i = 0; i < 2; ++i) { int r = cwl_step(st, 0, true, 9, 4, &call); printf("graph9 %%d %%d\n", r, call); }
  for (int i = 0; i < 2; ++i) { int r = cwl_step(st, 0, false, 0, 4, &call); printf("after %%d %%d\n", r, call); }
  return 0;
}
"""


def test_the_dispatchers_decisions_run(tmp_path):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler (g++) to run the dispatcher's decisions")
    src = tmp_path / "decide.cpp"
    src.write_text(DECIDE_MAIN % library.DISPATCH_LOGIC)
    subprocess.run([cxx, "-std=c++17", "-Wall", "-Werror", "-o", str(tmp_path / "decide"), str(src)], check=True)
    lines = subprocess.run([str(tmp_path / "decide")], capture_output=True, text=True, check=True).stdout.splitlines()
    assert lines[0] == "find 0 2 -1 -1"  # exact sizes only: 4096 is between two tuned sizes, and refused
    assert lines[1] == ("message 4096 bytes per PE was not tuned (the kernels have their sizes compiled in); the 3 "
                        "tuned sizes: 1024, 8192, 16777216 (tune and emit this size)")
    eager = [tuple(int(v) for v in line.split()[1:]) for line in lines[2:15]]
    # a reset before the first call (1: the PEs meet first) and after every 4 calls (2: right after the
    # 4th call, whose kernel ended with every PE meeting); calls numbered 0..3 within each prefix
    assert [(r, c) for k, r, c in eager[:10]] == [(1, 0), (0, 1), (0, 2), (0, 3), (2, 0), (0, 1), (0, 2), (0, 3),
                                                 (2, 0), (0, 1)]
    assert eager[10] == (1, 1, 0)  # another size: a reset from a state not known, whatever the count
    assert eager[11] == (0, 1, 0) and eager[12] == (0, 0, 1)  # back to size 0: a reset again
    graph7 = [tuple(int(v) for v in line.split()[1:]) for line in lines[15:20]]
    assert graph7 == [(1, 0), (0, 1), (0, 2), (0, 3), (2, 0)]  # a capture begins with a reset
    graph9 = [tuple(int(v) for v in line.split()[1:]) for line in lines[20:22]]
    assert graph9 == [(1, 0), (0, 1)]  # another capture: its own reset
    after = [tuple(int(v) for v in line.split()[1:]) for line in lines[22:24]]
    assert after == [(1, 0), (1, 0)]  # after a capture, every eager call resets: a replay may have run


# --------------------------------------------------------------------------------- names
def test_names_reaching_cpp_are_validated(tmp_path):
    sched = family("oneshot", 2)
    bad = sched.model_copy(update={"name": "int"})  # a keyword: refused (the IR's validator is bypassed here)
    with pytest.raises(library.LibraryError, match="cannot name a library"):
        library.library_name(bad)
    assert library.library_name(sched) == "cw_nvshmem_allreduce_family"
    # a label or a file name of the user's reaches the text only inside comments and string literals
    hostile = 'x */ "); system("rm -rf /"); //\n#define'
    winners = [W(1024, {"ALGO": "oneshot"}, 0, "alternate", 1.0, label=hostile)]
    entries = library.plan_entries(_defn(), 2, winners, calls=2)
    out = tmp_path / "lib"
    library.emit(entries, {"source": hostile, "topology": "t", "file": hostile, "hash": "h"}, out)
    for path in [*out.glob("*.h"), *out.glob("*.cu")]:
        for line in path.read_text().splitlines():
            assert not line.startswith("#define'")
            if "rm -rf" in line:  # after a comment's start, or in a literal whose quotes are escaped
                assert "//" in line[:line.index("rm -rf")] or "\\042" in line, line


def test_caller_buffers_that_differ_only_in_case_are_refused():
    buffers = [library.text._Buffer("x", 4, "float32", "input"), library.text._Buffer("X", 4, "float32", "output")]
    with pytest.raises(library.LibraryError, match="differ only in case"):
        library.text._caller(buffers)
    scratch = library.text._Buffer("t", 4, "float32", "scratch")
    assert [b.name for b in library.text._caller(buffers[:1] + [scratch])] == ["x"]


# ------------------------------------------------------------------------------ the CLI
def test_emit_in_a_dry_run_labels_the_winners_predicted(tmp_path, capsys):
    out, lib = tmp_path / "tune", tmp_path / "lib"
    code, stdout, err = _cli(["tune", str(FAMILY), "-t", "h200x2-nv18", "--np", "2", "--sizes", "8KiB,16MiB", "--dry",
                              "--calls", "4", "--out", str(out), "--emit", str(lib), "--reset-every", "3"], capsys)
    assert code == 0, err
    header = (lib / "cw_nvshmem_allreduce_family.h").read_text()
    assert "PREDICTED winners, not measured (tune --dry)" in header
    assert "predicted, not measured" in header
    described = json.loads((lib / "cw_nvshmem_allreduce_family.json").read_text())
    assert described["measured"] is False and described["reset_every"] == 3
    # the winners are the tune's predicted ones (at 16 MiB the two are within about 1% of each other)
    report = json.loads((out / "tune.json").read_text())
    assert [(s["bytes"], s["label"]) for s in described["sizes"]] == [
        (row["bytes"], row["predicted_winner"]["label"].split(" (")[0]) for row in report["sizes"]]
    assert described["sizes"][0]["label"] == "ALGO=oneshot" and described["sizes"][0]["between"] == "alternate"
    assert {s["between"] for s in described["sizes"]} <= {"alternate", "none"}
    assert "PREDICTED, not measured" in stdout
    assert "| 8 KiB | ALGO=oneshot | alternate | a reset every 3 |" in stdout
    assert "every prefix of 3 calls verified" in err


def test_emit_from_the_committed_all_reduce_results(tmp_path, capsys):
    lib = tmp_path / "lib"
    code, stdout, err = _cli(["tune", str(FAMILY), "--emit", str(lib), "--from", str(COMMITTED / "small"),
                              "--from", str(COMMITTED / "large")], capsys)
    assert code == 0, err
    described = json.loads((lib / "cw_nvshmem_allreduce_family.json").read_text())
    assert described["measured"] is True and described["reset_every"] == library.DEFAULT_RESET_EVERY
    rows = [(s["bytes"], s["label"], s["between"], s["time_us"]) for s in described["sizes"]]
    assert rows == [(1024, "ALGO=oneshot, packets <= 32 KiB", "alternate", 2.89),
                    (8192, "ALGO=oneshot, packets <= 32 KiB", "alternate", 3.67),
                    (65536, "ALGO=oneshot", "alternate", 8.13), (262144, "ALGO=oneshot", "alternate", 7.895),
                    (1 << 20, "ALGO=oneshot", "alternate", 9.225), (16 << 20, "ALGO=twoshot", "none", 72.9),
                    (256 << 20, "ALGO=twoshot", "none", 936.8), (1 << 30, "ALGO=twoshot", "none", 3673.3)]
    # measured as 20 calls fused into one kernel (small), or one call per run (large): said per size
    assert described["sizes"][0]["timing"].startswith("20 calls per timed run, fused")
    assert described["sizes"][-1]["timing"] == "one call per timed run"
    assert "| 1 GiB | ALGO=twoshot | none | a reset every 32 | 3673.30 |" in stdout
    # with --calls-without-end, every size of the 2-rank family is proven for any number of calls
    code, stdout, err = _cli(["tune", str(FAMILY), "--emit", str(tmp_path / "endless"), "--calls-without-end",
                              "--from", str(COMMITTED / "small"), "--from", str(COMMITTED / "large")], capsys)
    assert code == 0, err
    assert stdout.count("any number (proven), no reset") == 8 and "any number of calls verified" in err


def test_emit_refuses_an_edited_schedule_file_and_bad_options(tmp_path, capsys):
    edited = tmp_path / "nvshmem_allreduce_family.py"
    edited.write_text(FAMILY.read_text() + "\n# edited\n")
    code, _out, err = _cli(["tune", str(edited), "--emit", str(tmp_path / "lib"), "--from", str(COMMITTED / "small")],
                           capsys)
    assert code == 2 and "is not the file" in err and "tune it again" in err
    code, _out, err = _cli(["tune", str(FAMILY), "--from", str(COMMITTED / "small")], capsys)
    assert code == 2 and "add --emit DIR" in err
    code, _out, err = _cli(["tune", str(FAMILY), "--emit", str(tmp_path / "lib"), "--from", str(tmp_path)], capsys)
    assert code == 2 and "cannot read" in err
    code, _out, err = _cli(["tune", str(FAMILY), "--dry"], capsys)
    assert code == 2 and "--topology T and --np N are required" in err
    code, _out, err = _cli(["tune", str(FAMILY), "-t", "h200x2-nv18", "--np", "2", "--dry", "--reset-every", "4"],
                           capsys)
    assert code == 2 and "add --emit DIR" in err
    # one size from two folders
    code, _out, err = _cli(["tune", str(FAMILY), "--emit", str(tmp_path / "lib"), "--from", str(COMMITTED / "small"),
                            "--from", str(COMMITTED / "small")], capsys)
    assert code == 2 and "was tuned in both" in err


def test_the_committed_dispatcher_is_what_emit_writes_now(tmp_path, capsys, monkeypatch):
    committed = ROOT / "results" / "h200x2" / "tune_all" / "dispatch"
    assert committed.is_dir(), "the committed dispatcher (results/h200x2/tune_all/dispatch) is missing"
    lib = tmp_path / "lib"
    monkeypatch.chdir(ROOT)  # the committed files name the results folders relative to the repository
    code, _out, err = _cli(["tune", "protocols/nvshmem_allreduce_family.py", "--emit", str(lib), "--from",
                            "results/h200x2/tune_all/allreduce_family/small", "--from",
                            "results/h200x2/tune_all/allreduce_family/large"], capsys)
    assert code == 0, err
    for path in lib.iterdir():
        assert (committed / path.name).read_text() == path.read_text(), path.name


# ---------------------------------------------------------------------------- compiling
def compile_library(out: Path, tc, name: str = "cw_nvshmem_allreduce_family") -> Path:
    """Build the emitted library in `out` with its test driver (nvcc, the NVSHMEM wheel): the binary, after
    asserting that it built without a warning."""
    binary = out / f"{name}_test"
    link_dir = build.link_dir_for(binary)
    build.prepare_link_dir("nvshmem", tc, link_dir)
    cmd = build.compile_command(out / f"{name}.cu", "nvshmem", tc, binary, link_dir)
    cmd.insert(cmd.index(str(out / f"{name}.cu")) + 1, str(out / f"{name}_test.cu"))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "warning" not in (done.stdout + done.stderr).lower()
    return binary


@pytest.mark.parametrize("endless", [False, True], ids=["reset every K", "calls without end"])
def test_the_library_and_its_driver_compile_and_link(tmp_path, nvshmem_toolchain, endless):
    tc = nvshmem_toolchain
    _entries, out = _emit(tmp_path, calls=2, endless=endless)
    name = "cw_nvshmem_allreduce_family"
    assert compile_library(out, tc, name).is_file()
    # the header stands alone in a caller's C or C++ translation unit
    for compiler, suffix in (("gcc", "c"), ("g++", "cpp")):
        if tc.cuda_include is None or shutil.which(compiler) is None:
            continue
        probe = tmp_path / f"probe.{suffix}"
        probe.write_text(f'#include "{name}.h"\nint main(void) {{ cudaStream_t s = 0; (void)s; '
                         f'return {name.upper()}_NSIZES == 2 && {name.upper()}_OK == 0 ? 0 : 1; }}\n')
        subprocess.run([compiler, "-Wall", "-Werror", f"-I{out}", f"-I{tc.cuda_include}", "-c", str(probe), "-o",
                        str(tmp_path / f"probe_{suffix}.o")], check=True)


def test_the_pieces_the_kernels_need_are_found():
    pieces = library.device_pieces()
    for name in ("enum CwReduce", "struct CwArith", "cw_nv_share", "cw_nv_mark", "cw_nv_grid_sync", "cw_nv_last",
                 "cw_nv_pk_send", "cw_nv_reduce", "cw_nv_opaque"):
        assert name in pieces, name
    for host in ("cw_abandon", "cw_nv_launch", "cw_nv_malloc", "cw_nv_refresh_marks", "#include <mpi.h>"):
        assert host not in pieces, host


def test_kinds_of_ops_the_library_cannot_run_are_named(tmp_path):
    ring = ROOT / "protocols" / "ring_allreduce.py"
    defn = load_file(str(ring))[0]
    entries = library.plan_entries(defn, 2, [W(4096, {}, 0, None, label="ring")], calls=1)
    with pytest.raises(library.LibraryError, match="nvshmem backend cannot generate it: .*ring_allreduce.py:"):
        library.emit(entries, {}, tmp_path)

