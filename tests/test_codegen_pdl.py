"""Programmatic dependent launch (PDL) between the NVSHMEM backend's kernels: every generated kernel
begins with the wait for the kernel before it (`cw_nv_after_previous_kernel`, `griddepcontrol.wait`)
before any memory access, in a kernel per call and in the single kernel alike; only plain launches
carry the PDL attribute (`cw_nv_launch`), cooperative ones keep the cooperative attribute or
NVSHMEM's collective launch, only with CW_NV_PDL set (measured: no gain on one PE), and each kernel
lets its dependents be scheduled right after its wait; the library's launches (all cooperative)
carry none. Compiled with nvcc for sm_90 (the wait is the first instruction of each kernel's PTX
after reading its parameters) and for sm_80 (no wait, which that architecture lacks); skipped, with
the reason, where nvcc or the NVSHMEM wheel is missing. Running them is for the GPU scripts
(scripts/gpu/one_pe_calls_h200.sh, its pdl spec)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from clockworks_dist.lowering import Build, lower
from clockworks_dist.codegen import build, program
from clockworks_dist.lowering import packets
from clockworks_dist.dsl.load import load_file

from test_packets import family

ROOT = Path(__file__).resolve().parent.parent
ONE_PE = ROOT / "scripts" / "gpu" / "one_pe_calls.py"
DISPATCH = ROOT / "results" / "h200x2" / "tune_all" / "dispatch" / "cw_nvshmem_allreduce_family.cu"
WAIT = "cw_nv_after_previous_kernel();"
KERNEL = re.compile(r"__global__ void __launch_bounds__\(CW_NV_THREADS\) (cw_nv_rank\d+(?:_call\d+)?)\([^)]*\) \{\n")


def one_pe(calls: int) -> str:
    """scripts/gpu/one_pe_calls.py on one PE, `calls` calls with alternate between them, a kernel per call
    (what `validate --np 1 --calls K` generates); calls 1: the single kernel."""
    one = load_file(str(ONE_PE))[0].trace(1)
    if calls == 1:
        return program.generate(one, "nvshmem")
    return program.generate(lower(one, Build("nvshmem", calls, "alternate")))


def oneshot_packets(calls: int) -> str:
    """The one-shot all-reduce at 2 ranks, `calls` calls as packets, a kernel per call."""
    one = family("oneshot", 2)
    return program.generate(lower(one, Build("nvshmem", calls, "alternate", packets=packets.DEFAULT_MAX_BYTES)))


def kernels(text: str) -> list[tuple[str, str]]:
    """Each generated rank kernel's name and body (from the line after its opening brace to its closing
    one), in the order of the text (a library has the same names in each size's namespace)."""
    return [(m.group(1), text[m.end():text.index("\n}\n", m.end())]) for m in KERNEL.finditer(text)]


def first_statement(body: str) -> str:
    """The body's first line that is not a comment or blank."""
    return next(line.strip() for line in body.split("\n") if line.strip() and not line.strip().startswith("//"))


def code(text: str) -> str:
    """`text` without its // comments (what is compiled, near enough for a search)."""
    return "\n".join(line.split("//", 1)[0] for line in text.split("\n"))


def function(text: str, head: str) -> str:
    start = text.index(head)
    return text[start:text.index("\n}\n", start)]


@pytest.mark.parametrize("name,make,count", [
    ("one PE, 4 calls", lambda: one_pe(4), 4),
    ("one PE, the single kernel", lambda: one_pe(1), 1),
    ("one-shot packets, 2 ranks, 3 calls", lambda: oneshot_packets(3), 6),
])
def test_every_kernel_waits_for_the_one_before_first(name, make, count):
    text = make()
    found = kernels(text)
    assert len(found) == count, [kernel for kernel, _ in found]
    for kernel, body in found:
        assert first_statement(body) == WAIT, kernel
        head = body[:body.index(WAIT)]
        # the comment above it states why the order is stream order's
        assert "completed and its memory operations are visible" in head and "plain stream order" in head, kernel
        assert body.count(WAIT) == 1, kernel


def test_the_wait_is_griddepcontrol_wait_then_the_trigger_both_guarded_for_sm_90():
    text = one_pe(4)
    helper = function(text, "__device__ __forceinline__ void cw_nv_after_previous_kernel()")
    # the trigger comes after the wait, never before: the next kernel is scheduled early, but this
    # kernel's own accesses all follow the wait for the one before
    assert re.search(r'#if defined\(__CUDA_ARCH__\) && __CUDA_ARCH__ >= 900\n\s*asm volatile\("griddepcontrol\.wait;" '
                     r'::: "memory"\);\n\s*asm volatile\("griddepcontrol\.launch_dependents;" ::: "memory"\);\n#endif',
                     helper), helper
    compiled = code(text)
    assert compiled.count("griddepcontrol.launch_dependents") == 1
    for api in ("cudaTriggerProgrammaticLaunchCompletion", "cudaGridDependencySynchronize"):
        assert api not in compiled, api


def test_only_a_plain_launch_carries_programmatic_stream_serialization():
    text = one_pe(4)
    launch = function(text, "static void cw_nv_launch(")
    body = code(launch)
    # cooperative: the cooperative attribute (in a graph) or NVSHMEM's collective launch, as before
    assert re.search(r"if \(cooperative\) \{\s*attribute\.id = cudaLaunchAttributeCooperative;\s*"
                     r"attribute\.val\.cooperative = 1;\s*\} else \{\s*"
                     r"attribute\.id = cudaLaunchAttributeProgrammaticStreamSerialization;\s*"
                     r"attribute\.val\.programmaticStreamSerializationAllowed = 1;\s*\}", body), body
    assert body.count("cudaLaunchAttributeProgrammaticStreamSerialization") == 1
    assert "config.numAttrs = cooperative || pdl ? 1 : 0;" in body
    assert "if (capture == cudaStreamCaptureStatusActive || !cooperative) {" in body
    assert "CW_NV(nvshmemx_collective_launch(kernel, dim3(cw_nv_grid), dim3(CW_NV_THREADS), params, 0, s));" in body
    # and only on a grid of one block (a wider plain grid's next kernel would hold many blocks' slots)
    assert "static const bool pdl_asked = cw_nv_pdl_allowed(kernel);" in body
    assert "const bool pdl = pdl_asked && cw_nv_grid == 1;" in body
    assert "bool cooperative = always || needs_cooperative;" in body
    # only with CW_NV_PDL, and where the kernels were compiled without the wait (before sm_90)
    allowed = code(function(text, "static bool cw_nv_pdl_allowed("))
    assert 'getenv("CW_NV_PDL") == nullptr) return false;' in allowed
    assert "return f.ptxVersion >= 90;" in allowed
    assert code(text).count("cudaLaunchAttributeProgrammaticStreamSerialization") == 1
    # the last call's kernel (it ends the run with every PE meeting) is launched as a collective
    launches = re.findall(r"cw_nv_launch\(\(const void\*\)(cw_nv_rank0_call\d), &a, s, (true|false)\);", text)
    assert launches == [("cw_nv_rank0_call0", "false"), ("cw_nv_rank0_call1", "false"),
                        ("cw_nv_rank0_call2", "false"), ("cw_nv_rank0_call3", "true")]


def test_the_committed_library_launches_without_pdl_and_its_kernels_wait():
    text = DISPATCH.read_text()
    found = kernels(text)
    assert len(found) == 8 * 2 * 32  # sizes x ranks x calls
    assert all(first_statement(body) == WAIT for _, body in found)
    assert "cudaLaunchAttributeProgrammaticStreamSerialization" not in code(text)
    launch = code(function(text, "int cwl_launch("))
    # a kernel none of whose blocks waits for another is launched plainly, whatever its grid; any other
    # cooperatively
    assert "if (!cooperative) {" in launch and "cudaLaunchKernel(kernel, dim3(grid)" in launch
    assert "cooperative.id = cudaLaunchAttributeCooperative;" in launch and "config.numAttrs = 1;" in launch
    # no size's calls sync their grid (the two-shot's all-gather runs inside its reduce, so no grid-wide
    # sync between the shots): plain, but for the K-th call, which ends the run (every block's quiet, a
    # grid-wide sync, every PE meeting). The reset kernel meets every PE
    flags = [f.split(", ") for f in re.findall(r"static const bool cooperative\[\] = \{([^}]*)\};", text)]
    assert len(flags) == 8 * 2 and flags == [["false"] * 31 + ["true"]] * 16
    assert "cwl_launch((const void*)cwl_reset_kernel, &r, 1, s, true);" in code(text)


# ---------------------------------------------------------------------------- compiling
@pytest.fixture(scope="module")
def calls_cu(tmp_path_factory, nvshmem_toolchain):
    out = tmp_path_factory.mktemp("pdl")
    cu = out / "calls.cu"
    cu.write_text(one_pe(4))
    return cu


def _ptx(cu: Path, arch: str) -> str:
    """nvcc's PTX of `cu` for `arch`, with the flags of a build."""
    tc = build.find_toolchain("nvshmem", arch=arch)
    cmd = build.compile_command(cu, "nvshmem", tc, cu.with_suffix(""), cu.parent / "link")
    ptx = cu.with_name(f"{cu.stem}_{arch}.ptx")
    cmd = cmd[:cmd.index(str(cu)) + 1] + ["-ptx", "-o", str(ptx)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return ptx.read_text()


def test_a_kernel_per_call_with_pdl_compiles_and_links(calls_cu):
    tc = build.find_toolchain("nvshmem")
    assert tc.arch == build.DEFAULT_ARCH or tc.arch_source != "default"
    assert build.compile_program(calls_cu, "nvshmem", calls_cu.parent / "bin", tc, timeout=600).is_file()


def test_for_sm_90_the_wait_comes_before_any_memory_access_of_each_kernel(calls_cu):
    ptx = _ptx(calls_cu, "sm_90")
    entries = re.findall(r"\.entry (_Z\d+cw_nv_rank0_call\d\w*)\((.*?)\n\}", ptx, re.S)
    assert len(entries) == 4, [name for name, _ in entries]
    for name, body in entries:
        assert body.count("griddepcontrol.wait;") == 1, name
        before = body[body.index("{"):body.index("griddepcontrol.wait;")]
        ops = [line.split()[0] for line in before.split("\n")
               if line.strip() and not line.strip().startswith(("//", ".reg", "{"))]
        # only the kernel's parameters are read before it: no global, shared or constant access, no call
        assert all(op.startswith(("ld.param", "cvta.to.global", "mov.")) for op in ops), (name, ops)


def test_for_sm_80_the_wait_is_left_out(calls_cu):
    ptx = _ptx(calls_cu, "sm_80")
    assert ".target sm_80" in ptx
    assert "griddepcontrol" not in ptx


GRID_WAITS = ("cw_nv_grid_sync(", "cw_nv_grid_barrier(", "cw_nv_quiet_all(", "cw_nv_grid_sum(", "grid.sync()",
              "nvshmem_barrier", "nvshmem_sync", "nvshmemx_team_sync", "_reduce_block(", "_fcollect_block(",
              "_alltoall_block(", "_broadcast_block(")


# (protocol, params, calls, between, packets, kernels launched plainly of the 4 ranks' 12, blocks a kernel)
@pytest.mark.parametrize("name,params,calls,between,packets_max,plain,blocks", [
    ("nvshmem_allreduce_family", {"ALGO": "oneshot"}, 3, "alternate", 0, 8, 4),
    ("nvshmem_allreduce_family", {"ALGO": "oneshot"}, 3, "alternate", packets.DEFAULT_MAX_BYTES, 8, 1),
    ("nvshmem_allreduce_family", {"ALGO": "twoshot"}, 3, "none", 0, 0, 7),  # grid-wide syncs between the shots
    ("nvshmem_allgather_family", {}, 3, "alternate", 0, 8, 4),
    ("nvshmem_reduce_scatter_family", {}, 3, "alternate", 0, 8, 4),
    ("nvshmem_alltoall_dispatch", {}, 3, "barrier", 0, 4, 4),  # a barrier_all between calls: a collective
    ("nvshmem_fenced_dispatch", {}, 3, "barrier", 0, 4, 11),
    ("nvshmem_twoshot_allreduce", {}, 3, "barrier", 0, 0, 7),
])
def test_a_kernel_launched_plainly_has_no_block_waiting_for_another(name, params, calls, between, packets_max,
                                                                   plain, blocks):
    """`nvshmem_plan.syncs_grid` decides the launch; the emitted kernels agree with it: every kernel launched
    plainly (at 4 ranks, with a grid of several blocks where its ops are wide) calls no grid-wide sync and
    no NVSHMEM collective, and the program model prices the same launches (`perf.programs`)."""
    from clockworks_dist.dsl import params as params_mod
    from clockworks_dist.perf.programs import NvshmemKernels

    with params_mod.bind(params):
        sched = load_file(str(ROOT / "protocols" / f"{name}.py"))[0].trace(4)
    lowered = lower(sched, Build("nvshmem", calls, between, packets=packets_max))
    text = program.generate(lowered)
    found = dict(kernels(text))
    plainly = 0
    for rank in range(4):
        assert lowered.plan(rank).blocks == blocks
        launches = re.findall(rf"cw_nv_launch\(\(const void\*\)(cw_nv_rank{rank}(?:_call\d+)?), &a, s, (true|false)\);",
                              text)
        assert len(launches) == lowered.plan(rank).kernels
        model = NvshmemKernels(lowered.sched, None, "graph", lowered)
        starts = [0] + sorted(m for r, m in model.call_kernels if r == rank)
        for (kernel, how), start in zip(launches, starts):
            assert model.cooperative(rank, start) == (how == "true"), (kernel, start)
            if how == "false":
                plainly += 1
                assert not [w for w in GRID_WAITS if w in code(found[kernel])], kernel
            else:  # launched cooperatively: it does sync its grid or meet the other PEs
                assert [w for w in GRID_WAITS if w in code(found[kernel])], kernel
    assert plainly == plain


def test_the_committed_library_launches_plainly_only_kernels_whose_blocks_never_wait_for_each_other():
    """Each call's flag (`cooperative[call]`, beside the kernels it launches) against that kernel's text:
    a kernel launched plainly calls no grid-wide sync and no NVSHMEM collective (a grid-wide sync in a
    plain launch of several blocks faults), and one launched cooperatively does one of them."""
    text = DISPATCH.read_text()
    bodies = {}
    for ns in re.findall(r"namespace (cw_size\d+) \{", text):
        block = text.split(f"namespace {ns} {{")[1].split(f"}}  // namespace {ns}")[0]
        bodies.update({f"{ns}::{name}": body for name, body in kernels(block)})
    checked = 0
    for names, flags in re.findall(r"static const void\* const kernels\[\] = \{([^}]*)\};\n"
                                   r"\s*static const bool cooperative\[\] = \{([^}]*)\};", text):
        names = [n.strip().removeprefix("(const void*)") for n in names.split(",")]
        flags = [f.strip() == "true" for f in flags.split(",")]
        assert len(names) == len(flags) == 32
        for name, coop in zip(names, flags):
            waits = [w for w in GRID_WAITS if w in code(bodies[name])]
            assert bool(waits) == coop, (name, waits)
            checked += 1
    assert checked == 8 * 2 * 32
