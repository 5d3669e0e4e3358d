"""A reduce and the puts of its destination right after it, run as one pass (`nvshmem_plan.fusable_put`,
`Step.fused`, `cw_nv_reduce_put`): where the two-shot all-gather puts what its reduce just wrote, each
block stores its sums into its own destination and straight into every peer's, and the puts emit no
copy of their own (a put_signal only its signal, after every block's fence). Fused only where the put
waits for nothing but that reduce; a put asked onto the copy engine is not fused. Compiling needs nvcc
and the NVSHMEM wheel (skipped where missing); running it is scripts/gpu/pk_reduce_h200x1.sh's job (PEs
sharing one GPU) and validate's on a machine with a GPU per PE."""

from __future__ import annotations

import pytest

import clockworks_dist as cw
from clockworks_dist import ir
from clockworks_dist.check import check
from clockworks_dist.codegen import build, program
from clockworks_dist.lowering import Build, lower
from clockworks_dist.lowering.nvshmem_plan import fusable_put, syncs_grid

from test_packets import family


def _steps(low, rank=0):
    return {s.index: s for s in low.plan(rank).steps}


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_the_two_shot_all_gather_runs_inside_its_reduce(ranks):
    low = lower(family("twoshot", ranks, 1 << 16), Build("nvshmem"))
    ops = low.sched.programs[0].ops
    steps = _steps(low)
    reduce_at = next(m for m, op in enumerate(ops) if isinstance(op, ir.LocalReduce))
    puts = list(range(reduce_at + 1, reduce_at + ranks))
    assert all(isinstance(ops[m], ir.PutSignal) and steps[m].fused for m in puts)
    assert all(steps[m].who == steps[reduce_at].who and steps[m].who.kind == "all" and not steps[m].pre for m in puts)
    assert not any(steps[m].fused for m in range(reduce_at))  # the reduce-scatter's puts read x, not a sum
    text = program.generate(low)
    call = text.split("cw_nv_rank0(CwNvArgs0 a) {")[1].split("\n}\n")[0]
    assert f"cw_nv_reduce_put<float, {ranks - 1}>(b_out, cw_srcs, {ranks}," in call
    pes = ", ".join(str(p) for p in range(1, ranks))
    assert f"const int cw_pes[] = {{{pes}}};" in call
    # the all-gather's data is never put again: only the signals, each after every block's fence
    assert call.count("cw_nv_put(") == ranks - 1  # the reduce-scatter's puts only
    assert call.count("its data went with the reduce above") == ranks - 1
    assert not syncs_grid(low.sched, 0, [steps[m] for m in [reduce_at, *puts]])
    assert check(low.sched, timeout=120).verdict == "verified"


def test_the_copy_engine_when_asked_takes_a_put_the_blocks_could_fuse():
    """`--copy-engine SIZE` puts every put of at least SIZE bytes on the copy engine, the all-gather's
    too: nothing is fused then; below SIZE the blocks fuse it."""
    low = lower(family("twoshot", 4, 1 << 16), Build("nvshmem", copy_engine=1 << 16))
    ops = low.sched.programs[0].ops
    assert low.engine_ops[0] == {m for m, op in enumerate(ops) if isinstance(op, ir.PutSignal)}
    assert not any(s.fused for s in low.plan(0).steps)
    above = lower(family("twoshot", 4, 1 << 16), Build("nvshmem", copy_engine=1 << 20))
    assert not above.engine_ops[0] and sum(s.fused for s in above.plan(0).steps) == 3


def test_a_put_that_waits_for_more_than_the_reduce_is_not_fused():
    """At a small size the two-shot's reduce and all-gather run on one block, and the put_signal's
    signal lets the peer go on after every block has polled its wait: it waits for the wait too, so it
    keeps its own put (the last block to arrive runs it)."""
    low = lower(family("twoshot", 4, 256), Build("nvshmem"))
    assert not any(s.fused for s in low.plan(0).steps)
    assert "cw_nv_reduce_put<" not in program.generate(low).split("cw_nv_rank0(CwNvArgs0 a) {")[1]


def _reduce_then(kind: str):
    """Rank 0 sums x and y into s, then (kind) puts s to rank 1, or fences first, or puts x."""
    def fn(r):
        x = r.symmetric("x", count=1 << 15, role="input")
        y = r.symmetric("y", count=1 << 15, role="input")
        s = r.symmetric("s", count=1 << 15, role="output")
        if r.rank == 0:
            r.reduce(s, x, y)
            if kind == "fence":
                r.fence()
            r.put(1, s, x if kind == "other" else s)
            r.quiet()
        r.barrier_all()
    return cw.schedule(fn).trace(2)


@pytest.mark.parametrize("kind,fused", [("same", True), ("fence", False), ("other", False)])
def test_only_a_put_of_exactly_the_sums_right_after_the_reduce_is_fused(kind, fused):
    low = lower(_reduce_then(kind), Build("nvshmem"))
    m = next(i for i, op in enumerate(low.sched.programs[0].ops) if isinstance(op, ir.Put))
    assert fusable_put(low.sched, 0, m) == fused and _steps(low)[m].fused == fused
    assert check(low.sched, timeout=60).verdict == "verified"


def test_fused_programs_compile(tmp_path, nvshmem_toolchain):
    for name, low in (("fused4", lower(family("twoshot", 4, 1 << 16), Build("nvshmem", 2, "none"))),
                      ("fused2", lower(family("twoshot", 2, 1 << 16), Build("nvshmem", 3, "none")))):
        cu = tmp_path / f"{name}.cu"
        cu.write_text(program.generate(low))
        assert "cw_nv_reduce_put<float" in cu.read_text()
        assert build.compile_program(cu, "nvshmem", tmp_path / name, nvshmem_toolchain).exists()
