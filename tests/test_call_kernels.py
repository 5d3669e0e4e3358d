"""One kernel per call (`--calls K` on the NVSHMEM backend): where each call begins in the K-call
schedule (`lowering.repeat.call_starts`), how the packets rewrite moves those places (`Lowered.remap`), the
plan's kernel boundaries (a fenced grid-wide sync: nothing one kernel's op waits for lies in the
kernel before), the program's kernels and launches, and validate's default (a kernel per call) and
`--fuse-calls`. Compiling needs nvcc and the NVSHMEM wheel (skipped, with the reason, where they are
missing); running is for the GPU scripts."""

from __future__ import annotations

import re

import pytest

from clockworks_dist.lowering import Build, lower
from clockworks_dist import ir
from clockworks_dist.codegen import build, program
from clockworks_dist.lowering import nvshmem_plan
from clockworks_dist.lowering import packets
from clockworks_dist.runtime import validate
from clockworks_dist.lowering.repeat import call_starts, repeat

from test_packets import FAMILY, family

SEPARATOR = {"barrier": ir.BarrierAll, "sync": ir.SyncAll}


@pytest.mark.parametrize("between", ["barrier", "sync", "alternate", "none"])
def test_each_call_begins_where_call_starts_says(between):
    one = family("twoshot", 4)
    rep = repeat(one, 3, between)
    starts = call_starts(one, 3, between)
    for p_one, p_rep in zip(one.programs, rep.programs):
        ms = starts[p_one.rank]
        assert len(ms) == 2
        for m in ms:
            first = p_rep.ops[m]
            if between in SEPARATOR:
                assert isinstance(first, SEPARATOR[between])
                first = p_rep.ops[m + 1]
            assert first.kind == p_one.ops[0].kind and first.loc == p_one.ops[0].loc
            assert p_rep.ops[m - 1].loc == p_one.ops[-1].loc  # the call before ends just before


def test_the_packets_rewrite_moves_the_starts_with_the_ops():
    one = family("twoshot", 2)  # its all-gather lands in `out`: copied out of the packets after the wait
    low = packets.lower(repeat(one, 3, "alternate"))
    starts = call_starts(one, 3, "alternate")
    moved = low.remap(starts)
    assert moved != starts  # a copy out of the packets follows each all-gather wait, so later ops move
    for rank, ms in moved.items():
        for old, new in zip(starts[rank], ms):
            before = repeat(one, 3, "alternate").programs[rank].ops[old]
            after = low.sched.programs[rank].ops[new]
            assert (after.kind, after.loc) == (before.kind, before.loc)


def _kernels(text: str, rank: int) -> list[str]:
    """The bodies of rank `rank`'s kernels, in the order of the text."""
    heads = [m.start() for m in re.finditer(rf"__global__ void __launch_bounds__\(CW_NV_THREADS\) cw_nv_rank{rank}"
                                            rf"(_call\d+)?\(", text)]
    return [text[h:text.index("\n}\n", h)] for h in heads]


@pytest.mark.parametrize("algo,between,lowered", [("oneshot", "alternate", True), ("twoshot", "none", True),
                                                  ("oneshot", "sync", False), ("oneshot", "barrier", False)])
def test_a_program_of_three_calls_has_a_kernel_per_call(algo, between, lowered):
    one = family(algo, 2)
    text = program.generate(lower(one, Build("nvshmem", 3, between,
                                             packets=packets.DEFAULT_MAX_BYTES if lowered else 0)))
    # the steps by hand: three calls, where each begins, packets, the starts moved with the ops
    rep = repeat(one, 3, between)
    starts = call_starts(one, 3, between)
    low = packets.lower(rep) if lowered else None
    sched = low.sched if low else rep
    splits = low.remap(starts) if low else starts
    for rank in range(2):
        bodies = _kernels(text, rank)
        assert len(bodies) == 3
        # every op of the rank is in exactly one kernel, each kernel's from its call's first op on
        marks = [[int(n) for n in re.findall(r"cw_nv_mark\(a\.marks, (\d+)\);", body)] for body in bodies]
        ops = len(sched.programs[rank].ops)
        assert [m for ms in marks for m in ms] == list(range(ops + 1))  # + the end of the run
        assert [ms[0] for ms in marks[1:]] == splits[rank]
        # only the last kernel ends the run (quiet, then every rank meets)
        assert ["nvshmem_barrier_all();" in body.split("// the end of a run")[-1] and "// the end of a run" in body
                for body in bodies] == [False, False, True]
        launches = re.findall(rf"cw_nv_launch\(\(const void\*\)(cw_nv_rank{rank}\w*), &a, s, (true|false)\);", text)
        assert [name for name, _ in launches] == [f"cw_nv_rank{rank}_call{k}" for k in range(3)]
        # a kernel that calls an NVSHMEM collective gets NVSHMEM's collective launch whatever its grid;
        # the others may start plainly when their grid is one block (cw_nv_launch)
        calls_collective = ["nvshmem_barrier_all()" in body or "nvshmem_sync_all()" in body for body in bodies]
        assert [flag == "true" for _, flag in launches] == calls_collective
        assert calls_collective[-1] and (between in ("sync", "barrier") or not any(calls_collective[:-1]))
    # the setup keeps a grid every kernel of the rank fits
    assert "for (int k = first[cw_rank]; k < first[cw_rank] + count[cw_rank]; ++k)" in text


def test_a_boundary_is_a_fenced_grid_sync_and_no_need_crosses_it():
    one = family("oneshot", 2)
    low = packets.lower(repeat(one, 3, "alternate"))
    splits = low.remap(call_starts(one, 3, "alternate"))
    fused = nvshmem_plan.plan_rank(low.sched, 0, packets=low)
    split = nvshmem_plan.plan_rank(low.sched, 0, packets=low, splits=frozenset(splits[0]))
    assert split.kernels == 3 and fused.kernels == 1
    begins = [0, *splits[0]]
    for step in split.steps:
        first = max(b for b in begins if b <= step.index)
        assert all(need.item.index >= first for need in step.needs), step.index
    # The packet send of call 2 needs, in one kernel, the fence after this rank's reads of its packet
    # area (its signal lets the peer overwrite them); across a boundary the kernel before ends fenced.
    send = splits[0][0]
    assert any(n.fence for n in fused.steps[send].needs)
    assert split.steps[send].kernel_start and split.steps[send].end_fence and not split.steps[send].needs


def test_a_boundary_with_nothing_to_publish_ends_unfenced():
    """A barrier_all between calls quiets and fences everything before it: the kernel before the
    barrier's own kernel has nothing left to fence."""
    one = family("oneshot", 2)
    rep = repeat(one, 2, "barrier")
    splits = call_starts(one, 2, "barrier")
    # the barrier begins the second kernel; what the first did is still unpublished at its end
    plan = nvshmem_plan.plan_rank(rep, 0, splits=frozenset(splits[0]))
    assert plan.steps[splits[0][0]].kernel_start
    # a split right after the barrier: the barrier fenced everything, so that boundary needs no fence
    after = nvshmem_plan.plan_rank(rep, 0, splits=frozenset({splits[0][0] + 1}))
    assert after.steps[splits[0][0] + 1].kernel_start and not after.steps[splits[0][0] + 1].end_fence


def test_validate_writes_a_kernel_per_call_unless_fused(tmp_path):
    out = tmp_path / "split"
    report = validate.validate_file(str(FAMILY), backend="nvshmem", ranks=2, sizes="8KiB", timeout=60,
                                    out_dir=str(out), launcher="slurm", calls=3, between="alternate", packets=32768)
    assert report["verdict"] == "written"
    text = next((out / "build").glob("*/*.cu")).read_text()
    assert len(_kernels(text, 0)) == 3 and len(_kernels(text, 1)) == 3
    fused = tmp_path / "fused"
    validate.validate_file(str(FAMILY), backend="nvshmem", ranks=2, sizes="8KiB", timeout=60, out_dir=str(fused),
                           launcher="slurm", calls=3, between="alternate", packets=32768, fuse_calls=True)
    text = next((fused / "build").glob("*/*.cu")).read_text()
    assert len(_kernels(text, 0)) == 1
    # what the prepared job records, for the results' description once it has run
    assert validate._read_manifest(str(out))["kernels"] == "per call"
    assert validate._read_manifest(str(fused))["kernels"] == "one"


def test_a_program_of_a_kernel_per_call_compiles(tmp_path, nvshmem_toolchain):
    tc = nvshmem_toolchain
    one = family("oneshot", 2)
    cu = tmp_path / "calls.cu"
    cu.write_text(program.generate(lower(one, Build("nvshmem", 3, "alternate", packets=packets.DEFAULT_MAX_BYTES))))
    assert build.compile_program(cu, "nvshmem", tmp_path / "out", tc).exists()


@pytest.mark.parametrize("algo, between", [("oneshot", "alternate"), ("twoshot", "none")])
def test_a_kernel_per_call_wants_the_grid_of_its_widest_call_not_of_all_calls(algo, between):
    """Nothing of a call's kernel runs beside the next call's, so each kernel's independent one-block ops
    start again from block 0: K calls want the grid one call wants, not K times its one-block ops (20
    calls of the one-shot all-reduce at 8 KiB wanted 40 blocks before, and every launch was cooperative)."""
    one = family(algo, 2, 1024)
    calls = 20
    rep = repeat(one, calls, between)
    starts = call_starts(one, calls, between)
    for rank in range(one.world):
        single = nvshmem_plan.plan_rank(one, rank)
        per_call = nvshmem_plan.plan_rank(rep, rank, splits=frozenset(starts[rank]))
        assert per_call.kernels == calls
        assert per_call.blocks == single.blocks
        # every call's first op runs where the first call's does
        firsts = [per_call.steps[m].who for m in (0, *starts[rank])]
        assert all(who == firsts[0] for who in firsts)
