"""The NVSHMEM backend (`clockworks_dist.codegen.nvshmem`): every one-sided protocol generates at 2 and 4
ranks; each fence, quiet, grid-wide sync and last-block handoff sits where the semantics' accesses and
order rules put it, with the reason beside it; what the backend cannot do names the op's file:line
and the backend that can; and the generated programs compile with nvcc against the NVSHMEM wheel
(skipped, with the reason, where nvcc or the wheel is missing). No GPU is needed: running them is
scripts/gpu/nvshmem_smoke.sh's job."""

from __future__ import annotations

import glob
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import clockworks_dist as cw
from clockworks_dist import ir
from clockworks_dist.codegen import nvshmem, program
from clockworks_dist.lowering import nvshmem_plan
from clockworks_dist.dsl.load import load_file
from clockworks_dist.semantics import backends
from clockworks_dist.semantics.backends import Unsupported

ROOT = Path(__file__).resolve().parent.parent
PROTOCOLS = sorted(glob.glob(str(ROOT / "protocols" / "*.py")) + glob.glob(str(ROOT / "protocols" / "buggy" / "*.py"))
                   + glob.glob(str(ROOT / "protocols" / "runtime" / "*.py")))


def trace_file(path: str, ranks: int, **sizes) -> ir.Schedule:
    return load_file(str(ROOT / path))[0].trace(ranks, sizes=sizes or None)


def trace(fn, ranks: int = 2) -> ir.Schedule:
    return cw.schedule(fn).trace(ranks)


def one_sided(path: str) -> bool:
    sched = load_file(path)[0].trace(2)
    return not program.unsupported(sched, "nvshmem")


NV_PROTOCOLS = [p for p in PROTOCOLS if one_sided(p)]


def kernel(text: str, rank: int) -> str:
    """The kernel of `rank` in a generated program."""
    start = text.index(f"__global__ void __launch_bounds__(CW_NV_THREADS) cw_nv_rank{rank}(")
    return text[start:text.index(f"static void rank{rank}(cudaStream_t s)", start)]


def op_code(text: str, rank: int, index: int) -> str:
    """The code of op `index` in `rank`'s kernel: from its progress mark to the next op's."""
    body = kernel(text, rank)
    start = body.index(f"cw_nv_mark(a.marks, {index});")
    start = body.rindex("\n  //", 0, start)  # the user's file:line above it
    nxt = body.find(f"cw_nv_mark(a.marks, {index + 1});", start)
    return body[start:body.rindex("\n  //", start, nxt) if nxt > 0 else len(body)]


# --------------------------------------------------------------------------------- the table
def test_the_backend_decides_every_op_class():
    assert backends.BACKENDS["nvshmem-codegen"] is nvshmem.NVSHMEM is nvshmem.TARGET.table
    nvshmem.NVSHMEM.check_complete()
    for cls in (ir.Send, ir.Recv, ir.Group, ir.ReduceScatter, ir.ReduceTo):
        assert "--backend nccl" in nvshmem.UNSUPPORTED[cls]
    # collectives and barriers run on an NVSHMEM team only; on the world or an NCCL communicator they are NCCL's
    for cls in (ir.AllReduce, ir.AllGather, ir.AllToAll, ir.Broadcast, ir.Barrier, ir.TeamSplit, ir.TeamBarrier,
                ir.SignalStore):
        assert cls in nvshmem.TABLE


def nccl_collectives_fn(r):
    y = r.symmetric("y", count=4)
    r.all_reduce(y, y)
    sub = r.comm("halves", [q for q in range(r.world) if q % 2 == r.rank % 2])
    r.barrier(sub)


def test_an_nccl_op_names_its_file_line_and_the_backend_that_can():
    sched = trace_file("protocols/ring_allreduce.py", 2)
    with pytest.raises(Unsupported) as exc:
        program.generate(sched, "nvshmem")
    message = str(exc.value)
    assert re.search(r"ring_allreduce\.py:\d+: the nvshmem-codegen backend cannot run (group|send|recv)", message)
    assert "--backend nccl" in message


def test_an_nccl_collective_names_its_line_and_nccl_not_the_team_ops():
    sched = trace(nccl_collectives_fn, 4)
    problems = program.unsupported(sched, "nvshmem")
    assert len(problems) == 2, problems
    for kind, problem in zip(("all_reduce", "barrier"), problems):
        assert re.search(rf"test_codegen_nvshmem\.py:\d+: the nvshmem-codegen backend cannot run {kind}: an NCCL op",
                         problem), problem
        assert "--backend nccl" in problem


# ----------------------------------------------------------------------------------- teams
TEAMS = "protocols/team_allreduce_rows.py"


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_team_splits_are_made_on_the_host_with_the_schedules_triplets(ranks):
    sched = trace_file(TEAMS, ranks)
    text = program.generate(sched, "nvshmem")
    setup = text[text.index("int main("):]
    for prog in sched.programs:
        splits = [op for op in prog.ops if isinstance(op, ir.TeamSplit)]
        assert len(splits) == 2 + ranks // 2
        branch = setup[setup.index(f"if (cw_rank == {prog.rank}) {{  // rank {prog.rank}'s team splits"):]
        at = 0
        for op in splits:  # in the rank's program order, each with its triplet, then what NVSHMEM made is checked
            call = (f"nvshmem_team_split_strided(NVSHMEM_TEAM_WORLD, {op.start}, {op.stride}, {op.size}, nullptr, 0, "
                    f"&cw_team_c_{op.team})")
            at = branch.index(call, at)
            members = sched.comm(op.team).members(prog.rank)
            check = (f"nvshmem_team_my_pe(cw_team_c_{op.team}) != {members.index(prog.rank)}" if members
                     else f"if (cw_team_c_{op.team} != NVSHMEM_TEAM_INVALID)")
            assert branch.index(check, at) < branch.index("\n  }", at)
        # in the kernel, the split is where the schedule has it: the parent's members meet there
        code = op_code(text, prog.rank, 0)
        assert "nvshmem_sync_all();" in code and "cw_nv_grid_sync(grid, false);" in code
    # created once at setup, before any run; destroyed after every PE has met, before nvshmem_finalize
    assert setup.index("nvshmem_team_split_strided(") < setup.index("cw_load_expect(bufs") < setup.index("run(s);")
    end = text[text.rindex("nvshmem_barrier_all();  // every PE is done with every team"):]
    assert end.index("nvshmem_team_destroy(cw_team_c_row0);") < end.index("nvshmem_finalize();")
    assert text.count("nvshmem_team_destroy(") == 2 + ranks // 2


def test_team_ops_take_the_rank_s_team_handle():
    sched = trace_file(TEAMS, 4)
    text = program.generate(sched, "nvshmem")
    for prog in sched.programs:
        row, column = f"c_row{prog.rank // 2}", f"c_column{prog.rank % 2}"
        body = kernel(text, prog.rank)
        reduce_ = op_code(text, prog.rank, 4)
        assert "cw_nv_grid_sync(grid, true);" in reduce_  # every block's work fenced: peers may read the source
        assert f"nvshmemx_team_sync_block({row});\n    nvshmemx_float_sum_reduce_block({row}, b_row_sum, b_x, 2);" \
            in reduce_
        assert reduce_.rstrip().endswith("grid.sync();")
        barrier = op_code(text, prog.rank, 6)
        assert "cw_nv_quiet_all(grid);" in barrier and f"nvshmem_barrier({column});" in barrier
        # the kernel takes the handles of its teams only, filled from the host's
        assert f"[[maybe_unused]] nvshmem_team_t {row} = a.{row};" in body
        other = f"c_row{1 - prog.rank // 2}"
        assert f"a.{other}" not in body
        launch = text[text.index(f"static void rank{prog.rank}(cudaStream_t s)"):]
        assert f"a.{row} = cw_team_{row};" in launch[:launch.index("}")]


def team_kinds_fn(r):
    """Every team op the backend emits, on a team split from a team (world 4: evens {0, 2}, inner {2})."""
    x = r.symmetric("x", count=4, role="input")
    y = r.symmetric("y", count=4, role="output")
    g = r.symmetric("g", count=8, role="output")
    a = r.symmetric("a", count=4, role="output")
    b = r.symmetric("b", count=4, role="output", dtype="float32")
    evens = r.team_split_strided("evens", start=0, stride=2, size=2)
    inner = r.team_split_strided("inner", start=1, stride=1, size=1, parent=evens) if evens else None
    if evens is not None:
        r.team_sync(evens)
        r.team_reduce(evens, y, x, op="max")
        r.team_fcollect(evens, g, x)
        r.team_alltoall(evens, a, x)
        r.team_broadcast(evens, b, b, root=1)
    if inner is not None:
        r.team_barrier(inner)
    r.signal_store(r.signal("done"), 7)


def test_every_team_op_is_nvshmems_call_on_its_team():
    sched = trace(team_kinds_fn, 4)
    assert not program.unsupported(sched, "nvshmem")
    text = program.generate(sched, "nvshmem")
    rank2 = kernel(text, 2)
    assert "nvshmem_team_split_strided(cw_team_c_evens, 1, 1, 1, nullptr, 0, &cw_team_c_inner)" in text
    assert "if (blockIdx.x == 0 && threadIdx.x == 0) nvshmem_team_sync(c_evens);" in op_code(text, 2, 1)  # the split
    assert "nvshmem_team_sync(c_evens);" in op_code(text, 2, 2)  # team_sync
    for needle in ("nvshmemx_float_max_reduce_block(c_evens, b_y, b_x, 4);",
                   "nvshmemx_float_fcollect_block(c_evens, b_g, b_x, 4);",
                   "nvshmemx_float_alltoall_block(c_evens, b_a, b_x, 2);",  # per member: 4 elements / 2 members
                   "nvshmemx_float_broadcast_block(c_evens, b_b, b_b, 4, 1)",  # root: member 1 of the team, rank 2
                   "nvshmem_barrier(c_inner);"):
        assert needle in rank2, needle
    # ranks 1 and 3 are in no team: their kernels call nothing of one, and their splits only meet the world
    for rank in (1, 3):
        body = kernel(text, rank)
        assert "c_evens" not in body and "reduce_block" not in body and body.count("nvshmem_sync_all();") == 1


def test_a_team_collective_whose_source_overlaps_its_destination_is_refused():
    sched = trace(team_kinds_fn, 4)
    prog = sched.programs[0]
    at = next(i for i, op in enumerate(prog.ops) if isinstance(op, ir.AllGather))
    bad = prog.ops[at].model_copy(update={"dst": ir.Region(buffer="g", start=0, stop=8),
                                          "src": ir.Region(buffer="g", start=2, stop=6)})
    broken = sched.model_copy(update={"programs": (prog.model_copy(update={"ops": (*prog.ops[:at], bad,
                                                                                      *prog.ops[at + 1:])}),
                                                   *sched.programs[1:])})
    with pytest.raises(Unsupported, match=r"test_codegen_nvshmem\.py:\d+: .*cannot run all_gather: its source "
                                          r"g\[2:6\] overlaps its destination"):
        program.generate(broken, "nvshmem")


def test_teams_under_calls_are_refused_at_the_split():
    from clockworks_dist.lowering import Build, lower

    lowered = lower(trace_file(TEAMS, 2), Build("nvshmem", 2, "barrier"))
    with pytest.raises(Unsupported, match=r"team_allreduce_rows\.py:\d+: the nvshmem-codegen backend cannot run "
                                          r"team_split: team row0 is split more than once .*without --calls"):
        program.generate(lowered)


# ------------------------------------------------------------------------------- signal_store
def test_signal_store_is_a_volatile_store_ordered_only_by_the_plan():
    sched = trace_file("protocols/flag_reset_before_ack.py", 2)
    text = program.generate(sched, "nvshmem")
    for prog in sched.programs:
        plan = nvshmem_plan.plan_rank(sched, prog.rank)
        store = next(i for i, op in enumerate(prog.ops) if isinstance(op, ir.SignalStore))
        code = op_code(text, prog.rank, store)
        assert "if (threadIdx.x == 0) *(volatile uint64_t*)(cw_sig + 0) = 0ULL;" in code
        assert "a plain store" in code and "nvshmemx_signal_op" not in code and "atomic" in code
        # after every block has polled the flag (a block still polling would miss the 1 it waits for)
        step = plan.steps[store]
        assert step.pre in ("grid", "last") and any(n.item.index == store - 2 for n in step.needs)
        # the ack that lets the peer send again follows the reset, fenced
        ack = plan.steps[store + 1]
        assert any(n.item.index == store and n.fence for n in ack.needs)


def test_a_remote_buffer_this_rank_lacks_is_named():
    sched = trace(_put_signal_fn(4))
    mine = sched.programs[0]
    bare = mine.model_copy(update={"buffers": tuple(b for b in mine.buffers if b.name != "box")})
    broken = sched.model_copy(update={"programs": (bare, *sched.programs[1:])})
    with pytest.raises(Unsupported, match=r"test_codegen_nvshmem\.py:\d+: .*symmetric buffer box is not declared"):
        program.generate(broken, "nvshmem")


# ------------------------------------------------------------------- every protocol generates
def declared(path: str, ranks: int) -> int:
    """`ranks`, or the most ranks below it the protocol declares (a schedule that declares 2 only may not
    trace at 4: the team twins split teams of 2)."""
    defn = load_file(path)[0]
    below = [r for r in defn.ranks or () if r <= ranks]
    return ranks if not defn.ranks or ranks in defn.ranks or not below else max(below)


NV_CASES = sorted({(p, declared(p, ranks)) for p in NV_PROTOCOLS for ranks in (2, 4)})


@pytest.mark.parametrize("path,ranks", NV_CASES, ids=[f"{Path(p).stem}-{n}" for p, n in NV_CASES])
def test_every_one_sided_protocol_generates(path, ranks):
    sched = load_file(path)[0].trace(ranks)
    text = program.generate(sched, "nvshmem")
    for prog in sched.programs:
        body = kernel(text, prog.rank)
        at = 0
        for index, op in enumerate(prog.ops):  # the user's file:line above each op's code, in order
            at = body.index(program.op_comment(op).strip(), at)
            assert body.index(f"cw_nv_mark(a.marks, {index});", at) > at
        assert f"cw_nv_mark(a.marks, {len(prog.ops)});" in body
        assert (f"cw_nv_launch((const void*)cw_nv_rank{prog.rank}, &a, s, true);  "
                "// cooperative: it syncs its grid or calls an NVSHMEM collective") in text
    assert text.count("nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID") == 1
    assert "MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD)" in text
    assert "nvshmem_finalize();" in text and text.index("nvshmem_finalize();") < text.rindex("MPI_Finalize();")
    assert "cw_mark_words = 1 + cw_nv_grid;" in text  # a progress word per block


def test_the_protocol_list_holds_every_nvshmem_protocol():
    names = {Path(p).stem for p in NV_PROTOCOLS}
    assert {"nvshmem_alltoall_dispatch", "nvshmem_oneshot_allreduce", "nvshmem_twoshot_allreduce",
            "dissemination_barrier", "signal_without_fence"} <= names


@pytest.mark.parametrize("path", NV_PROTOCOLS, ids=lambda p: Path(p).stem)
def test_every_handoff_follows_only_earlier_ops_and_says_why(path):
    sched = load_file(path)[0].trace(declared(path, 4))
    text = program.generate(sched, "nvshmem")
    for prog in sched.programs:
        plan = nvshmem_plan.plan_rank(sched, prog.rank)
        for step in plan.steps:
            assert all(need.item.index < step.index for need in step.needs)
            if step.pre == "block":  # one block keeps the order only if it ran everything it follows
                assert all(need.item.who.same_block(step.who) for need in step.needs)
            code = op_code(text, prog.rank, step.index)
            if step.pre and step.needs:
                assert re.search(r"// (a grid-wide sync|block \d+ runs it|the last block to arrive runs it)", code)
                assert re.search(rf"op {step.needs[0].item.index}\b", code)  # the earlier op it keeps the order after
        assert plan.blocks <= nvshmem_plan.MAX_BLOCKS


# ----------------------------------------------------------------------------- fences and quiets
def _signal_fn(fence: bool, count: int):
    """signal_without_fence.py, with and without its fix (a fence between the put and the signal)."""
    def fenced_signal(r):
        x = r.buffer("x", count=count, role="input")
        out = r.buffer("out", count=count, role="output")
        box = r.symmetric("box", count=count, role="scratch")
        full = r.signal("full")
        if r.rank == 0:
            r.put(1, box, x)
            if fence:
                r.fence()
            r.signal_op(1, full, 1, op="set")
            r.quiet()
        else:
            r.wait_until(full, "eq", 1)
            r.copy(out, box)
    return fenced_signal


def test_without_a_fence_the_signal_goes_out_on_its_own_block():
    text = program.generate(trace_file("protocols/buggy/signal_without_fence.py", 2), "nvshmem")
    put, signal = op_code(text, 0, 0), op_code(text, 0, 1)
    assert "if (cw_nv_mine(0))" in put and "cw_nv_put(b_box, b_x, 8, 1, false, 1, blockIdx.x)" in put
    assert "if (cw_nv_mine(1))" in signal  # deliveries are unordered: nothing holds the signal back
    assert "cw_nv_block(" not in signal and "cw_nv_last(" not in signal and "cw_nv_grid_sync(" not in signal
    assert "nvshmemx_signal_op(cw_sig + 0, 1ULL, NVSHMEM_SIGNAL_SET, 1);" in signal


def test_a_fence_after_one_blocks_put_is_that_blocks_fence():
    sched = trace(_signal_fn(True, 2))
    text = program.generate(sched, "nvshmem")
    assert "fence: the deliveries to PE 1 above land before later ones to it" in op_code(text, 0, 1)
    assert "op 2 (test_codegen_nvshmem.py:" in op_code(text, 0, 1)
    signal = op_code(text, 0, 2)
    assert "if (cw_nv_mine(0))" in signal and "cw_nv_block(true);" in signal  # the put's block, its fence
    assert re.search(r"the fence at test_codegen_nvshmem\.py:\d+ orders op 0's delivery to PE 1 before this one",
                     signal)


def test_a_fence_after_a_spread_put_makes_the_last_block_signal():
    sched = trace(_signal_fn(True, 100_000))  # 400 KB: seven blocks put a share each
    text = program.generate(sched, "nvshmem")
    assert "cw_nv_put(b_box, b_x, 400000, 1, false, 7, 0);" in op_code(text, 0, 0)
    signal = op_code(text, 0, 2)
    assert "if (cw_nv_last(&cw_arrive[0], true))" in signal  # every block fences and arrives first
    assert "every block arriving after its own work and its nvshmem_fence" in signal
    unfenced = program.generate(trace(_signal_fn(False, 100_000)), "nvshmem")
    assert "cw_nv_last(" not in op_code(unfenced, 0, 1) and "if (cw_nv_mine(" in op_code(unfenced, 0, 1)


def test_a_fence_with_nothing_after_it_orders_nothing():
    def fence_last(r):
        box = r.symmetric("box", count=2)
        if r.rank == 0:
            r.put(1, box, box)
            r.fence()
            r.quiet()
            r.fence()
    text = program.generate(trace(fence_last), "nvshmem")
    assert "none follows" in op_code(text, 0, 1) and "cw_nv_" not in op_code(text, 0, 1).split("\n", 3)[-1]
    assert "no delivery since the last fence or quiet" in op_code(text, 0, 3)


def test_quiet_completes_every_blocks_deliveries_unless_nothing_is_in_flight():
    text = program.generate(trace_file("protocols/dissemination_barrier.py", 2), "nvshmem")
    quiet = op_code(text, 0, 1)
    assert "every block completes its own deliveries (nvshmem_quiet by its thread 0)" in quiet
    assert "cw_nv_quiet_all(grid);" in quiet

    def idle_quiet(r):
        x = r.buffer("x", count=2)
        r.quiet()
        r.fill(x, 1.0)
    text = program.generate(trace(idle_quiet), "nvshmem")
    assert "nothing to do" in op_code(text, 0, 0) and "cw_nv_quiet_all" not in op_code(text, 0, 0)


def test_barrier_all_and_sync_all_are_one_threads_barrier_between_grid_syncs():
    text = program.generate(trace_file("protocols/nvshmem_oneshot_allreduce.py", 2), "nvshmem")
    sync = next(op_code(text, 0, i) for i in range(20) if "sync_all()" in op_code(text, 0, i).split("\n")[1])
    assert "cw_nv_grid_sync(grid, true);" in sync  # slots were read: visible before a peer writes them again
    assert "if (blockIdx.x == 0 && threadIdx.x == 0) nvshmem_sync_all();\n  grid.sync();" in sync
    text = program.generate(trace_file("protocols/buggy/put_vs_atomic_counter.py", 3), "nvshmem")
    barrier = op_code(text, 0, 0)
    assert "cw_nv_quiet_all(grid);\n  if (blockIdx.x == 0 && threadIdx.x == 0) nvshmem_barrier_all();" in barrier
    assert "every rank's last op was a barrier_all" in kernel(text, 0)  # no second barrier at the end


def test_a_rank_without_ops_still_meets_the_others_at_the_end():
    def lonely(r):
        box = r.symmetric("box", count=2)
        if r.rank == 0:
            r.put(1, box, box)
    text = program.generate(trace(lonely), "nvshmem")
    idle = kernel(text, 1)
    assert "cw_nv_mark(a.marks, 0);" in idle and "nvshmem_barrier_all();" in idle


def test_a_run_ends_with_every_delivery_landed_and_every_rank_met():
    text = program.generate(trace_file("protocols/buggy/put_without_quiet.py", 2), "nvshmem")
    end = kernel(text, 0)[kernel(text, 0).index("// the end of a run"):]
    assert "cw_nv_quiet_all(grid);" in end and "nvshmem_barrier_all();" in end


# ------------------------------------------------------------------------- put_signal, hazards
def _put_signal_fn(count: int):
    def put_signal(r):
        x = r.symmetric("x", count=count, role="input")
        box = r.symmetric("box", count=count, role="output")
        flag = r.signal("flag")
        if r.rank == 0:
            r.put_signal(1, box, x, flag, 1)
        else:
            r.wait_until(flag, "eq", 1)
        r.barrier_all()
    return put_signal


def test_put_signal_is_one_blocks_call_or_spread_data_then_the_last_blocks_signal():
    small = program.generate(trace(_put_signal_fn(4)), "nvshmem")
    assert ("nvshmemx_putmem_signal_block(b_box, b_x, 16, cw_sig + 0, 1ULL, NVSHMEM_SIGNAL_SET, 1);"
            in op_code(small, 0, 0))
    big = op_code(program.generate(trace(_put_signal_fn(1 << 24)), "nvshmem"), 0, 0)  # 64 MiB
    assert f"cw_nv_put(b_box, b_x, {4 << 24}, 1, false, {nvshmem_plan.MAX_BLOCKS}, 0);" in big
    assert "put_signal: the signal lands after the data, which every block put a share of" in big
    assert ("if (cw_nv_last(&cw_arrive[0], true)) {\n    if (threadIdx.x == 0) nvshmemx_signal_op(cw_sig + 0, 1ULL, "
            "NVSHMEM_SIGNAL_SET, 1);") in big


def _reduce_then_put_half(count: int):
    """Rank 0 waits for rank 1's put_signal, sums into s, then puts the first half of s to rank 1 (not
    exactly the reduce's destination, so not run inside the reduce: nvshmem_plan.fusable_put)."""
    def fn(r):
        x = r.symmetric("x", count=count, role="input")
        got = r.symmetric("got", count=count, role="scratch")
        s = r.symmetric("s", count=count, role="scratch")
        part = r.symmetric("part", count=count // 2, role="output")
        flag = r.signal("flag")
        if r.rank == 1:
            r.put_signal(0, got, x, flag, 1)
        else:
            r.wait_until(flag, "eq", 1)
            r.reduce(s, x, got)
            r.put(1, part, s[0:count // 2])
            r.quiet()
    return fn


def test_a_spread_write_then_a_spread_read_is_a_grid_sync_naming_the_writer():
    sched = trace(_reduce_then_put_half(1 << 21))  # 8 MiB
    text = program.generate(sched, "nvshmem")
    reduce_line = sched.programs[0].ops[1].loc.line
    put = op_code(text, 0, 2)
    assert "cw_nv_grid_sync(grid, false);" in put
    assert f"s[0:1048576]: op 1 (test_codegen_nvshmem.py:{reduce_line}) writes it first" in put
    waits = op_code(text, 0, 0)  # the wait needs no grid sync: each block polls
    assert "cw_nv_wait(cw_sig + 0, NVSHMEM_CMP_EQ, 1ULL);" in waits and "grid" not in waits


def test_a_small_dependent_op_stays_on_the_block_it_depends_on():
    text = program.generate(trace(_reduce_then_put_half(16)), "nvshmem")
    reduce, put = op_code(text, 0, 1), op_code(text, 0, 2)
    block = re.search(r"if \(cw_nv_mine\((\d+)\)\)", reduce).group(1)
    assert f"if (cw_nv_mine({block})) {{  // block {block} (mod the grid) runs it\n    cw_nv_block(false);" in put


def test_the_two_shot_all_gather_runs_inside_its_reduce_at_4_mib_chunks():
    """The same 4 MiB two-shot as a put of exactly what the reduce wrote: no grid sync before it, the
    data stored by the reduce's threads (`cw_nv_reduce_put`), the signal after every block's fence."""
    sched = trace_file("protocols/nvshmem_twoshot_allreduce.py", 2, CHUNK=1 << 20)
    text = program.generate(sched, "nvshmem")
    reduce, put = op_code(text, 0, 2), op_code(text, 0, 3)
    assert "cw_nv_reduce_put<float, 1>(b_out, cw_srcs, 2, 1048576, CW_SUM, cw_peer_dst, cw_pes, false," in reduce
    assert "grid" not in put and "cw_nv_put(" not in put and "if (cw_nv_last(&cw_arrive[" in put


def test_a_signal_after_reading_what_peers_write_waits_for_every_block():
    text = program.generate(trace_file("protocols/nvshmem_twoshot_allreduce.py", 2), "nvshmem")
    put = op_code(text, 0, 3)  # all-gather: its signal lets the peer go on; slots were read on another block
    assert "if (cw_nv_last(&cw_arrive[0], true))" in put
    assert "its signal lets another rank go on, and op 2 (" in put and "reads slots[4:8]" in put


def test_a_run_of_signals_after_every_blocks_work_is_one_grid_sync():
    text = program.generate(trace_file("protocols/nvshmem_twoshot_allreduce.py", 4), "nvshmem")
    first, second = op_code(text, 0, 7), op_code(text, 0, 8)
    assert "cw_nv_grid_sync(grid, true);" in first
    assert "cw_nv_grid_sync" not in second and "cw_nv_last" not in second
    assert re.search(r"cw_nv_mine\((\d+)\)", first).group(1) != re.search(r"cw_nv_mine\((\d+)\)", second).group(1)


def test_independent_small_puts_go_out_from_different_blocks():
    text = program.generate(trace_file("protocols/nvshmem_alltoall_dispatch.py", 4), "nvshmem")
    blocks = [re.search(r"cw_nv_mine\((\d+)\)", op_code(text, 0, i)).group(1) for i in range(3)]
    assert len(set(blocks)) == 3


def test_a_wait_read_of_a_word_that_only_grows_needs_no_handoff():
    def counting(r):
        hits = r.signal("hits")
        r.signal_op((r.rank + 1) % r.world, hits, 1, op="add")
        r.wait_until(hits, "ge", 1)
        r.signal_op((r.rank + 1) % r.world, hits, 1, op="add")
        r.wait_until(hits, "ge", 2)
    plan = nvshmem_plan.plan_rank(trace(counting), 0)
    assert plan.steps[2].pre == "" and not plan.steps[2].needs

    def resetting(r):
        flag = r.signal("flag")
        r.signal_op((r.rank + 1) % r.world, flag, 1, op="set")
        r.wait_until(flag, "eq", 1)
        r.signal_op((r.rank + 1) % r.world, flag, 2, op="set")
        r.wait_until(flag, "eq", 2)
    plan = nvshmem_plan.plan_rank(trace(resetting), 0)
    assert plan.steps[2].pre == "last" and plan.steps[2].needs[0].item.index == 1


# ------------------------------------------------------------------------------ words and atomics
def test_a_signal_word_is_addressed_by_the_targets_layout():
    def crossed(r):
        counts = {"a": 2, "b": 3}
        sigs = {name: r.signal(name, count=counts[name]) for name in (("a", "b") if r.rank == 0 else ("b", "a"))}
        if r.rank == 0:
            r.signal_op(1, sigs["b"][1], 5)
        else:
            r.wait_until(sigs["b"][1], "eq", 5)
    sched = trace(crossed)
    text = program.generate(sched, "nvshmem")
    # rank 1 declared b first: b[1] is its word 1 (on rank 0, after a's two words, it is word 3)
    assert "nvshmemx_signal_op(cw_sig + 1, 5ULL, NVSHMEM_SIGNAL_SET, 1);" in op_code(text, 0, 0)
    assert "cw_nv_wait(cw_sig + 1, NVSHMEM_CMP_EQ, 5ULL);" in op_code(text, 1, 0)


def test_atomics_use_the_words_type_and_int64_adds_go_through_uint64():
    def atomics(r):
        c32 = r.symmetric("c32", count=1, dtype="int32")
        c64 = r.symmetric("c64", count=1, dtype="int64")
        into = r.buffer("into", count=2, dtype="int32")
        sig = r.signal("sig")
        if r.rank == 0:
            r.atomic_add(1, c32.element(0), 2**32 - 1)
            r.atomic_add(1, c64.element(0), 5)
            r.fetch_inc(1, c64.element(0), into.element(0))
            r.compare_swap(1, c64.element(0), 7, 9, into.element(1))
            r.atomic(1, sig, "xor", 3)
        r.barrier_all()
    text = kernel(program.generate(trace(atomics), "nvshmem"), 0)
    assert "nvshmem_int32_atomic_add(b_c32, (int32_t)4294967295ULL, 1);" in text
    assert "nvshmem_uint64_atomic_add((uint64_t*)(b_c64), (uint64_t)5ULL, 1);" in text
    assert "*(b_into) = (int32_t)nvshmem_uint64_atomic_fetch_inc((uint64_t*)(b_c64), 1);" in text
    assert "*(b_into + 1) = (int32_t)nvshmem_int64_atomic_compare_swap(b_c64, (int64_t)7ULL, (int64_t)9ULL, 1);" in text
    assert "nvshmem_uint64_atomic_xor(cw_sig + 0, (uint64_t)3ULL, 1);" in text


def test_wait_all_and_any_name_their_words_by_a_status_array():
    def waits(r):
        flags = r.signal("flags", count=4)
        r.wait_until_all([flags[0], flags[2]], "ge", 1)
        r.wait_until_any([flags[1], flags[3]], "ne", 0)
    text = program.generate(trace(waits), "nvshmem")
    assert "static __device__ const int CW_NV_STATUS_0_0[] = {0, 1, 0};" in text
    assert "nvshmem_uint64_wait_until_all(cw_sig + 0, 3, CW_NV_STATUS_0_0, NVSHMEM_CMP_GE, 1ULL);" in text
    assert "nvshmem_uint64_wait_until_any(cw_sig + 1, 3, CW_NV_STATUS_0_1, NVSHMEM_CMP_NE, 0ULL);" in text


def test_a_self_put_onto_its_own_source_is_staged_through_scratch():
    def shift(r):
        box = r.symmetric("box", count=8)
        r.put(r.rank, box[2:6], box[0:4])
        r.quiet()
    text = program.generate(trace(shift), "nvshmem")
    put = op_code(text, 0, 0)
    assert re.search(r"cw_nv_copy\(cw_scratch_0_\d+, b_box, 16, 1, blockIdx.x\);", put)
    assert re.search(r"cw_nv_put\(b_box \+ 2, \(float\*\)cw_scratch_0_\d+, 16, 0, false", put)


def test_per_rank_buffers_come_from_one_symmetric_pool_of_one_size_on_every_rank():
    def uneven(r):
        r.buffer("mine", count=100 * (r.rank + 1), dtype="float64")
        r.buffer("more", count=3, dtype="int32")
    text = program.generate(trace(uneven, 3), "nvshmem")
    assert "cw_nv_pool_bytes = 2816;" in text  # rank 2: 2400 bytes and 12 bytes, each rounded up to 256
    assert "? sym[bufs[b].symmetric] : cw_nv_local(bytes);" in text


# --------------------------------------------------------------------------------- compiling
def every_op_fn(r):
    """One schedule with every op the backend emits, in one- and many-block forms (not meant to verify)."""
    big = 40_000  # 160 KB of float32: three blocks
    peer = (r.rank + 1) % r.world
    xs = r.symmetric("xs", count=big)
    ys = r.symmetric("ys", count=big)
    halves = r.symmetric("halves", count=64, dtype="float16")
    brains = r.buffer("brains", count=64, dtype="bfloat16")
    doubles = r.buffer("doubles", count=64, dtype="float64")
    i32 = r.symmetric("i32", count=4, dtype="int32")
    i64 = r.symmetric("i64", count=4, dtype="int64")
    u32 = r.symmetric("u32", count=4, dtype="uint32")
    u64 = r.symmetric("u64", count=4, dtype="uint64")
    into = r.buffer("into", count=8, dtype="int64")
    flags = r.signal("flags", count=4)
    r.fill(xs, 1.5)
    r.fill(halves, 0.25)
    r.fill(brains, 3.0)
    r.fill(i64, -2)
    r.put(peer, ys, xs)
    r.put(peer, halves[0:32], halves[32:64], nbi=True)
    r.fence()
    r.put_signal(peer, ys[0:8], xs[0:8], flags[0], 1, op="add")
    r.put_signal(peer, ys, xs, flags[1], 2, op="set", nbi=True)
    r.signal_op(peer, flags[2], 1, op="add")
    for word, ops in ((i32, ("add", "inc", "set", "and", "or", "xor")), (u32, ("add", "xor")),
                      (i64, ("add", "inc", "set")), (u64, ("add", "and"))):
        for how in ops:
            r.atomic(peer, word.element(0), how, 3)
    r.atomic(peer, flags[3], "or", 8)
    r.fetch_add(peer, i64.element(1), 5, into.element(0))
    r.fetch_inc(peer, i32.element(1), into.element(1))
    r.atomic_fetch(peer, u64.element(1), into.element(2))
    r.swap(peer, u32.element(1), 5, into.element(3))
    r.compare_swap(peer, i64.element(1), 1, 2, into.element(4))
    r.fetch_add(peer, flags[0], 1, into.element(7))  # the bitwise fetches (no DSL call) are added by _bitwise
    r.quiet()
    r.wait_until(flags[0], "ge", 1)
    r.wait_until_all([flags[1], flags[2]], "ge", 1)
    r.wait_until_any([flags[0], flags[3]], "ne", 0)
    r.get(peer, xs, ys)
    r.get_nbi(peer, halves[0:16], halves[16:32])
    r.quiet()
    r.reduce(ys, xs, ys)
    r.reduce(halves[0:32], halves[0:32], halves[32:64], op="max")
    r.reduce(doubles[0:32], doubles[32:64], doubles[0:32], op="prod")
    r.reduce(i32, i32, i32, op="min")
    r.copy(brains[0:32], brains[32:64])
    r.compute("mix", reads=[xs, halves], writes=[ys, doubles])
    r.compute("tiny", reads=[brains], writes=[u64])
    r.sync_all()
    r.put(r.rank, ys[8:40], ys[0:32])
    r.barrier_all()


def _bitwise(sched: ir.Schedule) -> ir.Schedule:
    """`sched` with fetch_and, fetch_or and fetch_xor (IR ops the DSL has no call for) after each rank's
    first fetching atomic."""
    programs = []
    for prog in sched.programs:
        ops = list(prog.ops)
        at = next(i for i, op in enumerate(ops) if isinstance(op, ir.FetchAtomic))
        peer = (prog.rank + 1) % sched.world
        extra = [ir.FetchAtomic(pe=peer, target=ir.Region(buffer=buf, start=1, stop=2), op=how, value=6,
                                into=ir.Region(buffer="into", start=k, stop=k + 1), loc=ops[at].loc)
                 for k, (how, buf) in enumerate((("fetch_and", "u64"), ("fetch_or", "i32"), ("fetch_xor", "i64")),
                                                start=5)]
        programs.append(prog.model_copy(update={"ops": tuple(ops[:at + 1] + extra + ops[at + 1:])}))
    return sched.model_copy(update={"programs": tuple(programs)})


def every_op(ranks: int = 2) -> ir.Schedule:
    return _bitwise(cw.schedule(every_op_fn).trace(ranks))


def _compile_targets() -> list[tuple[str, ir.Schedule]]:
    targets = [(Path(p).stem, load_file(p)[0].trace(2)) for p in PROTOCOLS if Path(p).name.startswith("nvshmem_")]
    return targets + [("every_op", every_op()), ("team_kinds", trace(team_kinds_fn, 4))]


def test_the_every_op_schedule_emits_every_table_entry():
    sched = every_op()
    kinds = {op.kind for prog in sched.programs for op in prog.ops}
    teams = {op.kind for prog in trace(team_kinds_fn, 4).programs for op in prog.ops}  # compiled too
    assert kinds | teams == {cls.model_fields["kind"].default for cls in nvshmem.TABLE}
    fetches = {op.op for op in sched.programs[0].ops if isinstance(op, ir.FetchAtomic)}
    assert fetches == set(nvshmem.FETCH_CALL)
    text = program.generate(sched, "nvshmem")
    for needle in ("cw_nv_reduce<__half>", "cw_nv_reduce<double>", "cw_nv_reduce<int32_t>", "cw_nv_fill<__nv_bfloat16>",
                   "cw_nv_grid_sum(grid, cw_hash + 0 * gridDim.x", "cw_nv_block_sum(cw_mine)",
                   "nvshmemx_putmem_signal_block", "nvshmemx_getmem", "cw_nv_get(b_halves, b_halves + 16, 32, 1, true"):
        assert needle in text, needle


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Each compile target built once, two at a time (nvcc is single-threaded; CI has 2 cores)."""
    from clockworks_dist.codegen import build

    toolchain = build.find_toolchain("nvshmem")
    if toolchain.missing:
        pytest.skip("cannot compile NVSHMEM programs here: " + "; ".join(str(m) for m in toolchain.missing))
    out = tmp_path_factory.mktemp("nvshmem")

    def one(target):
        name, sched = target
        cu = out / f"{name}.cu"
        cu.write_text(program.generate(sched, "nvshmem"))
        try:
            return name, build.compile_program(cu, "nvshmem", out / "bin", toolchain, timeout=400), None
        except build.BuildError as exc:
            return name, None, str(exc)

    with ThreadPoolExecutor(2) as pool:
        return {name: (exe, error) for name, exe, error in pool.map(one, _compile_targets())}


@pytest.mark.parametrize("name", [name for name, _ in _compile_targets()])
def test_generated_programs_compile(built, name):
    exe, error = built[name]
    assert error is None, error
    assert exe.is_file() and exe.stat().st_size > 0
