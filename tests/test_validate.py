"""`clockworks validate` without a GPU: the expectation files byte by byte, dumps compared again with
every execution of the checker, the table and the plot, the sbatch script and the folder it sums
up, and the launcher running a program that follows the contract of `codegen/__init__.py` (a small
Python stand-in for a generated program): match, mismatch after a dump, hang, crash, no process
left behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")

import clockworks_dist as cw  # noqa: E402
from clockworks_dist import codegen, ir  # noqa: E402
from clockworks_dist.lowering import Build, as_built, lower  # noqa: E402
from clockworks_dist.report import validate as report_validate  # noqa: E402
from clockworks_dist.runtime import nccl_bench, validate  # noqa: E402
from clockworks_dist.semantics import numeric  # noqa: E402
from clockworks_dist.runtime import expected, job as job_mod, launch, verdict  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOCOLS = os.path.join(os.path.dirname(HERE), "protocols")
needs_mpiexec = pytest.mark.skipif(shutil.which("mpiexec") is None, reason="no mpiexec on PATH (pip install mpich)")

# The expectation file as the contract in codegen/__init__.py states it, read field by field. The
# stand-in program below reads its file with this same text.
READER = '''
import struct


def read_expect(path):
    """Every field of an expectation file, in the order the contract lists them."""
    with open(path, "rb") as handle:
        data = handle.read()
    magic, version, rank, count, words = struct.unpack_from("<8sIIII", data, 0)
    at = 24
    buffers = []
    for _ in range(count):
        elements, itemsize, zero = struct.unpack_from("<QII", data, at)
        at += 16
        entry = {"count": elements, "itemsize": itemsize, "zero": zero}
        for key in ("checked", "post"):
            (n,) = struct.unpack_from("<Q", data, at)
            at += 8
            ranges = [struct.unpack_from("<QQ", data, at + 16 * i) for i in range(n)]
            at += 16 * n
            values = None
            if n:
                values = data[at:at + elements * itemsize]
                at += elements * itemsize
            entry[key] = ranges
            entry[key + "_values"] = values
        buffers.append(entry)
    (signal_words,) = struct.unpack_from("<Q", data, at)
    at += 8
    signals = list(struct.unpack_from(f"<{signal_words}Q", data, at))
    at += 8 * signal_words
    checked = list(data[at:at + signal_words])
    at += signal_words
    return {"magic": magic, "version": version, "rank": rank, "words": words, "buffers": buffers,
            "signal_words": signal_words, "signals": signals, "signals_checked": checked, "end": at,
            "size": len(data)}
'''
exec(READER)  # defines read_expect here too
read_expect = globals()["read_expect"]  # the name exec defined, spelled out for the linter


@cw.schedule(expect=cw.allreduce("x", "out"))
def bf16_oneshot(r):
    """One-shot all-reduce in bfloat16 over put_signal, and an int64 output: a postcondition,
    signal words, itemsizes 2 and 8."""
    n = r.world
    x = r.symmetric("x", count=4, dtype="bfloat16", role="input")
    slots = r.symmetric("slots", count=n * 4, dtype="bfloat16", role="scratch")
    out = r.buffer("out", count=4, dtype="bfloat16", role="output")
    flag = r.buffer("flag", count=3, dtype="int64", role="output")
    ready = r.signal("ready", count=n)
    peers = [(r.rank + k) % n for k in range(1, n)]
    for pe in peers:
        r.put_signal(pe, slots.chunk(r.rank, n), x, ready[r.rank], value=1, op="set")
    for pe in peers:
        r.wait_until(ready[pe], "ge", 1)
    r.reduce(out, *[x if q == r.rank else slots.chunk(q, n) for q in range(n)])
    r.fill(flag.region(0, 2), 7)


def tickets(r):
    """Both ranks take a ticket from rank 0's counter: the tickets depend on the order."""
    counter = r.symmetric("counter", count=1, dtype="uint64", role="scratch")
    ticket = r.buffer("ticket", count=1, dtype="uint64", role="scratch")
    r.fetch_add(0, counter.element(0), 1, ticket)
    r.barrier_all()


def _bits(values: np.ndarray, dtype: str) -> bytes:
    return validate.to_device(values, dtype).tobytes()


# ---------------------------------------------------------------------------- expectation files
@pytest.mark.parametrize("complete", [True, False])
def test_expectation_files_follow_the_contract_byte_by_byte(tmp_path, complete):
    sched = bf16_oneshot.trace(2)
    ref = expected.build_reference(sched) if complete else expected.build_reference(sched, max_states=1)
    assert ref.complete is complete
    paths = validate.write_expectations(str(tmp_path), sched, ref)
    assert paths == [str(tmp_path / "expect0.bin"), str(tmp_path / "expect1.bin")]
    for rank, path in enumerate(paths):
        got = read_expect(path)
        want = expected.expect_rank(ref, rank)
        assert (got["magic"], got["version"], got["rank"]) == (b"CWEXPECT", 1, rank)
        assert got["end"] == got["size"]  # nothing left over
        assert [b["itemsize"] for b in got["buffers"]] == [2, 2, 2, 8]  # bfloat16 is 2 on the device
        assert [b["zero"] for b in got["buffers"]] == [0, 0, 0, 0]
        for decl, entry in zip(sched.programs[rank].buffers, got["buffers"]):
            mine = want.buffers[decl.name]
            assert entry["count"] == decl.count
            runs = [(int(i), int(i) + 1) for i in np.flatnonzero(mine.checked)]
            assert _merge(runs) == entry["checked"]
            if entry["checked"]:
                assert entry["checked_values"] == _bits(mine.expected, decl.dtype)
            if mine.post is not None:
                assert entry["post"] == [(0, decl.count)]
                assert entry["post_values"] == _bits(mine.post, decl.dtype)
            else:
                assert entry["post"] == [] and entry["post_values"] is None
        out = got["buffers"][2]
        assert out["checked"] == [(0, 4)] and out["post"] == [(0, 4)]
        # the bfloat16 bits are the top half of the float32 the runtime stores
        total = sum(numeric.input_values(q, "x", "bfloat16", 0, 4) for q in range(2))
        assert np.frombuffer(out["post_values"], "<u2").tolist() == (total.view(np.uint32) >> 16).tolist()
        assert got["buffers"][3]["checked"] == [(0, 3)]  # an output: checked even without every execution
        assert got["signal_words"] == got["words"] == 2
        assert got["signals"] == [int(v) for v in want.signals]
        assert got["signals"][1 - rank] == 1  # the peer's put_signal set its word
        assert got["signals_checked"] == ([1, 1] if complete else [0, 0])
    if not complete:  # scratch is compared only when every execution is known
        assert read_expect(paths[0])["buffers"][1]["checked"] == []


def _merge(runs):
    merged = []
    for start, stop in runs:
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], stop)
        else:
            merged.append((start, stop))
    return merged


def test_mask_ranges_are_the_runs_of_true_and_fast_on_large_masks():
    rng = np.random.default_rng(1)
    for mask in [np.zeros(0, bool), np.ones(5, bool), np.zeros(5, bool), rng.random(200) < 0.5,
                 np.array([True, False, True, True, False, False, True])]:
        want = _merge([(int(i), int(i) + 1) for i in np.flatnonzero(mask)])
        assert [tuple(map(int, row)) for row in validate.mask_ranges(mask)] == want
    big = np.ones(1 << 26, dtype=bool)
    big[1000:2000] = False
    started = time.perf_counter()
    found = validate.mask_ranges(big)
    assert time.perf_counter() - started < 5.0
    assert found.tolist() == [[0, 1000], [2000, 1 << 26]]


def test_bfloat16_to_the_device_and_back_is_exact():
    values = numeric.to_dtype(np.array([1.0, -2.5, 3.0e38, 1e-40, np.inf, -0.0]), "bfloat16")
    device = validate.to_device(values, "bfloat16")
    assert device.dtype == np.dtype("<u2") and device.nbytes == 12
    back = validate.from_device(device.view(np.uint8), "bfloat16")
    assert back.dtype == np.float32 and numeric.same_bits(back, values).all()
    halves = np.array([1.5, -3.0], dtype=np.float16)
    assert numeric.same_bits(validate.from_device(validate.to_device(halves, "float16").view(np.uint8),
                                                  "float16"), halves).all()


# ---------------------------------------------------------------------------------- dumps
def _write_dump(path, sched, rank, memory, signals=()):
    with open(path, "wb") as handle:
        for decl in sched.programs[rank].buffers:
            handle.write(_bits(memory[decl.name], decl.dtype))
        handle.write(np.asarray(signals, dtype="<u8").tobytes())


def _dumped_line(rank, buffer, element):
    return {"rank": rank, "item": 0, "schedule": "s", "world": 2, "status": "mismatch", "seconds": [1e-5],
            "compare": {"checked": 10, "mismatches": 1, "other_execution": 0, "post_checked": 4, "post_failures": 0,
                        "first": [{"rank": rank, "buffer": buffer, "element": element, "against": "checker",
                                   "iteration": 3}], "dumped": True, "dumps": [3]}}


def test_read_dump_gives_runtime_storage_and_signal_words(tmp_path):
    sched = bf16_oneshot.trace(2)
    ref = expected.build_reference(sched)
    want = expected.expect_rank(ref, 0)
    memory = {name: b.expected for name, b in want.buffers.items()}
    _write_dump(tmp_path / "dump0.bin", sched, 0, memory, [5, 2**64 - 1])
    got, signals = validate.read_dump(str(tmp_path / "dump0.bin"), sched, 0)
    assert list(got) == ["x", "slots", "out", "flag"]
    for name, values in memory.items():
        assert got[name].dtype == values.dtype and numeric.same_bits(got[name], values).all()
    assert signals.dtype == np.uint64 and signals.tolist() == [5, 2**64 - 1]
    with open(tmp_path / "dump0.bin", "ab") as handle:
        handle.write(b"\0" * 8)
    with pytest.raises(validate.ValidateError, match=r"dump0.bin: rank 0's dump holds 80 bytes, but its buffers "
                                                     r"\(x, slots, out, flag\) and 2 signal words take 72"):
        validate.read_dump(str(tmp_path / "dump0.bin"), sched, 0)


def test_recompare_accepts_another_executions_value_and_names_a_wrong_one(tmp_path):
    sched = cw.schedule(tickets).trace(2)
    ref = expected.build_reference(sched)
    assert ref.complete
    want = expected.expect_rank(ref, 1)
    mine = int(want.buffers["ticket"].expected[0])
    counter0 = int(numeric.input_values(0, "counter", "uint64", 0, 1)[0])
    other = ({counter0, counter0 + 1} - {mine}).pop()
    memory = {name: b.expected.copy() for name, b in want.buffers.items()}
    for ticket, status in ((other, "match"), (counter0 + 7, "mismatch")):
        memory["ticket"][0] = ticket
        _write_dump(tmp_path / "dump1_3.bin", sched, 1, memory)
        line = validate.recompare(_dumped_line(1, "ticket", 0), str(tmp_path), sched, ref)
        assert line["status"] == status
        found = line["compare"]
        assert found["recompared"] and found["dumped"] and found["checked"] == 10
        if status == "match":
            assert (found["mismatches"], found["other_execution"]) == (0, 1)
        else:
            assert found["mismatches"] == 1
            record = found["first"][0]
            assert (record["buffer"], record["element"], record["got"], record["iteration"]) == (
                "ticket", 0, counter0 + 7, 3)
            assert record["possible"] == [counter0, counter0 + 1]


def test_recompare_names_the_symbolic_expected_value(tmp_path):
    sched = cw.load_file(os.path.join(PROTOCOLS, "ring_allreduce.py"))[0].trace(2)
    ref = expected.build_reference(sched)
    want = expected.expect_rank(ref, 1)
    memory = {name: b.expected.copy() for name, b in want.buffers.items()}
    memory["x"][5] += 1
    _write_dump(tmp_path / "dump1_3.bin", sched, 1, memory)
    line = validate.recompare(_dumped_line(1, "x", 5), str(tmp_path), sched, ref)
    assert line["status"] == "mismatch"
    records = line["compare"]["first"]
    assert records[0]["expected_term"] == "(x@r0[4:8] + x@r1[4:8]) at [1]"
    assert records[1]["against"] == "postcondition"
    assert line["compare"]["post_failures"] == 1
    # a line that dumped nothing is left as the program wrote it
    untouched = {"rank": 0, "status": "match", "compare": {"checked": 3, "dumped": False}}
    assert validate.recompare(dict(untouched), str(tmp_path), sched, ref) == untouched


# ------------------------------------------------------------------------------ table and plot
def _result(verdict_name, median, graph=None):
    timing = {"iterations": 20, "median_us": median, "min_us": median * 0.9, "max_us": median * 1.5}
    graph_timing = None if graph is None else {"iterations": 20, "median_us": graph, "min_us": graph * 0.9,
                                               "max_us": graph * 1.2}
    return {"verdict": verdict_name, "message": f"{verdict_name}: synthetic", "time": timing,
            "graph_time": graph_timing, "checked": 4096}


def _cells():
    nccl = {1024: {"bench": "nccl", "op": "allreduce", "bytes": 1024, "eager_us": 20.0, "graph_us": 10.0,
                   "correct": True}}
    cells = []
    for size, result in ((1024, _result("match", 16.0, 8.0)), (4096, _result("match", 20.0, 12.0)),
                         (65536, _result("mismatch", 40.0, 30.0))):
        found, note = validate.nccl_cell("allreduce", nccl, size, 2, None)
        cells.append(validate.make_cell(size, result, {"eager_us": 20.0, "graph_us": 10.0}, found,
                                        [note] if note else []))
    return cells


def test_cells_compute_errors_and_speedups_against_nccl():
    first, second, _third = _cells()
    assert first["error"] == {"eager": 0.25, "graph": 0.25}  # (20 - 16) / 16, (10 - 8) / 8
    assert first["speedup_vs_nccl"] == {"eager": 1.25, "graph": 1.25}  # NCCL 20 us vs 16 us
    assert second["nccl"] is None and second["speedup_vs_nccl"] is None
    assert second["notes"] == ["NCCL's allreduce not measured at 4096 bytes"]
    assert validate.nccl_cell(None, {}, 1024, 2, None) == (None, "no NCCL collective")
    assert "not a multiple of 4 x 2 ranks" in validate.nccl_cell("allgather", {}, 1026, 2, None)[1]


def test_table_has_every_column_and_a_row_per_size():
    meta = {"schedule": "ring_allreduce", "file": "ring_allreduce.py", "backend": "nccl", "ranks": 2, "iters": 20,
            "warmup": 2, "graph": True, "topology": "h200x2-nv18", "nccl_op": "allreduce", "nccl_version": "2.28.9",
            "machine": {"gpu_names": ["NVIDIA H200", "NVIDIA H200"]}}
    text = report_validate.render_table(_cells(), meta, validate.prediction_source(meta), launch.NO_MULTICAST)
    header = next(line for line in text.splitlines() if line.startswith("| size"))
    assert [c.strip() for c in header.strip("|").split("|")] == list(report_validate.COLUMNS)
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith(("| size", "| ---"))]
    assert len(rows) == 3
    assert rows[0].split(" | ")[:2] == ["| 1 KiB", "match"]
    assert "16.0 (14.4..24.0)" in rows[0] and "+25% / +25%" in rows[0] and "1.25x / 1.25x" in rows[0]
    assert "NCCL's allreduce not measured at 4096 bytes" in rows[1]
    assert "- 64 KiB: mismatch: synthetic" in text  # problems listed under the table
    assert "Machine: 2 x NVIDIA H200;" in text and "NCCL 2.28.9" in text and "NCCL_NVLS_ENABLE=0" in text
    no_collective = validate.make_cell(1024, _result("match", 5.0), None, None, ["no NCCL collective"])
    assert "no NCCL collective" in report_validate.table_row(no_collective)


def test_results_folder_has_json_markdown_and_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    meta = {"schedule": "ring_allreduce", "file": "x.py", "backend": "nccl", "ranks": 2, "iters": 20, "warmup": 2,
            "graph": True}
    report = validate.write_results(str(tmp_path), _cells(), meta)
    assert report["verdict"] == "mismatch"
    stored = json.loads((tmp_path / "results.json").read_text())
    assert [c["bytes"] for c in stored["cells"]] == [1024, 4096, 65536]
    assert stored["cells"][0]["eager"]["median_us"] == 16.0 and stored["cells"][0]["nccl"]["graph_us"] == 10.0
    png = (tmp_path / "results.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    assert (tmp_path / "results.md").read_text().startswith("# `clockworks validate` ring_allreduce")


# ------------------------------------------------------------------------------------- Slurm
def test_sbatch_script_runs_every_size_under_srun_pmix_with_multicast_off(tmp_path):
    out = str(tmp_path / "my results")
    cells = [{"size": "1 KiB", "bytes": 1024, "binary": f"{out}/build/1024/prog", "job": f"{out}/runs/1024"},
             {"size": "4 KiB", "bytes": 4096, "binary": f"{out}/build/4096/prog", "job": f"{out}/runs/4096"}]
    os.makedirs(out)
    path = os.path.join(out, "validate.sbatch")
    text = validate.write_sbatch(path, out, cells, 8, nodes=2, iters=20, warmup=2, graph=False, timeout=60,
                                 nccl={"op": "allreduce", "sizes": [1024, 4096]}, python="/opt/py thon/bin/python3",
                                 account="proj; rm -rf /")
    assert open(path).read() == text and os.access(path, os.X_OK)
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    for wanted in ("#SBATCH --nodes=2", "#SBATCH --ntasks=8", "#SBATCH --ntasks-per-node=4",
                   "#SBATCH --gpus-per-task=1", "#SBATCH --account='proj; rm -rf /'",
                   "export NCCL_NVLS_ENABLE=0", "export NVSHMEM_DISABLE_NVLS=1",
                   "export TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "PYTHON='/opt/py thon/bin/python3'"):
        assert wanted in lines
    runs = [line for line in lines if " srun --mpi=pmix " in line]
    assert len(runs) == 3  # two sizes and NCCL's baseline
    first = f"'{out}/build/1024/prog' --job '{out}/runs/1024' --iters 20 --warmup 2 --timeout 60 --no-graph"
    assert first in runs[0] and runs[0].startswith("timeout --kill-after=10 90 srun --mpi=pmix --ntasks=8")
    assert "--ops allreduce --sizes 1024,4096" in runs[2]
    build = lines.index('"$PYTHON" -m clockworks_dist.runtime.validate build "$OUT" || exit 2')
    summary = lines.index('"$PYTHON" -m clockworks_dist.runtime.validate collect "$OUT"')
    assert build < lines.index(runs[0]) < summary
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n", path], capture_output=True).returncode == 0


def test_validate_with_slurm_prepares_every_size_and_collect_sums_up(tmp_path, monkeypatch):
    """--launcher slurm writes each size's program, job directory and expected values, and the
    script; `collect` then reads what the ranks wrote there (written here as a program would)."""
    pytest.importorskip("matplotlib")
    fake = type(sys)("clockworks_dist.codegen.program")
    fake.generate = (lambda lowered: f"// {lowered.sched.name} {lowered.build.backend} "
                     f"{lowered.sched.programs[0].buffers[0].count}\n")
    monkeypatch.setitem(sys.modules, "clockworks_dist.codegen.program", fake)
    monkeypatch.setattr(codegen, "program", fake, raising=False)
    out = tmp_path / "out"
    report = validate.validate_file(os.path.join(PROTOCOLS, "ring_allreduce.py"), backend="nccl", ranks=2,
                                    sizes="1KiB,4KiB", timeout=30, out_dir=str(out), launcher="slurm",
                                    topology="h200x2-nv18")
    assert report["verdict"] == "written" and report["nccl"] == {"op": "allreduce", "sizes": [1024, 4096]}
    script = (out / "validate.sbatch").read_text()
    assert script.count("srun --mpi=pmix") == 3 and f"{out}/build/1024/ring_allreduce --job" in script
    assert report_validate.summary_lines(report)[1].startswith(f"submit it: sbatch {out}/validate.sbatch")
    for size, elements in ((1024, 256), (4096, 1024)):
        assert (out / "build" / str(size) / "ring_allreduce.cu").read_text() == f"// ring_allreduce nccl {elements}\n"
        job = out / "runs" / str(size)
        assert sorted(os.listdir(job)) == ["expect0.bin", "expect1.bin", "job.pkl", "progress.bin"]
        assert read_expect(str(job / "expect1.bin"))["buffers"][0]["count"] == elements
    # the cluster's side: 1 KiB matched on both ranks; at 4 KiB rank 1 timed out in its second op
    sched = ir.Schedule.from_json(job_mod.read(str(out / "runs" / "1024")).items[0].schedule_json)
    for rank in range(2):
        _emit(out / "runs" / "1024", {"rank": rank, "status": "match", "seconds": [2e-5, 3e-5],
                                      "graph_seconds": [1e-5, 1e-5], "compare": {"checked": 512, "dumped": False}})
    _emit(out / "runs" / "4096", {"rank": 0, "status": "match", "seconds": [1e-4], "graph_seconds": [1e-4],
                                  "compare": {"checked": 2048, "dumped": False}})
    op = sched.programs[1].ops[1]
    _emit(out / "runs" / "4096", {"rank": 1, "status": "timeout", "seconds": [], "graph_seconds": [],
                                  "op": {"index": 1, "member": None, "text": "recv(peer=0)", "file": op.loc.file,
                                         "line": op.loc.line}, "phase": "running"})
    (out / validate.NCCL_LINES).write_text(
        '{"bench":"nccl_header","nccl_version":"2.28.9"}\n'
        '{"bench":"nccl","op":"allreduce","bytes":1024,"eager_us":15.0,"graph_us":9.0,"correct":true}\n')
    summary = validate.collect(str(out))
    first, second = summary["cells"]
    assert (first["verdict"], first["graph"]["median_us"], first["nccl"]["graph_us"]) == ("match", 10.0, 9.0)
    assert first["speedup_vs_nccl"]["graph"] == 0.9 and first["predicted"]["graph_us"] > 0
    assert second["verdict"] == "hang" and f"rank 1 is in recv(peer=0) at {op.loc.file}:{op.loc.line}" in \
        second["message"]
    assert summary["nccl_version"] == "2.28.9" and summary["launcher"] == "slurm"
    assert (out / "results.png").stat().st_size > 0 and "| 4 KiB | hang |" in (out / "results.md").read_text()


def test_the_run_records_where_an_nvshmem_kernel_writes_its_progress_words(tmp_path, monkeypatch):
    """validate records `progress_words` (GPU memory: it never passes --host-progress), so a
    prediction of its results knows which build it prices; an NCCL run records none."""
    fake = type(sys)("clockworks_dist.codegen.program")
    fake.generate = lambda lowered: f"// {lowered.sched.name} {lowered.build.backend}\n"
    monkeypatch.setitem(sys.modules, "clockworks_dist.codegen.program", fake)
    monkeypatch.setattr(codegen, "program", fake, raising=False)
    for backend, protocol, want in (("nvshmem", "nvshmem_oneshot_allreduce.py", "gpu"),
                                    ("nccl", "ring_allreduce.py", None)):
        out = tmp_path / backend
        validate.validate_file(os.path.join(PROTOCOLS, protocol), backend=backend, ranks=2, sizes="1KiB",
                               timeout=30, out_dir=str(out), launcher="slurm", topology="h200x2-nv18")
        manifest = json.loads((out / validate.MANIFEST).read_text())
        assert manifest["progress_words"] == want, backend


def _emit(job_dir, fields):
    line = {"item": 0, "schedule": "ring_allreduce", "world": 2, "backend": "nccl", **fields}
    with open(job_dir / f"rank{fields['rank']}.jsonl", "a") as handle:
        handle.write(json.dumps(line) + "\n")


def test_unverified_schedules_are_refused_with_the_fix():
    path = os.path.join(PROTOCOLS, "buggy")
    buggy = sorted(os.listdir(path))[0]
    with pytest.raises(validate.ValidateError, match=r"the checker finds \d+ error\(s\), first .*pass --no-check"):
        validate.validate_file(os.path.join(path, buggy), ranks=2, launcher="slurm", timeout=30)


def test_unknown_backend_and_launcher_are_bad_input():
    with pytest.raises(validate.ValidateError, match="unknown backend 'mpi'; clockworks validate knows nccl"):
        validate.validate_file("x.py", backend="mpi")
    with pytest.raises(validate.ValidateError, match="unknown launcher 'pbs'; one of mpirun, local, slurm"):
        validate.validate_file("x.py", launcher="pbs")


# -------------------------------------------------------------- a program under the launcher
FAKE = '''
import json, os, signal, sys, time
sys.path.insert(0, {root!r})
import numpy as np
from clockworks_dist.runtime.progress import Phase, Progress
{reader}

def main():
    directory = sys.argv[sys.argv.index("--job") + 1]
    rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    mode = os.environ["FAKE_MODE"]
    if mode == "crash":
        sys.exit(1)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    progress = Progress(os.path.join(directory, "progress.bin"), rank)
    progress.start()
    if mode == "hang" and rank == 1:
        progress.op(1)
        while True:
            time.sleep(0.1)
    if mode == "die" and rank == 1:
        progress.op(0)
        os._exit(1)
    expect = read_expect(os.path.join(directory, f"expect{{rank}}.bin"))
    assert expect["magic"] == b"CWEXPECT" and expect["rank"] == rank
    checked = sum(stop - start for b in expect["buffers"] for start, stop in b["checked"])
    checked += sum(expect["signals_checked"])
    line = {{"rank": rank, "item": 0, "schedule": "tickets", "world": 2, "backend": "nccl", "status": "match",
            "seconds": [2e-5, 1e-5, 3e-5], "graph_seconds": [1e-5, 1e-5, 2e-5],
            "compare": {{"checked": checked, "mismatches": 0, "other_execution": 0, "post_checked": 0,
                        "post_failures": 0, "first": [], "dumped": False}}}}
    ticket = os.environ.get(f"FAKE_TICKET_{{rank}}")
    if mode == "dump" and ticket is not None:
        with open(os.path.join(directory, f"dump{{rank}}_0.bin"), "wb") as handle:
            for entry in expect["buffers"]:
                handle.write(entry["checked_values"] if entry["checked"] else bytes(entry["count"] * entry["itemsize"]))
            handle.seek(-8, 1)  # the ticket: the last buffer's only element
            handle.write(int(ticket).to_bytes(8, "little"))
            handle.write(np.asarray(expect["signals"], dtype="<u8").tobytes())
        line["status"] = "mismatch"
        line["compare"].update(mismatches=1, dumped=True, dumps=[0],
                               first=[{{"rank": rank, "buffer": "ticket", "element": 0, "against": "checker",
                                       "iteration": 0}}])
    with open(os.path.join(directory, f"rank{{rank}}.jsonl"), "a") as out:
        out.write(json.dumps(line) + "\\n")
    print(json.dumps(line), flush=True)
    progress.set(Phase.FINISHED)
    sys.exit(1 if line["status"] == "mismatch" else 0)

main()
'''


@pytest.fixture
def program(tmp_path):
    """A stand-in for a generated program (Python, executable), and a check that no process of it
    outlives the test."""
    path = tmp_path / "fake_program.py"
    path.write_text(f"#!{sys.executable}\n" + FAKE.format(root=os.path.dirname(HERE), reader=READER))
    path.chmod(0o755)
    yield str(path)
    assert not _running(str(path)), "a rank of the stand-in program outlived its job"


def _running(mark: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if mark.encode() in handle.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def _tickets_job(timeout=30.0):
    sched = cw.schedule(tickets).trace(2)
    ref = expected.build_reference(sched)
    item = job_mod.Item(name=sched.name, world=2, schedule_json=sched.to_json(), reference=ref, timeout=timeout)
    return sched, ref, job_mod.Job(items=[item], ranks=2)


def _launch(program, mode, timeout, **env):
    sched, ref, job = _tickets_job()
    directory = tempfile_dir()
    try:
        validate.write_expectations(directory, sched, ref)
        outcome = launch.run(job, timeout=timeout, argv=[sys.executable, program, "--job", "{dir}"],
                             env={**os.environ, "FAKE_MODE": mode, **env}, directory=directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return sched, outcome, verdict.summarize([sched], outcome)


def tempfile_dir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="clockworks-test-")


@needs_mpiexec
def test_a_program_that_matches_gives_match_with_its_times(program):
    _sched, outcome, summary = _launch(program, "match", 30.0)
    result = summary["results"][0]
    assert result["verdict"] == "match", result["message"]
    assert result["message"].startswith("results match: ")
    assert {line["rank"] for line in outcome.lines} == {0, 1}
    assert all(line["compare"]["checked"] > 0 for line in outcome.lines)
    assert result["time"]["median_us"] == 20.0
    assert validate.timing(result["ranks"], "graph_seconds")["max_us"] == 20.0


@needs_mpiexec
def test_a_program_that_hangs_is_stopped_and_named_by_its_progress_row(program):
    sched, outcome, summary = _launch(program, "hang", 4.0)
    result = summary["results"][0]
    op = sched.programs[1].ops[1]
    assert result["verdict"] == "hang"
    assert outcome.stopped_by == "deadline" and outcome.seconds < 15
    assert "rank 0 finished" in result["message"]
    assert f"rank 1 is stuck in barrier_all() at {op.loc.file}:{op.loc.line}" in result["message"]


@needs_mpiexec
def test_a_program_that_exits_without_a_word_is_a_crash(program):
    _sched, _outcome, summary = _launch(program, "crash", 20.0)
    result = summary["results"][0]
    assert result["verdict"] == "crash"
    assert result["message"].startswith("no rank started (mpiexec exited with code 1")


@needs_mpiexec
def test_a_rank_that_dies_in_an_op_is_named(program):
    sched, outcome, summary = _launch(program, "die", 20.0)
    result = summary["results"][0]
    op = sched.programs[1].ops[0]
    assert result["verdict"] == "crash" and outcome.dead == [1]
    assert f"rank 1 died (its process ended without a result; killed?) in fetch_add" in result["message"]
    assert f"at {op.loc.file}:{op.loc.line}" in result["message"]


@needs_mpiexec
def test_run_program_compares_a_dump_with_every_execution(program, tmp_path):
    sched, ref, _job = _tickets_job()
    counter0 = int(numeric.input_values(0, "counter", "uint64", 0, 1)[0])
    mine = {rank: int(expected.expect_rank(ref, rank).buffers["ticket"].expected[0]) for rank in range(2)}
    env = {**os.environ, "FAKE_MODE": "dump"}
    # rank 0 holds the other execution's ticket (rank 1's): no mismatch
    result = validate.run_program(program, sched, ref, 2, timeout=30.0, iters=3, warmup=1,
                                  env={**env, "FAKE_TICKET_0": str(mine[1])})
    assert result["verdict"] == "match", result["message"]
    assert result["message"].endswith("equal the checker's values (1 hold the value of another execution of the "
                                      "checker)")
    assert result["ranks"][0]["compare"]["other_execution"] == 1 and result["ranks"][0]["compare"]["recompared"]
    assert result["graph_time"]["median_us"] == 10.0 and result["time"]["median_us"] == 20.0
    # a ticket no execution takes: a mismatch naming the buffer, the value and the possible ones
    saved = tmp_path / "saved"
    result = validate.run_program(program, sched, ref, 2, timeout=30.0, iters=3, warmup=1,
                                  env={**env, "FAKE_TICKET_1": str(counter0 + 9)}, save_to=str(saved))
    assert result["verdict"] == "mismatch"
    assert f"rank 1: ticket[0]: expected" in result["message"] and f"got {counter0 + 9}" in result["message"]
    assert f"any of [{counter0}, {counter0 + 1}]" in result["message"]
    assert (saved / "rank1.jsonl").exists()


def test_program_argv_follows_the_contract():
    assert validate.program_argv("./prog", 20, 2, 60.0, True) == [
        "./prog", "--job", "{dir}", "--iters", "20", "--warmup", "2", "--timeout", "60"]
    assert validate.program_argv("./prog", 5, 0, 4.0, False)[-3:] == ["--timeout", "4", "--no-graph"]
    assert launch.rank_command(["./prog", "--job", "{dir}"], "/tmp/j") == ["./prog", "--job", "/tmp/j"]
    assert launch.rank_command([Path("./prog"), "--job={dir}"], "/tmp/j") == ["prog", "--job=/tmp/j"]
    assert launch.rank_command(None, "/tmp/j")[1:] == ["-m", "clockworks_dist.runtime.worker", "/tmp/j"]


def test_the_nccl_baseline_follows_the_postcondition():
    ring = cw.load_file(os.path.join(PROTOCOLS, "ring_allreduce.py"))[0].trace(2)
    gather = cw.load_file(os.path.join(PROTOCOLS, "ring_allgather.py"))[0].trace(2)
    assert validate.nccl_collective(ring) == "allreduce"
    assert validate.nccl_collective(gather) == "allgather"
    assert validate.nccl_collective(cw.schedule(tickets).trace(2)) is None
    assert validate.main_bytes(gather) == gather.programs[0].buffer(gather.expect[0].region.buffer).count * 4
    assert validate.nccl_sizes([1024, 1026, 4096], 2) == [1024, 4096]
    header, cells = validate.parse_nccl([{"bench": "nccl_header", "nccl_version": "2.28.9"},
                                         {"bench": "nccl", "op": "allreduce", "bytes": 1024, "eager_us": 3.0}])
    assert header["nccl_version"] == "2.28.9" and cells[1024]["eager_us"] == 3.0


def test_the_calibrated_topology_is_picked_by_the_gpus_here():
    topo, note = validate.pick_topology(None, 2, ["NVIDIA H200", "NVIDIA H200"])
    assert topo is not None and topo.name == "h200x2-nv18" and "calibrated on NVIDIA H200" in note
    assert validate.pick_topology(None, 2, [])[0] is None
    topo, note = validate.pick_topology(None, 2, ["NVIDIA A100-SXM4-80GB"] * 2)
    assert topo is None and "pass --topology" in note
    with pytest.raises(validate.ValidateError, match="h200x2-nv18 has 2 GPUs, but the schedule has 4 ranks"):
        validate.pick_topology("h200x2-nv18", 4, [])
    ring = cw.load_file(os.path.join(PROTOCOLS, "ring_allreduce.py"))[0].trace(2)
    predicted, why = validate.predictions(lower(ring, Build("nccl")), validate.pick_topology("h200x2-nv18", 2, [])[0],
                                          False)
    assert why is None and 0 < predicted["graph_us"] <= predicted["eager_us"]


def test_a_dead_rank_in_a_slurm_job_directory_is_a_crash(tmp_path):
    sched, ref, job = _tickets_job()
    validate.prepare_job_dir(str(tmp_path), sched, ref, 30.0, 1, "nccl")
    rows = np.memmap(tmp_path / "progress.bin", dtype=np.int64, mode="r+").reshape(2, -1)
    rows[1, :6] = [4242, 2, 0, 0, 0, -1]  # pid, running, schedule 0, iteration 0, op 0
    rows.flush()
    _emit(tmp_path, {"rank": 0, "status": "match", "seconds": [1e-5], "compare": {"checked": 3, "dumped": False}})
    outcome = validate._outcome_of(str(tmp_path), 2)
    assert outcome.dead == [1]
    result = validate.summarize_run(sched, ref, outcome, str(tmp_path))
    assert result["verdict"] == "crash" and "rank 1 died" in result["message"] and "fetch_add" in result["message"]


def test_no_check_runs_a_schedule_without_expected_values_when_none_can_be_built(tmp_path, monkeypatch):
    """recv_never_matched does not even match statically: with no_check its program still runs (to
    show the hang), with no expectation files; without no_check it is refused."""
    fake = type(sys)("clockworks_dist.codegen.program")
    fake.generate = lambda lowered: "// program\n"
    monkeypatch.setitem(sys.modules, "clockworks_dist.codegen.program", fake)
    monkeypatch.setattr(codegen, "program", fake, raising=False)
    path = os.path.join(PROTOCOLS, "buggy", "recv_never_matched.py")
    refused = "recv_never_matched.py:24: recv_never_matched at 2 ranks, rank 0: the checker finds"
    with pytest.raises(validate.ValidateError, match=refused):
        validate.validate_file(path, ranks=2, launcher="slurm", out_dir=str(tmp_path / "refused"), timeout=30)
    report = validate.validate_file(path, ranks=2, launcher="slurm", out_dir=str(tmp_path / "out"), timeout=30,
                                    no_check=True)
    job = report["cells"][0]["job"]
    assert sorted(os.listdir(job)) == ["job.pkl", "progress.bin"]
    assert job_mod.read(job).items[0].reference is None


def test_nccl_benchmark_is_built_once_per_source_and_command(tmp_path, monkeypatch):
    """bench_nccl is kept between validate calls under $CLOCKWORKS_CACHE, by a hash of its source and
    its build command: a second call copies it; another source (or command) builds again."""
    source = tmp_path / "src" / "bench_nccl.cu"
    source.parent.mkdir()
    source.write_text("int main() { return 0; }\n")
    built = []

    class Runner:
        HERE = source.parent

        @staticmethod
        def find_nvcc():
            return "nvcc"

        @staticmethod
        def find_wheel_lib(*_args):
            return tmp_path / "nccl"

        @staticmethod
        def mpi_build_flags():
            return ["-I/mpi"], ["-lmpi"], "fake"

        @staticmethod
        def build_commands(nvcc, arch, src_dir, build_dir, *_rest):
            return {"nccl": [nvcc, f"-arch={arch}", str(src_dir / "bench_nccl.cu"), "-o",
                             str(build_dir / "bench_nccl")]}

    def run_bounded(command, env, timeout, log, mark=None):
        out = command[command.index("-o") + 1]
        Path(out).write_text(f"built from {source.read_text()}")
        built.append(out)
        return 0, ""

    monkeypatch.setenv("CLOCKWORKS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(nccl_bench, "runner", Runner)
    monkeypatch.setattr(nccl_bench, "gpu_arch", lambda: "sm_90")
    monkeypatch.setattr(nccl_bench.launch, "run_bounded", run_bounded)
    first = nccl_bench.build_nccl_bench(str(tmp_path / "a"))
    second = nccl_bench.build_nccl_bench(str(tmp_path / "b"))
    assert len(built) == 1 and Path(second).read_text() == Path(first).read_text()
    assert second == str(tmp_path / "b" / "bench_nccl")
    source.write_text("int main() { return 1; }\n")
    third = nccl_bench.build_nccl_bench(str(tmp_path / "c"))
    assert len(built) == 2 and "return 1" in Path(third).read_text()
    monkeypatch.setattr(nccl_bench, "gpu_arch", lambda: "sm_100")  # another command: built again
    nccl_bench.build_nccl_bench(str(tmp_path / "d"))
    assert len(built) == 3


def test_the_prediction_is_the_generated_programs_run_where_the_model_covers_it():
    from clockworks_dist.perf.program import program_us
    from clockworks_dist.topology import choose_topology

    assert validate.program_model({"backend": "nccl"}) == "nccl"
    assert validate.program_model({"backend": "nvshmem", "kernels": "one"}) == "nvshmem"
    # not modelled: the cupy executor, packets
    assert validate.program_model({"backend": "cupy"}) is None
    assert validate.program_model({"backend": "nvshmem", "packets": {"max_bytes": 32768}}) is None
    # a kernel per call is: each call's kernel begins where its call does in the K-call schedule
    assert validate.program_model({"backend": "nvshmem", "kernels": "per call"}) == "nvshmem"
    from clockworks_dist.lowering.repeat import call_starts, repeat

    one = cw.load_file(os.path.join(PROTOCOLS, "nvshmem_oneshot_allreduce.py"))[0].trace(2)
    run = repeat(one, 4, "sync")
    meta = {"backend": "nvshmem", "kernels": "per call", "calls": 4, "between": "sync"}
    assert validate.kernel_splits(run, meta) == call_starts(one, 4, "sync")
    assert validate.kernel_splits(run, {**meta, "kernels": "one"}) is None
    topo_ = choose_topology("h200x2-nv18").topology
    # read back from a results folder (the K-call schedule and its meta), as `collect` does
    per_call, _ = validate.predictions(as_built(run, validate.build_of(meta), validate.kernel_splits(run, meta)),
                                       topo_, True)
    fused, _ = validate.predictions(as_built(run, validate.build_of({**meta, "kernels": "one"})), topo_, True)
    # each of the 3 later calls starts a kernel of its own where one kernel has a handoff between blocks
    assert per_call["graph_us"] > fused["graph_us"]
    # ... is what the lowering of one call gives
    assert per_call["graph_us"] == round(program_us(lower(one, Build("nvshmem", 4, "sync")), topo_, "graph"), 2)
    # a local run with packets: its program with the packet sends (one crossing, twice the bytes, no fence)
    from clockworks_dist.lowering import packets

    from clockworks_dist.dsl import params

    with params.bind({"ALGO": "oneshot"}):
        family = cw.load_file(os.path.join(PROTOCOLS, "nvshmem_allreduce_family.py"))[0].trace(2)
    low = packets.lower(family, 32768)
    assert low.channels
    sent, _ = validate.predictions(lower(family, Build("nvshmem", packets=32768)), topo_, True)
    fenced, _ = validate.predictions(as_built(low.sched, Build("nvshmem")), topo_, True)  # no packet sends
    assert sent["graph_us"] == round(program_us(as_built(low.sched, Build("nvshmem"), packets=low), topo_, "graph"), 2)
    assert sent["graph_us"] < fenced["graph_us"]
    meta = {"backend": "nvshmem", "packets": {"max_bytes": 32768}}
    assert "sent as packets" in validate.prediction_source({**meta, "launcher": "local"})
    assert "schedule's ops" in validate.prediction_source({**meta, "launcher": "slurm"})
    assert "generated program's timed run" in validate.prediction_source({"backend": "nccl"})
    assert "schedule's ops" in validate.prediction_source({"backend": "cupy"})
    topo = choose_topology("h200x2-nv18").topology
    sched = cw.load_file(os.path.join(PROTOCOLS, "ring_allreduce.py"))[0].trace(2)
    program, why = validate.predictions(lower(sched, Build("nccl")), topo, True)
    alone, _ = validate.predictions(lower(sched, Build("nccl")), topo, False)
    assert why is None
    assert program == {f"{mode}_us": round(program_us(lower(sched, Build("nccl")), topo, mode), 2)
                       for mode in ("eager", "graph")}
    # the program's own costs (its start, a progress word around every op) come on top of the ops
    assert program["graph_us"] > alone["graph_us"] + topo.constants.program_graph_us


def test_every_build_knob_is_recorded_in_the_results_and_read_back():
    """A run's results record how it was lowered (`build_meta`) and `build_of` reads the same `Build`
    back (bench_predict_generated and `collect` predict from it): a knob added to `lowering.Build`
    fails here until both handle it."""
    import dataclasses

    from clockworks_dist.lowering import Build, lower

    one = cw.load_file(os.path.join(PROTOCOLS, "nvshmem_allreduce_family.py"))[0].trace(2, params={"ALGO": "oneshot"})
    changed = {"backend": "nvshmem", "calls": 3, "between": "sync", "fuse_calls": True, "packets": 32768,
               "copy_engine": 1 << 20, "host_progress": True}
    assert set(changed) == {f.name for f in dataclasses.fields(Build)}, "a Build knob this test does not set"
    for name in changed:  # each knob alone (the separator and the fusing matter in a run of calls)
        base = {"backend": "nvshmem", "calls": 3 if name in ("between", "fuse_calls") else 1}
        build = Build(**{**base, name: changed[name]})
        meta = {"backend": build.backend, **validate.build_meta(build, [lower(one, build)])}
        assert validate.build_of(meta) == build, name
    build = Build(**changed)
    assert validate.build_of({"backend": "nvshmem", **validate.build_meta(build, [lower(one, build)])}) == build
