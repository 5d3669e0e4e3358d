"""Plain kernels and compute ops in the performance model: their own launch constants, the cost a
compute op states (us=, or flops= and bytes= as a roofline on the topology's GPU), the warning when
it states none, the kernel after a recv that reduces, an all-to-all's own chunk as an HBM copy, the
size-dependent rate of an exchange's channels, a generated program's own costs, and the fit that
recovers the new constants from measurements."""

from __future__ import annotations

import math
import textwrap
import warnings
from pathlib import Path

import pytest

from clockworks_dist.lowering import Build, lower

import clockworks_dist as cw
from clockworks_dist import ir, load_file
from clockworks_dist.check import check
from clockworks_dist.errors import CostWarning, ScheduleError
from clockworks_dist.perf import costs, fit, nccl
from clockworks_dist.perf.costs import RunConditions, host_cost, launch_us
from clockworks_dist.perf.microbench import KERNEL_OPS, MICROBENCHMARKS, SPIN_US
from clockworks_dist.perf.network import from_topology
from clockworks_dist.perf.predict import predict_sizes
from clockworks_dist.perf.program import program_us
from clockworks_dist.perf.simulate import PredictError, Simulator
from clockworks_dist.report.text import render_listing as listing
from clockworks_dist.semantics.rules import rule
from clockworks_dist.topology import Constants, load_topology


def run_us(sched, topo, mode: str, backend: str, **build) -> float:
    """`program_us` of `sched` lowered for `backend` with the `Build` knobs `build`."""
    return program_us(lower(sched, Build(backend, **build)), topo, mode)


KiB, MiB = 1 << 10, 1 << 20
H200 = "h200x2-nv18"  # the uncalibrated file: the driver's link rates (bare_h200: with the model's defaults)
ROOT = Path(__file__).resolve().parent.parent
MEASURED = str(ROOT / "topologies" / "measured" / "h200x2-nv18.yaml")
N = cw.size("N", 1024)


def bare_h200():
    """The uncalibrated 2 x H200 description with the model's own default constants, not the
    library's: these tests price one term at a time from known values."""
    topo = load_topology(H200)
    return topo.model_copy(update={"constants": Constants()})


def topo_with(**changes):
    topo = bare_h200()
    return topo.model_copy(update={"constants": topo.constants.model_copy(update=changes)})


def simulate(defn, topo, mode="graph", conditions=RunConditions(), **sizes):
    sched = defn.trace(2, sizes=sizes or None)
    return Simulator(sched, from_topology(topo, 2), topo.constants, mode, conditions=conditions).run()


@pytest.fixture(autouse=True)
def fresh_warnings():
    """Each test sees the no-cost warnings afresh (they are given once per op site per process)."""
    costs._WARNED.clear()
    yield
    costs._WARNED.clear()


# ------------------------------------------------------------------------------------------ launches
def test_plain_kernels_have_launch_constants_of_their_own():
    c = Constants(kernel_launch_us=9.0, graph_launch_us=4.0, eager_launch_us=0.6, local_host_us=2.5,
                  local_graph_launch_us=1.2, local_eager_launch_us=0.3)
    loc, region = ir.SourceLoc(file="x.py", line=1), ir.Region(buffer="x", start=0, stop=4)
    assert host_cost(ir.Fill(loc=loc, dst=region, value=1.0), c) == 2.5
    assert host_cost(ir.Compute(loc=loc, name="k", writes=(region,)), c) == 2.5
    assert host_cost(ir.AllReduce(loc=loc, src=region, dst=region), c) == 9.0
    assert launch_us(c, "graph", "local") == 1.2 and launch_us(c, "eager", "local") == pytest.approx(1.5)
    assert launch_us(c, "graph") == 4.0 and launch_us(c, "eager") == pytest.approx(4.6)
    assert costs.COSTS["reduce"].launch == "local" and costs.COSTS["all_reduce"].launch == "nccl"


@cw.schedule
def one_fill(r):
    x = r.buffer("x", count=N, role="output")
    r.fill(x, 1.0)


def test_a_fill_costs_a_plain_kernel_not_an_nccl_one():
    topo = topo_with(local_graph_launch_us=1.25, graph_launch_us=7.0)
    tl = simulate(one_fill, topo, N=1)
    assert tl.total_us == pytest.approx(1.25, abs=1e-3)  # 4 bytes: the launch alone
    assert simulate(one_fill, topo_with(local_graph_launch_us=2.5, graph_launch_us=7.0), N=1).total_us == \
        pytest.approx(2.5, abs=1e-3)


# --------------------------------------------------------------------------------------- compute cost
def write_schedule(tmp_path, body: str, name: str = "kernels.py"):
    """A schedule file whose body's first line is line 8."""
    head = ["import clockworks_dist as cw", 'N = cw.size("N", 1024)', "", "@cw.schedule", "def kernels(r):",
            '    x = r.buffer("x", count=N, dtype="bfloat16", role="inout")',
            '    y = r.buffer("y", count=N, dtype="bfloat16", role="output")']
    lines = head + ["    " + line for line in textwrap.dedent(body).splitlines()]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return load_file(str(path))[0]


def test_compute_us_is_its_time_whatever_it_touches(tmp_path):
    defn = write_schedule(tmp_path, 'r.compute("k", reads=x, writes=y, us=40.0)')
    topo = topo_with(local_graph_launch_us=1.0)
    small = simulate(defn, topo, N=1024).total_us
    big = simulate(defn, topo, N=1 << 26).total_us  # 128 MiB read and written: us= says what it costs
    assert small == pytest.approx(41.0) and big == pytest.approx(41.0)
    twice = write_schedule(tmp_path, 'r.compute("k", reads=x, writes=y, us=80.0)', "twice.py")
    assert simulate(twice, topo, N=1024).total_us == pytest.approx(81.0)


def test_compute_flops_and_bytes_follow_the_roofline(tmp_path):
    topo = topo_with(local_graph_launch_us=1.0)
    gpu = topo.devices[0]
    hbm = gpu.hbm_GBs * topo.constants.hbm_efficiency * 1e3  # bytes per us
    peak = gpu.peak_tflops["bfloat16"] * 1e6  # flops per us

    def time(flops, nbytes):
        defn = write_schedule(tmp_path, f'r.compute("k", reads=x, writes=y, flops={flops}, bytes={nbytes})',
                              f"k_{flops}_{nbytes}.py")
        return simulate(defn, topo, N=1024).total_us - 1.0  # the launch

    # compute-bound: the arithmetic's time, and twice the flops take twice as long
    assert time(int(989e9), 1 << 20) == pytest.approx(989e9 / peak)  # 1 ms at 989 TFLOP/s
    assert time(int(2 * 989e9), 1 << 20) == pytest.approx(2 * 989e9 / peak)
    # memory-bound: the bytes over HBM, whatever the (few) flops
    assert time(1000, 1 << 30) == pytest.approx((1 << 30) / hbm)
    assert time(2000, 1 << 31) == pytest.approx((1 << 31) / hbm)
    # at the ridge point both take as long
    ridge = int(peak / hbm * (1 << 30))
    assert time(ridge, 1 << 30) == pytest.approx((1 << 30) / hbm, rel=1e-3)


def test_compute_flops_count_at_the_peak_of_the_dtype_it_writes(tmp_path):
    topo = topo_with(local_graph_launch_us=1.0)
    peak = topo.devices[0].peak_tflops
    path = tmp_path / "f32.py"
    path.write_text(textwrap.dedent("""\
        import clockworks_dist as cw

        @cw.schedule
        def f32(r):
            x = r.buffer("x", count=16, dtype="float32", role="output")
            r.compute("k", writes=x, flops=67e9)
        """))
    f32 = load_file(str(path))[0]
    assert simulate(f32, topo).total_us - 1.0 == pytest.approx(67e9 / (peak["float32"] * 1e6))


def test_compute_flops_on_a_gpu_without_a_peak_rate_names_the_op_and_the_fix(tmp_path):
    defn = write_schedule(tmp_path, 'r.compute("k", writes=y, flops=1e12)', "nopeak.py")
    topo = load_topology("pcie-gen4-8gpu")  # its L40S lists no peak rate
    with pytest.raises(PredictError, match=r"nopeak\.py:\d+: compute k states flops=1e\+12, but gpu0 \(L40S-48GB\) "
                                           r"has no peak FLOP rate for bfloat16: add peak_tflops"):
        simulate(defn, topo)


def test_a_compute_op_without_a_cost_warns_once_per_site(tmp_path):
    defn = write_schedule(tmp_path, '''\
        r.compute("a", reads=x, writes=y)
        r.compute("b", reads=y, writes=x, us=3.0)
        r.compute("c", reads=x, writes=y)''', "nocost.py")
    topo = topo_with(local_graph_launch_us=1.0, compute_us=0.0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        tl = simulate(defn, topo, N=1 << 20)  # two ranks, each running both ops without a cost
        simulate(defn, topo, N=1 << 22)  # and again at another size
    found = [w for w in seen if issubclass(w.category, CostWarning)]
    assert len(found) == 2  # sites a and c, once each
    assert sorted(w.lineno for w in found) == [8, 10]
    assert all(w.filename == "nocost.py" for w in found)
    text = str(found[0].message)
    assert "compute a states no cost" in text and "us=" in text and "flops=" in text and "bytes=" in text
    # taken as bound by its reads and writes over HBM: 2 MiB each of bf16
    hbm = topo.devices[0].hbm_GBs * topo.constants.hbm_efficiency * 1e3
    assert tl.total_us == pytest.approx(3 * 1.0 + 3.0 + 2 * (4 * MiB) / hbm)


@pytest.mark.parametrize("call, message", [
    ('r.compute("k", writes=y, us=-1)', "kernel k: us=-1 is out of range: us is more than 0"),
    ('r.compute("k", writes=y, us=0)', "kernel k: us=0 is out of range"),
    ('r.compute("k", writes=y, us=float("nan"))', "kernel k: us=nan is out of range"),
    ('r.compute("k", writes=y, us="5")', "kernel k: us must be a number of microseconds, got str '5'"),
    ('r.compute("k", writes=y, flops=-2.0)', "kernel k: flops=-2.0 is out of range: flops is at least 0"),
    ('r.compute("k", writes=y, flops=float("inf"))', "kernel k: flops=inf is out of range"),
    ('r.compute("k", writes=y, bytes=1.5)', "kernel k: bytes must be an integer, got float 1.5"),
    ('r.compute("k", writes=y, bytes=-4)', "kernel k: bytes=-4 is out of range 0..2**50"),
    ('r.compute("k", writes=y, us=5, flops=10)', "kernel k: give us= (its time) or flops= and bytes= (its work), "
                                                 "not both"),
])
def test_bad_compute_costs_name_the_line_the_op_and_the_fix(tmp_path, call, message):
    path = tmp_path / "bad.py"
    path.write_text(textwrap.dedent(f"""\
        import clockworks_dist as cw

        @cw.schedule
        def bad(r):
            y = r.buffer("y", count=8, role="output")
            {call}
        """))
    with pytest.raises(ScheduleError) as info:
        load_file(str(path))[0].trace(2)
    err = info.value
    assert (err.file, err.line, err.rank, err.op) == ("bad.py", 6, 0, "compute")
    assert message in str(err)


def test_the_ir_refuses_a_cost_the_dsl_would_refuse():
    loc = ir.SourceLoc(file="x.py", line=1)
    with pytest.raises(ValueError, match="its time \\(us\\) or its work \\(flops, bytes\\), not both"):
        ir.Compute(loc=loc, name="k", us=1.0, bytes=8)
    for bad in (dict(us=0.0), dict(us=float("nan")), dict(flops=-1.0), dict(bytes=-1)):
        with pytest.raises(ValueError):
            ir.Compute(loc=loc, name="k", **bad)


def test_cost_fields_change_no_meaning(tmp_path):
    plain = write_schedule(tmp_path, '''\
        r.compute("k", reads=x, writes=y)
        r.send((r.rank + 1) % r.world, y) if r.rank == 0 else r.recv(0, x)''', "plain.py").trace(2)
    costed = write_schedule(tmp_path, '''\
        r.compute("k", reads=x, writes=y, flops=1e9, bytes=4096)
        r.send((r.rank + 1) % r.world, y) if r.rank == 0 else r.recv(0, x)''', "costed.py").trace(2)
    # the same op but for its cost: unequal (and hashable), the same rule's accesses and flows
    a, b = plain.programs[0].ops[0], costed.programs[0].ops[0]
    assert a != b and hash(a) != hash(b) and len({a, b, a}) == 2
    assert rule(a).accesses(a, 0) == rule(b).accesses(b, 0) and rule(a).flows(a, 0) == rule(b).flows(b, 0)
    # the checker finds the same states, transitions and verdict
    one, two = check(plain), check(costed)
    assert (one.verdict, one.states, one.transitions) == (two.verdict, two.states, two.transitions)
    # and the cost round-trips through JSON exactly
    again = ir.Schedule.from_json(costed.to_json())
    assert again == costed and again.programs[0].ops[0].flops == 1e9 and again.programs[0].ops[0].bytes == 4096


def test_show_prints_the_stated_cost(tmp_path):
    sched = write_schedule(tmp_path, 'r.compute("k", reads=x, writes=y, us=12.5)', "shown.py").trace(2)
    text = listing(sched)
    assert "compute k(reads x[0:1024]; writes y[0:1024]; us=12.5)" in text
    flops = write_schedule(tmp_path, 'r.compute("k", writes=y, flops=2e12, bytes=4096)', "f.py").trace(2)
    assert "compute k(reads -; writes y[0:1024]; flops=2e+12; bytes=4096)" in listing(flops)


# ---------------------------------------------------------------------------- what NCCL programs run
@cw.schedule
def recv_and_reduce(r):
    x = r.buffer("x", count=N, role="inout")
    if r.rank == 0:
        r.send(1, x)
    else:
        r.recv(0, x, reduce="sum")


def test_a_recv_that_reduces_is_a_kernel_after_the_transfer():
    topo = topo_with(local_graph_launch_us=2.0)
    tl = simulate(recv_and_reduce, topo, N=1 << 20)  # 4 MiB
    kernel = next(r for r in tl.records if r.kind == "reduce")
    transfer = next(r for r in tl.records if r.kind == "send")
    assert kernel.rank == 1 and kernel.start == pytest.approx(transfer.end)
    # x and what arrived read, x written: 12 MiB, within the H200's 50 MiB of L2
    assert kernel.end - kernel.start == pytest.approx(2.0 + 3 * 4 * MiB / (topo.constants.l2_GBs * 1e3))
    assert tl.total_us == pytest.approx(kernel.end)
    assert tl.critical[-1] is kernel and tl.critical[-2].kind == "recv"
    c = Constants(p2p_launch_us=10.0, local_host_us=3.0)
    assert host_cost(recv_and_reduce.trace(2).programs[1].ops[0], c) == 13.0  # the group, then the kernel


@cw.schedule
def a2a(r):
    x = r.buffer("x", count=2 * N, role="input")
    y = r.buffer("y", count=2 * N, role="output")
    r.all_to_all(x, y)


def test_an_all_to_all_copies_its_own_chunk_in_hbm():
    topo = bare_h200()
    chunk = 64 * MiB
    tl = simulate(a2a, topo, N=chunk // 4)
    net = tl.network
    hbm = {name: moved for res, moved in tl.link_bytes.items() for name in [net.names[res]]}
    assert hbm["gpu0 HBM"] == pytest.approx(2 * chunk)  # read and written
    # the copy takes its own time: with a slow copy channel the call is slower
    slow = topo_with(nccl_copy_channel_GBs=1.0)
    assert simulate(a2a, slow, N=chunk // 4).total_us > 1.5 * tl.total_us


@cw.schedule
def inner_all_reduce(r):
    me = r.comm("me", [r.rank])  # a communicator of one rank
    x = r.buffer("x", count=N, role="inout")
    r.all_reduce(x, x, comm=me)


def test_an_in_place_collective_of_one_rank_is_nothing():
    topo = topo_with(graph_launch_us=5.0)
    assert simulate(inner_all_reduce, topo, N=1 << 20).total_us == pytest.approx(0.0)
    assert simulate(inner_all_reduce, topo, "eager", N=1 << 20).total_us == pytest.approx(0.0)


# ----------------------------------------------------------------------------- exchange channel rate
def test_an_exchange_channel_climbs_from_the_ramp_to_its_full_rate():
    c = Constants(nccl_exchange_ramp=0.6)
    view = nccl.default_view(c)
    chunk = 512 * KiB
    ramp = lambda nbytes, channels=16, kind="all_to_all", proto="Simple": nccl.exchange_ramp(  # noqa: E731
        c, kind, proto, channels, nbytes, view)
    assert ramp(16 * chunk) == pytest.approx(0.6)  # one chunk a channel
    assert ramp(16 * chunk // 4) == pytest.approx(0.6)  # less than one
    assert ramp(16 * chunk * 32) == pytest.approx(1.0) and ramp(16 * chunk * 1024) == pytest.approx(1.0)
    assert ramp(16 * chunk * 4) == pytest.approx(0.6 + 0.4 * 2 / 5)  # log2(4) of log2(32)
    assert ramp(16 * chunk * 4, channels=1) == 1.0  # one channel: flat
    assert ramp(16 * chunk, kind="p2p") == 1.0 and ramp(16 * chunk, proto="LL") == 1.0
    assert nccl.exchange_ramp(Constants(), "all_to_all", "Simple", 16, 16 * chunk, view) == 1.0  # the default


def test_the_calibrated_exchange_rate_depends_on_size():
    topo = load_topology(MEASURED)
    c = topo.constants
    assert c.nccl_exchange_ramp < 1.0  # fitted: an exchange's channels start slower
    view = nccl.default_view(c)

    def per_byte(kind, nbytes):
        proto, ch, ceiling = nccl.p2p_choice(c, nbytes, float("inf"), kind, view)
        return ceiling / ch

    # per channel, an 8 MiB exchange runs slower than a 256 MiB one; a one-way send does not ramp
    assert per_byte("all_to_all", 8 * MiB) < 0.85 * per_byte("all_to_all", 256 * MiB)
    assert per_byte("p2p", 8 * MiB) == pytest.approx(per_byte("p2p", 256 * MiB))
    bidir = MICROBENCHMARKS["sendrecv_bidir"]
    times = {n: predict_sizes(bidir, topo, 2, [n])[0].time_us for n in (8 * MiB, 16 * MiB, 256 * MiB)}
    rates = {n: n / t for n, t in times.items()}
    assert rates[8 * MiB] < rates[16 * MiB] < rates[256 * MiB]


# ------------------------------------------------------------------------- a generated program's run
def test_a_generated_program_adds_its_own_costs():
    topo = topo_with(program_graph_us=5.0, program_mark_us=2.0, program_step_us=1.5, local_graph_launch_us=1.0,
                     barrier_us=3.0)
    sched = one_fill.trace(2, sizes={"N": 1})
    alone = Simulator(sched, from_topology(topo, 2), topo.constants).run().total_us
    # NCCL: the run's start, a progress word before the op and one after it
    assert run_us(sched, topo, "graph", "nccl") == pytest.approx(alone + 5.0 + 2 * 2.0)
    # NVSHMEM: the run's start, its one kernel, the op's step inside it (no launch of its own), the closing barrier
    assert run_us(sched, topo, "graph", "nvshmem") == pytest.approx(5.0 + 1.0 + 1.5 + 3.0, abs=1e-3)
    with pytest.raises(ValueError, match="unknown backend"):
        run_us(sched, topo, "graph", "cupy")


@cw.schedule
def fill_then_put(r):
    x = r.symmetric("x", count=N, role="scratch")
    y = r.symmetric("y", count=N, role="scratch")
    out = r.buffer("out", count=N, role="output")
    ready = r.signal("ready")
    r.fill(x, 1.0)  # spread over the kernel's blocks ...
    r.put_signal(1 - r.rank, y, x, ready, value=1, op="set")  # ... sent once every block has filled its part
    r.wait_until(ready, "ge", 1)
    r.copy(out, y)


def test_an_nvshmem_program_pays_for_the_handoffs_its_code_generator_plans():
    from clockworks_dist.lowering.nvshmem_plan import plan_rank

    sched = fill_then_put.trace(2, sizes={"N": 1 << 20})  # 4 MiB: many blocks
    handoffs = [sum(step.pre in ("grid", "last") for step in plan_rank(sched, rank).steps) for rank in range(2)]
    assert handoffs[0] == handoffs[1] >= 1  # the put follows the fill's blocks: a handoff the code has
    base = topo_with(program_graph_us=5.0, program_step_us=1.5, barrier_us=3.0)
    priced = topo_with(program_graph_us=5.0, program_step_us=1.5, barrier_us=3.0, program_sync_us=2.5)
    without = run_us(sched, base, "graph", "nvshmem")
    assert run_us(sched, priced, "graph", "nvshmem") == pytest.approx(without + 2.5 * handoffs[0], rel=1e-6)
    # a host-driven (NCCL) program has no such handoffs: the constant changes nothing there
    local = one_fill.trace(2, sizes={"N": 1})
    assert run_us(local, priced, "graph", "nccl") == pytest.approx(run_us(local, base, "graph", "nccl"))


@cw.schedule
def one_copy(r):
    x = r.buffer("x", count=N, role="input")
    out = r.buffer("out", count=N, role="output")
    r.copy(out, x)


@cw.schedule
def one_reduce(r):
    a = r.buffer("a", count=N, role="input")
    b = r.buffer("b", count=N, role="input")
    out = r.buffer("out", count=N, role="output")
    r.reduce(out, a, b)


def test_a_local_op_in_an_nvshmem_kernel_goes_at_its_blocks_rate():
    # one block per 64 KiB of the bytes the code generator spreads the op by, each at
    # nvshmem_local_block_GBs: a copy of 64 KiB (one block) and one of 256 KiB (four) take the same
    # least time, 64 KiB at that rate, however fast HBM or L2 would move them
    rate = 10.0
    base = topo_with(program_graph_us=5.0, program_step_us=1.5, barrier_us=3.0)
    priced = topo_with(program_graph_us=5.0, program_step_us=1.5, barrier_us=3.0, nvshmem_local_block_GBs=rate)
    per_block = 64 * KiB / (rate * 1e3)
    for count in (16 * KiB, 64 * KiB):  # float32: 64 KiB and 256 KiB copied
        sched = one_copy.trace(2, sizes={"N": count})
        without = run_us(sched, base, "graph", "nvshmem")
        assert run_us(sched, priced, "graph", "nvshmem") == pytest.approx(
            5.0 + 1.0 + 1.5 + per_block + 3.0, abs=1e-3)  # start, kernel, step, the blocks' time, barrier
        assert without < 5.0 + 1.0 + 1.5 + 3.0 + 0.2  # over HBM or L2 alone: next to nothing
    # a reduce spreads by its destination and its sources (3 x 16 KiB = 48 KiB: one block), and each
    # block takes the time of its share of the destination (16 KiB here): its sources load beside it
    sched = one_reduce.trace(2, sizes={"N": 4 * KiB})
    assert run_us(sched, priced, "graph", "nvshmem") == pytest.approx(
        5.0 + 1.0 + 1.5 + 16 * KiB / (rate * 1e3) + 3.0, abs=1e-3)
    # ... so a reduce of 64 KiB (192 KiB spread: three blocks) takes a third of a copy of 64 KiB (one block),
    # as a reduce and a copy of the same destination measured on one H200 (results/h200/one_gpu/one_pe_local)
    sched = one_reduce.trace(2, sizes={"N": 16 * KiB})
    assert run_us(sched, priced, "graph", "nvshmem") == pytest.approx(
        5.0 + 1.0 + 1.5 + 64 * KiB / 3 / (rate * 1e3) + 3.0, abs=1e-3)
    # a host-driven (NCCL) program's local kernels are plain ones: the constant changes nothing there
    sched = one_copy.trace(2, sizes={"N": 16 * KiB})
    assert run_us(sched, priced, "graph", "nccl") == pytest.approx(run_us(sched, base, "graph", "nccl"))
    # 0 (the default) is off
    assert bare_h200().constants.nvshmem_local_block_GBs == 0.0


@cw.schedule
def puts_to_every_peer(r):
    x = r.symmetric("x", count=N, role="input")
    slots = r.symmetric("slots", count=N * r.world, role="scratch")
    ready = r.signal("ready", count=r.world)
    peers = [(r.rank + k) % r.world for k in range(1, r.world)]
    for pe in peers:
        r.put_signal(pe, slots.chunk(r.rank, r.world), x, ready[r.rank], value=1, op="set")
    for pe in peers:
        r.wait_until(ready[pe], "ge", 1)


@cw.schedule
def puts_then_sum(r):
    x = r.symmetric("x", count=N, role="input")
    slots = r.symmetric("slots", count=N * r.world, role="scratch")
    out = r.buffer("out", count=N, role="output")
    ready = r.signal("ready", count=r.world)
    peers = [(r.rank + k) % r.world for k in range(1, r.world)]
    for pe in peers:
        r.put_signal(pe, slots.chunk(r.rank, r.world), x, ready[r.rank], value=1, op="set")
    for pe in peers:
        r.wait_until(ready[pe], "ge", 1)
    r.reduce(out, *[x if q == r.rank else slots.chunk(q, r.world) for q in range(r.world)])


def test_puts_on_blocks_of_their_own_run_side_by_side():
    # the block plan gives each put to a peer a block of its own with nothing between them, so the
    # generated kernel's blocks 0, 1 and 2 store their bytes at once; the model runs them so: each
    # put starts before the one before it has finished storing, where the schedule alone (one
    # stream) runs them one after another
    sched = puts_to_every_peer.trace(4, sizes={"N": 4 * KiB})
    topo = load_topology("h200x4-nvswitch")
    lowered = lower(sched, Build("nvshmem"))
    steps = lowered.plan(0).steps
    assert [(str(s.who), s.pre) for s in steps[:3]] == [("block 0", ""), ("block 1", ""), ("block 2", "")]

    def puts(conditions):
        tl = Simulator(sched, from_topology(topo, 4), topo.constants, "graph", conditions=conditions).run()
        return tl, sorted((r for r in tl.records if r.rank == 0 and r.kind == "put_signal"), key=lambda r: r.start)

    program, beside = puts(RunConditions(program=lowered))
    assert all(b.start < a.end for a, b in zip(beside, beside[1:]))
    waits = [r for r in program.records if r.rank == 0 and r.kind == "wait_until"]
    assert min(w.start for w in waits) >= max(p.end for p in beside)  # the waits run on every block: after all
    alone, one_by_one = puts(RunConditions())
    assert all(b.start >= a.end for a, b in zip(one_by_one, one_by_one[1:]))
    # 1 MiB a put: each spread over 16 blocks (0-15, 16-31, 32-47 mod the grid). With the reduce the
    # kernel has 80 blocks and the three sets are apart: side by side; without it the grid is 16, every
    # put takes all of it, and they run one after another
    for defn, grid, beside_expected in ((puts_then_sum, 80, True), (puts_to_every_peer, 16, False)):
        sched = defn.trace(4, sizes={"N": 256 * KiB})
        lowered = lower(sched, Build("nvshmem"))
        plan = lowered.plan(0)
        assert plan.blocks == grid
        assert [(s.who.kind, s.who.base, s.who.want) for s in plan.steps[:3]] == [("all", 0, 16), ("all", 16, 16),
                                                                                 ("all", 32, 16)]
        _, spread = puts(RunConditions(program=lowered))
        assert all((b.start < a.end) == beside_expected for a, b in zip(spread, spread[1:]))


def test_host_mapped_progress_words_cost_each_op_of_an_nvshmem_program():
    # programs built with host-mapped progress words fence on PCIe writes: program_host_progress_us
    # per op the kernel's blocks run (fill, put_signal, copy; not the wait one thread polls), and
    # nothing unless the run was built so
    sched = fill_then_put.trace(2, sizes={"N": 1 << 10})
    topo = topo_with(program_graph_us=5.0, program_step_us=1.5, barrier_us=3.0, program_host_progress_us=0.5)
    plain = run_us(sched, topo, "graph", "nvshmem")
    spread = [op.kind for op in sched.programs[0].ops if op.kind != "wait_until"]
    assert spread == ["fill", "put_signal", "copy"]
    assert run_us(sched, topo, "graph", "nvshmem", host_progress=True) == pytest.approx(plain + 0.5 * 3,
                                                                                          abs=1e-3)
    off = topo_with(program_graph_us=5.0, program_step_us=1.5, barrier_us=3.0)
    assert run_us(sched, off, "graph", "nvshmem", host_progress=True) == pytest.approx(plain)


# ---------------------------------------------------------------------------------------- calibration
def synthetic(truth: Constants, topo, ops, sizes) -> list[fit.Cell]:
    """Cells measured on a machine whose constants are `truth` (each the model's own prediction)."""
    cells = []
    for op in ops:
        for nbytes in sizes.get(op, [4]):
            for mode in ("graph", "eager"):
                cell = fit.Cell(op, nbytes, mode, 1.0)
                cells.append(fit.Cell(op, nbytes, mode, fit.predict_cell(cell, topo, truth)))
    return cells


def test_the_fit_recovers_plain_kernel_constants_from_their_microbenchmarks():
    pytest.importorskip("scipy")
    topo = bare_h200()
    truth = fit.with_values(topo.constants, {"local_graph_launch_us": 1.7, "hbm_efficiency": 0.82,
                                             "local_host_us": 4.6, "local_eager_launch_us": 0.9, "l2_GBs": 11000.0})
    # even powers of two: all trained; 4 and 16 MiB of reduce (12 and 48 MiB moved) run from L2
    sizes = {"kernel_reduce": [4 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 256 * MiB]}
    cells = synthetic(truth, topo, KERNEL_OPS, sizes)
    assert not any(fit.held_out(c) for c in cells)
    start = topo.constants
    assert (start.local_graph_launch_us, start.hbm_efficiency, start.local_host_us) == (1.0, 0.9, 3.0)
    fitted, summary = fit.fit(cells, topo, start, workers=1)
    assert set(summary) == {"graph", "eager"}
    for path, want in (("local_graph_launch_us", 1.7), ("hbm_efficiency", 0.82), ("local_host_us", 4.6),
                       ("local_eager_launch_us", 0.9), ("l2_GBs", 11000.0)):
        assert fit.get_value(fitted, path) == pytest.approx(want, rel=0.01), path
    # nothing the kernel cells cannot tell apart moved
    assert fitted.graph_launch_us == start.graph_launch_us and fitted.nccl_channel_GBs == start.nccl_channel_GBs


def test_a_plain_kernel_runs_from_l2_only_when_what_it_moves_fits():
    topo = topo_with(local_graph_launch_us=0.0)
    l2 = topo.devices[0].l2_MiB * MiB
    net = from_topology(topo, 2)
    hbm = net.capacity[net.hbm(0)]  # bytes per us
    rate = topo.constants.l2_GBs * 1e3
    assert net.local_bytes(0, l2, topo.constants.l2_GBs) == pytest.approx(l2 * hbm / rate)  # fits exactly
    assert net.local_bytes(0, l2 + 1, topo.constants.l2_GBs) == l2 + 1  # one byte more: all over HBM
    assert net.local_bytes(0, 1024, 1.0) == 1024  # an L2 slower than HBM never speeds a kernel up
    # a GPU that states no L2 is HBM alone
    bare = topo.model_copy(update={"devices": [d.model_copy(update={"l2_MiB": None}) for d in topo.devices]})
    assert from_topology(bare, 2).local_bytes(0, 1024, topo.constants.l2_GBs) == 1024
    def reduce_us(t, nbytes):  # the reduce kernel's microbenchmark, in a graph (its start costs 0 here)
        return fit.predict_cell(fit.Cell("kernel_reduce", nbytes, "graph", 1.0), t, t.constants)

    small, large = 4 * MiB, 64 * MiB  # 12 MiB moved (in L2), 192 MiB moved (not)
    assert reduce_us(topo, small) == pytest.approx(3 * small / rate, rel=1e-3)
    assert reduce_us(topo, large) == pytest.approx(3 * large / hbm, rel=1e-3)
    assert reduce_us(bare, small) == pytest.approx(3 * small / hbm, rel=1e-3)


def test_the_calibrated_rates_are_the_fit_of_the_measured_plain_kernels():
    """The kernel microbenchmark measured on one H200 (results/h200/one_gpu/kernels.jsonl): fitted
    as `clockworks calibrate --raw` fits it, it predicts a reduce kernel from 1 KiB to 1 GiB within a
    median of 5%, and the calibrated file's HBM and L2 rates are that fit's."""
    pytest.importorskip("scipy")
    cells, _ = fit.load_cells(str(ROOT / "results" / "h200" / "one_gpu" / "kernels.jsonl"))
    topo = load_topology(MEASURED)
    rates = [("local_graph_launch_us", 0.05, 20.0), ("hbm_efficiency", 0.3, 1.0), ("l2_GBs", 500.0, 50000.0)]
    fitted, _ = fit.fit(cells, topo, topo.constants, workers=1, parameters={"graph": rates, "eager": []})
    assert fitted.hbm_efficiency == pytest.approx(topo.constants.hbm_efficiency, rel=0.01)
    assert fitted.l2_GBs == pytest.approx(topo.constants.l2_GBs, rel=0.01)
    reduces = [c for c in cells if c.op == "kernel_reduce" and c.mode == "graph"]
    assert len(reduces) == 21  # 1 KiB .. 1 GiB
    errors = sorted(abs(fit.predict_cell(c, topo, fitted) / c.measured_us - 1) for c in reduces)
    assert errors[len(errors) // 2] < 0.05
    # in HBM (64 MiB and up) within 3%
    assert all(abs(fit.predict_cell(c, topo, fitted) / c.measured_us - 1) < 0.03 for c in reduces
               if c.nbytes >= 64 * MiB)
    # and from L2 (4 to 16 MiB) far faster than HBM alone would allow
    hbm_alone = topo.devices[0].hbm_GBs * topo.constants.hbm_efficiency * 1e3
    assert all(c.measured_us < 3 * c.nbytes / hbm_alone * 0.8 for c in reduces if 4 * MiB <= c.nbytes <= 16 * MiB)


def test_the_fit_recovers_the_exchange_ramp():
    pytest.importorskip("scipy")
    topo = load_topology(MEASURED)
    truth = fit.with_values(topo.constants, {"nccl_exchange_ramp": 0.55})
    sizes = {"sendrecv_bidir": [MiB * 4 ** k for k in range(6)], "alltoall": [MiB * 4 ** k for k in range(6)]}
    cells = synthetic(truth, topo, ("sendrecv_bidir", "alltoall"), sizes)
    start = fit.with_values(topo.constants, {"nccl_exchange_ramp": 0.9})
    fitted, _ = fit.fit(cells, topo, start, workers=1,
                        parameters={"graph": [("nccl_exchange_ramp", 0.2, 1.0)], "eager": []})
    assert fitted.nccl_exchange_ramp == pytest.approx(0.55, rel=0.01)


def test_kernel_microbenchmark_lines_become_cells(tmp_path):
    raw = tmp_path / "raw.jsonl"
    raw.write_text("\n".join([
        '{"bench":"kernel_header","gpu":"NVIDIA H200"}',
        '{"bench":"kernel","op":"kernel_empty","bytes":4,"eager_us":4.6,"graph_us":1.7,"spin_us":0,"correct":null}',
        '{"bench":"kernel","op":"kernel_spin","bytes":4,"eager_us":52.6,"graph_us":51.7,"spin_us":50,"correct":null}',
        '{"bench":"kernel","op":"kernel_reduce","bytes":1048576,"eager_us":5.0,"graph_us":3.0,"correct":true}',
        '{"bench":"kernel","op":"kernel_reduce","bytes":2097152,"eager_us":5.0,"graph_us":3.0,"correct":false}',
    ]))
    cells, _ = fit.load_cells(str(raw))
    assert {(c.op, c.nbytes, c.mode) for c in cells} == {
        (op, n, mode) for op, n in (("kernel_empty", 4), ("kernel_spin", 4), ("kernel_reduce", 1 << 20))
        for mode in ("graph", "eager")}  # a wrong result is never fitted
    spin = next(c for c in cells if c.op == "kernel_spin" and c.mode == "graph")
    topo = topo_with(local_graph_launch_us=1.7)
    assert fit.predict_cell(spin, topo, topo.constants) == pytest.approx(SPIN_US + 1.7)
    assert math.isclose(spin.measured_us, 51.7)
