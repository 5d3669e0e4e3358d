"""Flag-in-data packets (`clockworks_dist.lowering.packets`, `--packets`): which put_signal + wait_until
pairs are lowered and why the others are not, the rewritten schedule the checker verifies, the code
the NVSHMEM backend writes for it (packet stores over nvshmem_ptr, every block polling, the unpacking
copy, the zeroed areas, the setup check), that a packet area is never compared as the model's values,
and the CLI's errors. Compiling a packets program needs nvcc and the NVSHMEM wheel (skipped, with the
reason, where they are missing); running it is scripts/gpu/packets_h200x2.sh's job."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import clockworks_dist as cw
from clockworks_dist.lowering import Build, lower
from clockworks_dist import ir
from clockworks_dist.check import check
from clockworks_dist.cli import main
from clockworks_dist.codegen import build, program
from clockworks_dist.lowering import packets
from clockworks_dist.dsl import params
from clockworks_dist.dsl.load import load_file
from clockworks_dist.lowering.repeat import repeat
from clockworks_dist.runtime.expected import build_reference, expect_rank

ROOT = Path(__file__).resolve().parent.parent
FAMILY = ROOT / "protocols" / "nvshmem_allreduce_family.py"


def family(algo: str, ranks: int = 2, chunk: int = 256) -> ir.Schedule:
    with params.bind({"ALGO": algo}):
        return load_file(str(FAMILY))[0].trace(ranks, sizes={"CHUNK": chunk})


@pytest.mark.parametrize("algo,ranks", [("oneshot", 2), ("oneshot", 4), ("oneshot", 8), ("twoshot", 2), ("twoshot", 4),
                                        ("twoshot", 8)])
def test_the_family_lowers_every_pair_and_the_rewrite_is_verified(algo, ranks):
    sched = family(algo, ranks)
    low = packets.lower(sched)
    puts = sum(isinstance(op, ir.PutSignal) for p in sched.programs for op in p.ops)
    assert len(low.sends) == puts and not low.refused
    assert len(low.waits) == puts
    # the one-shot's slots (scratch) are read only by the reduce: it reads the packet areas instead, no copy;
    # the two-shot's reduce-scatter likewise, its all-gather lands in `out` (an output): copied out of the packets
    assert len(low.unpacks) == {"oneshot": 0, "twoshot": puts // 2}[algo]
    polled = {(rank, w) for (rank, _r), reads in low.reads.items() for _position, w in reads}
    assert len(low.reads) == ranks and len(polled) == puts - len(low.unpacks)
    for (rank, m), channel in low.waits.items():
        ops = low.sched.programs[rank].ops
        assert isinstance(ops[m], ir.WaitUntil) and ops[m].signal.signal == channel.signal
        if (rank, m) in polled:
            reduce_at, position = next((r, q) for (rk, r), reads in low.reads.items() if rk == rank
                                       for q, w in reads if w == m)
            reduce = ops[reduce_at]
            assert isinstance(reduce, ir.LocalReduce) and reduce.srcs[position].buffer == channel.area
            assert (reduce.srcs[position].start, reduce.srcs[position].count) == (0, channel.region.count)
            assert not any(isinstance(op, ir.Copy) and op.dst.buffer == "slots" for op in ops)
            continue
        copy = ops[m + 1]
        assert isinstance(copy, ir.Copy) and copy.dst == channel.region and copy.src.buffer == channel.area
        assert (rank, m + 1) in low.unpacks
    for (rank, m), channel in low.sends.items():
        op = low.sched.programs[rank].ops[m]
        assert isinstance(op, ir.PutSignal) and op.dst.buffer == channel.area and op.pe == channel.receiver
    area = low.sched.programs[0].buffer(low.channels[0].area)
    assert area.role == "packets" and area.symmetric and area.count == 2 * low.channels[0].region.count
    assert check(low.sched, timeout=120).verdict == "verified"


def test_repeated_calls_lower_with_their_epochs_and_keep_the_checkers_verdict():
    alternate = packets.lower(repeat(family("oneshot"), 4, "alternate"))
    flags = sorted(op.value for (rank, m) in alternate.sends if rank == 0
                   for op in [alternate.sched.programs[0].ops[m]])
    assert flags == [1, 1, 3, 3]  # each copy's epochs: 1 + k * M, M = 2
    assert check(alternate.sched, timeout=120).verdict == "verified"
    none = packets.lower(repeat(family("oneshot"), 4, "none"))
    result = check(none.sched, timeout=120)
    assert result.verdict == "violated" and "deadlock" in {e.kind for e in result.errors}


def _pair(sig_op="set", value=1, cmp="eq", count=256, dtype="float32"):
    def fn(r):
        d = r.symmetric("d", count=count, dtype=dtype, role="output")
        s = r.symmetric("s", count=count, dtype=dtype, role="input")
        flag = r.signal("flag", count=1)
        if r.rank == 0:
            r.put_signal(1, d, s, flag[0], value=value, op=sig_op)
        else:
            r.wait_until(flag[0], cmp, value)
    return cw.schedule(fn).trace(2)


@pytest.mark.parametrize("kwargs,reason", [
    ({"sig_op": "add"}, "its signal is an add, not a set"),
    ({"cmp": "ge"}, "only wait_until eq one of the set values can poll packets"),
    ({"value": 1 << 33}, "does not fit a 32-bit flag"),
    ({"count": 3}, "not a whole number of 8-byte packets"),
    ({"count": 1 << 15}, "more than the packet limit of 65536"),
])
def test_a_pair_that_packets_cannot_carry_keeps_its_signal_and_says_why(kwargs, reason):
    low = packets.lower(_pair(**kwargs))
    assert not low.channels and not low.sends and low.sched == _pair(**kwargs)
    assert len(low.refused) == 1 and reason in low.refused[0] and "flag[0] of rank 1" in low.refused[0]


def _published(read_a: bool):
    """Rank 0 puts `a` into rank 1, fences, then put_signals `d`; rank 1 waits and then reads `a`
    (read_a) or only its own `mine`."""
    def fn(r):
        a = r.symmetric("a", count=64, role="output")
        d = r.symmetric("d", count=64, role="output")
        s = r.symmetric("s", count=64, role="input")
        mine = r.symmetric("mine", count=64, role="input")
        out = r.buffer("out", count=64, role="output")
        flag = r.signal("flag", count=1)
        if r.rank == 0:
            r.put(1, a, s)
            r.fence()
            r.put_signal(1, d, s, flag[0])
        else:
            r.wait_until(flag[0], "eq", 1)
            r.copy(out, a if read_a else mine)
    return cw.schedule(fn).trace(2)


def test_a_receiver_that_reads_other_published_data_after_the_wait_keeps_the_signal():
    """Polled packets are no acquire: data published before them (a put and a fence) would be read
    by plain loads after the wait, perhaps stale from L1. The pair keeps its signal and says why."""
    sched = _published(read_a=True)
    assert check(sched, timeout=60).verdict == "verified"
    low = packets.lower(sched)
    assert not low.channels and low.sched == sched
    assert len(low.refused) == 1 and "flag[0] of rank 1" in low.refused[0]
    assert "reads a[0:64], which another rank writes" in low.refused[0]
    own = packets.lower(_published(read_a=False))  # reading only its own data: lowered
    assert len(own.channels) == 1 and not own.refused
    assert check(own.sched, timeout=60).verdict == "verified"


def test_the_limit_is_the_callers():
    assert packets.lower(_pair(count=1 << 15), max_bytes=1 << 17).channels


def test_the_generated_program_sends_polls_unpacks_and_zeroes_the_areas():
    text = program.generate(lower(family("oneshot"), Build("nvshmem", 2, "alternate", fuse_calls=True,
                                                          packets=packets.DEFAULT_MAX_BYTES)))
    assert "cw_nv_pk_send(nvshmem_ptr(b_packets_ready_0, 1), b_x, 2048, 1u" in text
    # 2 calls in one kernel: the reduce is not its kernel's last op, so the wait polls every packet first,
    # then the reduce reads the payload (polling again, each packet already there) in place of slots
    assert "cw_nv_pk_wait(b_packets_ready_1, 2048, 1u);" in text and "cw_nv_pk_unpack(b_" not in text
    assert "const void* cw_srcs[] = {b_x, b_packets_ready_1};" in text
    assert "cw_nv_pk_reduce<float, 2>(b_out, cw_srcs, 0x2u, cw_flags, 512, CW_SUM," in text
    assert "nvshmemx_putmem_signal" not in text.split("cw_nv_rank0(CwNvArgs0 a)")[1]
    assert "(cw_rank == 0) CW_CUDA(cudaMemsetAsync(bufs[4].ptr, 0, 4096, s));  // packet area packets_ready_1" in text
    assert "!nvshmem_ptr(bufs[" in text and "generate without --packets" in text
    # every op of a rank fits one block: all on block 0, each after the one before by a __syncthreads
    kernels = text.split("cw_nv_rank0(CwNvArgs0 a)")[1].split("// the end of a run")[0]
    assert "cw_nv_last(" not in kernels and "cw_nv_grid_sync(" not in kernels
    assert "static const int wants[] = {1, 1};" in text


def _slots_reread(how: str):
    """Rank 1 put_signals `x` into rank 0's scratch `slots`; rank 0 waits, sums slots into `out`, and
    then (how) reads slots again, or sums it twice in one reduce, or nothing more ("once")."""
    def fn(r):
        x = r.symmetric("x", count=64, role="input")
        slots = r.symmetric("slots", count=64, role="output" if how == "output" else "scratch")
        out = r.symmetric("out", count=64, role="output")
        again = r.buffer("again", count=64, role="output")
        flag = r.signal("flag", count=1)
        if r.rank == 1:
            r.put_signal(0, slots, x, flag[0])
        else:
            r.wait_until(flag[0], "eq", 1)
            if how == "twice":
                r.reduce(out, x, slots, slots)
            else:
                r.reduce(out, x, slots)
            if how == "reread":
                r.copy(again, slots)
    return cw.schedule(fn).trace(2)


@pytest.mark.parametrize("how,in_place", [("once", True), ("reread", False), ("output", False), ("twice", False)])
def test_the_copy_goes_only_where_one_reduce_is_its_only_reader(how, in_place):
    """The unpacking copy is dropped only where its destination is scratch read once, by one reduce
    (`packets._consumed`); otherwise it stays, and the rewrite is verified either way."""
    low = packets.lower(_slots_reread(how))
    assert len(low.channels) == 1 and not low.refused
    assert bool(low.reads) == in_place and bool(low.unpacks) == (not in_place)
    ops = low.sched.programs[0].ops
    if in_place:
        assert [op.kind for op in ops] == ["wait_until", "reduce"]
        assert ops[1].srcs[1].buffer == low.channels[0].area and low.reads == {(0, 1): ((1, 0),)}
    else:
        assert isinstance(ops[1], ir.Copy) and ops[1].dst.buffer == "slots"
    assert check(low.sched, timeout=60).verdict == "verified"


def test_a_call_kernel_whose_reduce_ends_it_polls_in_the_reduce_only():
    """A kernel per call: the one-shot's reduce is its kernel's last op, so the wait emits no poll of its
    own (each block's reduce share polls its packets); at 4 ranks the reduce polls three areas."""
    for ranks, mask in ((2, "0x2u"), (4, "0xeu")):
        text = program.generate(lower(family("oneshot", ranks), Build("nvshmem", 2, "alternate",
                                                                       packets=packets.DEFAULT_MAX_BYTES)))
        kernels = text.split("__global__ void __launch_bounds__(CW_NV_THREADS) cw_nv_rank0_call0")[1]
        kernels = kernels.split("static void rank0(")[0]
        assert "cw_nv_pk_wait(" not in kernels and "cw_nv_pk_unpack(" not in kernels
        assert kernels.count("polled by the reduce at nvshmem_allreduce_family.py:33") == 2 * (ranks - 1)
        assert kernels.count(f"cw_nv_pk_reduce<float, {ranks}>(b_out, cw_srcs, {mask}, cw_flags,") == 2
    # the second call's flags are the alternate copy's epoch (3), and x's slot is not polled
    assert "const uint32_t cw_flags[] = {0u, 1u, 1u, 1u};" in kernels


def test_a_packet_area_is_never_compared_and_what_it_carried_is():
    low = packets.lower(family("twoshot"))  # its all-gather's packets are copied out into `out`
    ref = build_reference(low.sched)
    expect = expect_rank(ref, 0)
    assert low.unpacks and all(c.region.buffer == "out" for c in low.unpacks.values())
    assert not any(expect.buffers[c.area].checked.any() for c in low.channels)
    assert expect.buffers["out"].checked.all()
    low = packets.lower(family("oneshot"))  # read by the reduce in place: slots never written
    expect = expect_rank(build_reference(low.sched), 0)
    assert not low.unpacks and expect.buffers["out"].checked.all()
    assert np.array_equal(expect.signals, np.array([0, 1], dtype=np.uint64))  # ready[1]: the wait's value


def test_packets_program_compiles(tmp_path, nvshmem_toolchain):
    tc = nvshmem_toolchain
    cu = tmp_path / "packets.cu"
    cu.write_text(program.generate(lower(family("twoshot"), Build("nvshmem", 2, "none", fuse_calls=True,
                                                                  packets=packets.DEFAULT_MAX_BYTES))))
    assert build.compile_program(cu, "nvshmem", tmp_path / "out", tc).exists()
    # a kernel per call, the reduce polling three packet areas itself (the waits emit no poll)
    cu = tmp_path / "packets_percall.cu"
    cu.write_text(program.generate(lower(family("oneshot", 4), Build("nvshmem", 2, "alternate",
                                                                     packets=packets.DEFAULT_MAX_BYTES))))
    assert "cw_nv_pk_reduce<float, 4>" in cu.read_text()
    assert build.compile_program(cu, "nvshmem", tmp_path / "out2", tc).exists()


def test_the_cli_refuses_packets_for_nccl_and_checks_the_rewrite(tmp_path, capsys):
    code = main(["codegen", str(FAMILY), "--backend", "nccl", "--packets", "64KiB", "-o", str(tmp_path)])
    assert code == 2 and "--backend nvshmem" in capsys.readouterr().err
    code = main(["codegen", str(FAMILY), "--backend", "nvshmem", "--np", "2", "--packets", "64KiB",
                 "--param", "ALGO=oneshot", "-o", str(tmp_path)])
    assert code == 0 and "cw_nv_pk_wait(" in next(tmp_path.glob("*.cu")).read_text()
    code = main(["codegen", str(FAMILY), "--backend", "nvshmem", "--packets", "lots", "-o", str(tmp_path)])
    assert code == 2 and "--packets" in capsys.readouterr().err


@pytest.mark.parametrize("chunk,blocks", [(256, 1), (1024, 1), (4096, 4), (32768, 32)])
def test_packet_ops_take_a_block_per_8_kib_of_payload(chunk, blocks):
    """A packet send and the reduce that reads packets spread over one block per 8 KiB of payload
    (`lowering.packet_blocks`): 2 KiB and 8 KiB on one block (every op of the rank on block 0), 32 KiB on 4,
    256 KiB on 32, each block sending and then polling its own share; the kernels sync no grid, so they
    are launched plainly, and the program model prices the same spread."""
    from clockworks_dist.lowering import packet_blocks
    from clockworks_dist.perf.programs import NvshmemKernels

    low = lower(family("oneshot", 2, chunk), Build("nvshmem", 2, "alternate", packets=1 << 20))
    payload = 2 * chunk * 4
    assert packet_blocks(payload) == blocks
    plan = low.plan(0)
    assert plan.blocks == blocks
    sends = [s for s in plan.steps if (0, s.index) in low.packets.sends]
    reduces = [s for s in plan.steps if (0, s.index) in low.packets.reads]
    assert len(sends) == len(reduces) == 2
    assert all(s.who.want == blocks if blocks > 1 else s.who.kind == "one" for s in sends + reduces)
    text = program.generate(low)
    call0 = text.split("cw_nv_rank0_call0(CwNvArgs0 a) {")[1].split("\n}\n")[0]
    share = f"{blocks}, " if blocks > 1 else "1, blockIdx.x"
    assert f"cw_nv_pk_send(nvshmem_ptr(b_packets_ready_0, 1), b_x, {payload}, 1u, {share}" in call0
    assert f"CW_SUM, {share}" in call0 and "cw_nv_pk_wait(" not in call0
    assert "cw_nv_launch((const void*)cw_nv_rank0_call0, &a, s, false);" in text
    assert not NvshmemKernels(low.sched, None, "graph", low).cooperative(0, 0)
