"""Puts on the copy engine (`--copy-engine SIZE`, `lowering.nvshmem_plan.copy_engine_ops`): a put or
put_signal of at least SIZE bytes is issued by the host on the rank's stream between two kernels
(`nvshmemx_putmem[_signal]_on_stream`), never inside a kernel; the plan treats it as a kernel
boundary (the kernel before ends fenced where the put publishes what came before); setup refuses a
peer not reached over NVLink; the simulator moves its bytes at the copy engine's rate. Compiled and
linked with nvcc where the NVSHMEM wheel is installed (skipped with the reason elsewhere); run on a GPU
by scripts/gpu/copy_engine_h200.sh (results/h200/one_gpu/copy_engine: every output bit-exact)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clockworks_dist.lowering import Build, LoweringError, lower
from clockworks_dist import ir
from clockworks_dist.codegen import build, program
from clockworks_dist.lowering import packets
from clockworks_dist.lowering.nvshmem_plan import copy_engine_ops, kernel_spans, plan_rank
from clockworks_dist.dsl.load import load_file
from clockworks_dist.perf.program import program_us
from clockworks_dist.topology import choose_topology

from test_packets import family


def run_us(sched, topo, mode: str, backend: str, **build) -> float:
    """`program_us` of `sched` lowered for `backend` with the `Build` knobs `build`."""
    return program_us(lower(sched, Build(backend, **build)), topo, mode)


ROOT = Path(__file__).resolve().parent.parent
TWOSHOT = ROOT / "protocols" / "nvshmem_twoshot_allreduce.py"
PUTBW = ROOT / "protocols" / "nvshmem_put_bandwidth.py"
ONE_PE = ROOT / "scripts" / "gpu" / "one_pe_calls.py"
KERNEL = re.compile(r"__global__ void __launch_bounds__\(CW_NV_THREADS\) (cw_nv_rank\d+(?:_call\d+)?)\([^)]*\) \{\n")
MiB = 1 << 20


def trace(path: Path, ranks: int, chunk: int) -> ir.Schedule:
    return load_file(str(path))[0].trace(ranks, sizes={"CHUNK": chunk})


def kernel_bodies(text: str) -> list[str]:
    return [text[m.end():text.index("\n}\n", m.end())] for m in KERNEL.finditer(text)]


def rank_function(text: str, rank: int) -> str:
    start = text.index(f"static void rank{rank}(cudaStream_t s) {{")
    return text[start:text.index("\n}\n", start)]


def code(text: str) -> list[str]:
    """The lines of `text` that are not comments."""
    return [line.split("//")[0].strip() for line in text.split("\n") if line.split("//")[0].strip()]


# ------------------------------------------------------------------------------- which ops
def test_only_puts_of_at_least_the_size_go_on_the_copy_engine():
    sched = trace(TWOSHOT, 2, 1 << 18)  # each put_signal moves one chunk: 1 MiB
    assert copy_engine_ops(sched, 0, 0) == frozenset()
    puts = frozenset(m for m, op in enumerate(sched.programs[0].ops) if isinstance(op, ir.PutSignal))
    assert len(puts) == 2
    assert copy_engine_ops(sched, 0, MiB) == puts
    assert copy_engine_ops(sched, 0, MiB + 4) == frozenset()


def schedule(tmp_path: Path, body: str, ranks: int) -> ir.Schedule:
    """A schedule file of one function whose body is `body` (r: the rank), traced at `ranks`."""
    path = tmp_path / "ce_sched.py"
    path.write_text("import clockworks_dist as cw\n\n\n@cw.schedule()\ndef ce_sched(r):\n"
                    + "".join(f"    {line}\n" for line in body.strip().split("\n")))
    return load_file(str(path))[0].trace(ranks)


def test_a_self_put_whose_source_overlaps_its_destination_stays_in_the_kernel(tmp_path):
    sched = schedule(tmp_path, """
x = r.symmetric("x", count=1 << 20)
r.put(0, x[1:(1 << 19) + 1], x[0:1 << 19])
r.put(0, x[1 << 19:1 << 20], x[0:1 << 19])
r.quiet()""", 1)
    assert copy_engine_ops(sched, 0, 1) == frozenset({1})


def test_puts_sent_as_packets_are_not_also_put_on_the_copy_engine():
    low = packets.lower(family("oneshot", 2, chunk=256))
    assert low.sends
    assert copy_engine_ops(low.sched, 0, 1, low) == frozenset()
    assert copy_engine_ops(low.sched, 0, 1) != frozenset()


# ------------------------------------------------------------------------------- the plan
def test_the_plan_puts_each_copy_between_two_kernels_in_program_order():
    sched = trace(TWOSHOT, 2, 1 << 18)
    engine = copy_engine_ops(sched, 0, MiB // 2)
    plan = plan_rank(sched, 0, copy_engine=engine)
    spans = kernel_spans(plan.steps)
    order = [step.index for _kind, steps in spans for step in steps]
    assert order == list(range(len(sched.programs[0].ops)))  # every op once, in program order
    kinds = [kind for kind, _steps in spans]
    assert kinds.count("host") == len(engine) == 2
    assert plan.kernels == kinds.count("kernel")
    assert kinds[-1] == "kernel"  # the run ends in a kernel: every block's quiet, every PE meeting
    for kind, steps in spans:
        assert (kind == "host") == all(step.who.kind == "host" for step in steps)
    hosts = [steps[0] for kind, steps in spans if kind == "host"]
    # the second put_signal publishes the reduce before it (the peer reads out after its wait):
    # the kernel before ends fenced
    assert hosts[1].kernel_start and hosts[1].end_fence


def test_without_the_copy_engine_the_plan_is_one_kernel():
    sched = trace(TWOSHOT, 2, 1 << 18)
    plan = plan_rank(sched, 0)
    assert plan.kernels == 1 and [k for k, _s in kernel_spans(plan.steps)] == ["kernel"]


# ------------------------------------------------------------------------------- the code
@pytest.fixture(scope="module")
def twoshot_cu() -> str:
    return program.generate(lower(trace(TWOSHOT, 2, 1 << 18), Build("nvshmem", copy_engine=MiB // 2)))


def test_the_host_issues_each_put_signal_on_the_stream_between_the_launches(twoshot_cu):
    for body in kernel_bodies(twoshot_cu):
        assert "on_stream" not in body and "nvshmemx_putmem_signal_block" not in body
    for rank in (0, 1):
        lines = code(rank_function(twoshot_cu, rank))
        calls = [line for line in lines if line.startswith(("nvshmemx_putmem", "cw_nv_launch"))]
        assert [c.split("(")[0] for c in calls] == ["nvshmemx_putmem_signal_on_stream", "cw_nv_launch",
                                                    "nvshmemx_putmem_signal_on_stream", "cw_nv_launch"]
        assert calls[0].endswith(f", NVSHMEM_SIGNAL_SET, {1 - rank}, s);")
        assert f"cw_nv_rank{rank}_call0" in calls[1] and f"cw_nv_rank{rank}_call1" in calls[3]


def test_every_copy_says_why_and_the_kernel_before_it_fences(twoshot_cu):
    fn = rank_function(twoshot_cu, 0)
    assert fn.count("// on the copy engine:") == 2
    assert "the signal lands after the data" in fn
    bodies = kernel_bodies(twoshot_cu)
    assert "the copy engine's put (op 3) starts" in bodies[0]
    assert code(bodies[0])[-1] == "if (threadIdx.x == 0) nvshmem_fence();"


def test_setup_stops_a_run_whose_peer_is_not_over_nvlink(twoshot_cu):
    assert 'if (cw_rank == 0 && !nvshmem_ptr(bufs[1].ptr, 1))' in twoshot_cu
    assert "generate without --copy-engine" in twoshot_cu


def test_a_plain_put_uses_the_put_without_a_signal(tmp_path):
    one = schedule(tmp_path, """
x = r.symmetric("x", count=1 << 18, role="input")
y = r.symmetric("y", count=1 << 18, role="output")
r.put(1 - r.rank, y, x, nbi=True)
r.quiet()""", 2)
    text = program.generate(lower(one, Build("nvshmem", copy_engine=1)))
    assert "nvshmemx_putmem_on_stream(a.b_y, a.b_x, 1048576, 1, s);" in rank_function(text, 0)
    assert "here it has landed" in text


def test_the_nccl_backend_refuses_the_copy_engine():
    with pytest.raises(LoweringError, match="--copy-engine is a lowering of the nvshmem backend"):
        Build("nccl", copy_engine=1)


def test_the_cli_names_the_backend_the_lowering_needs(tmp_path, capsys):
    from clockworks_dist import cli

    rc = cli.main(["codegen", str(TWOSHOT), "--np", "2", "--copy-engine", "1MiB", "-o", str(tmp_path)])
    assert rc == 2
    assert "--copy-engine is a lowering of the nvshmem backend" in capsys.readouterr().err


def test_a_kernel_per_call_keeps_its_copies_in_call_order():
    one = load_file(str(ONE_PE))[0].trace(1, sizes={"CHUNK": 1 << 18})
    text = program.generate(lower(one, Build("nvshmem", 3, "alternate", copy_engine=MiB)))
    calls = [line.split("(")[0] for line in code(rank_function(text, 0))
             if line.startswith(("nvshmemx_putmem", "cw_nv_launch"))]
    assert calls == ["nvshmemx_putmem_signal_on_stream", "cw_nv_launch"] * 3


# ------------------------------------------------------------------------------- the model
def test_the_simulator_moves_a_copy_at_the_copy_engines_rate():
    topo = choose_topology("h200x2-nv18").topology
    sched = trace(PUTBW, 2, 1 << 28)  # 1 GiB each way
    slow = topo.model_copy(update={"constants": topo.constants.model_copy(update={"copy_engine_GBs": 100.0})})
    fast = run_us(sched, topo, "graph", "nvshmem", copy_engine=MiB)
    assert run_us(sched, slow, "graph", "nvshmem", copy_engine=MiB) > 2.5 * fast
    # without the lowering the copy engine's rate plays no part
    assert run_us(sched, slow, "graph", "nvshmem") == pytest.approx(run_us(sched, topo, "graph", "nvshmem"))


# ------------------------------------------------------------------------------- compiling
def test_the_program_compiles_and_links(tmp_path, twoshot_cu, nvshmem_toolchain):
    tc = nvshmem_toolchain
    cu = tmp_path / "twoshot_ce.cu"
    cu.write_text(twoshot_cu)
    assert build.compile_program(cu, "nvshmem", tmp_path / "bin", tc, timeout=600).is_file()


# ------------------------------------------------------------------------------- the library
def _library(tmp_path: Path, calls: int = 2):
    from clockworks_dist.codegen import library

    defn = load_file(str(ROOT / "protocols" / "nvshmem_allreduce_family.py"))[0]
    winners = [library.Winner(16 << 20, {"ALGO": "twoshot"}, 0, None, 72.9, 75.6, True,
                              "ALGO=twoshot, copy engine >= 1 MiB", copy_engine=MiB)]
    entries = library.plan_entries(defn, 2, winners, calls=calls)
    out = tmp_path / "lib"
    library.emit(entries, {"source": "test", "topology": "h200x2-nv18", "file": "f.py", "hash": "0" * 64}, out)
    return out


def test_a_library_call_issues_its_copies_between_its_kernels(tmp_path):
    out = _library(tmp_path, calls=2)
    text = (out / "cw_nvshmem_allreduce_family.cu").read_text()
    call = text[text.index("int cwl_call_0(int pe, int call, cudaStream_t s) {"):]
    call = call[:call.index("\n}\n")]
    rank0 = call[call.index("case 0: {"):call.index("case 1: {")]
    # per call: the reduce-scatter's put, a kernel, the all-gather's put, a kernel (two-shot, none between calls)
    steps = [line.split("(")[0] for line in code(rank0) if line.startswith(("nvshmemx_putmem", "CWL_TRY(cwl_launch"))]
    assert steps == ["nvshmemx_putmem_signal_on_stream", "CWL_TRY", "nvshmemx_putmem_signal_on_stream", "CWL_TRY"] * 2
    assert code(rank0).count("case 0:") == 1 and code(rank0).count("case 1:") == 1
    assert "kernels[3]" in rank0 and "kernels[4]" not in rank0
    assert "on the copy engine, which is not reached over NVLink" in text
    described = (out / "cw_nvshmem_allreduce_family.json").read_text()
    assert '"copy_engine": 1048576' in described


def test_the_library_with_copies_compiles_and_links(tmp_path, nvshmem_toolchain):
    from test_dispatch import compile_library

    assert compile_library(_library(tmp_path), nvshmem_toolchain).is_file()


# ------------------------------------------------------------------------------- tune
def test_tune_tries_the_copy_engine_where_a_put_is_that_large(tmp_path):
    from clockworks_dist import tune

    family = ROOT / "protocols" / "nvshmem_allgather_family.py"
    report = tune.tune(str(family), "h200x2-nv18", 2, [MiB, 64 * MiB], str(tmp_path), dry=True,
                       copy_engine=[16 * MiB])
    assert report["copy_engine"] == [16 * MiB]
    small, large = report["sizes"]
    labels = lambda row: {r["label"] for r in row["ranked"]}  # noqa: E731
    assert not any("copy engine" in label for label in labels(small))  # no put of 16 MiB at 1 MiB
    assert {"ALGO=direct, copy engine >= 16 MiB", "ALGO=ring, copy engine >= 16 MiB"} <= labels(large)
    memory = tune.load_memory(str(tmp_path / tune.MEMORY_FILE))
    engine = [t for t in memory.values() if t.get("copy_engine")]
    assert len(engine) == 2 and all(t["not_lowered"] == [MiB] for t in engine)
    # a rerun takes every try from the memory
    again = tune.tune(str(family), "h200x2-nv18", 2, [MiB, 64 * MiB], str(tmp_path), dry=True, copy_engine=[16 * MiB])
    assert again["skipped"] == again["variants"] == 4
    assert "issued on the copy engine (`--copy-engine`)" in (tmp_path / "tune.md").read_text()
    # each candidate is predicted as the program validate would build and time: the copy engine's
    # puts priced as such, not as the plain variant's
    from clockworks_dist.dsl import load_file, params
    from clockworks_dist.perf.predict import size_binding
    from clockworks_dist.topology import choose_topology

    topo = choose_topology("h200x2-nv18").topology
    [defn] = load_file(str(family))
    times = {r["label"]: r["time_us"] for r in large["ranked"]}
    with params.bind({"ALGO": "direct"}):
        sched = defn.trace(2, sizes=size_binding(defn, 2, 64 * MiB, None, defn.trace(2)))
    assert times["ALGO=direct"] == pytest.approx(run_us(sched, topo, "graph", "nvshmem"), abs=1e-3)
    assert times["ALGO=direct, copy engine >= 16 MiB"] == pytest.approx(
        run_us(sched, topo, "graph", "nvshmem", copy_engine=16 * MiB), abs=1e-3)
    assert times["ALGO=direct, copy engine >= 16 MiB"] != pytest.approx(times["ALGO=direct"], abs=1e-3)
